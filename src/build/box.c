/* box: the build's sandbox (build/box.h): a per-build staging directory
 * under the cache, every process the build starts run in the sandbox's build profile, and the
 * compiler's log cleared of diagnostics located in files outside the candidate's view. */
#include "build/box.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

#define BOX_MAX_ENV 64
#define WITHHELD    ": diagnostic withheld (a file outside the candidate's directory)"

static int add_root(struct build_box *bx, const char *path)
{
	if (!path || !path[0] || bx->n_roots >= BUILD_BOX_MAX_ROOTS)
		return 0;
	if (ca_strlcpy(bx->roots[bx->n_roots], path, sizeof bx->roots[0]))
		return CA_ERR_LIMIT;
	bx->n_roots++;
	return 0;
}

static int add_bind(struct build_box *bx, const char *path, bool writable)
{
	if (bx->n_binds >= BUILD_BOX_MAX_BINDS)
		return CA_ERR_LIMIT;
	bx->binds[bx->n_binds++] = (struct sandbox_bind){.src = path, .writable = writable,
							 .optional = !writable};
	return 0;
}

/* The toolkit's root: nvcc's directory's parent (.../cuda/bin/nvcc -> .../cuda), resolved. */
static void toolkit_root(const char *nvcc, char *out, size_t size)
{
	char real[PATH_MAX];
	out[0] = '\0';
	if (ca_realpath(nvcc, real, sizeof real, NULL) != 0)
		return;
	for (int i = 0; i < 2; i++) {
		char *slash = strrchr(real, '/');
		if (!slash || slash == real)
			return;
		*slash = '\0';
	}
	ca_strlcpy(out, real, size);
}

int build_box_open(struct build_box *bx, const char *cache, const char *kdir,
		   const char *include_dir, const char *nvcc, struct ca_diag *d)
{
	const char *sbv = getenv("CUDA_AGENT_SANDBOX"), *path = getenv("PATH");
	char tk[PATH_MAX];
	int rc;

	memset(bx, 0, sizeof *bx);
	bx->sandboxed = !(sbv && strcmp(sbv, "0") == 0);
	if (snprintf(bx->pch_dir, sizeof bx->pch_dir, "%s/nvcc-split/pch", cache) >=
	    (int)sizeof bx->pch_dir)
		return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	if (include_dir && include_dir[0] &&
	    (rc = ca_realpath(include_dir, bx->include_dir, sizeof bx->include_dir, d)))
		return rc;
	if ((rc = ca_mkdirs(bx->pch_dir, 0755, d)) ||
	    (rc = ca_make_temp_dir(cache, "staging-", bx->staging, sizeof bx->staging, d)))
		return rc;
	if (snprintf(bx->path_env, sizeof bx->path_env, "PATH=%s",
		     path && path[0] ? path : SANDBOX_DEFAULT_PATH) >= (int)sizeof bx->path_env)
		snprintf(bx->path_env, sizeof bx->path_env, "PATH=%s", SANDBOX_DEFAULT_PATH);
	/* the operator's nvcc settings, as nvcc outside the sandbox would see them */
	static const char *const pass[] = {"NVCC_CCBIN", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"};
	for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++) {
		const char *v = getenv(pass[i]);
		if (v && asprintf(&bx->pass_env[bx->n_pass_env], "%s=%s", pass[i], v) > 0)
			bx->n_pass_env++;
	}
	toolkit_root(nvcc, tk, sizeof tk);
	/* where a diagnostic may be located and shown (build_filter_log) */
	if ((rc = add_root(bx, kdir)) || (rc = add_root(bx, bx->staging)) ||
	    (rc = add_root(bx, bx->include_dir)) || (rc = add_root(bx, tk)) ||
	    (rc = add_root(bx, bx->pch_dir)) || (rc = add_root(bx, "/usr/include")) ||
	    (rc = add_root(bx, "/usr/lib/gcc")) || (rc = add_root(bx, "/usr/local/include")) ||
	    (bx->sandboxed && (rc = add_root(bx, "/tmp")))) /* inside: the build's own tmpfs */
		goto fail;
	if ((rc = add_bind(bx, kdir, false)) || (rc = add_bind(bx, bx->pch_dir, false)) ||
	    (bx->include_dir[0] && (rc = add_bind(bx, bx->include_dir, false))) ||
	    (rc = add_bind(bx, bx->staging, true)))
		goto fail;
	ca_log_debug("build: %s, staging in %s", bx->sandboxed ? "in the sandbox" :
		     "without the sandbox", bx->staging);
	if (!bx->sandboxed)
		ca_log_warn("build: CUDA_AGENT_SANDBOX=0: the compilers run without the sandbox, "
			    "with all of this user's rights");
	return 0;
fail:
	build_box_close(bx);
	return ca_fail(d, rc, "build: the sandbox's paths are too long");
}

