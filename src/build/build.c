/* build: the build driver (see build.h). Layout of the cache (<cache_dir> = opts->cache_dir, else
 * ca_cache_dir()/build):
 *   obj/<key>.o, obj/<key>.info    one translation unit and its ptxas lines
 *   obj/<key>.hostasm              the verdict of its host assembly check (build/hostasm.h):
 *                                  "ca-hostasm-1 clean", or "ca-hostasm-1 refused" and the
 *                                  findings. Written before the object is moved into place; a
 *                                  refused unit has a verdict and no object. A unit is taken from
 *                                  the cache only with a verdict, so none is accepted unchecked
 *   lib/<key>.so, lib/<key>.info   one linked candidate and the ptxas lines of all its units
 *   nvcc/<hash of nvcc path, mtime, size, inode>.txt   `nvcc --version`, so that a full cache
 *                                  hit runs no child process at all
 * Every file is written under a temporary name and renamed into place, so concurrent builds of
 * the same candidate are safe (the last rename wins with identical content). */
#include "build/build.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build/elfsyms.h"
#include "build/hostasm.h"
#include "build/rules.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/proc.h"

#define KEY_VERSION "ca-build-2" /* 2: objects carry a host assembly verdict */
#define VERDICT_CLEAN "ca-hostasm-1 clean\n"
#define VERDICT_REFUSED "ca-hostasm-1 refused\n"
#define VERDICT_MAX (64u << 10)
#define MAX_TREE_BYTES (64u << 20) /* all files under kernels/ together */
#define MAX_ERROR_LINES 20
#define MAX_ERROR_LINE_LEN 400
#define DEFAULT_TIMEOUT_S 120.0
#define MAX_JOBS 64
#define DEFAULT_ARCH "sm_90"

/* Flags of every compile; part of every object key. NVTX is disabled because its header-only
 * injection code (pulled in by CUB and Thrust) calls getenv/dlopen/dlsym, which the symbol rules
 * forbid. -Xcompiler -S stops the host compiler, nvcc's last step, at its assembly: nvcc's output
 * is the host assembly, which is checked (build/hostasm.h) and then assembled into the object by
 * the host compiler's driver (`gcc -c -x assembler`, what `gcc -c` runs itself: the object is the
 * same). Cheaper than -save-temps (no preprocessed copy is written): one more short process. */
static const char *const compile_flags[] = {
	"-O3", "--use_fast_math", "-std=c++17", "-Xcompiler", "-fPIC", "-lineinfo", "-Xptxas", "-v",
	"-DCCCL_DISABLE_NVTX", "-DNVTX_DISABLE", "-Xcompiler", "-S",
};

const char *build_status_code(enum build_status s)
{
	switch (s) {
	case BUILD_OK: return "ok";
	case BUILD_COMPILE_ERROR: return "build.error";
	case BUILD_RULE_VIOLATION: return "build.forbidden_source";
	case BUILD_SYMBOL_VIOLATION: return "build.forbidden_symbol";
	case BUILD_NO_SOURCES: return "build.no_sources";
	case BUILD_TIMEOUT: return "build.timeout";
	}
	return "internal"; /* not reached: every status is above */
}

/* ---- small text helpers ------------------------------------------------------------------ */

/* Appends one line (a '\n' is added) if it fits whole; returns false when it does not. */
static bool buf_add_line(char *buf, size_t size, const char *line, size_t line_len)
{
	size_t len = strlen(buf);
	if (len + line_len + 2 > size)
		return false;
	memcpy(buf + len, line, line_len);
	buf[len + line_len] = '\n';
	buf[len + line_len + 1] = '\0';
	return true;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n > k && strcmp(s + n - k, suffix) == 0;
}

/* Replaces every occurrence of `from` in s (in place, bounded by size) by `to`. */
static void replace_all(char *s, size_t size, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	char *p = s;

	if (fl == 0)
		return;
	while ((p = strstr(p, from)) != NULL) {
		size_t rest = strlen(p + fl);
		if ((size_t)(p - s) + tl + rest + 1 > size)
			return;
		memmove(p + tl, p + fl, rest + 1);
		memcpy(p, to, tl);
		p += tl;
	}
}

/* A temporary name next to path, unique across processes and across threads of this one. */
static atomic_ulong tmp_counter;

static void temp_name(char *out, size_t size, const char *path, const char *suffix)
{
	unsigned long n = atomic_fetch_add(&tmp_counter, 1);
	snprintf(out, size, "%s.tmp.%ld.%lu%s", path, (long)getpid(), n, suffix);
}

