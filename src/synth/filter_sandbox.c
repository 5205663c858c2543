/* filter_sandbox: `synth filter` in the sandbox (filter_sandbox.h). */
#include "synth/filter_sandbox.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/torch_candidate.h"
#include "sandbox/sandbox.h"
#include "util/fs.h"
#include "util/pylaunch.h"
#include "util/str.h"

#define STAGED_MAX (1u << 30) /* bytes of a file copied into or out of the staging directory */
#define MAX_ARGS 32

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* Copies src to dst (atomically) when src exists. */
static int copy_if_there(const char *src, const char *dst, struct ca_diag *d)
{
	char *data = NULL;
	size_t len = 0;
	int rc;
	if (!ca_is_file(src))
		return 0;
	if ((rc = ca_read_file(src, STAGED_MAX, &data, &len, d)) == 0)
		rc = ca_write_file_atomic(dst, data, len, d);
	free(data);
	return rc;
}

/* Forwards the program's stdout until it closes it (the program ended) or a stop signal. */
static void forward_stdout(int fd)
{
	char buf[4096];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (!stop_requested) {
		int n = poll(&p, 1, 200);
		if (n < 0 && errno != EINTR)
			return;
		if (n <= 0)
			continue;
		ssize_t got = read(fd, buf, sizeof buf);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return;
		fwrite(buf, 1, (size_t)got, stdout);
		fflush(stdout);
	}
}

/* The layers that are off here, on one line (the program runs without them). */
static void warn_layers_off(const struct sandbox_report *rep)
{
	char line[1024] = "";
	size_t used = 0;
	for (int i = 0; i < SANDBOX_N_LAYERS; i++) {
		if (rep->layer[i].on)
			continue;
		int n = snprintf(line + used, sizeof line - used, "%s%s (%s)", used ? "; " : "",
				 sandbox_layer_name((enum sandbox_layer)i), rep->layer[i].detail);
		if (n < 0 || (size_t)n >= sizeof line - used)
			break;
		used += (size_t)n;
	}
	if (used)
		fprintf(stderr, "cuda-agent synth filter: sandbox layers off here: %s\n", line);
}

