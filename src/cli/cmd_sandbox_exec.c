/* cmd_sandbox_exec: `cuda-agent sandbox-exec`, one program in the build sandbox
 * (sandbox_build_opts: no GPU, no network, minimal /etc, the system read-only) with the
 * caller's read-only and writable binds; for builds the trusted side drives from elsewhere
 * (python/cuda_agent_bridge/torch_build.py). Its exit status is the program's. */
#include "cli/commands.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/fs.h"
#include "util/proc.h"

#define EXEC_MAX_BINDS 256
#define EXEC_MAX_ENV   256
#define EXEC_OUT_CAP   (4u << 20)
enum { EXEC_TIMEOUT = 124, EXEC_SETUP = 125 };

static const char usage[] =
	"usage: cuda-agent sandbox-exec [--ro PATH]... [--rw DIR]... [--cwd DIR] "
	"[--timeout SECONDS]\n"
	"                               [--env K=V]... -- PROGRAM [ARGS...]\n";

static const char help[] =
	"\n"
	"Runs PROGRAM (an absolute path, or found on PATH) in the build sandbox: no GPU, no\n"
	"network, a fresh read-only root with /usr, /opt, /lib*, /bin and only the few files of /etc\n"
	"compilers read, a private /tmp (2 GiB), RLIMIT_AS 16 GiB per process, its own PID namespace\n"
	"(nothing it starts outlives it). docs/security.md, \"The build sandbox\".\n"
	"\n"
	"options:\n"
	"  --ro PATH          bind PATH read-only at the same path (readable by uid 65534 when run\n"
	"                     as root)\n"
	"  --rw DIR           bind DIR writable at the same path; as root, DIR is handed to uid\n"
	"                     65534 (chown of DIR itself): use per-build directories only\n"
	"  --cwd DIR          working directory inside (default /)\n"
	"  --timeout SECONDS  kill the whole sandbox after this long (exit status 124)\n"
	"  --env K=V          add to the environment (PATH, LANG=C.UTF-8 and HOME=/tmp are there)\n"
	"\n"
	"PROGRAM's stdout and stderr are forwarded (4 MiB of each at most). Exit status: PROGRAM's,\n"
	"128+N when killed by signal N, 124 on timeout, 125 when the sandbox could not be set up\n"
	"(a message on stderr starting \"sandbox-exec: \"). CUDA_AGENT_SANDBOX=0 runs PROGRAM\n"
	"without the sandbox, with a warning.\n";

struct exec_args {
	struct sandbox_bind binds[EXEC_MAX_BINDS];
	char *owned[EXEC_MAX_BINDS + 1]; /* resolved bind paths and cwd */
	size_t n_binds, n_owned;
	const char *env[EXEC_MAX_ENV + 4];
	size_t n_env;
	const char *cwd;
	double timeout_s;
	char **prog_argv;
};

static int fail_setup(const char *msg, const char *arg)
{
	fprintf(stderr, "sandbox-exec: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
	return EXEC_SETUP;
}

/* An absolute, resolved path (binds must name real directories, without symlinks on the way). */
static char *resolve(struct exec_args *a, const char *path)
{
	char abs[PATH_MAX];
	if (ca_realpath(path, abs, sizeof abs, NULL) != 0 || a->n_owned >= EXEC_MAX_BINDS + 1)
		return NULL;
	char *s = strdup(abs);
	if (s)
		a->owned[a->n_owned++] = s;
	return s;
}

/* Parses argv into *a: 0, or an exit status (usage 2 after a message). */
static int parse(int argc, char **argv, struct exec_args *a)
{
	int i = 1;
	for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
		const char *o = argv[i];
		if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
			printf("%s%s", usage, help);
			return -1;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "sandbox-exec: %s needs a value\n%s", o, usage);
			return EXIT_USAGE;
		}
		const char *v = argv[++i];
		if (strcmp(o, "--ro") == 0 || strcmp(o, "--rw") == 0) {
			char *p = resolve(a, v);
			if (a->n_binds >= EXEC_MAX_BINDS)
				return fail_setup("too many binds", NULL);
			if (!p)
				return fail_setup("cannot resolve the bind", v);
			a->binds[a->n_binds++] = (struct sandbox_bind){
				.src = p, .writable = strcmp(o, "--rw") == 0};
		} else if (strcmp(o, "--cwd") == 0) {
			a->cwd = v;
		} else if (strcmp(o, "--timeout") == 0) {
			char *end;
			a->timeout_s = strtod(v, &end);
			if (end == v || *end || a->timeout_s <= 0) {
				fprintf(stderr, "sandbox-exec: bad --timeout %s\n", v);
				return EXIT_USAGE;
			}
		} else if (strcmp(o, "--env") == 0) {
			if (!strchr(v, '=') || v[0] == '=' || a->n_env >= EXEC_MAX_ENV) {
				fprintf(stderr, "sandbox-exec: bad --env %s (K=V)\n", v);
				return EXIT_USAGE;
			}
			a->env[a->n_env++] = v;
		} else {
			fprintf(stderr, "sandbox-exec: unknown option %s\n%s", o, usage);
			return EXIT_USAGE;
		}
	}
	if (i + 1 >= argc) {
		fprintf(stderr, "sandbox-exec: no program (after --)\n%s", usage);
		return EXIT_USAGE;
	}
	a->prog_argv = argv + i + 1;
	return 0;
}