/* Writes a small cache file atomically (temporary name, then rename); best effort. */
static void write_cache_file(const char *path, const char *text)
{
	char tmp[PATH_MAX + 64];
	size_t len = strlen(text), done = 0;
	int fd;

	temp_name(tmp, sizeof tmp, path, "");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	while (done < len) {
		ssize_t n = write(fd, text + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	if (close(fd) != 0 || done != len || rename(tmp, path) != 0)
		unlink(tmp);
}

/* ---- arch, nvcc, CUDA libraries ------------------------------------------------------------ */

static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER;
static bool arch_queried;
static char queried_arch[32]; /* empty: nvidia-smi gave nothing */
static char version_id[PATH_MAX + 96];
static char version_text[1024];

static bool arch_valid(const char *a)
{
	const char *p;
	size_t digits = 0;

	if (strncmp(a, "sm_", 3) == 0)
		p = a + 3;
	else if (strncmp(a, "compute_", 8) == 0)
		p = a + 8;
	else
		return false;
	while (*p >= '0' && *p <= '9') {
		p++;
		digits++;
	}
	if (digits < 2 || digits > 3)
		return false;
	if (*p == 'a' || *p == 'f')
		p++;
	return *p == '\0' && strlen(a) < 32;
}

/* "9.0" -> "sm_90", "10.0" -> "sm_100". */
static bool arch_from_compute_cap(const char *cc, char *out, size_t out_size)
{
	int major = 0, minor = 0;
	if (sscanf(cc, "%d.%d", &major, &minor) != 2 || major < 1 || major > 99 || minor < 0 ||
	    minor > 9)
		return false;
	return snprintf(out, out_size, "sm_%d%d", major, minor) < (int)out_size;
}

static void query_gpu_arch(char *out, size_t out_size)
{
	pthread_mutex_lock(&state_mu);
	if (!arch_queried) {
		const char *argv[] = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader",
				      NULL};
		struct ca_run_opts ro = {.timeout_s = 15, .stdout_cap = 4096, .stderr_cap = 4096};
		struct ca_run_result rr;
		arch_queried = true;
		queried_arch[0] = '\0';
		if (ca_run(argv, &ro, &rr, NULL) == 0) {
			if (!rr.timed_out && !rr.term_signal && rr.exit_code == 0 && rr.out)
				if (!arch_from_compute_cap(rr.out, queried_arch, sizeof queried_arch))
					queried_arch[0] = '\0';
			ca_run_result_free(&rr);
		}
	}
	snprintf(out, out_size, "%s", queried_arch);
	pthread_mutex_unlock(&state_mu);
}

static int resolve_arch(const struct build_opts *opts, char *out, size_t out_size,
			struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_ARCH");

	if (opts->arch && opts->arch[0]) {
		if (!arch_valid(opts->arch))
			return ca_fail(d, CA_ERR_INVALID, "bad GPU architecture '%s' (expected e.g. "
							  "sm_90)", opts->arch);
		snprintf(out, out_size, "%s", opts->arch);
		return 0;
	}
	if (env && env[0]) {
		if (!arch_valid(env))
			return ca_fail(d, CA_ERR_INVALID, "bad $CUDA_AGENT_ARCH '%s' (expected e.g. "
							  "sm_90)", env);
		snprintf(out, out_size, "%s", env);
		return 0;
	}
	query_gpu_arch(out, out_size);
	if (!out[0])
		snprintf(out, out_size, "%s", DEFAULT_ARCH);
	return 0;
}

int build_resolve_arch(const char *arch, char *out, size_t out_size, struct ca_diag *d)
{
	struct build_opts o = {.arch = arch};
	return resolve_arch(&o, out, out_size, d);
}

static bool find_in_path(const char *name, char *out, size_t out_size)
{
	const char *path = getenv("PATH");
	while (path && *path) {
		size_t n = strcspn(path, ":");
		if (n > 0 && snprintf(out, out_size, "%.*s/%s", (int)n, path, name) < (int)out_size &&
		    access(out, X_OK) == 0 && ca_is_file(out))
			return true;
		path += n;
		if (*path == ':')
			path++;
	}
	return false;
}

static int resolve_nvcc(const struct build_opts *opts, char *out, size_t out_size,
			struct ca_diag *d)
{
	const char *want = opts->nvcc && opts->nvcc[0] ? opts->nvcc : getenv("NVCC");

	if (want && want[0]) {
		if (strchr(want, '/')) {
			if (snprintf(out, out_size, "%s", want) >= (int)out_size)
				return ca_fail(d, CA_ERR_LIMIT, "nvcc path too long");
		} else if (!find_in_path(want, out, out_size)) {
			return ca_fail(d, CA_ERR_NOTFOUND, "%s: not found on PATH", want);
		}
	} else if (!find_in_path("nvcc", out, out_size)) {
		snprintf(out, out_size, "%s", "/usr/local/cuda/bin/nvcc");
	}
	if (access(out, X_OK) != 0 || !ca_is_file(out))
		return ca_fail(d, CA_ERR_NOTFOUND, "nvcc not found or not executable at %s (set "
						   "NVCC or put nvcc on PATH)", out);
	return 0;
}

/* `nvcc --version`, cached per process and in <cache>/nvcc/ keyed by the nvcc binary's identity. */
static int nvcc_version(const char *nvcc, const char *cache, char *out, size_t out_size,
			struct ca_diag *d)
{
	struct stat st;
	char id[sizeof version_id], idhash[CA_HASH_HEX_LEN + 1], dir[PATH_MAX], path[PATH_MAX];
	char *text = NULL;
	size_t len = 0;
	int rc = 0;

	if (stat(nvcc, &st) != 0)
		return ca_fail(d, CA_ERR_NOTFOUND, "cannot stat %s: %s", nvcc, strerror(errno));
	snprintf(id, sizeof id, "%s|%lld.%09ld|%lld|%llu", nvcc, (long long)st.st_mtim.tv_sec,
		 st.st_mtim.tv_nsec, (long long)st.st_size, (unsigned long long)st.st_ino);
	pthread_mutex_lock(&state_mu);
	if (strcmp(id, version_id) == 0) {
		snprintf(out, out_size, "%s", version_text);
		pthread_mutex_unlock(&state_mu);
		return 0;
	}
	pthread_mutex_unlock(&state_mu);

	ca_hash_hex(id, strlen(id), idhash);
	if (snprintf(dir, sizeof dir, "%s/nvcc", cache) >= (int)sizeof dir ||
	    snprintf(path, sizeof path, "%s/%s.txt", dir, idhash) >= (int)sizeof path)
		return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	if (ca_read_file(path, 4096, &text, &len, NULL) == 0 && len > 0) {
		snprintf(out, out_size, "%s", text);
	} else {
		const char *argv[] = {nvcc, "--version", NULL};
		struct ca_run_opts ro = {.timeout_s = 60, .stdout_cap = 4096, .stderr_cap = 4096};
		struct ca_run_result rr;
		char how[128];
		rc = ca_run(argv, &ro, &rr, d);
		if (rc)
			goto out;
		if (rr.timed_out || rr.term_signal || rr.exit_code != 0 || !rr.out || !rr.out[0]) {
			ca_run_describe(&rr, how, sizeof how);
			rc = ca_fail(d, CA_ERR_BUILD, "%s --version failed: %s", nvcc, how);
			ca_run_result_free(&rr);
			goto out;
		}
		snprintf(out, out_size, "%s", rr.out);
		ca_run_result_free(&rr);
		if (ca_mkdirs(dir, 0755, NULL) == 0)
			write_cache_file(path, out);
	}
	pthread_mutex_lock(&state_mu);
	snprintf(version_id, sizeof version_id, "%s", id);
	snprintf(version_text, sizeof version_text, "%s", out);
	pthread_mutex_unlock(&state_mu);
out:
	free(text);
	return rc;
}

/* <nvcc dir>/../lib64 and <nvcc dir>/../targets/<arch>-linux/lib, those that exist. */
static int cuda_lib_dirs(const char *nvcc, char dirs[3][PATH_MAX])
{
	static const char *const subs[] = {"lib64", "targets/x86_64-linux/lib",
					   "targets/sbsa-linux/lib"};
	char root[PATH_MAX];
	int n = 0;

	snprintf(root, sizeof root, "%s", nvcc);
	for (int k = 0; k < 2; k++) { /* strip "/nvcc", then "/bin" */
		char *slash = strrchr(root, '/');
		if (!slash)
			return 0;
		*slash = '\0';
	}
	if (!root[0])
		return 0;
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		if (snprintf(dirs[n], PATH_MAX, "%s/%s", root, subs[i]) < PATH_MAX &&
		    ca_is_dir(dirs[n]))
			n++;
	}
	return n;
}