int synth_filter_sandboxed(const struct synth_filter_run *run, int *exit_code, struct ca_diag *d)
{
	struct python_runtime *rt = calloc(1, sizeof *rt);
	char stage[PATH_MAX] = "", src[PATH_MAX], dst[PATH_MAX], corpus[PATH_MAX];
	char pp_env[PATH_MAX + 16], inductor_env[PATH_MAX + 32], triton_env[PATH_MAX + 32];
	char cvd_env[256], shown_env[PATH_MAX + 32];
	const char *argv[MAX_ARGS + 12], *env[9];
	struct sandbox_bind binds[PY_RUNTIME_MAX_DIRS + 1];
	struct sandbox_opts so = {0};
	struct sandbox sb;
	struct ca_run_result res;
	struct sigaction sa = {0}, old_int, old_term;
	const char *tmp = getenv("TMPDIR");
	size_t na = 0, ne = 0, nb = 0;
	int rc, copy_rc;
	bool spawned = false;

	*exit_code = -1;
	memset(&sb, 0, sizeof sb);
	sb.child.pid = -1;
	if (!rt)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	if ((rc = python_runtime_probe(run->python, rt, d)))
		goto out;
	if ((rc = ca_make_temp_dir(tmp && tmp[0] == '/' ? tmp : "/tmp", "ca-synth-filter-", stage,
				   sizeof stage, d)))
		goto out;
	/* the step's inputs, staged */
	if ((rc = ca_path_join(src, sizeof src, run->dir, "tasks.jsonl")) ||
	    (rc = ca_path_join(dst, sizeof dst, stage, "tasks.jsonl")) ||
	    (rc = copy_if_there(src, dst, d)) ||
	    (rc = ca_path_join(src, sizeof src, run->dir, "verdicts.jsonl")) ||
	    (rc = ca_path_join(dst, sizeof dst, stage, "verdicts.jsonl")) ||
	    (rc = copy_if_there(src, dst, d)) ||
	    (rc = ca_path_join(corpus, sizeof corpus, stage, "kernelbench_corpus.json")) ||
	    (run->corpus && (rc = copy_if_there(run->corpus, corpus, d)))) {
		rc = rc == CA_ERR_LIMIT ? ca_fail(d, rc, "--dir is too long") : rc;
		goto out;
	}
	argv[na++] = rt->exe;
	argv[na++] = "-B";
	argv[na++] = "-m";
	argv[na++] = "cuda_agent_bridge.synth";
	argv[na++] = "filter";
	argv[na++] = "--dir";
	argv[na++] = stage;
	if (run->corpus) {
		argv[na++] = "--kernelbench";
		argv[na++] = corpus;
	}
	for (size_t i = 0; run->args && run->args[i]; i++) {
		if (i == MAX_ARGS) {
			rc = ca_fail(d, CA_ERR_LIMIT, "more than %d arguments", MAX_ARGS);
			goto out;
		}
		argv[na++] = run->args[i];
	}
	argv[na] = NULL;
	snprintf(pp_env, sizeof pp_env, "PYTHONPATH=%s", rt->package_dir);
	snprintf(inductor_env, sizeof inductor_env, "TORCHINDUCTOR_CACHE_DIR=%s/torch-cache", stage);
	snprintf(triton_env, sizeof triton_env, "TRITON_CACHE_DIR=%s/triton-cache", stage);
	env[ne++] = pp_env;
	env[ne++] = "PYTHONDONTWRITEBYTECODE=1";
	env[ne++] = "PYTHONNOUSERSITE=1";
	env[ne++] = inductor_env;
	env[ne++] = triton_env;
	snprintf(shown_env, sizeof shown_env, "CUDA_AGENT_SYNTH_DIR=%s", run->dir);
	env[ne++] = shown_env; /* what the step's messages call the directory */
	if (getenv("CUDA_VISIBLE_DEVICES")) {
		snprintf(cvd_env, sizeof cvd_env, "CUDA_VISIBLE_DEVICES=%s",
			 getenv("CUDA_VISIBLE_DEVICES"));
		env[ne++] = cvd_env;
	}
	env[ne] = NULL;
	for (int i = 0; i < rt->n_dirs; i++)
		binds[nb++] = (struct sandbox_bind){.src = rt->dirs[i]};
	binds[nb++] = (struct sandbox_bind){.src = stage, .writable = true};
	so.env = env;
	so.pass_ld_library_path = true;
	so.cwd = stage;
	so.binds = binds;
	so.n_binds = nb;
	so.allow_processes = true; /* the checking processes, torch.compile's compilers */
	so.cpu_seconds = SANDBOX_UNLIMITED; /* a long run: its processes add up hours */
	so.nproc = 1u << 16;
	so.pids_max = 1u << 16;
	so.nofile = 1u << 14;
	so.memory_max = SANDBOX_UNLIMITED; /* the user's own job: not a tenant to cap */
	fflush(stdout);
	stop_requested = 0;
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	rc = sandbox_spawn(&sb, argv, &so, NULL, d);
	if (rc == 0) {
		spawned = true;
		warn_layers_off(&sb.report);
		forward_stdout(sb.child.from_child);
		memset(&res, 0, sizeof res);
		/* stopped: killed now (the verdicts written so far stay); else it has closed its
		 * stdout and exits */
		sandbox_finish(&sb, stop_requested ? 0.0 : 60.0, &res);
		*exit_code = res.term_signal ? 128 + res.term_signal : res.exit_code;
		if (stop_requested)
			rc = ca_fail(d, CA_ERR_INTERRUPTED, "interrupted; the verdicts so far are kept");
	} else {
		rc = ca_fail_prefix(d, CA_ERR_CHILD, "cannot start the filter in the sandbox");
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (spawned) {
		struct ca_diag cd = {{0}};
		(void)ca_path_join(src, sizeof src, stage, "verdicts.jsonl");
		(void)ca_path_join(dst, sizeof dst, run->dir, "verdicts.jsonl");
		copy_rc = copy_if_there(src, dst, &cd);
		if (copy_rc && rc == 0)
			rc = ca_fail(d, CA_ERR_IO, "cannot copy the verdicts back: %s", cd.msg);
	}
out:
	if (stage[0])
		(void)ca_remove_tree(stage, NULL);
	free(rt);
	return rc;
}
