/* cuda-agent tasks: the task store (src/store/task_store.h, docs/tasks.md).
 *
 *   tasks import kernelbench DIR | ops6k FILE   KernelBench checkouts, Ops-6K JSONL or parquet
 *   tasks list [--source S] [--level N]          a table, or JSON lines
 *   tasks show ID                                the fields, the directory and model.py
 *   tasks check [--source S] [--level N]         degeneracy of stored tasks (tasks_check.h)
 *   tasks export --format verl-rl --out F        prompts for RL trainers (python/cuda_agent_rl)
 *
 * Exit codes (docs/cli.md): 0 ok, 2 usage, 3 the input or the task is missing or broken (also:
 * an import where every row was skipped), 4 environment (the store cannot be opened or written,
 * no Python or pyarrow for parquet), 5 internal (out of memory). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/tasks_check.h"
#include "store/task_store.h"
#include "import/import.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/pylaunch.h"
#include "util/str.h"


static const char usage_all[] =
	"usage: cuda-agent tasks import kernelbench DIR [options]\n"
	"       cuda-agent tasks import ops6k FILE [options]\n"
	"       cuda-agent tasks list [--source S] [--level N] [options]\n"
	"       cuda-agent tasks show ID [options]\n"
	"       cuda-agent tasks check [--source S] [--level N] [options]\n"
	"       cuda-agent tasks export --format verl-rl|verl-single --out FILE [options]\n";

static const char help_all[] =
	"\n"
	"The task store: a directory of tasks (STORE/<source>/.../{model.py,task.json}, each a\n"
	"normal task for `cuda-agent eval`) indexed by STORE/tasks.sqlite. docs/tasks.md.\n"
	"\n"
	"  import kernelbench DIR   a KernelBench checkout, its KernelBench/ folder or one levelN\n"
	"                           folder: every <N>_<Name>.py becomes kernelbench/levelN/<N>_<Name>\n"
	"  import ops6k FILE        CUDA-Agent-Ops-6K rows (JSONL, or parquet through pyarrow) with\n"
	"                           columns code, ops, data_source: row R becomes ops6k/<R>_<ops>\n"
	"  list                     the tasks in the store\n"
	"  show ID                  one task: its fields, directory and model.py\n"
	"  check                    which tasks are degenerate (a constant or zeros passes them):\n"
	"                           the torch bridge describes each task, the verdict is stored\n"
	"  export                   prompts for RL trainers (verl, TRL) as parquet (docs/rl.md)\n"
	"\n"
	"Run 'cuda-agent tasks <import|list|show|check|export> --help' for the options.\n"
	"Store: --store DIR, else $CUDA_AGENT_TASKS, else $XDG_DATA_HOME/cuda-agent/tasks, else\n"
	"~/.local/share/cuda-agent/tasks.\n"
	"Exit codes: 0 ok, 2 usage, 3 input or task missing or broken, 4 environment, 5 internal.\n";

static const char help_import[] =
	"usage: cuda-agent tasks import kernelbench DIR [options]\n"
	"       cuda-agent tasks import ops6k FILE [options]\n"
	"\n"
	"Imports tasks into the store. Each file or row is written as a task directory and must\n"
	"pass the task loader's checks (class Model, get_inputs, get_init_inputs); one that does\n"
	"not is skipped with a one-line reason, and the import goes on. Re-importing the same\n"
	"input changes nothing. Prints one summary line:\n"
	"  imported N, unchanged N, updated N, skipped N (first: row R: reason)\n"
	"\n"
	"  kernelbench DIR   DIR is a KernelBench checkout (DIR/KernelBench/level1..level4), its\n"
	"                    KernelBench/ folder, or one levelN folder; files <N>_<Name>.py\n"
	"  ops6k FILE        JSONL (one object per line) or parquet (through pyarrow), with\n"
	"                    columns code (the model.py text), ops (a list of names, or a string\n"
	"                    holding one) and data_source; row R is line R+1 of a JSONL file\n"
	"\n"
	"options:\n"
	"  --store DIR       the task store (default $CUDA_AGENT_TASKS, else\n"
	"                    $XDG_DATA_HOME/cuda-agent/tasks, else ~/.local/share/cuda-agent/tasks)\n"
	"  --source NAME     ops6k: the tasks' source and id prefix instead of ops6k (a set\n"
	"                    made by cuda-agent synth, say: its rows do not replace Ops-6K's)\n"
	"  --python PATH     parquet: a Python with pyarrow; --check: the bridge's Python\n"
	"                    ($CUDA_AGENT_PYTHON, else python3)\n"
	"  --check           then check the source's tasks for degeneracy (as `tasks check`;\n"
	"                    the exit code is then the check's)\n"
	"  --device D        --check: where the bridge runs the models (auto, cuda, cpu)\n"
	"  --json            print the summary as one JSON object\n"
	"  -q, --quiet       no progress or skip messages\n"
	"  -v, --verbose     every skip reason (by default the first 20)\n"
	"  -h, --help        this help\n"
	"\n"
	"Exit codes: 0 imported (rows may have been skipped), 2 usage, 3 the input is missing,\n"
	"unreadable or not in the format, or every row was skipped, 4 the store cannot be written\n"
	"or parquet cannot be read here (no Python or pyarrow), 5 internal.\n";

static const char help_list[] =
	"usage: cuda-agent tasks list [--source S] [--level N] [options]\n"
	"\n"
	"Lists the tasks in the store, ordered by source, level and number: a table (id, source,\n"
	"level, ops), or with --json one JSON object per line (id, source, level, name, dir, hash,\n"
	"ops, data_source, imported_at).\n"
	"\n"
	"options:\n"
	"  --source S        only tasks of source S (kernelbench, ops6k)\n"
	"  --level N         only tasks of level N (0-99)\n"
	"  --store DIR       the task store (see 'cuda-agent tasks --help')\n"
	"  --json            JSON lines instead of the table\n"
	"  -h, --help        this help\n"
	"\n"
	"Exit codes: 0 ok (also when no task matches), 2 usage, 4 the store cannot be read.\n";

static const char help_show[] =
	"usage: cuda-agent tasks show ID [options]\n"
	"\n"
	"Shows one task: its fields, its directory (a task for `cuda-agent eval DIR CANDIDATE`)\n"
	"and its model.py. ID is the task's id (kernelbench/level1/19_ReLU) or, when only one task\n"
	"has it, its name (19_ReLU).\n"
	"\n"
	"options:\n"
	"  --store DIR       the task store (see 'cuda-agent tasks --help')\n"
	"  --json            one JSON object (the list fields and model_py)\n"
	"  -h, --help        this help\n"
	"\n"
	"Exit codes: 0 ok, 2 usage or an ambiguous name, 3 no such task or its directory is\n"
	"missing or broken, 4 the store cannot be read.\n";

static const char help_check[] =
	"usage: cuda-agent tasks check [--source S] [--level N] [options]\n"
	"\n"
	"Finds the degenerate tasks of the store: those whose reference output is within tolerance\n"
	"of zeros or of a constant, or does not change across seeds, so that a kernel that does not\n"
	"compute can pass them (docs/evaluation.md, \"Degenerate tasks\"). The torch bridge runs\n"
	"each task's survey (as every evaluation does) and the verdict is stored with the task's\n"
	"hash: `tasks list` shows it, and a task already checked at its content is skipped. Prints\n"
	"one line per degenerate task, then `checked N tasks: K degenerate (level 1: a, ...)`.\n"
	"\n"
	"  --source S        only tasks of source S (kernelbench, ops6k)\n"
	"  --level N         only tasks of level N\n"
	"  --again           check tasks already checked at their content again\n"
	"  --device D        where the bridge runs the models: auto (default), cuda, cpu\n"
	"  --python PATH     the bridge's Python ($CUDA_AGENT_PYTHON, else python3)\n"
	"  --store DIR       the task store (see 'cuda-agent tasks --help')\n"
	"  --json            one JSON object per degenerate task ({id, degenerate}), then\n"
	"                    {checked, degenerate, failed, seconds}\n"
	"  -q, --quiet       no progress lines\n"
	"  -h, --help        this help\n"
	"\n"
	"Exit codes: 0 ok (degenerate tasks are findings), 3 no store, or a task could not run\n"
	"(named on stderr), 4 the bridge cannot run or the store cannot be written, 5 internal.\n";

static const char help_export[] =
	"usage: cuda-agent tasks export --format verl-rl|verl-single --out FILE [options]\n"
	"\n"
	"Writes the store's tasks as prompts for RL trainers, one parquet row per task (docs/rl.md):\n"
	"prompt (system: the service's session prompt, SKILL.md and INTERFACE.md; user: the task's\n"
	"id and model.py), tools (the session's tool schemas, JSON text), agent_name, data_source,\n"
	"ability, reward_model (ground_truth: the task id) and extra_info (index, task_id,\n"
	"task_hash, source, level). The prompt and tools are what a session of `cuda-agent serve`\n"
	"answers for the task: a session is opened per task on --url, else on a service started\n"
	"here on CPU for the export (it describes each task with the torch bridge).\n"
	"\n"
	"  --format F        verl-rl: agent_name cuda_agent, the multi-turn agent loop of\n"
	"                    cuda_agent_rl.verl_agent; verl-single: agent_name single_turn_agent,\n"
	"                    no tools, the user message asks for one ```cuda block (recipe stage 1)\n"
	"  --out FILE        the parquet file (needs pyarrow)\n"
	"  --source S        only tasks of source S\n"
	"  --level N         only tasks of level N\n"
	"  --limit N         at most N tasks (in `tasks list` order)\n"
	"  --url URL         a running service that holds the same store (else one is started)\n"
	"  --jobs N          sessions opened at once (default 4)\n"
	"  --python PATH     the Python with pyarrow and the bridge's torch ($CUDA_AGENT_PYTHON,\n"
	"                    else python3)\n"
	"  --store DIR       the task store (see 'cuda-agent tasks --help')\n"
	"  -q, --quiet       no line per skipped task\n"
	"  -h, --help        this help\n"
	"\n"
	"Exit codes: 0 written (tasks whose session failed are skipped and named), 2 usage, 3 no\n"
	"task selected or every task failed, 4 the service cannot be started or reached, no\n"
	"pyarrow, or the Python cannot be run.\n";

struct opts {
	const char *store;
	const char *python;
	const char *source;
	const char *device;
	int level;
	int json;
	bool check, again;
};

/* Which options a subcommand takes besides --store, --json, -q, -v, -h. */
enum { A_PYTHON = 1, A_FILTER = 2, A_DEVICE = 4, A_CHECK = 8, A_AGAIN = 16, A_AS = 32 };