/* ---- candidate files ------------------------------------------------------------------------- */

struct unit {
	const char *name;   /* relative name, e.g. "axpy.cu" (points into the tree listing) */
	const char *text;   /* file bytes (points into the file table) */
	size_t len;
	char key[CA_HASH_HEX_LEN + 1];
	char obj[PATH_MAX];
	char info_path[PATH_MAX];
	char verdict_path[PATH_MAX];
	bool cached;
	bool refused;   /* its host assembly was refused (this compile or the cached verdict) */
	char *findings; /* then: the findings, one per line */
	/* filled by the compile */
	bool failed, timed_out;
	int run_rc;
	char *log;  /* captured stderr + stdout of nvcc */
	char *info; /* ptxas lines */
};

struct candidate {
	char **names;   /* every file under kernels/ (relative), sorted */
	char **texts;
	size_t *lens;
	size_t count;
	struct unit *units;
	size_t num_units;
	bool uses_cublas, uses_cudnn;
};

static void candidate_free(struct candidate *c)
{
	for (size_t i = 0; i < c->num_units; i++) {
		free(c->units[i].log);
		free(c->units[i].info);
		free(c->units[i].findings);
	}
	free(c->units);
	for (size_t i = 0; c->texts && i < c->count; i++)
		free(c->texts[i]);
	free(c->texts);
	free(c->lens);
	ca_free_names(c->names, c->count);
	memset(c, 0, sizeof *c);
}

static bool is_unit_name(const char *name)
{
	return !strchr(name, '/') &&
	       (has_suffix(name, ".cu") || has_suffix(name, ".cpp") || has_suffix(name, ".c"));
}

/* ---- ptxas info and compiler errors --------------------------------------------------------- */

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
				buf_add_line(out, cap, rec, strlen(rec));
			entry[0] = '\0';
		}
	}
	return out;
}

struct rewrite {
	const char *from, *to;
};

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
static int add_errors(const char *log, const char *unit, const struct rewrite *rw, size_t nrw,
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
			replace_all(line, sizeof line, rw[i].from, rw[i].to);
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
		if (!buf_add_line(errors, size, line, strlen(line)))
			break;
		(*lines)++;
		added++;
	}
	return added;
}

