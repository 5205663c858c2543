/* cuda-agent baselines export|import|measure: the baseline table as JSON lines, so that a fleet
 * rewards every candidate against the same eager and torch.compile numbers
 * (src/store/baseline_cache.h, docs/evaluation.md "Sharing baselines"); measure fills it for
 * tasks, with no candidate (eval_baselines).
 *
 * Exit codes (docs/cli.md): 0 ok; 2 usage, or a file that cannot be read or holds a bad line
 * (nothing is imported then: the message names FILE:LINE); 4 the cache cannot be opened or
 * written; 5 internal (out of memory). */
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/torch_rules.h"
#include "cli/commands.h"
#include "eval/eval.h"
#include "store/baseline_cache.h"
#include "store/task_store.h"

static const char usage_all[] =
	"usage: cuda-agent baselines export [--cache DB] [OUT.jsonl]\n"
	"       cuda-agent baselines import [--cache DB] [--replace] IN.jsonl...\n"
	"       cuda-agent baselines measure [--cache DB] [--refresh] [--json] [--python PATH]\n"
	"                                 [--rules R] (TASK_DIR... | --store S [--source NAME])\n";

static const char help_all[] =
	"\n"
	"Moves the baseline table (eager and torch.compile timings per task, GPU, torch version\n"
	"and timing protocol) between machines as JSON lines (docs/evaluation.md, \"Sharing\n"
	"baselines\"). export writes every entry (to stdout without OUT); import adds the entries\n"
	"of each file in one transaction, all or none, keeping for each key the later measurement\n"
	"(--replace: the file's). Evaluations then find their baselines in the table and do not\n"
	"measure them again. measure times each task's baselines on this machine's GPU, with no\n"
	"candidate, and stores them (a task already in the table is left as it is unless\n"
	"--refresh); it prints one line per task (--json: the result object, docs/result.md).\n"
	"Without a GPU it says so for each task and exits 4.\n"
	"\n"
	"options:\n"
	"  --cache DB   the baseline cache (default <cache dir>/baselines.sqlite; $CUDA_AGENT_CACHE)\n"
	"  --replace    import: the file's entries win over the table's\n"
	"  --refresh    measure: measure again even when the table has the task\n"
	"  --json       measure: one result object per line\n"
	"  --python P   measure: the Python with torch for the bridge ($CUDA_AGENT_PYTHON)\n"
	"  --rules R    measure: the baselines of evaluations under rules R, cuda-agent (default:\n"
	"               Model in eval mode) or kernelbench (training mode); kept apart\n"
	"  --store S    measure: every task of the task store S (--source NAME: of that source)\n"
	"  -h, --help   this help\n";

static int parse(int argc, char **argv, const char **db, bool *replace, bool import)
{
	enum { O_CACHE = 256, O_REPLACE };
	static const struct option longopts[] = {
		{"cache", required_argument, NULL, O_CACHE},
		{"replace", no_argument, NULL, O_REPLACE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_CACHE: *db = optarg; break;
		case O_REPLACE:
			if (!import) {
				fprintf(stderr, "%s(--replace is for import)\n", usage_all);
				return EXIT_USAGE;
			}
			*replace = true;
			break;
		case 'h': printf("%s%s", usage_all, help_all); return -1;
		default:
			fprintf(stderr, "%sTry 'cuda-agent baselines --help'.\n", usage_all);
			return EXIT_USAGE;
		}
	}
	return EXIT_OK;
}

static int open_cache(struct baseline_cache *c, const char *db)
{
	struct ca_diag d = {{0}};
	if (baseline_cache_open(c, db, &d) != 0) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return EXIT_ENV;
	}
	return EXIT_OK;
}