/* import ops6k --source NAME: 1-32 of [a-z0-9_-], not a source of its own format. */
static bool source_name_ok(const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n > 32 || strcmp(v, "kernelbench") == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '_' ||
		      v[i] == '-'))
			return false;
	return true;
}

/* Parses the options of one subcommand; positionals stay in argv[optind..]. */
static int parse(struct opts *o, int argc, char **argv, const char *help, unsigned allow)
{
	enum { O_STORE = 256, O_PYTHON, O_SOURCE, O_LEVEL, O_JSON, O_DEVICE, O_CHECK, O_AGAIN };
	static const struct option longopts[] = {
		{"store", required_argument, NULL, O_STORE},
		{"python", required_argument, NULL, O_PYTHON},
		{"source", required_argument, NULL, O_SOURCE},
		{"level", required_argument, NULL, O_LEVEL},
		{"json", no_argument, NULL, O_JSON},
		{"device", required_argument, NULL, O_DEVICE},
		{"check", no_argument, NULL, O_CHECK},
		{"again", no_argument, NULL, O_AGAIN},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int ch;

	memset(o, 0, sizeof *o);
	o->level = -1;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "qvh", longopts, NULL)) != -1) {
		switch (ch) {
		case O_STORE: o->store = optarg; break;
		case O_JSON: o->json = 1; break;
		case 'q': ca_log_set_level(CA_LOG_QUIET); break;
		case 'v': ca_log_set_level(CA_LOG_DEBUG); break;
		case 'h':
			fputs(help, stdout);
			exit(EXIT_OK);
		case O_PYTHON:
			if (allow & A_PYTHON) {
				o->python = optarg;
				break;
			}
			goto bad;
		case O_DEVICE:
			if (!(allow & A_DEVICE))
				goto bad;
			if (strcmp(optarg, "auto") && strcmp(optarg, "cuda") && strcmp(optarg, "cpu")) {
				fprintf(stderr, "cuda-agent: --device takes auto, cuda or cpu\n");
				return EXIT_USAGE;
			}
			o->device = optarg;
			break;
		case O_CHECK:
			if (!(allow & A_CHECK))
				goto bad;
			o->check = true;
			break;
		case O_AGAIN:
			if (!(allow & A_AGAIN))
				goto bad;
			o->again = true;
			break;
		case O_SOURCE:
			if (allow & A_AS && !source_name_ok(optarg)) {
				fprintf(stderr, "cuda-agent: --source takes 1-32 of a-z, 0-9, _ and -, "
					"not kernelbench\n");
				return EXIT_USAGE;
			}
			if (allow & (A_FILTER | A_AS)) {
				o->source = optarg;
				break;
			}
			goto bad;
		case O_LEVEL:
			if (allow & A_FILTER) {
				char *end;
				long v = strtol(optarg, &end, 10);
				if (end == optarg || *end || v < 0 || v > CA_TASK_LEVEL_MAX) {
					fprintf(stderr, "cuda-agent: --level takes a whole number "
						"0-%d\n", CA_TASK_LEVEL_MAX);
					return EXIT_USAGE;
				}
				o->level = (int)v;
				break;
			}
			goto bad;
		default:
			goto bad;
		}
	}
	return 0;
