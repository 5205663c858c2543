/* compile: one nvcc process per translation unit, in parallel, each stopped at its host assembly,
 * which is checked (build/hostasm.h) and assembled; ptxas lines and compiler errors parsed for
 * the result; objects and verdicts cached (build_int.h). */
#include "build/build_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/hostasm.h"
#include "build/nvcc_split.h"
#include "util/fs.h"
#include "util/pool.h"

/* Flags of every compile; part of every object key. NVTX is disabled because its header-only
 * injection code (pulled in by CUB and Thrust) calls getenv/dlopen/dlsym, which the symbol rules
 * forbid. -Xcompiler -S stops the host compiler, nvcc's last step, at its assembly: nvcc's output
 * is the host assembly, which is checked (build/hostasm.h) and then assembled into the object by
 * the host compiler's driver (`gcc -c -x assembler`, what `gcc -c` runs itself: the object is the
 * same). Cheaper than -save-temps (no preprocessed copy is written): one more short process.
 * `--threads N` (build_nvcc_threads, not part of the key: the output does not depend on it) is
 * added after these. */
const char *const build_compile_flags[] = {
	"-O3", "--use_fast_math", "-std=c++17", "-Xcompiler", "-fPIC", "-lineinfo", "-Xptxas", "-v",
	"-DCCCL_DISABLE_NVTX", "-DNVTX_DISABLE", "-Xcompiler", "-S",
};
const size_t build_compile_flags_count = sizeof build_compile_flags / sizeof build_compile_flags[0];


/* "ptxas info : Used 32 registers, ..., 1024 bytes smem" lines to "kernel: N registers, M bytes
 * smem, K bytes spill". */
static char *parse_ptxas(const char *log)
{
	size_t cap = CA_BUILD_LOG_MAX;
	char *out = calloc(1, cap);
	char entry[256] = "", props[256] = "";
	long spill = 0;

	if (!out)
		return NULL;
	for (const char *p = log; p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char line[1024];
		const char *q;
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
		p = eol ? eol + 1 : p + n;

		if ((q = strstr(line, "Compiling entry function '")) != NULL) {
			q += strlen("Compiling entry function '");
			size_t k = strcspn(q, "'");
			snprintf(entry, sizeof entry, "%.*s", (int)(k < 255 ? k : 255), q);
			spill = 0;
		} else if ((q = strstr(line, "Function properties for ")) != NULL) {
			snprintf(props, sizeof props, "%s", q + strlen("Function properties for "));
		} else if ((q = strstr(line, "bytes spill stores")) != NULL) {
			long stack = 0, stores = 0;
			if (strcmp(props, entry) == 0 &&
			    sscanf(line, " %ld bytes stack frame, %ld bytes spill stores", &stack,
				   &stores) == 2)
				spill = stores;
		} else if ((q = strstr(line, "Used ")) != NULL && strstr(line, "registers") &&
			   entry[0]) {
			long regs = 0, smem = 0;
			const char *s = strstr(line, "bytes smem");
			sscanf(q, "Used %ld registers", &regs);
			if (s) {
				const char *b = s;
				while (b > line && (b[-1] == ' ' || (b[-1] >= '0' && b[-1] <= '9')))
					b--;
				smem = strtol(b, NULL, 10);
			}
			char rec[400];
			int m = snprintf(rec, sizeof rec, "%s: %ld registers, %ld bytes smem, %ld bytes "
					 "spill", entry, regs, smem, spill);
			if (m > 0)
				build_buf_add_line(out, cap, rec, strlen(rec));
			entry[0] = '\0';
		}
	}
	return out;
}

static bool is_error_line(const char *line)
{
	if (strstr(line, "errors detected in the compilation") ||
	    strstr(line, "error detected in the compilation"))
		return false;
	return strstr(line, "error") || strstr(line, "fatal") ||
	       strstr(line, "undefined reference") || strstr(line, "multiple definition");
}

/* "kernels/a.cu(12): error: x" -> "kernels/a.cu:12: error: x" */
static void paren_line_to_colon(char *line)
{
	char *open = strchr(line, '(');
	if (!open || open == line || strchr(line, ' ') < open)
		return;
	char *p = open + 1;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == open + 1 || p[0] != ')' || p[1] != ':')
		return;
	*open = ':';
	memmove(p, p + 1, strlen(p + 1) + 1); /* drop ')' */
}