static int baselines_export(int argc, char **argv)
{
	const char *db = NULL, *path;
	struct baseline_cache c;
	struct ca_diag d = {{0}};
	bool unused = false;
	size_t n = 0;
	FILE *out;
	int rc = parse(argc, argv, &db, &unused, false);

	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (argc - optind > 1) {
		fprintf(stderr, "%s(export takes at most one output file)\n", usage_all);
		return EXIT_USAGE;
	}
	path = optind < argc ? argv[optind] : NULL;
	if ((rc = open_cache(&c, db)))
		return rc;
	out = path ? fopen(path, "w") : stdout;
	if (!out) {
		perror(path);
		baseline_cache_close(&c);
		return EXIT_USAGE;
	}
	if (baseline_cache_export(&c, out, &n, &d) != 0) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		rc = EXIT_ENV;
	}
	if ((path ? fclose(out) : fflush(out)) != 0 && rc == EXIT_OK) {
		perror(path ? path : "stdout");
		rc = EXIT_ENV;
	}
	baseline_cache_close(&c);
	if (rc == EXIT_OK)
		fprintf(stderr, "exported %zu baseline entr%s%s%s\n", n, n == 1 ? "y" : "ies",
			path ? " to " : "", path ? path : "");
	return rc;
}

static int baselines_import(int argc, char **argv)
{
	const char *db = NULL;
	struct baseline_cache c;
	bool replace = false;
	int rc = parse(argc, argv, &db, &replace, true);

	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (optind >= argc) {
		fprintf(stderr, "%s(at least one file to import)\n", usage_all);
		return EXIT_USAGE;
	}
	if ((rc = open_cache(&c, db)))
		return rc;
	for (int i = optind; i < argc && rc == EXIT_OK; i++) {
		struct ca_diag d = {{0}};
		size_t added = 0, skipped = 0;
		int err = baseline_cache_import(&c, argv[i], replace, &added, &skipped, &d);
		if (err) {
			fprintf(stderr, "cuda-agent: %s (nothing of this file was imported)\n", d.msg);
			rc = err == CA_ERR_NOMEM ? EXIT_INTERNAL
			     : err == CA_ERR_IO && strstr(d.msg, "baseline cache") ? EXIT_ENV
										 : EXIT_USAGE;
		} else {
			fprintf(stderr, "%s: %zu entr%s imported, %zu kept (the table's were newer)\n",
				argv[i], added, added == 1 ? "y" : "ies", skipped);
		}
	}
	baseline_cache_close(&c);
	return rc;
}

/* The task directories of a store (of one source): a NULL-terminated array the caller frees
 * (each string and the array), or NULL with a message printed. */
struct dir_list {
	const struct task_store *store;
	char **dirs;
	size_t n, cap;
	bool failed;
};

static int collect_dir(const struct task_record *rec, void *ctx)
{
	struct dir_list *l = ctx;
	char dir[PATH_MAX];
	if (task_store_task_dir(l->store, rec, dir, sizeof dir))
		return 0; /* a damaged row: not ours to measure */
	if (l->n + 2 > l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		char **more = realloc(l->dirs, cap * sizeof *more);
		if (!more) {
			l->failed = true;
			return 1;
		}
		l->dirs = more;
		l->cap = cap;
	}
	if (!(l->dirs[l->n] = strdup(dir))) {
		l->failed = true;
		return 1;
	}
	l->dirs[++l->n] = NULL;
	return 0;
}

static char **store_dirs(const char *store_opt, const char *source, size_t *n)
{
	struct task_store st;
	struct task_filter f = {.source = source, .level = -1};
	struct dir_list l = {.store = &st};
	struct ca_diag d = {{0}};
	char root[PATH_MAX];
	if (task_store_default_dir(store_opt, root, sizeof root, &d) ||
	    task_store_open(&st, root, false, &d)) {
		fprintf(stderr, "cuda-agent baselines: %s\n", d.msg);
		return NULL;
	}
	if (task_store_list(&st, &f, collect_dir, &l, &d) && !l.failed)
		fprintf(stderr, "cuda-agent baselines: %s\n", d.msg);
	task_store_close(&st);
	if (l.failed || !l.dirs) {
		for (size_t i = 0; i < l.n; i++)
			free(l.dirs[i]);
		free(l.dirs);
		if (l.failed)
			fprintf(stderr, "cuda-agent baselines: out of memory\n");
		else
			fprintf(stderr, "cuda-agent baselines: the store %s holds no task%s%s\n",
				root, source ? " of source " : "", source ? source : "");
		return NULL;
	}
	*n = l.n;
	return l.dirs;
}