bad:
	fprintf(stderr, "cuda-agent: tasks %s: bad option '%s'\n", argv[0],
		optind > 0 && optind <= argc ? argv[optind - 1] : "?");
	fputs(help, stderr);
	return EXIT_USAGE;
}

/* Opens the store; prints the error and returns an exit code on failure. */
static int open_store(struct task_store *s, const struct opts *o, bool create)
{
	char dir[PATH_MAX];
	struct ca_diag d = {{0}};
	int rc = task_store_default_dir(o->store, dir, sizeof dir, &d);
	if (!rc)
		rc = task_store_open(s, dir, create, &d);
	if (!rc)
		return EXIT_OK;
	if (rc == CA_ERR_NOTFOUND && !create)
		return -1; /* no store yet: the caller decides */
	fprintf(stderr, "cuda-agent: %s\n", d.msg);
	return rc == CA_ERR_NOMEM ? EXIT_INTERNAL : EXIT_ENV;
}

static void iso_time(double t, char *out, size_t size)
{
	time_t secs = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&secs, &tm) || strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		ca_strlcpy(out, "?", size);
}

static json_t *record_json(const struct task_store *s, const struct task_record *r)
{
	char dir[PATH_MAX], when[32];
	json_t *ops = json_loads(r->ops, 0, NULL);
	if (!json_is_array(ops)) {
		json_decref(ops);
		ops = json_array();
	}
	if (task_store_task_dir(s, r, dir, sizeof dir) != 0)
		dir[0] = '\0';
	iso_time(r->imported_at, when, sizeof when);
	bool checked = task_record_checked(r);
	json_t *deg = checked && r->degenerate[0] ? json_loads(r->degenerate, 0, NULL) : NULL;
	return json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:o, s:o, s:s, s:b, s:o}", "id", r->id,
			 "source", r->source, "level",
			 r->level >= 0 ? json_integer(r->level) : json_null(), "name", r->name,
			 "dir", dir, "hash", r->hash, "ops", ops, "data_source",
			 r->data_source[0] ? json_string(r->data_source) : json_null(),
			 "imported_at", when, "checked", checked,
			 "degenerate", json_is_object(deg) ? deg : (json_decref(deg), json_null()));
}