/* Adds the error lines of one nvcc log to errors (at most MAX_ERROR_LINES in all). Returns how
 * many were added. */
int build_add_errors(const char *log, const char *unit, const struct rewrite *rw, size_t nrw,
		     char *errors, size_t size, int *lines)
{
	int added = 0;
	for (const char *p = log; p && *p && *lines < MAX_ERROR_LINES;) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char line[MAX_ERROR_LINE_LEN + PATH_MAX];
		snprintf(line, sizeof line, "%.*s",
			 (int)(n < MAX_ERROR_LINE_LEN ? n : MAX_ERROR_LINE_LEN), p);
		p = eol ? eol + 1 : p + n;
		if (!is_error_line(line))
			continue;
		for (size_t i = 0; i < nrw; i++)
			build_replace_all(line, sizeof line, rw[i].from, rw[i].to);
		paren_line_to_colon(line);
		if (unit && strncmp(line, "kernels/", 8) != 0) { /* name the unit it came from */
			size_t ul = strlen(unit), ll = strlen(line);
			if (8 + ul + 2 + ll < sizeof line) {
				memmove(line + 8 + ul + 2, line, ll + 1);
				memcpy(line, "kernels/", 8);
				memcpy(line + 8, unit, ul);
				memcpy(line + 8 + ul, ": ", 2);
			}
		}
		line[MAX_ERROR_LINE_LEN] = '\0';
		if (!build_buf_add_line(errors, size, line, strlen(line)))
			break;
		(*lines)++;
		added++;
	}
	return added;
}

/* The last few non-empty lines of a log, for failures without a recognizable error line. */
void build_add_tail(const char *log, const struct rewrite *rw, size_t nrw, char *errors,
		    size_t size, int *lines)
{
	const char *starts[5];
	int n = 0;
	const char *p = log;
	while (p && *p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		if (len > 0) {
			if (n == 5) {
				memmove(starts, starts + 1, 4 * sizeof *starts);
				n = 4;
			}
			starts[n++] = p;
		}
		p = eol ? eol + 1 : p + len;
	}
	for (int i = 0; i < n && *lines < MAX_ERROR_LINES; i++) {
		char line[MAX_ERROR_LINE_LEN + PATH_MAX];
		size_t len = strcspn(starts[i], "\n");
		snprintf(line, sizeof line, "%.*s",
			 (int)(len < MAX_ERROR_LINE_LEN ? len : MAX_ERROR_LINE_LEN), starts[i]);
		for (size_t k = 0; k < nrw; k++)
			build_replace_all(line, sizeof line, rw[k].from, rw[k].to);
		line[MAX_ERROR_LINE_LEN] = '\0';
		if (!build_buf_add_line(errors, size, line, strlen(line)))
			return;
		(*lines)++;
	}
}

char *build_concat_logs(const struct ca_run_result *rr)
{
	size_t a = rr->err ? rr->err_len : 0, b = rr->out ? rr->out_len : 0;
	char *s = malloc(a + b + 2);
	if (!s)
		return NULL;
	memcpy(s, rr->err ? rr->err : "", a);
	s[a] = '\n';
	memcpy(s + a + 1, rr->out ? rr->out : "", b);
	s[a + b + 1] = '\0';
	return s;
}

/* Appends a line to u->log. */
static void log_append(struct unit *u, const char *line)
{
	size_t l = (u->log ? strlen(u->log) : 0) + strlen(line) + 2;
	char *joined = malloc(l);
	if (!joined)
		return;
	snprintf(joined, l, "%s%s%s", u->log ? u->log : "", u->log && u->log[0] ? "\n" : "", line);
	free(u->log);
	u->log = joined;
}

/* Checks the host assembly nvcc wrote to spath and writes the verdict into the cache. 0: clean.
 * Otherwise the unit is refused (u->refused, u->findings; the verdict is cached) or could not be
 * checked (u->failed, u->log), and nothing of it may be used. */