void build_box_close(struct build_box *bx)
{
	for (size_t i = 0; i < bx->n_pass_env; i++)
		free(bx->pass_env[i]);
	bx->n_pass_env = 0;
	if (bx->staging[0])
		(void)ca_remove_tree(bx->staging, NULL);
	bx->staging[0] = '\0';
}

/* argv[0] as an absolute path (found on the build's PATH when it is a bare name). */
static bool resolve_prog(const struct build_box *bx, const char *name, char *out, size_t size)
{
	if (name[0] == '/')
		return ca_strlcpy(out, name, size) == 0;
	return !strchr(name, '/') && ca_find_in_path(bx->path_env + 5, name, out, size);
}

static bool env_has(const char *const *env, size_t n, const char *kv)
{
	size_t k = strcspn(kv, "=");
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], kv, k) == 0 && env[i][k] == '=')
			return true;
	return false;
}

int build_exec(const struct build_box *bx, const char *const *argv, const struct ca_run_opts *ro,
	       const struct sandbox_bind *extra, size_t n_extra, struct ca_run_result *rr,
	       struct ca_diag *d)
{
	const char *env[BOX_MAX_ENV + 4], *nargv[BUILD_EXEC_MAX_ARGS + 1];
	struct sandbox_bind binds[BUILD_BOX_MAX_BINDS + BUILD_EXEC_MAX_EXTRA];
	char prog[PATH_MAX], shown[256];
	struct sandbox_opts so;
	size_t ne = 0, na = 0;

	if (!bx || !bx->sandboxed)
		return ca_run(argv, ro, rr, d);
	memset(rr, 0, sizeof *rr);
	if (!resolve_prog(bx, argv[0], prog, sizeof prog))
		return ca_fail(d, CA_ERR_NOTFOUND, "build: %s: not found on PATH",
			       ca_printable(shown, argv[0], sizeof shown));
	nargv[na++] = prog;
	for (size_t i = 1; argv[i]; i++) {
		if (na >= BUILD_EXEC_MAX_ARGS)
			return ca_fail(d, CA_ERR_LIMIT, "build: more than %d arguments",
				       BUILD_EXEC_MAX_ARGS);
		nargv[na++] = argv[i];
	}
	nargv[na] = NULL;
	/* the step's own variables first (nvcc's dry run names PATH, TMPDIR, ...) */
	for (size_t i = 0; ro && ro->env_add && ro->env_add[i] && ne < BOX_MAX_ENV; i++)
		env[ne++] = ro->env_add[i];
	static const char *const base[] = {"HOME=/tmp", "LANG=C.UTF-8"};
	if (!env_has(env, ne, bx->path_env))
		env[ne++] = bx->path_env;
	for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
		if (!env_has(env, ne, base[i]))
			env[ne++] = base[i];
	for (size_t i = 0; i < bx->n_pass_env; i++)
		if (!env_has(env, ne, bx->pass_env[i]))
			env[ne++] = bx->pass_env[i];
	env[ne] = NULL;
	if (n_extra > BUILD_EXEC_MAX_EXTRA)
		return ca_fail(d, CA_ERR_LIMIT, "build: more than %d binds", BUILD_EXEC_MAX_EXTRA);
	memcpy(binds, bx->binds, bx->n_binds * sizeof binds[0]);
	if (n_extra)
		memcpy(binds + bx->n_binds, extra, n_extra * sizeof binds[0]);
	sandbox_build_opts(&so);
	so.env = env;
	so.pass_ld_library_path = true;
	if (bx->as_bytes)
		so.as_bytes = bx->as_bytes;
	so.binds = binds;
	so.n_binds = bx->n_binds + n_extra;
	if (ro && ro->timeout_s > 0)
		so.cpu_seconds = (uint64_t)ro->timeout_s + 30;
	int rc = sandbox_run(nargv, &so, ro, rr, NULL, d);
	if (rc)
		rc = ca_fail_prefix(d, rc, "build: the sandbox");
	return rc;
}

/* Lexically normalized absolute form of path ("." and ".." resolved, relative taken from "/",
 * the sandbox's working directory). */