static int print_json(json_t *j)
{
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return EXIT_INTERNAL;
	puts(text);
	free(text);
	return EXIT_OK;
}

/* "a, b, c" from the ops JSON text, at most size-1 bytes ("..." when cut); "-" when none. */
static void ops_display(const char *ops_json, char *out, size_t size)
{
	json_t *a = json_loads(ops_json, 0, NULL);
	size_t off = 0, i;
	json_t *v;
	out[0] = '\0';
	if (json_is_array(a)) {
		json_array_foreach(a, i, v) {
			if (json_is_string(v))
				ca_appendf(out, size, &off, "%s%s", i ? ", " : "",
					   json_string_value(v));
		}
	}
	json_decref(a);
	if (!out[0])
		ca_strlcpy(out, "-", size);
	else if (off >= size - 1 && size > 4)
		memcpy(out + size - 4, "...", 4);
}

/* ---- import -------------------------------------------------------------------------- */

static int tasks_import(int argc, char **argv)
{
	struct opts o;
	struct task_store s;
	struct import_opts io;
	struct import_stats st;
	struct ca_diag d = {{0}};
	char summary[CA_IMPORT_REASON_MAX + 128];
	const char *kind, *path;
	int rc = parse(&o, argc, argv, help_import, A_PYTHON | A_DEVICE | A_CHECK | A_AS);

	if (rc)
		return rc;
	if (argc - optind != 2) {
		fprintf(stderr, "%s(a source, kernelbench or ops6k, and its path)\n", help_import);
		return EXIT_USAGE;
	}
	kind = argv[optind];
	path = argv[optind + 1];
	if (o.source && strcmp(kind, "ops6k") != 0) {
		fprintf(stderr, "cuda-agent: tasks import: --source names an ops6k import's tasks\n");
		return EXIT_USAGE;
	}
	if (strcmp(kind, "kernelbench") && strcmp(kind, "ops6k")) {
		char shown[64];
		fprintf(stderr, "cuda-agent: tasks import: unknown source '%s' (kernelbench or "
			"ops6k)\n", ca_printable(shown, kind, sizeof shown));
		return EXIT_USAGE;
	}
	/* the input is checked before the store is made, so a typo creates nothing */
	if (strcmp(kind, "kernelbench") == 0 && !ca_is_dir(path)) {
		fprintf(stderr, "cuda-agent: KernelBench directory %s does not exist\n", path);
		return EXIT_TASK;
	}
	if (strcmp(kind, "ops6k") == 0 && !ca_is_file(path)) {
		fprintf(stderr, "cuda-agent: %s %s\n", path,
			ca_is_dir(path) ? "is a directory, not a JSONL or parquet file"
					: "does not exist");
		return EXIT_TASK;
	}
	rc = open_store(&s, &o, true);
	if (rc)
		return rc;
	import_opts_defaults(&io);
	io.python = o.python;
	io.source = o.source;
	if (ca_log_get_level() == CA_LOG_QUIET) {
		io.progress_s = 0;
		io.show_skips = 0;
	} else if (ca_log_get_level() == CA_LOG_DEBUG) {
		io.show_skips = -1;
	}
	ca_log_info("importing %s tasks from %s into %s", kind, path, s.root);
	if (strcmp(kind, "kernelbench") == 0)
		rc = import_kernelbench(&s, path, &io, &st, &d);
	else
		rc = import_ops6k(&s, path, &io, &st, &d);
	import_summary(&st, summary, sizeof summary);
	if (o.json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "source",
				      o.source ? o.source : kind, "input", path, "store", s.root, "rows",
				      (json_int_t)st.rows, "imported", (json_int_t)st.imported,
				      "unchanged", (json_int_t)st.unchanged, "updated",
				      (json_int_t)st.updated, "skipped", (json_int_t)st.skipped,
				      "first_skip",
				      st.skipped ? json_string(st.first_skip) : json_null(), "error",
				      rc ? json_string(d.msg) : json_null());
		if (print_json(j) != EXIT_OK) {
			task_store_close(&s);
			return EXIT_INTERNAL;
		}
	} else if (!rc || st.rows) {
		puts(summary);
	}
	if (!rc && o.check && st.imported + st.unchanged + st.updated > 0) {
		/* the source just imported, every task not yet checked at its content */
		struct task_filter f = {.source = strcmp(kind, "ops6k") == 0 && o.source ? o.source
										  : kind,
					.level = -1};
		struct tasks_check_opts co = {.python = o.python, .device = o.device, .json = o.json,
					      .quiet = ca_log_get_level() == CA_LOG_QUIET};
		fflush(stdout);
		int crc = tasks_check_run(&s, &f, &co);
		task_store_close(&s);
		return crc;
	}
	task_store_close(&s);
	if (rc) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		if (rc == CA_ERR_NOMEM)
			return EXIT_INTERNAL;
		return st.input_bad ? EXIT_TASK : EXIT_ENV;
	}
	if (st.imported + st.unchanged + st.updated == 0) {
		fprintf(stderr, "cuda-agent: no task in %s passed the checks\n", path);
		return EXIT_TASK;
	}
	return EXIT_OK;
}