static int check_host_asm(struct job *j, struct unit *u, const char *spath)
{
	char shown_name[PATH_MAX + 16], *buf, *verdict;
	struct hostasm_unit hu = {.kdir = j->kdir, .label = "kernels", .source = u->text,
				  .source_len = u->len};
	struct rules_report r;
	struct ca_diag rd;
	int rc;

	snprintf(shown_name, sizeof shown_name, "kernels/%s", u->name);
	hu.shown = shown_name;
	buf = malloc(CA_BUILD_LOG_MAX);
	if (!buf) {
		u->failed = true;
		log_append(u, "nvcc error: out of memory checking the host assembly");
		return -1;
	}
	rules_report_init(&r, buf, CA_BUILD_LOG_MAX);
	rc = hostasm_check_file(&hu, spath, &r, &rd);
	rules_report_finish(&r);
	if (rc == 0) {
		build_write_cache_file(u->verdict_path, VERDICT_CLEAN);
	} else if (rc == CA_ERR_REJECTED) {
		u->refused = true;
		u->findings = buf;
		buf = NULL;
		verdict = malloc(strlen(VERDICT_REFUSED) + strlen(u->findings) + 1);
		if (verdict) {
			memcpy(verdict, VERDICT_REFUSED, strlen(VERDICT_REFUSED));
			memcpy(verdict + strlen(VERDICT_REFUSED), u->findings,
			       strlen(u->findings) + 1);
			build_write_cache_file(u->verdict_path, verdict);
			free(verdict);
		}
	} else {
		u->failed = true;
		log_append(u, "nvcc error: cannot check the host assembly:");
		log_append(u, rd.msg);
	}
	free(buf);
	return rc ? -1 : 0;
}

/* Assembles the checked host assembly into obj with the host compiler's driver: $NVCC_CCBIN when
 * it names a program (nvcc's own choice then), else gcc, as nvcc does. 0, or the unit failed
 * (u->failed, u->timed_out, u->run_rc, u->log). */
static int assemble(struct job *j, struct unit *u, const char *spath, const char *obj)
{
	const char *cc = getenv("NVCC_CCBIN");
	const char *argv[] = {cc && cc[0] && access(cc, X_OK) == 0 && ca_is_file(cc) ? cc : "gcc",
			      "-c", "-x", "assembler", spath, "-o", obj, NULL};
	struct ca_run_opts ro = {.timeout_s = j->timeout_s, .stdout_cap = 64u << 10,
				 .stderr_cap = 256u << 10};
	struct ca_run_result rr;
	struct ca_diag rd;
	char how[128];
	int rc = build_exec(j->box, argv, &ro, NULL, 0, &rr, &rd);

	if (rc) {
		u->failed = true;
		u->run_rc = rc;
		log_append(u, rd.msg);
		return -1;
	}
	if (rr.timed_out || rr.term_signal || rr.exit_code != 0 || !ca_is_file(obj)) {
		char *log = build_filter_log(j->box, build_concat_logs(&rr));
		u->failed = true;
		u->timed_out = rr.timed_out;
		if (log)
			log_append(u, log);
		free(log);
		ca_run_describe(&rr, how, sizeof how);
		log_append(u, "assembling the host code failed:");
		log_append(u, how);
		rc = -1;
	}
	ca_run_result_free(&rr);
	return rc;
}

/* A unit's cached verdict: 1 clean, 0 refused (u->refused, u->findings), -1 none or unreadable
 * (the unit is compiled and checked again). */
int build_load_verdict(struct unit *u)
{
	char *text = NULL;
	size_t len = 0;
	int v = -1;

	if (ca_read_file(u->verdict_path, VERDICT_MAX, &text, &len, NULL) != 0)
		return -1;
	if (strcmp(text, VERDICT_CLEAN) == 0) {
		v = 1;
	} else if (strncmp(text, VERDICT_REFUSED, strlen(VERDICT_REFUSED)) == 0 &&
		   text[strlen(VERDICT_REFUSED)]) {
		free(u->findings);
		u->findings = strdup(text + strlen(VERDICT_REFUSED));
		if (u->findings) {
			u->refused = true;
			v = 0;
		}
	}
	free(text);
	return v;
}