static bool env_given(const struct exec_args *a, const char *key)
{
	size_t k = strlen(key);
	for (size_t i = 0; i < a->n_env; i++)
		if (strncmp(a->env[i], key, k) == 0 && a->env[i][k] == '=')
			return true;
	return false;
}

static void forward(const struct ca_run_result *r)
{
	if (r->out_len)
		(void)fwrite(r->out, 1, r->out_len, stdout);
	fflush(stdout);
	if (r->err_len)
		(void)fwrite(r->err, 1, r->err_len, stderr);
	if (r->out_dropped || r->err_dropped)
		fprintf(stderr, "sandbox-exec: output past %u bytes dropped (%zu of stdout, %zu of "
			"stderr)\n", EXEC_OUT_CAP, r->out_dropped, r->err_dropped);
	fflush(stderr);
}

static int status_of(const struct ca_run_result *r)
{
	if (r->timed_out)
		return EXEC_TIMEOUT;
	if (r->term_signal)
		return 128 + r->term_signal;
	return r->exit_code;
}

int cmd_sandbox_exec(int argc, char **argv)
{
	struct exec_args *a = calloc(1, sizeof *a);
	struct ca_run_result r;
	struct ca_diag d = {{0}};
	char prog[PATH_MAX], path_env[PATH_MAX + 8];
	const char *sbv = getenv("CUDA_AGENT_SANDBOX"), *path = getenv("PATH");
	bool sandboxed = !(sbv && strcmp(sbv, "0") == 0);
	int rc;

	if (!a)
		return fail_setup("out of memory", NULL);
	if ((rc = parse(argc, argv, a)) != 0) {
		rc = rc < 0 ? EXIT_OK : rc;
		goto out;
	}
	const char *name = a->prog_argv[0];
	if (name[0] == '/')
		snprintf(prog, sizeof prog, "%s", name);
	else if (strchr(name, '/') || !ca_find_in_path(path, name, prog, sizeof prog)) {
		rc = fail_setup("program not found (give an absolute path, or a name on PATH)",
				name);
		goto out;
	}
	a->prog_argv[0] = prog;
	snprintf(path_env, sizeof path_env, "PATH=%s", path && path[0] ? path :
		 SANDBOX_DEFAULT_PATH);
	if (!env_given(a, "PATH"))
		a->env[a->n_env++] = path_env;
	if (!env_given(a, "LANG"))
		a->env[a->n_env++] = "LANG=C.UTF-8";
	if (!env_given(a, "HOME"))
		a->env[a->n_env++] = "HOME=/tmp";
	a->env[a->n_env] = NULL;
	struct ca_run_opts ro = {.timeout_s = a->timeout_s, .stdout_cap = EXEC_OUT_CAP,
				 .stderr_cap = EXEC_OUT_CAP, .cwd = a->cwd, .env_add = a->env};
	if (sandboxed) {
		struct sandbox_opts so;
		sandbox_build_opts(&so);
		so.env = a->env;
		so.cwd = a->cwd;
		so.binds = a->binds;
		so.n_binds = a->n_binds;
		if (a->timeout_s > 0)
			so.cpu_seconds = (uint64_t)a->timeout_s + 30;
		if ((rc = sandbox_run((const char *const *)a->prog_argv, &so, &ro, &r, NULL, &d))) {
			rc = fail_setup(d.msg, NULL);
			goto out;
		}
	} else {
		fprintf(stderr, "sandbox-exec: warning: CUDA_AGENT_SANDBOX=0: %s runs without the "
			"sandbox, with all of this user's rights\n", prog);
		if ((rc = ca_run((const char *const *)a->prog_argv, &ro, &r, &d))) {
			rc = fail_setup(d.msg, NULL);
			goto out;
		}
	}
	forward(&r);
	rc = status_of(&r);
	ca_run_result_free(&r);
out:
	for (size_t i = 0; i < a->n_owned; i++)
		free(a->owned[i]);
	free(a);
	return rc;
}