/* ---- list ---------------------------------------------------------------------------- */

/* The CHECK column: "-" never checked (or not at this content), "ok", or the degenerate kind. */
static const char *check_display(const struct task_record *r)
{
	static char kind[64];
	json_t *deg;
	if (!task_record_checked(r))
		return "-";
	if (!r->degenerate[0])
		return "ok";
	deg = json_loads(r->degenerate, 0, NULL);
	snprintf(kind, sizeof kind, "degenerate:%s",
		 json_string_value(json_object_get(deg, "kind")) ?
			 json_string_value(json_object_get(deg, "kind")) : "?");
	json_decref(deg);
	return kind;
}

struct list_ctx {
	const struct task_store *s;
	int json;
	size_t count;
};

static int list_one(const struct task_record *r, void *arg)
{
	struct list_ctx *c = arg;
	c->count++;
	if (c->json)
		return print_json(record_json(c->s, r)) ? CA_ERR_NOMEM : 0;
	char ops[52], level[16];
	ops_display(r->ops, ops, sizeof ops);
	if (r->level >= 0)
		snprintf(level, sizeof level, "%d", r->level);
	else
		ca_strlcpy(level, "-", sizeof level);
	printf("%-40s %-12s %-5s %-14s %s\n", r->id, r->source, level, check_display(r), ops);
	return 0;
}