/* The last few non-empty lines of a log, for failures without a recognizable error line. */
static void add_tail(const char *log, const struct rewrite *rw, size_t nrw, char *errors,
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
			replace_all(line, sizeof line, rw[k].from, rw[k].to);
		line[MAX_ERROR_LINE_LEN] = '\0';
		if (!buf_add_line(errors, size, line, strlen(line)))
			return;
		(*lines)++;
	}
}

/* ---- compiling -------------------------------------------------------------------------------- */

struct job {
	struct unit *units;
	size_t num_units;
	size_t next;
	pthread_mutex_t mu;
	const char *nvcc;
	const char *arch;
	const char *kdir;
	const char *include_dir;
	double timeout_s;
};

static char *concat_logs(const struct ca_run_result *rr)
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
		write_cache_file(u->verdict_path, VERDICT_CLEAN);
	} else if (rc == CA_ERR_REJECTED) {
		u->refused = true;
		u->findings = buf;
		buf = NULL;
		verdict = malloc(strlen(VERDICT_REFUSED) + strlen(u->findings) + 1);
		if (verdict) {
			memcpy(verdict, VERDICT_REFUSED, strlen(VERDICT_REFUSED));
			memcpy(verdict + strlen(VERDICT_REFUSED), u->findings,
			       strlen(u->findings) + 1);
			write_cache_file(u->verdict_path, verdict);
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
	int rc = ca_run(argv, &ro, &rr, &rd);

	if (rc) {
		u->failed = true;
		u->run_rc = rc;
		log_append(u, rd.msg);
		return -1;
	}
	if (rr.timed_out || rr.term_signal || rr.exit_code != 0 || !ca_is_file(obj)) {
		char *log = concat_logs(&rr);
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
static int load_verdict(struct unit *u)
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
		inc_k[PATH_MAX + 3], inc_i[PATH_MAX + 3];
	const char *argv[32];
	int n = 0;
	struct ca_run_opts ro = {.timeout_s = j->timeout_s, .stdout_cap = 256u << 10,
				 .stderr_cap = 1u << 20};
	struct ca_run_result rr;
	struct ca_diag rd;

	snprintf(src, sizeof src, "%s/%s", j->kdir, u->name);
	temp_name(spath, sizeof spath, u->obj, ".s"); /* nvcc's output: the host assembly */
	temp_name(tmp, sizeof tmp, u->obj, ".o");
	snprintf(arch_flag, sizeof arch_flag, "-arch=%s", j->arch);
	snprintf(inc_k, sizeof inc_k, "-I%s", j->kdir);
	argv[n++] = j->nvcc;
	for (size_t i = 0; i < sizeof compile_flags / sizeof compile_flags[0]; i++)
		argv[n++] = compile_flags[i];
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

	u->run_rc = ca_run(argv, &ro, &rr, &rd);
	if (u->run_rc) {
		u->failed = true;
		u->log = strdup(rd.msg);
		return;
	}
	u->log = concat_logs(&rr);
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
			write_cache_file(u->info_path, u->info);
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

static void *compile_worker(void *arg)
{
	struct job *j = arg;
	for (;;) {
		size_t i;
		pthread_mutex_lock(&j->mu);
		while (j->next < j->num_units && j->units[j->next].cached)
			j->next++;
		i = j->next < j->num_units ? j->next++ : j->num_units;
		pthread_mutex_unlock(&j->mu);
		if (i >= j->num_units)
			return NULL;
		compile_unit(j, i);
	}
}

static int compile_all(struct job *j, int jobs, struct ca_diag *d)
{
	pthread_t threads[MAX_JOBS];
	int started = 0;

	if (pthread_mutex_init(&j->mu, NULL) != 0)
		return ca_fail(d, CA_ERR_NOMEM, "cannot create a mutex");
	for (int i = 1; i < jobs; i++) {
		if (pthread_create(&threads[started], NULL, compile_worker, j) != 0)
			break;
		started++;
	}
	compile_worker(j); /* this thread works too */
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&j->mu);
	return 0;
}

/* ---- the driver ------------------------------------------------------------------------------ */

static int set_verdict(struct build_result *res, enum build_status s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int set_verdict(struct build_result *res, enum build_status s, const char *fmt, ...)
{
	va_list ap;
	res->status = s;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(res->errors, sizeof res->errors, fmt, ap);
		va_end(ap);
	}
	return 0;
}

static int read_candidate(const char *kdir, struct candidate *c, struct build_result *res,
			  bool *verdict, struct ca_diag *d)
{
	size_t total = 0;
	int rc = rules_list_tree(kdir, RULES_MAX_TREE_FILES, &c->names, &c->count, d);

	*verdict = false;
	if (rc == CA_ERR_LIMIT) {
		*verdict = true;
		return set_verdict(res, BUILD_RULE_VIOLATION, "kernels/ holds more than %d files",
				   RULES_MAX_TREE_FILES);
	}
	if (rc)
		return rc;
	c->texts = calloc(c->count ? c->count : 1, sizeof *c->texts);
	c->lens = calloc(c->count ? c->count : 1, sizeof *c->lens);
	c->units = calloc(c->count ? c->count : 1, sizeof *c->units);
	if (!c->texts || !c->lens || !c->units)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory reading the candidate");
	for (size_t i = 0; i < c->count; i++)
		if (is_unit_name(c->names[i]))
			c->num_units++;
	if (c->num_units == 0) {
		*verdict = true;
		return set_verdict(res, BUILD_NO_SOURCES, "kernels/ holds no .cu, .cpp or .c files");
	}
	if (c->num_units > CA_BUILD_MAX_SOURCES) {
		*verdict = true;
		return set_verdict(res, BUILD_RULE_VIOLATION,
				   "kernels/ holds %zu source files, over the limit of %d",
				   c->num_units, CA_BUILD_MAX_SOURCES);
	}
	c->num_units = 0;
	for (size_t i = 0; i < c->count; i++) {
		char path[PATH_MAX];
		struct ca_diag rd;
		if (ca_path_join(path, sizeof path, kdir, c->names[i]) != 0)
			return ca_fail(d, CA_ERR_LIMIT, "path too long under %s", kdir);
		rc = ca_read_file(path, CA_BUILD_MAX_SOURCE_BYTES, &c->texts[i], &c->lens[i], &rd);
		if (rc == CA_ERR_LIMIT) {
			*verdict = true;
			return set_verdict(res, BUILD_RULE_VIOLATION,
					   "kernels/%s is larger than the limit of %u bytes",
					   c->names[i], CA_BUILD_MAX_SOURCE_BYTES);
		}
		if (rc)
			return ca_fail(d, rc, "%s", rd.msg);
		total += c->lens[i];
		if (total > MAX_TREE_BYTES) {
			*verdict = true;
			return set_verdict(res, BUILD_RULE_VIOLATION,
					   "kernels/ holds more than %u bytes", MAX_TREE_BYTES);
		}
		if (strstr(c->texts[i], "cublas"))
			c->uses_cublas = true;
		if (strstr(c->texts[i], "cudnn"))
			c->uses_cudnn = true;
		if (is_unit_name(c->names[i])) {
			struct unit *u = &c->units[c->num_units++];
			u->name = c->names[i];
			u->text = c->texts[i];
			u->len = c->lens[i];
		}
	}
	return 0;
}

/* Hash of the files of include_dir the candidate compiles against. */
static void hash_include_dir(struct ca_hasher *h, const char *include_dir)
{
	static const char *const files[] = {"dlpack/dlpack.h", "cuda_agent/abi.h"};
	ca_hasher_update_str(h, include_dir ? include_dir : "");
	for (size_t i = 0; include_dir && i < sizeof files / sizeof files[0]; i++) {
		char path[PATH_MAX], *text = NULL;
		size_t len = 0;
		if (ca_path_join(path, sizeof path, include_dir, files[i]) == 0 &&
		    ca_read_file(path, 16u << 20, &text, &len, NULL) == 0) {
			ca_hasher_update_str(h, files[i]);
			ca_hasher_update(h, text, len);
		}
		free(text);
	}
}

static int compute_keys(struct candidate *c, const char *nvcc_ver, const char *arch,
			const char *include_dir, const char *const *link_flags, size_t nlink,
			const char *cache, char lib_key[CA_HASH_HEX_LEN + 1], struct ca_diag *d)
{
	struct ca_hasher common, h;
	char common_hex[CA_HASH_HEX_LEN + 1];
	int rc;

	/* What every unit sees: compiler, flags, arch, include dir, every non-unit file. */
	if ((rc = ca_hasher_init(&common)))
		return ca_fail(d, rc, "out of memory hashing");
	ca_hasher_update_str(&common, KEY_VERSION);
	ca_hasher_update_str(&common, nvcc_ver);
	for (size_t i = 0; i < sizeof compile_flags / sizeof compile_flags[0]; i++)
		ca_hasher_update_str(&common, compile_flags[i]);
	ca_hasher_update_str(&common, arch);
	hash_include_dir(&common, include_dir);
	for (size_t i = 0; i < c->count; i++) {
		if (is_unit_name(c->names[i]))
			continue;
		ca_hasher_update_str(&common, c->names[i]);
		ca_hasher_update(&common, &c->lens[i], sizeof c->lens[i]);
		ca_hasher_update(&common, c->texts[i], c->lens[i]);
	}
	ca_hasher_final_hex(&common, common_hex);
	ca_hasher_free(&common);

	for (size_t i = 0; i < c->num_units; i++) {
		struct unit *u = &c->units[i];
		if ((rc = ca_hasher_init(&h)))
			return ca_fail(d, rc, "out of memory hashing");
		ca_hasher_update_str(&h, common_hex);
		ca_hasher_update_str(&h, u->name);
		ca_hasher_update(&h, &u->len, sizeof u->len);
		ca_hasher_update(&h, u->text, u->len);
		/* a unit that names another unit may #include it */
		for (size_t k = 0; k < c->num_units; k++) {
			if (k == i || !strstr(u->text, c->units[k].name))
				continue;
			ca_hasher_update_str(&h, c->units[k].name);
			ca_hasher_update(&h, &c->units[k].len, sizeof c->units[k].len);
			ca_hasher_update(&h, c->units[k].text, c->units[k].len);
		}
		ca_hasher_final_hex(&h, u->key);
		ca_hasher_free(&h);
		if (snprintf(u->obj, sizeof u->obj, "%s/obj/%s.o", cache, u->key) >=
			    (int)sizeof u->obj ||
		    snprintf(u->info_path, sizeof u->info_path, "%s/obj/%s.info", cache, u->key) >=
			    (int)sizeof u->info_path ||
		    snprintf(u->verdict_path, sizeof u->verdict_path, "%s/obj/%s.hostasm", cache,
			     u->key) >= (int)sizeof u->verdict_path)
			return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	}

	if ((rc = ca_hasher_init(&h)))
		return ca_fail(d, rc, "out of memory hashing");
	ca_hasher_update_str(&h, KEY_VERSION);
	ca_hasher_update_str(&h, "lib");
	ca_hasher_update_str(&h, arch);
	for (size_t i = 0; i < nlink; i++)
		ca_hasher_update_str(&h, link_flags[i]);
	for (size_t i = 0; i < c->num_units; i++)
		ca_hasher_update_str(&h, c->units[i].key);
	ca_hasher_final_hex(&h, lib_key);
	ca_hasher_free(&h);
	return 0;
}

/* Appends text (whole lines) to a CA_BUILD_LOG_MAX buffer. */
static void append_lines(char *buf, size_t size, const char *text)
{
	for (const char *p = text; p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		if (n && !buf_add_line(buf, size, p, n))
			return;
		p = eol ? eol + 1 : p + n;
	}
}

static void load_info(const char *path, char *buf, size_t size)
{
	char *text = NULL;
	if (ca_read_file(path, 1u << 20, &text, NULL, NULL) == 0)
		append_lines(buf, size, text);
	free(text);
}

/* Links the objects into lib (via a temporary name). */
static int link_library(const char *nvcc, const char *arch, struct candidate *c,
			const char *const *link_flags, size_t nlink, const char *lib,
			double timeout_s, const struct rewrite *rw, size_t nrw,
			struct build_result *res, struct ca_diag *d)
{
	char tmp[PATH_MAX + 64], arch_flag[48];
	const char **argv = calloc(c->num_units + nlink + 16, sizeof *argv);
	struct ca_run_opts ro = {.timeout_s = timeout_s, .stdout_cap = 256u << 10,
				 .stderr_cap = 1u << 20};
	struct ca_run_result rr;
	int n = 0, rc, lines = 0;

	if (!argv)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory linking");
	temp_name(tmp, sizeof tmp, lib, ".so");
	snprintf(arch_flag, sizeof arch_flag, "-arch=%s", arch);
	argv[n++] = nvcc;
	argv[n++] = "-shared";
	argv[n++] = "-cudart";
	argv[n++] = "shared";
	argv[n++] = arch_flag;
	argv[n++] = "-o";
	argv[n++] = tmp;
	for (size_t i = 0; i < c->num_units; i++)
		argv[n++] = c->units[i].obj;
	for (size_t i = 0; i < nlink; i++)
		argv[n++] = link_flags[i];
	argv[n] = NULL;

	rc = ca_run(argv, &ro, &rr, d);
	free(argv);
	if (rc)
		return rc;
	if (rr.timed_out) {
		set_verdict(res, BUILD_TIMEOUT, "linking took longer than %.0f s", timeout_s);
	} else if (rr.term_signal || rr.exit_code != 0 || !ca_is_file(tmp)) {
		char *log = concat_logs(&rr);
		res->status = BUILD_COMPILE_ERROR;
		res->errors[0] = '\0';
		if (log && add_errors(log, NULL, rw, nrw, res->errors, sizeof res->errors, &lines) == 0)
			add_tail(log, rw, nrw, res->errors, sizeof res->errors, &lines);
		if (!res->errors[0]) {
			char how[128];
			ca_run_describe(&rr, how, sizeof how);
			snprintf(res->errors, sizeof res->errors, "linking failed: %s\n", how);
		}
		free(log);
	} else if (rename(tmp, lib) != 0) {
		rc = ca_fail(d, CA_ERR_IO, "cannot move %s into the build cache: %s", lib,
			     strerror(errno));
	} else {
		res->status = BUILD_OK;
	}
	unlink(tmp);
	ca_run_result_free(&rr);
	return rc;
}

/* The findings of every refused unit: build.forbidden_source. */
static void report_refused(const struct candidate *c, struct build_result *res)
{
	struct rules_report r;

	res->status = BUILD_RULE_VIOLATION;
	rules_report_init(&r, res->errors, sizeof res->errors);
	for (size_t i = 0; i < c->num_units; i++) {
		const char *p = c->units[i].findings;
		while (c->units[i].refused && p && *p) {
			size_t n = strcspn(p, "\n");
			if (n)
				rules_report_add(&r, "%.*s", (int)(n < 1000 ? n : 1000), p);
			p += n + (p[n] == '\n');
		}
	}
	rules_report_finish(&r);
}

/* Symbol and library rules on the built library, and the ABI's ca_forward. */
static void check_library(const char *lib, struct build_result *res)
{
	struct elf_dynamic e;
	struct rules_report r;
	struct ca_diag ed;

	if (elf_dynamic_read_file(lib, &e, &ed) != 0) {
		set_verdict(res, BUILD_SYMBOL_VIOLATION,
			    "cannot read the library's dynamic symbols: %s\n", ed.msg);
		return;
	}
	res->errors[0] = '\0';
	rules_report_init(&r, res->errors, sizeof res->errors);
	if (rules_check_elf(&e, &r) > 0) {
		rules_report_finish(&r);
		res->status = BUILD_SYMBOL_VIOLATION;
	} else if (!elf_dynamic_find_defined(&e, "ca_forward")) {
		set_verdict(res, BUILD_COMPILE_ERROR,
			    "the library does not export ca_forward with C linkage (define it "
			    "extern \"C\" and include <cuda_agent/abi.h>)\n");
	} else {
		res->status = BUILD_OK;
		snprintf(res->library, sizeof res->library, "%s", lib);
	}
	elf_dynamic_free(&e);
}

int build_candidate(const struct build_opts *opts, struct build_result *res, struct ca_diag *d)
{
	double t0 = ca_now();
	struct candidate c = {0};
	char nvcc[PATH_MAX], cache[PATH_MAX], kdir[PATH_MAX], dir[PATH_MAX + 8], lib[PATH_MAX],
		lib_info[PATH_MAX], version[sizeof version_text];
	char libdirs[3][PATH_MAX];
	const char *link_flags[16];
	size_t nlink = 0;
	struct rewrite rw[2];
	char kprefix[PATH_MAX + 1];
	double timeout_s;
	int rc, jobs, nlibdirs, lines = 0;
	size_t clean = 0, refused = 0;
	bool verdict = false;

	memset(res, 0, sizeof *res);
	res->status = BUILD_COMPILE_ERROR;
	if (!opts || !opts->kernels_dir || !opts->kernels_dir[0])
		return ca_fail(d, CA_ERR_INVALID, "no kernels directory given");
	timeout_s = opts->timeout_s > 0 ? opts->timeout_s : DEFAULT_TIMEOUT_S;

	if ((rc = resolve_arch(opts, res->arch, sizeof res->arch, d)) ||
	    (rc = resolve_nvcc(opts, nvcc, sizeof nvcc, d)))
		goto out;
	if (opts->cache_dir && opts->cache_dir[0]) {
		if (snprintf(cache, sizeof cache, "%s", opts->cache_dir) >= (int)sizeof cache) {
			rc = ca_fail(d, CA_ERR_LIMIT, "cache path too long");
			goto out;
		}
	} else {
		char root[PATH_MAX];
		if ((rc = ca_cache_dir(root, sizeof root, d)))
			goto out;
		if (ca_path_join(cache, sizeof cache, root, "build") != 0) {
			rc = ca_fail(d, CA_ERR_LIMIT, "cache path too long");
			goto out;
		}
	}
	snprintf(dir, sizeof dir, "%s/obj", cache);
	if ((rc = ca_mkdirs(dir, 0755, d)))
		goto out;
	snprintf(dir, sizeof dir, "%s/lib", cache);
	if ((rc = ca_mkdirs(dir, 0755, d)))
		goto out;
	{ /* absolute, so that result->library works from any working directory */
		char abs[PATH_MAX];
		if ((rc = ca_realpath(cache, abs, sizeof abs, d)))
			goto out;
		memcpy(cache, abs, sizeof cache);
	}

	if (!ca_is_dir(opts->kernels_dir)) {
		set_verdict(res, BUILD_NO_SOURCES, "kernels/ does not exist (%s)\n",
			    opts->kernels_dir);
		goto out;
	}
	if ((rc = ca_realpath(opts->kernels_dir, kdir, sizeof kdir, d)))
		goto out;

	/* (1) source rules, before anything is compiled */
	rc = rules_check_sources(kdir, res->errors, sizeof res->errors, d);
	if (rc == CA_ERR_REJECTED) {
		rc = 0;
		res->status = BUILD_RULE_VIOLATION;
		goto out;
	}
	if (rc == CA_ERR_LIMIT) {
		rc = 0;
		set_verdict(res, BUILD_RULE_VIOLATION, "%s\n", d ? d->msg : "too many files");
		goto out;
	}
	if (rc)
		goto out;
	res->errors[0] = '\0';

	if ((rc = read_candidate(kdir, &c, res, &verdict, d)) || verdict)
		goto out;
	if ((rc = nvcc_version(nvcc, cache, version, sizeof version, d)))
		goto out;

	/* link flags: the allowed libraries the sources mention, and an rpath to libcudart */
	if (c.uses_cublas) {
		link_flags[nlink++] = "-lcublas";
		link_flags[nlink++] = "-lcublasLt";
	}
	if (c.uses_cudnn)
		link_flags[nlink++] = "-lcudnn";
	nlibdirs = cuda_lib_dirs(nvcc, libdirs);
	for (int i = 0; i < nlibdirs; i++) {
		link_flags[nlink++] = "-Xlinker";
		link_flags[nlink++] = "-rpath";
		link_flags[nlink++] = "-Xlinker";
		link_flags[nlink++] = libdirs[i];
	}

	if ((rc = compute_keys(&c, version, res->arch, opts->include_dir, link_flags, nlink, cache,
			       res->hash, d)))
		goto out;
	if (snprintf(lib, sizeof lib, "%s/lib/%s.so", cache, res->hash) >= (int)sizeof lib ||
	    snprintf(lib_info, sizeof lib_info, "%s/lib/%s.info", cache, res->hash) >=
		    (int)sizeof lib_info) {
		rc = ca_fail(d, CA_ERR_LIMIT, "cache path too long");
		goto out;
	}

	/* (2) the cached verdicts: a refused unit ends the build without nvcc; the whole library
	 * comes from the cache only when every unit has a clean verdict */
	for (size_t i = 0; i < c.num_units; i++) {
		struct unit *u = &c.units[i];
		int v = opts->no_cache ? -1 : load_verdict(u);
		if (v == 1)
			clean++;
		else if (v == 0)
			refused++;
	}
	if (refused) {
		res->objects_cached = (int)refused;
		report_refused(&c, res);
		goto out;
	}
	if (!opts->no_cache && clean == c.num_units && ca_is_file(lib)) {
		res->cached = true;
		res->objects_cached = (int)c.num_units;
		load_info(lib_info, res->ptxas_info, sizeof res->ptxas_info);
		check_library(lib, res);
		goto out;
	}

	/* (3) compile what the cache lacks, in parallel */
	size_t to_compile = 0;
	for (size_t i = 0; i < c.num_units; i++) {
		struct unit *u = &c.units[i];
		u->cached = !opts->no_cache && load_verdict(u) == 1 && ca_is_file(u->obj);
		if (u->cached)
			res->objects_cached++;
		else
			to_compile++;
	}
	jobs = opts->jobs > 0 ? opts->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (jobs < 1)
		jobs = 1;
	if (jobs > MAX_JOBS)
		jobs = MAX_JOBS;
	if ((size_t)jobs > to_compile)
		jobs = (int)(to_compile ? to_compile : 1);
	if (to_compile) {
		struct job j = {.units = c.units, .num_units = c.num_units, .nvcc = nvcc,
				.arch = res->arch, .kdir = kdir, .include_dir = opts->include_dir,
				.timeout_s = timeout_s};
		ca_log_debug("build: compiling %zu of %zu units (%d jobs, %s)", to_compile,
			     c.num_units, jobs, res->arch);
		if ((rc = compile_all(&j, jobs, d)))
			goto out;
	}
	snprintf(kprefix, sizeof kprefix, "%s/", kdir);
	rw[0] = (struct rewrite){.from = kprefix, .to = "kernels/"};
	rw[1] = (struct rewrite){.from = cache, .to = "<cache>"};
	for (size_t i = 0; i < c.num_units; i++) {
		struct unit *u = &c.units[i];
		if (u->cached || !u->failed)
			continue;
		if (u->run_rc && !u->timed_out) { /* could not run nvcc at all */
			rc = ca_fail(d, u->run_rc, "cannot compile kernels/%s: %s", u->name,
				     u->log ? u->log : "");
			goto out;
		}
		if (u->timed_out) {
			char line[PATH_MAX + 64];
			int m = snprintf(line, sizeof line, "kernels/%s: nvcc took longer than %.0f s",
					 u->name, timeout_s);
			if (res->status != BUILD_TIMEOUT) {
				res->errors[0] = '\0';
				lines = 0;
			}
			res->status = BUILD_TIMEOUT;
			if (m > 0)
				buf_add_line(res->errors, sizeof res->errors, line, strlen(line));
			continue;
		}
		if (res->status == BUILD_TIMEOUT)
			continue;
		res->objects_compiled++;
		if (add_errors(u->log, u->name, rw, 2, res->errors, sizeof res->errors, &lines) == 0) {
			char line[PATH_MAX + 64];
			snprintf(line, sizeof line, "kernels/%s: nvcc failed:", u->name);
			buf_add_line(res->errors, sizeof res->errors, line, strlen(line));
			add_tail(u->log, rw, 2, res->errors, sizeof res->errors, &lines);
		}
	}
	for (size_t i = 0; i < c.num_units; i++) {
		struct unit *u = &c.units[i];
		if (u->cached)
			load_info(u->info_path, res->ptxas_info, sizeof res->ptxas_info);
		else if (!u->failed) {
			res->objects_compiled++;
			append_lines(res->ptxas_info, sizeof res->ptxas_info, u->info);
		}
	}
	for (size_t i = 0; i < c.num_units; i++)
		refused += c.units[i].refused;
	if (refused) { /* host assembly refused: the verdict, before compile errors */
		report_refused(&c, res);
		goto out;
	}
	if (res->errors[0]) { /* compile errors or timeouts: the verdict */
		if (res->status != BUILD_TIMEOUT)
			res->status = BUILD_COMPILE_ERROR;
		goto out;
	}

	/* (4) link, then the library rules */
	write_cache_file(lib_info, res->ptxas_info);
	if ((rc = link_library(nvcc, res->arch, &c, link_flags, nlink, lib, timeout_s, rw, 2, res,
			       d)))
		goto out;
	if (res->status != BUILD_OK)
		goto out;
	check_library(lib, res);
out:
	if (rc && d)
		snprintf(res->errors, sizeof res->errors, "%s\n", d->msg);
	res->seconds = ca_now() - t0;
	candidate_free(&c);
	return rc;
}