static int baselines_measure(int argc, char **argv)
{
	enum { O_CACHE = 256, O_REFRESH, O_JSON, O_PYTHON, O_STORE, O_SOURCE, O_RULES };
	static const struct option longopts[] = {
		{"cache", required_argument, NULL, O_CACHE},
		{"refresh", no_argument, NULL, O_REFRESH},
		{"json", no_argument, NULL, O_JSON},
		{"python", required_argument, NULL, O_PYTHON},
		{"store", required_argument, NULL, O_STORE},
		{"source", required_argument, NULL, O_SOURCE},
		{"rules", required_argument, NULL, O_RULES},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct eval_opts o;
	struct eval_session session;
	const char *python = NULL, *store = NULL, *source = NULL;
	char **owned = NULL, **dirs;
	size_t n = 0;
	bool as_json = false;
	int ch, worst = EXIT_OK;

	eval_opts_defaults(&o);
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_CACHE: o.baseline_db = optarg; break;
		case O_REFRESH: o.refresh_baselines = true; break;
		case O_JSON: as_json = true; break;
		case O_PYTHON: python = optarg; break;
		case O_STORE: store = optarg; break;
		case O_SOURCE: source = optarg; break;
		case O_RULES: {
			struct ca_diag fd = {{0}};
			if (torch_profile_parse(optarg, &o.rules, &fd)) {
				fprintf(stderr, "cuda-agent: --rules: %s\n", fd.msg);
				return EXIT_USAGE;
			}
			break;
		}
		case 'h': printf("%s%s", usage_all, help_all); return EXIT_OK;
		default:
			fprintf(stderr, "%sTry 'cuda-agent baselines --help'.\n", usage_all);
			return EXIT_USAGE;
		}
	}
	if ((optind >= argc) == !store) {
		fprintf(stderr, "%s(task directories, or --store, to measure)\n", usage_all);
		return EXIT_USAGE;
	}
	if (source && !store) {
		fprintf(stderr, "%s(--source goes with --store)\n", usage_all);
		return EXIT_USAGE;
	}
	if (store) {
		if (!(owned = store_dirs(store, source, &n)))
			return EXIT_USAGE;
		dirs = owned;
	} else {
		dirs = argv + optind;
		n = (size_t)(argc - optind);
	}
	eval_session_init(&session, python, "auto");
	for (size_t i = 0; i < n; i++) {
		struct ca_diag d = {{0}};
		json_t *res = NULL;
		int code;
		o.task_dir = dirs[i];
		if (n > 1)
			fprintf(stderr, "baselines: %zu/%zu %s\n", i + 1, n, dirs[i]);
		if (eval_baselines(&session, &o, &res, &d) != 0) {
			fprintf(stderr, "cuda-agent: %s: %s\n", dirs[i], d.msg);
			code = EXIT_USAGE;
		} else {
			code = eval_exit_code(res);
			if (as_json) {
				char *text = json_dumps(res, JSON_COMPACT);
				if (text)
					printf("%s\n", text);
				free(text);
			} else {
				printf("%s\n",
				       json_string_value(json_object_get(res, "summary")));
			}
			fflush(stdout);
		}
		if (code > worst)
			worst = code;
		const char *why = json_string_value(
			json_object_get(json_object_get(res, "reason"), "code"));
		if (why && n > i + 1 && strcmp(why, "env.no_gpu") == 0) {
			fprintf(stderr, "cuda-agent baselines: no GPU here: the other %zu tasks are not "
				"measured\n", n - i - 1);
			json_decref(res);
			break;
		}
		json_decref(res);
	}
	eval_session_close(&session);
	for (size_t i = 0; owned && i < n; i++)
		free(owned[i]);
	free(owned);
	return worst;
}

int cmd_baselines(int argc, char **argv)
{
	static const struct cli_subcommand subs[] = {
		{"export", baselines_export},
		{"import", baselines_import},
		{"measure", baselines_measure},
	};
	return cli_dispatch("baselines", argc, argv, usage_all, help_all, subs,
			    sizeof subs / sizeof subs[0]);
}