static int tasks_list(int argc, char **argv)
{
	struct opts o;
	struct task_store s;
	struct ca_diag d = {{0}};
	int rc = parse(&o, argc, argv, help_list, A_FILTER);

	if (rc)
		return rc;
	if (argc - optind != 0) {
		fprintf(stderr, "%s(no arguments besides the options)\n", help_list);
		return EXIT_USAGE;
	}
	rc = open_store(&s, &o, false);
	if (rc == -1) {
		if (!o.json)
			printf("%-40s %-12s %-5s %-14s %s\n", "ID", "SOURCE", "LEVEL", "CHECK", "OPS");
		ca_log_info("the task store is empty (cuda-agent tasks import ...)");
		return EXIT_OK;
	}
	if (rc)
		return rc;
	struct task_filter f = {.source = o.source, .level = o.level};
	struct list_ctx c = {.s = &s, .json = o.json};
	if (!o.json)
		printf("%-40s %-12s %-5s %-14s %s\n", "ID", "SOURCE", "LEVEL", "CHECK", "OPS");
	rc = task_store_list(&s, &f, list_one, &c, &d);
	if (!rc)
		ca_log_info("%zu task%s in %s", c.count, c.count == 1 ? "" : "s", s.root);
	task_store_close(&s);
	if (rc == CA_ERR_NOMEM)
		return EXIT_INTERNAL;
	if (rc) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return EXIT_ENV;
	}
	return EXIT_OK;
}

/* ---- show ---------------------------------------------------------------------------- */

struct name_match {
	struct task_record first;
	size_t count;
	char others[256];
	size_t off;
};

static int collect_name(const struct task_record *r, void *arg)
{
	struct name_match *m = arg;
	if (m->count++ == 0)
		m->first = *r;
	else if (m->count <= 5)
		ca_appendf(m->others, sizeof m->others, &m->off, "%s%s", m->count > 2 ? ", " : "",
			   r->id);
	return 0;
}

