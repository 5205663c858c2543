/* kb_harness: KernelBench's own harness before bench's evaluations (kb_harness.h). */
#include "bench/kb_harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge/bridge.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/pylaunch.h"
#include "util/str.h"

#define LINE_MAX_BYTES 65536
#define POLL_S         0.25
#define GRACE_S        15.0 /* for the tool to kill the candidate in flight and write */

/* The tool's exit codes (python/cuda_agent_bridge/kb_harness.py) */
enum { TOOL_OK = 0, TOOL_USAGE = 2, TOOL_ENV = 4, TOOL_INTERRUPTED = 130 };

static int tool_failed(const struct kb_harness_opts *o, const struct ca_run_result *res,
		       const char *python, struct ca_diag *d)
{
	char tail[1024], how[128];
	ca_file_tail(o->log_path, 3, tail, sizeof tail);
	for (char *p = tail; *p; p++)
		if (*p == '\n')
			*p = ' ';
	ca_run_describe(res, how, sizeof how);
	if (!res->term_signal && !res->timed_out && res->exit_code == TOOL_USAGE)
		return ca_fail(d, CA_ERR_INVALID, "KernelBench's harness refused its arguments: %s",
			       tail[0] ? tail : how);
	if (!res->term_signal && !res->timed_out && res->exit_code == TOOL_ENV)
		return ca_fail(d, CA_ERR_UNSUPPORTED,
			       "KernelBench's eval cannot run with %s: %s (log: %s)", python,
			       tail[0] ? tail : how, o->log_path);
	if (!res->term_signal && !res->timed_out && res->exit_code == TOOL_INTERRUPTED)
		return ca_fail(d, CA_ERR_INTERRUPTED,
			       "interrupted while KernelBench's harness ran; what it judged is kept "
			       "in %s (run the same command again to resume)",
			       o->out_path);
	return ca_fail(d, CA_ERR_CHILD, "KernelBench's harness failed (%s)%s%s (log: %s)", how,
		       tail[0] ? ": " : "", tail, o->log_path);
}

int kb_harness_run(const struct kb_harness_opts *o, struct ca_diag *d)
{
	char pp_env[PYLAUNCH_ENV_MAX], sample[16], timeout[32];
	const char *python = bridge_python(o->python);
	const char *argv[32];
	const char *env_add[] = {pp_env, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", NULL};
	struct ca_run_opts ro = {.env_add = env_add};
	struct ca_run_result res;
	struct ca_child c;
	bool stopped = false;
	int a = 0, rc;

	rc = ca_pythonpath_env(pp_env, sizeof pp_env, NULL, PYTHONPATH_INHERIT,
			       "KernelBench's harness", d);
	if (rc)
		return rc;
	snprintf(sample, sizeof sample, "%d", o->sample);
	argv[a++] = python;
	argv[a++] = "-m";
	argv[a++] = "cuda_agent_bridge.kb_harness";
	argv[a++] = "run";
	argv[a++] = "--kernelbench";
	argv[a++] = o->kernelbench;
	argv[a++] = "--tasks";
	argv[a++] = o->tasks_dir;
	argv[a++] = "--candidates";
	argv[a++] = o->candidates_dir;
	argv[a++] = "--out";
	argv[a++] = o->out_path;
	argv[a++] = "--log";
	argv[a++] = o->log_path;
	argv[a++] = "--sample";
	argv[a++] = sample;
	if (o->timeout_s > 0) {
		snprintf(timeout, sizeof timeout, "%.6g", o->timeout_s);
		argv[a++] = "--timeout";
		argv[a++] = timeout;
	}
	if (o->device && strcmp(o->device, "auto") != 0) {
		argv[a++] = "--device";
		argv[a++] = o->device;
	}
	if (o->fresh)
		argv[a++] = "--fresh";
	argv[a] = NULL;

	if (!o->quiet)
		fprintf(stderr, "bench: KernelBench's own harness (%s) first; its verdicts go to %s\n",
			o->kernelbench, o->out_path);
	/* stderr to the log, where the tool also writes the candidates' output: a failure's
	 * message is its last lines. */
	rc = ca_child_spawn(&c, argv, &ro, o->log_path, d);
	if (rc)
		return ca_fail_prefix(d, rc, "cannot start KernelBench's harness (%s)", python);
	for (;;) {
		struct ca_diag ld = {{0}};
		char *line = NULL;
		if (o->stop && *o->stop && !stopped) {
			/* The tool kills the candidate in flight (its own session) and keeps what it
			 * judged; a SIGKILL of its group would leave that candidate running. */
			kill(c.pid, SIGTERM);
			stopped = true;
		}
		rc = ca_child_read_line(&c, LINE_MAX_BYTES, POLL_S, &line, &ld);
		if (rc == CA_ERR_TIMEOUT)
			continue;
		if (rc)
			break; /* it closed its stdout: it ended */
		if (!o->quiet) {
			char shown[512];
			ca_printable(shown, line, sizeof shown);
			fprintf(stderr, "kernelbench %s\n", shown);
		}
		free(line);
	}
	ca_child_finish(&c, GRACE_S, &res);
	if (stopped)
		return ca_fail(d, CA_ERR_INTERRUPTED,
			       "interrupted while KernelBench's harness ran; what it judged is kept in "
			       "%s (run the same command again to resume)",
			       o->out_path);
	if (res.term_signal || res.timed_out || res.exit_code != TOOL_OK)
		return tool_failed(o, &res, python, d);
	ca_log_debug("KernelBench's harness done: %s", o->out_path);
	return 0;
}