static void normalize(const char *path, char *out, size_t size)
{
	size_t n = 0;
	const char *p = path;
	out[0] = '\0';
	while (*p) {
		while (*p == '/')
			p++;
		size_t k = strcspn(p, "/");
		if (k == 0)
			break;
		if (k == 1 && p[0] == '.') {
			/* nothing */
		} else if (k == 2 && p[0] == '.' && p[1] == '.') {
			while (n > 0 && out[n - 1] != '/')
				n--;
			if (n > 0)
				n--;
		} else if (n + 1 + k + 1 < size) {
			out[n++] = '/';
			memcpy(out + n, p, k);
			n += k;
		}
		out[n] = '\0';
		p += k;
	}
	if (n == 0)
		ca_strlcpy(out, "/", size);
}

static bool under_root(const struct build_box *bx, const char *path)
{
	for (size_t i = 0; i < bx->n_roots; i++) {
		size_t k = strlen(bx->roots[i]);
		if (strncmp(path, bx->roots[i], k) == 0 && (path[k] == '/' || path[k] == '\0'))
			return true;
	}
	return false;
}

/* Whether a diagnostic at `path` may be shown: the path, normalized, lies under an allowed
 * root, and so does what it resolves to on this host where it exists (a symlink in the
 * candidate's directory to a file elsewhere is withheld too). */
bool build_path_shown(const struct build_box *bx, const char *path)
{
	char norm[PATH_MAX], real[PATH_MAX];
	normalize(path, norm, sizeof norm);
	if (!under_root(bx, norm))
		return false;
	if (realpath(norm, real) && !under_root(bx, real))
		return false;
	return true;
}

/* The file a diagnostic line is located in, into out: `PATH:LINE[:COL]: ...` (gcc),
 * `PATH(LINE): ...` (EDG: cudafe++, cicc), `In file included from PATH:LINE`, `from PATH:LINE`,
 * `PATH: In function ...` / `PATH: At global scope:`. False when the line is none of these. */
static bool located_at(const char *line, size_t len, char *out, size_t size)
{
	const char *p = line, *end = line + len;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if ((size_t)(end - p) > 22 && strncmp(p, "In file included from ", 22) == 0)
		p += 22;
	else if ((size_t)(end - p) > 5 && strncmp(p, "from ", 5) == 0)
		p += 5;
	if (p >= end || *p == '<' || *p == ' ')
		return false;
	for (const char *q = p; q < end; q++) {
		bool num = q + 1 < end && q[1] >= '0' && q[1] <= '9';
		bool scope = (size_t)(end - q) > 5 && (strncmp(q, ": In ", 5) == 0 ||
						       strncmp(q, ": At ", 5) == 0);
		if (((*q == ':' || *q == '(') && num) || scope) {
			size_t n = (size_t)(q - p);
			if (n == 0 || n >= size || !memchr(p, '/', n))
				return false; /* not a path ("nvcc fatal", "ptxas info") */
			memcpy(out, p, n);
			out[n] = '\0';
			return true;
		}
		if (*q == ' ' && !(q > p && q[-1] == '\\'))
			return false;
	}
	return false;
}

char *build_filter_log(const struct build_box *bx, char *log)
{
	struct ca_buf out = {0};
	char path[PATH_MAX], *text;
	bool withholding = false;

	if (!bx || !log)
		return log;
	for (const char *p = log; *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		const char *line = p;
		p += len + (eol ? 1 : 0);
		if (located_at(line, len, path, sizeof path)) {
			withholding = !build_path_shown(bx, path);
			if (withholding) {
				char shown[256];
				ca_buf_printf(&out, "%s%s\n", ca_printable(shown, path, sizeof shown),
					      WITHHELD);
				continue;
			}
		} else if (withholding && len > 0 && (line[0] == ' ' || line[0] == '\t')) {
			continue; /* its quoted source and caret lines */
		} else {
			withholding = false;
		}
		ca_buf_add(&out, line, len);
		if (eol)
			ca_buf_add(&out, "\n", 1);
	}
	text = out.err ? NULL : ca_buf_take(&out);
	ca_buf_free(&out);
	free(log); /* out of memory: no log rather than an unfiltered one */
	return text;
}

void build_adopt(const char *path)
{
	/* what the sandbox's uid wrote becomes the service's before it enters the cache, so that
	 * nothing else running as that uid can change a cache entry */
	if (geteuid() == 0 && lchown(path, 0, 0) != 0)
		ca_log_debug("build: cannot take over %s: %s", path, strerror(errno));
}