/* The record for an id, else for a unique name; prints why not and returns an exit code. */
static int find_task(struct task_store *s, const char *id, struct task_record *r)
{
	struct ca_diag d = {{0}};
	char shown[CA_TASK_ID_MAX];
	struct name_match *m;
	int rc = task_store_get(s, id, r, &d);

	if (rc == 0)
		return EXIT_OK;
	if (rc != CA_ERR_NOTFOUND) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return EXIT_ENV;
	}
	m = calloc(1, sizeof *m);
	if (!m)
		return EXIT_INTERNAL;
	struct task_filter f = {.level = -1, .name = id};
	rc = task_store_list(s, &f, collect_name, m, &d);
	ca_printable(shown, id, sizeof shown);
	if (rc) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		rc = EXIT_ENV;
	} else if (m->count == 1) {
		*r = m->first;
		rc = EXIT_OK;
	} else if (m->count > 1) {
		fprintf(stderr, "cuda-agent: %zu tasks are named '%s': %s, %s%s (give the id)\n",
			m->count, shown, m->first.id, m->others, m->count > 5 ? ", ..." : "");
		rc = EXIT_USAGE;
	} else {
		fprintf(stderr, "cuda-agent: no task '%s' in the task store %s (cuda-agent tasks "
			"list)\n", shown, s->root);
		rc = EXIT_TASK;
	}
	free(m);
	return rc;
}

static int tasks_show(int argc, char **argv)
{
	struct opts o;
	struct task_store s;
	struct task_record *r = NULL;
	struct ca_diag d = {{0}};
	char dir[PATH_MAX], path[PATH_MAX];
	char *model = NULL;
	size_t model_len = 0;
	int rc = parse(&o, argc, argv, help_show, 0);

	if (rc)
		return rc;
	if (argc - optind != 1) {
		fprintf(stderr, "%s(one task id)\n", help_show);
		return EXIT_USAGE;
	}
	rc = open_store(&s, &o, false);
	if (rc == -1) {
		char shown[CA_TASK_ID_MAX];
		fprintf(stderr, "cuda-agent: no task '%s': the task store is empty (cuda-agent tasks "
			"import ...)\n", ca_printable(shown, argv[optind], sizeof shown));
		return EXIT_TASK;
	}
	if (rc)
		return rc;
	r = calloc(1, sizeof *r);
	if (!r) {
		rc = EXIT_INTERNAL;
		goto out;
	}
	rc = find_task(&s, argv[optind], r);
	if (rc)
		goto out;
	if (task_store_task_dir(&s, r, dir, sizeof dir) != 0 ||
	    ca_path_join(path, sizeof path, dir, "model.py") != 0) {
		fprintf(stderr, "cuda-agent: task %s has a bad directory in the store (re-import "
			"it)\n", r->id);
		rc = EXIT_TASK;
		goto out;
	}
	if (ca_read_file(path, CA_TASK_MAX_MODEL_BYTES, &model, &model_len, &d) != 0) {
		fprintf(stderr, "cuda-agent: task %s: %s (re-import it)\n", r->id, d.msg);
		rc = EXIT_TASK;
		goto out;
	}
	if (o.json) {
		json_t *j = record_json(&s, r);
		if (j)
			json_object_set_new(j, "model_py", json_stringn(model, model_len));
		rc = print_json(j);
	} else {
		char ops[1024], when[32];
		ops_display(r->ops, ops, sizeof ops);
		iso_time(r->imported_at, when, sizeof when);
		printf("id           %s\n", r->id);
		printf("source       %s\n", r->source);
		if (r->level >= 0)
			printf("level        %d\n", r->level);
		else
			printf("level        -\n");
		printf("name         %s\n", r->name);
		printf("ops          %s\n", ops);
		printf("data_source  %s\n", r->data_source[0] ? r->data_source : "-");
		printf("hash         %s\n", r->hash);
		printf("imported_at  %s\n", when);
		printf("dir          %s\n", dir);
		printf("\n---- model.py\n");
		/* the code is untrusted text: no terminal control sequences reach the terminal */
		for (size_t i = 0; i < model_len; i++) {
			unsigned char ch = (unsigned char)model[i];
			putchar(ch < 0x20 && ch != '\n' && ch != '\t' ? '?' : ch == 0x7f ? '?' : ch);
		}
		if (model_len && model[model_len - 1] != '\n')
			putchar('\n');
		rc = EXIT_OK;
	}
out:
	free(model);
	free(r);
	task_store_close(&s);
	return rc;
}