static void compile_unit(struct job *j, size_t index)
{
	struct unit *u = &j->units[index];
	char src[PATH_MAX], tmp[PATH_MAX + 64], spath[PATH_MAX + 64], arch_flag[48],
		inc_k[PATH_MAX + 3], inc_i[PATH_MAX + 3], threads[16];
	const char *argv[32];
	int n = 0;
	_Static_assert(sizeof build_compile_flags / sizeof build_compile_flags[0] + 11 <= 32,
		       "compile_unit's argv holds the flags and 11 more entries");
	struct ca_run_opts ro = {.timeout_s = j->timeout_s, .stdout_cap = 256u << 10,
				 .stderr_cap = 1u << 20};
	struct ca_run_result rr;
	struct ca_diag rd;

	snprintf(src, sizeof src, "%s/%s", j->kdir, u->name);
	/* nvcc's output (the host assembly) and the object go to the staging directory, the only
	 * place the sandbox may write; the object enters the cache by rename once checked */
	if (j->box) {
		snprintf(spath, sizeof spath, "%s/%s.s", j->box->staging, u->key);
		snprintf(tmp, sizeof tmp, "%s/%s.o", j->box->staging, u->key);
	} else {
		build_temp_name(spath, sizeof spath, u->obj, ".s");
		build_temp_name(tmp, sizeof tmp, u->obj, ".o");
	}
	snprintf(arch_flag, sizeof arch_flag, "-arch=%s", j->arch);
	snprintf(inc_k, sizeof inc_k, "-I%s", j->kdir);
	argv[n++] = j->nvcc;
	for (size_t i = 0; i < build_compile_flags_count; i++)
		argv[n++] = build_compile_flags[i];
	if (j->nvcc_threads > 1 && !j->split_dir) {
		snprintf(threads, sizeof threads, "%d", j->nvcc_threads);
		argv[n++] = "--threads";
		argv[n++] = threads;
	}
	argv[n++] = arch_flag;
	argv[n++] = inc_k;
	if (j->include_dir && j->include_dir[0]) {
		snprintf(inc_i, sizeof inc_i, "-I%s", j->include_dir);
		argv[n++] = inc_i;
	}
	argv[n++] = "-c";
	argv[n++] = src;
	argv[n++] = "-o";
	argv[n++] = spath;
	argv[n] = NULL;

	if (!j->split_dir || nvcc_split_run(argv, src, j->kdir, j->split_dir, j->timeout_s, &rr,
					    NULL, j->box) != NVCC_SPLIT_DONE)
		u->run_rc = build_exec(j->box, argv, &ro, NULL, 0, &rr, &rd);
	if (u->run_rc) {
		u->failed = true;
		u->log = strdup(rd.msg);
		return;
	}
	u->log = build_filter_log(j->box, build_concat_logs(&rr));
	if (rr.timed_out) {
		u->failed = u->timed_out = true;
	} else if (rr.term_signal || rr.exit_code != 0 || !ca_is_file(spath)) {
		u->failed = true;
		if (rr.term_signal || rr.exit_code == 127) {
			char how[128], *withhow;
			ca_run_describe(&rr, how, sizeof how);
			size_t l = (u->log ? strlen(u->log) : 0) + strlen(how) + 32;
			withhow = malloc(l);
			if (withhow) {
				snprintf(withhow, l, "%s\nnvcc error: %s", u->log ? u->log : "", how);
				free(u->log);
				u->log = withhow;
			}
		}
	} else if (check_host_asm(j, u, spath) == 0 && assemble(j, u, spath, tmp) == 0) {
		u->info = parse_ptxas(u->log ? u->log : "");
		if (u->info)
			build_write_cache_file(u->info_path, u->info);
		build_adopt(tmp);
		if (rename(tmp, u->obj) != 0) {
			u->failed = true;
			u->run_rc = CA_ERR_IO;
			free(u->log);
			u->log = strdup("cannot move the object into the build cache");
		}
	}
	unlink(spath);
	unlink(tmp);
	ca_run_result_free(&rr);
}

/* One unit of the pool (util/pool.h): the cached ones were decided before. */
static void compile_item(void *ctx, size_t i)
{
	struct job *j = ctx;
	if (!j->units[i].cached)
		compile_unit(j, i);
}

int build_compile_all(struct job *j, int jobs, struct ca_diag *d)
{
	struct ca_pool pool;
	(void)d;
	ca_pool_start(&pool, j->num_units, jobs - 1, compile_item, j);
	ca_pool_work(&pool); /* this thread works too */
	ca_pool_join(&pool);
	return 0;
}
