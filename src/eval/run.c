/* run: what every step of an evaluation shares (eval/run.h): the result's reason, step seconds,
 * secret seeds, the bridge request helper, the runs directory. */
#include "eval/run.h"

#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "protocol/reasons.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/fs.h"
#include "util/str.h"
#include "util/timeline.h"

uint64_t secret_seed(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
		/* getrandom cannot fail for 8 bytes once the pool is ready; fall back anyway. */
		uint64_t pid = (uint64_t)(uint32_t)getpid();
		uint64_t now = (uint64_t)(ca_wall_now() * 1e9);
		v = pid * (uint64_t)0x9E3779B97F4A7C15ull ^ now;
	}
	return v & 0x7fffffffffffffffull;
}

/* The first reason set wins: it is the cause; later failures are consequences. */
void set_reason(struct run *r, const char *code, const char *fmt, ...)
{
	char msg[CA_DIAG_MAX];
	va_list ap;
	json_t *old = json_object_get(r->result, "reason");
	if (old && strcmp(json_string_value(json_object_get(old, "code")), "ok") != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ca_utf8_sanitize(msg); /* a message cut in a character, or quoting bytes that are not text */
	json_object_set_new(r->result, "reason", json_pack("{s:s, s:s}", "code", code, "message",
							   msg));
}

const char *reason_code(const struct run *r)
{
	json_t *reason = json_object_get(r->result, "reason");
	const char *c = json_string_value(json_object_get(reason, "code"));
	return c ? c : "";
}

void note_seconds(struct run *r, const char *what, double since)
{
	double now = ca_now();
	json_object_set_new(r->seconds, what, json_real(now - since));
	/* CUDA_AGENT_LOG=debug: the run's timeline, each step with when it began and ended */
	ca_log_debug("step %-10s %7.3f s to %7.3f s (%.3f s)", what, since - r->t_start,
		     now - r->t_start, now - since);
	ca_timeline_span(what, since, now);
}


const char *run_module_mode(const struct run *r)
{
	return r->rules == TORCH_PROFILE_KERNELBENCH ? "train" : "eval";
}

void note_mark(const struct run *r, const char *what)
{
	ca_log_debug("at %7.3f s: %s", ca_now() - r->t_start, what);
}


int bridge_request(struct run *r, const char *op, const json_t *req, double timeout_s,
		   json_t **res)
{
	struct ca_diag d = {{0}};
	char code[64];
	int rc = bridge_call(&r->s->bridge, op, req, timeout_s, res, code, sizeof code, &d);
	if (rc == CA_ERR_INVALID && reason_class_of(code) == REASON_TASK) {
		set_reason(r, code, "%s", d.msg);
	} else if (rc) {
		set_reason(r, code[0] ? code : "env.bridge", "torch bridge (%s): %s", op, d.msg);
	}
	return rc;
}

/* Run directories hold every reference and output tensor of an evaluation (gigabytes for large
 * tasks), written once and read once: they live in memory (/dev/shm) when it exists, else under
 * the cache. $CUDA_AGENT_RUNS overrides. */
int runs_base(char *out, size_t size, struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_RUNS");
	char cache[PATH_MAX];
	if (env && env[0])
		return ca_strlcpy(out, env, size) ? ca_fail(d, CA_ERR_LIMIT, "path too long") : 0;
	if (ca_is_dir("/dev/shm") && access("/dev/shm", W_OK) == 0)
		return ca_format(out, size, "/dev/shm/cuda-agent-%ld", (long)getuid())
			       ? ca_fail(d, CA_ERR_LIMIT, "path too long")
			       : 0;
	if (ca_cache_dir(cache, sizeof cache, d))
		return CA_ERR_IO;
	return ca_format(out, size, "%s/runs", cache) ? ca_fail(d, CA_ERR_LIMIT, "path too long") : 0;
}

void reason_from_fail(struct run *r, const struct loop_fail *f)
{
	/* A process that died, hung or flooded: how it ended may name a more specific cause (a
	 * seccomp kill, the memory limit), which must be set first. */
	if (r->proc_started && (r->proc.dead || r->proc.timed_out || r->proc.flooded ||
				strcmp(f->code, "fault.crash") == 0))
		step_finish(r, false);
	set_reason(r, f->code[0] ? f->code : "internal", "%s",
		   f->message[0] ? f->message : "the evaluation failed");
}

/* The last lines of a process's stderr file, on one line (empty when there are none). */
void stderr_tail(const char *path, char *out, size_t size)
{
	ca_file_tail(path, 3, out, size);
	for (char *p = out; *p; p++)
		if (*p == '\n')
			*p = ' ';
}