/* ---- check --------------------------------------------------------------------------- */

static int tasks_check(int argc, char **argv)
{
	struct opts o;
	struct task_store s;
	int rc = parse(&o, argc, argv, help_check, A_PYTHON | A_FILTER | A_DEVICE | A_AGAIN);

	if (rc)
		return rc;
	if (argc - optind != 0) {
		fprintf(stderr, "%s(no arguments besides the options)\n", help_check);
		return EXIT_USAGE;
	}
	rc = open_store(&s, &o, false);
	if (rc == -1) {
		fprintf(stderr, "cuda-agent: the task store is empty (cuda-agent tasks import ...)\n");
		return EXIT_TASK;
	}
	if (rc)
		return rc;
	struct task_filter f = {.source = o.source, .level = o.level};
	struct tasks_check_opts co = {.python = o.python, .device = o.device, .again = o.again,
				      .json = o.json, .quiet = ca_log_get_level() == CA_LOG_QUIET};
	rc = tasks_check_run(&s, &f, &co);
	task_store_close(&s);
	return rc;
}

/* ---- export --------------------------------------------------------------------------- */

/* The work is Python (python/cuda_agent_rl/export.py), run with this binary as its --cli and the
 * store resolved here, so that `tasks list` and `serve --tasks` read the store meant. */
static int tasks_export(int argc, char **argv)
{
	const char *python = getenv("CUDA_AGENT_PYTHON"), *store = NULL, *format = NULL;
	char exe[PATH_MAX], dir[PATH_MAX];
	struct ca_diag d = {{0}};
	const char **args;
	ssize_t len;
	int n = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fputs(help_export, stdout);
			return EXIT_OK;
		}
		if (i + 1 < argc && strcmp(argv[i], "--format") == 0)
			format = argv[i + 1];
		else if (i + 1 < argc && strcmp(argv[i], "--store") == 0)
			store = argv[i + 1];
	}
	if (!format || (strcmp(format, "verl-rl") != 0 && strcmp(format, "verl-single") != 0)) {
		fprintf(stderr, "cuda-agent: tasks export: --format verl-rl or verl-single\n%s",
			help_export);
		return EXIT_USAGE;
	}
	len = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (len <= 0 || task_store_default_dir(store, dir, sizeof dir, &d) != 0) {
		fprintf(stderr, "cuda-agent: tasks export: %s\n",
			len <= 0 ? "cannot find this executable" : d.msg);
		return EXIT_ENV;
	}
	exe[len] = '\0';
	args = calloc((size_t)argc + 8, sizeof *args);
	if (!args)
		return EXIT_INTERNAL;
	args[n++] = "--cli";
	args[n++] = exe;
	args[n++] = "--store";
	args[n++] = dir;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--store") == 0 && i + 1 < argc) {
			i++;
		} else if (strcmp(argv[i], "--python") == 0 && i + 1 < argc) {
			python = argv[++i];
			args[n++] = "--python";
			args[n++] = python;
		} else {
			args[n++] = argv[i];
		}
	}
	args[n] = NULL;
	(void)ca_exec_python_module(python && python[0] ? python : "python3",
				    "cuda_agent_rl.export", args, "tasks export", &d);
	fprintf(stderr, "cuda-agent tasks export: %s\n", d.msg);
	free(args);
	return EXIT_ENV;
}

int cmd_tasks(int argc, char **argv)
{
	static const struct cli_subcommand subs[] = {
		{"import", tasks_import},
		{"list", tasks_list},
		{"show", tasks_show},
		{"check", tasks_check},
		{"export", tasks_export},
	};
	return cli_dispatch("tasks", argc, argv, usage_all, help_all, subs,
			    sizeof subs / sizeof subs[0]);
}
