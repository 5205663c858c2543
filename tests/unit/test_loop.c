/* Unit tests for the supervisor's side of the timed loop (src/protocol/loop.c, sample.c) and of
 * the candidate's process (src/eval/proc.c), against a scripted candidate process that lies.
 *
 * No GPU: the device is the CPU backend (slots are memfds mapped by both sides). The scripted
 * process is this test binary forked: it answers the commands of docs/protocol.md on a task
 * y = 2x + 1 (float32), honestly or in one of the ways a tampering candidate would: claiming
 * short times, skipping work after the first calls, writing outputs after it answered, caching
 * per input buffer, sending events nobody asked for, blaming the environment. Each must end as
 * the reason the protocol promises (or held to the outside bound), and the honest one must
 * pass. The work is a busy loop of a few milliseconds, so that the supervisor's window (pipes,
 * SIGSTOP, scheduling on a loaded CI machine) is small against it. */
#define TEST_NAME "loop"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "device/prep.h"
#include "eval/cpu_claim.h"
#include "eval/proc.h"
#include "protocol/loop.h"
#include "protocol/sample.h"
#include "protocol/wire.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/proc.h"

#define N_ELEMS 4096
#define N_SETS 3
#define WORK_MS 20.0

enum mode {
	HONEST,
	LIE_TIME,       /* does the work, claims a hundredth of it */
	LIE_SLIGHT,     /* claims half the true time */
	SKIP_AFTER,     /* computes the first 12 calls, then answers without working */
	LATE_WRITE,     /* answers first, then computes */
	CACHE_BUFFER,   /* computes once per input buffer, then serves the cached output */
	EXTRA_EVENT,    /* sends a second answer */
	BLAME_ENV,      /* reports its failure as the environment's */
	SLOW_EMPTY,     /* inflates the calibration: harmless, it is done before load */
	SKIP_THEN_DIE,  /* as SKIP_AFTER, then exits at its 31st call, before the loop ends */
	EARLY_ANSWER,   /* computes, then answers while its (scripted) GPU work still runs 8 ms */
	EARLY_ONCE,     /* as EARLY_ANSWER on its 9th call only */
	HONEST_CPU,     /* 1 ms of its own CPU time a call, and claims that (as events time the GPU's
			 * work, not the host's scheduling) */
	ORACLE_STALE,   /* told which calls are special (an oracle better than any gap it could
			 * time), computes those and the first 3, serves the last output otherwise */
};

/* The scripted GPU (test_loop's stand-in for the GPU's timer, loop.probe_waits): a process
 * that answers early says until when its GPU work still runs, in a page shared with the
 * harness. A probe launched before then waits until then; the first probe of every window also
 * waits SWITCH_S, the switch back to the supervisor's context. */
#define SWITCH_S 50e-6
#define EARLY_MS 8.0
static volatile double *gpu_busy_until;
/* ORACLE_STALE's oracle: the harness's prepare says whether the next call is a special one. */
static volatile int *oracle_special;
static uint64_t loop_secret = 0xC0FFEEull;

/* ---- the scripted candidate process ------------------------------------------------------------ */

static void busy(double ms)
{
	double t0 = ca_now();
	while ((ca_now() - t0) * 1e3 < ms) {
	}
}

static void say(int fd, const char *line)
{
	size_t n = strlen(line);
	if (write(fd, line, n) != (ssize_t)n || write(fd, "\n", 1) != 1)
		_exit(3);
}

static void compute(const float *x, float *y)
{
	for (int i = 0; i < N_ELEMS; i++)
		y[i] = 2.0f * x[i] + 1.0f;
}

static void candidate_main(enum mode m, int cmd_fd, int ev_fd, float **inputs, float *outputs)
{
	char buf[WIRE_MAX_COMMAND];
	size_t len = 0;
	int calls = 0, loaded = 0;
	float *cache[N_SETS] = {0};

	say(ev_fd, "{\"event\": \"device\", \"name\": \"scripted\"}");
	for (;;) {
		char *nl;
		ssize_t n = read(cmd_fd, buf + len, sizeof buf - len - 1);
		if (n <= 0)
			_exit(0);
		len += (size_t)n;
		buf[len] = '\0';
		while ((nl = strchr(buf, '\n')) != NULL) {
			char line[WIRE_MAX_COMMAND], ans[256];
			json_t *cmd;
			const char *name;
			int input;
			double t0, ev;
			*nl = '\0';
			snprintf(line, sizeof line, "%s", buf);
			memmove(buf, nl + 1, len - (size_t)(nl + 1 - buf) + 1);
			len = strlen(buf);
			cmd = json_loads(line, 0, NULL);
			name = json_string_value(json_object_get(cmd, "cmd"));
			input = (int)json_integer_value(json_object_get(cmd, "input"));
			if (!name)
				_exit(4);
			if (strcmp(name, "quit") == 0) {
				say(ev_fd, "{\"event\": \"done\"}");
				_exit(0);
			}
			if (strcmp(name, "load") == 0) {
				loaded = 1;
				say(ev_fd, "{\"event\": \"loaded\"}");
			} else if (strcmp(name, "empty") == 0) {
				if (m == SLOW_EMPTY)
					busy(2.0);
				say(ev_fd, "{\"event\": \"called\", \"ev_ms\": 0.003}");
			} else if (strcmp(name, "call") == 0 && loaded) {
				calls++;
				t0 = ca_now();
				if (m == SKIP_THEN_DIE && calls > 30)
					_exit(7);
				if (m == BLAME_ENV && calls > 5) {
					say(ev_fd, "{\"event\": \"failed\", \"code\": \"env.bridge\", "
						   "\"message\": \"not my fault\"}");
					json_decref(cmd);
					continue;
				}
				if (m == LATE_WRITE) {
					say(ev_fd, "{\"event\": \"called\", \"ev_ms\": 0.5}");
					busy(WORK_MS);
					compute(inputs[input], outputs);
					json_decref(cmd);
					continue;
				}
				if ((m == EARLY_ANSWER || (m == EARLY_ONCE && calls == 9)) &&
				    calls > 1) {
					compute(inputs[input], outputs);
					*gpu_busy_until = ca_now() + EARLY_MS * 1e-3;
					say(ev_fd, "{\"event\": \"called\", \"ev_ms\": 0.01}");
					json_decref(cmd);
					continue;
				}
				if (m == HONEST_CPU) {
					struct timespec a, b;
					clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
					do
						clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
					while ((double)(b.tv_sec - a.tv_sec) * 1e3 +
						       (double)(b.tv_nsec - a.tv_nsec) * 1e-6 <
					       1.0);
					compute(inputs[input], outputs);
					say(ev_fd, "{\"event\": \"called\", \"ev_ms\": 1.0}");
					json_decref(cmd);
					continue;
				}
				if (m == ORACLE_STALE && calls > 3 && !*oracle_special && cache[0]) {
					memcpy(outputs, cache[0], sizeof(float) * N_ELEMS);
					say(ev_fd, "{\"event\": \"called\", \"ev_ms\": 20.0}");
					json_decref(cmd);
					continue;
				}
				if (m == ORACLE_STALE) {
					busy(WORK_MS);
					compute(inputs[input], outputs);
					if (!cache[0])
						cache[0] = malloc(sizeof(float) * N_ELEMS);
					memcpy(cache[0], outputs, sizeof(float) * N_ELEMS);
					say(ev_fd, "{\"event\": \"called\", \"ev_ms\": 20.0}");
					json_decref(cmd);
					continue;
				}
				if (m == CACHE_BUFFER && cache[input]) {
					memcpy(outputs, cache[input], sizeof(float) * N_ELEMS);
				} else if (!((m == SKIP_AFTER || m == SKIP_THEN_DIE) && calls > 12)) {
					busy(WORK_MS);
					compute(inputs[input], outputs);
					if (m == CACHE_BUFFER) {
						cache[input] = malloc(sizeof(float) * N_ELEMS);
						memcpy(cache[input], outputs, sizeof(float) * N_ELEMS);
					}
				}
				ev = (ca_now() - t0) * 1e3 + 0.003;
				if (m == LIE_TIME)
					ev /= 100.0;
				if (m == LIE_SLIGHT)
					ev *= 0.5;
				snprintf(ans, sizeof ans, "{\"event\": \"called\", \"ev_ms\": %.6f}", ev);
				say(ev_fd, ans);
				if (m == EXTRA_EVENT && calls == 3)
					say(ev_fd, ans);
			} else {
				say(ev_fd, "{\"event\": \"error\", \"code\": \"worker.bad_plan\", "
					   "\"message\": \"unexpected command\"}");
				_exit(1);
			}
			json_decref(cmd);
		}
	}
}

/* ---- the supervisor's side --------------------------------------------------------------------- */

struct harness {
	struct device dev;
	int fds[N_SETS + 1];
	struct device_slot in[N_SETS], out;
	struct ca_child child, ref_child;
	struct cand_proc proc, ref;
	bool has_ref;
	struct loop L;
	unsigned seed;
	uint64_t state[N_SETS];
	int checks, wrong;
	int calls; /* `call` commands sent to the candidate's process */
	int refs;  /* reference windows in the timed loop (from loop_time on) */
	/* kept checks (keep_cap > 0): copies of the set and the outputs, N_ELEMS floats each */
	struct device_buffer kept;
	int keep_cap, kept_input[64], kept_calls;
};

static int h_prepare(void *ctx, int input, int special, uint64_t seed, struct loop_fail *f)
{
	struct harness *h = ctx;
	struct ca_diag d = {{0}};
	float *x = h->in[input].host;
	*oracle_special = special != LOOP_NORMAL;
	if (special == LOOP_NORMAL) {
		if (device_perturb(&h->dev, &h->in[input], 0, N_ELEMS, CA_DTYPE_F32,
				   CA_PREP_ELEMENTS, h->state[input], seed, 0.5, &d))
			goto fail;
		h->state[input] = seed;
	} else {
		h->state[input] = 0;
		for (int i = 0; i < N_ELEMS; i++) /* a fresh set */
			x[i] = (float)rand_r(&h->seed) / (float)RAND_MAX - 0.5f;
	}
	if (device_poison(&h->dev, &h->out, 0, N_ELEMS * sizeof(float), &d) ||
	    device_sync(&h->dev, &d))
		goto fail;
	return 0;
fail:
	loop_fail_set(f, "env.gpu", "%s", d.msg);
	return -1;
}

/* The scripted GPU's waits for the window's probes (launched at dev->probe_at[k]). */
static int h_probe_waits(void *ctx, struct device *dev, int n, double *wait_s)
{
	(void)ctx;
	for (int k = 0; k < n; k++)
		wait_s[k] = (k == 0 ? SWITCH_S : 0.0) + fmax(0.0, *gpu_busy_until - dev->probe_at[k]);
	*gpu_busy_until = 0; /* the window's probes drained it */
	return 0;
}

static double h_run_delay(void *ctx, enum loop_send what)
{
	struct harness *h = ctx;
	return ca_run_delay_s(what == LOOP_SEND_REF ? h->ref_child.pid : h->child.pid);
}

static int h_send(void *ctx, int input, enum loop_send what, struct loop_fail *f)
{
	struct harness *h = ctx;
	/* as eval/verify.c: the first probe is launched the moment the answer arrives */
	h->proc.on_answer = h->ref.on_answer = loop_answered;
	h->proc.on_answer_arg = h->ref.on_answer_arg = &h->L;
	if (what == LOOP_SEND_REF) {
		h->refs++;
		return cand_proc_send(&h->ref, WIRE_CMD_EMPTY, json_pack("{s:i}", "input", input), f);
	}
	if (what == LOOP_SEND_CALL)
		h->calls++;
	return cand_proc_send(&h->proc, what == LOOP_SEND_EMPTY ? WIRE_CMD_EMPTY : WIRE_CMD_CALL,
			      json_pack("{s:i}", "input", input), f);
}

static int h_wait(void *ctx, double *ev_ms, struct loop_fail *f)
{
	struct harness *h = ctx;
	json_t *ans = NULL;
	int rc = cand_proc_wait(h->ref.cmd ? &h->ref : &h->proc, &ans, f);
	if (rc)
		return rc;
	*ev_ms = json_number_value(json_object_get(ans, "ev_ms"));
	return 0;
}

static int h_check(void *ctx, int input, int special, json_t *detail, struct loop_fail *f)
{
	struct harness *h = ctx;
	const float *x = h->in[input].host, *y = h->out.host;
	(void)special;
	(void)f;
	h->checks++;
	for (int i = 0; i < N_ELEMS; i++)
		if (!(fabsf(y[i] - (2.0f * x[i] + 1.0f)) <= 1e-4f)) {
			h->wrong++;
			json_object_set_new(detail, "message", json_sprintf("element %d wrong", i));
			return 0;
		}
	return 1;
}

/* keep: copies the call's set and outputs (the device's buffer, as eval/data.c) while there is
 * room */
/* Copies set `input` and the outputs to (to_buffer) or from kept copy `kept`. */
static int h_copy(struct harness *h, int input, int kept, bool to_buffer, struct loop_fail *f)
{
	struct ca_diag d = {{0}};
	const size_t n = N_ELEMS * sizeof(float), at = 2 * n * (size_t)kept;
	if (device_buffer_copy(&h->dev, &h->in[input], 0, &h->kept, at, n, to_buffer, &d) ||
	    device_buffer_copy(&h->dev, &h->out, 0, &h->kept, at + n, n, to_buffer, &d)) {
		loop_fail_set(f, "env.gpu", "%s", d.msg);
		return -1;
	}
	return 0;
}

static int h_keep(void *ctx, int input, int kept, json_t *detail, struct loop_fail *f)
{
	struct harness *h = ctx;
	struct ca_diag d = {{0}};
	(void)detail;
	if (kept >= h->keep_cap)
		return LOOP_KEEP_FULL;
	if (!h->kept.bytes)
		assert_int_equal(device_buffer_alloc(&h->dev,
						     2 * N_ELEMS * sizeof(float) * (size_t)h->keep_cap,
						     0, &h->kept, &d),
				 0);
	if (h_copy(h, input, kept, true, f))
		return -1;
	h->kept_input[kept] = input;
	h->kept_calls++;
	return LOOP_KEPT;
}

static int h_check_kept(void *ctx, int kept, json_t *detail, struct loop_fail *f)
{
	struct harness *h = ctx;
	int input = h->kept_input[kept];
	return h_copy(h, input, kept, false, f) ? -1 : h_check(ctx, input, LOOP_NORMAL, detail, f);
}

/* Forks a scripted process in mode m on the harness's slots. */
static void fork_scripted(struct harness *h, enum mode m, struct ca_child *child)
{
	int to[2], from[2];
	pid_t pid;
	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		float *inputs[N_SETS];
		close(to[1]);
		close(from[0]);
		for (int i = 0; i < N_SETS; i++)
			inputs[i] = h->in[i].host; /* the same shared mappings */
		candidate_main(m, to[0], from[1], inputs, h->out.host);
		_exit(0);
	}
	close(to[0]);
	close(from[1]);
	child->pid = pid;
	child->to_child = to[1];
	child->from_child = from[0];
}

static void start(struct harness *h, enum mode m, bool with_ref)
{
	struct ca_diag d = {{0}};

	memset(h, 0, sizeof *h);
	h->seed = 12345;
	if (!gpu_busy_until) {
		void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
				  0);
		assert_true(page != MAP_FAILED);
		gpu_busy_until = page;
		oracle_special = (volatile int *)((char *)page + 64);
	}
	*gpu_busy_until = 0;
	assert_int_equal(device_open(&h->dev, DEVICE_CPU, 0, &d), 0);
	for (int i = 0; i <= N_SETS; i++) {
		h->fds[i] = memfd_create("slot", MFD_CLOEXEC);
		assert_true(h->fds[i] >= 0);
		assert_int_equal(ftruncate(h->fds[i], N_ELEMS * sizeof(float)), 0);
	}
	for (int i = 0; i < N_SETS; i++) {
		assert_int_equal(device_slot_import(&h->dev, h->fds[i], N_ELEMS * sizeof(float),
						    &h->in[i], &d),
				 0);
		for (int k = 0; k < N_ELEMS; k++)
			((float *)h->in[i].host)[k] = (float)rand_r(&h->seed) / (float)RAND_MAX;
	}
	assert_int_equal(device_slot_import(&h->dev, h->fds[N_SETS], N_ELEMS * sizeof(float),
					    &h->out, &d),
			 0);
	fork_scripted(h, m, &h->child);
	cand_proc_init(&h->proc, &h->child, true, 120.0, NULL);
	if (with_ref) { /* an honest twin that is only ever sent empty calls */
		struct loop_fail f = {0};
		fork_scripted(h, HONEST, &h->ref_child);
		cand_proc_init(&h->ref, &h->ref_child, true, 120.0, NULL);
		assert_int_equal(cand_proc_hello(&h->ref, &f), 0);
		h->has_ref = true;
	}
	h->L.ops = (struct loop_ops){.ctx = h, .prepare = h_prepare, .send = h_send,
				     .wait = h_wait, .check = h_check, .keep = h_keep,
				     .check_kept = h_check_kept, .has_ref = with_ref,
				     .run_delay = h_run_delay};
	h->L.dev = &h->dev;
	h->L.probe_waits = h_probe_waits;
}

static void stop(struct harness *h)
{
	struct ca_run_result fate;
	cand_proc_resume(&h->proc);
	ca_child_finish(&h->child, 2.0, &fate);
	cand_proc_free(&h->proc);
	if (h->has_ref) {
		cand_proc_resume(&h->ref);
		ca_child_finish(&h->ref_child, 2.0, &fate);
		cand_proc_free(&h->ref);
	}
	for (int i = 0; i < N_SETS; i++)
		device_slot_unmap(&h->in[i]);
	device_slot_unmap(&h->out);
	for (int i = 0; i <= N_SETS; i++)
		close(h->fds[i]);
	device_buffer_free(&h->dev, &h->kept);
	device_close(&h->dev);
}

/* The protocol's settle_calls in the next run; -1: the default (3), so that every liar below
 * meets the loop as it ships */
static int settle_calls = -1;
/* The harness's calls take WORK_MS (20 ms), above the default's 5 ms: settle after them */
static double settle_below_ms = 1e4;
static double settle_ms = 0;
/* The protocol's defer_checks_mb, and how many copies the harness has room for */
static double defer_checks_mb = 0;
static int keep_cap = 0;

static struct timing_protocol protocol(void)
{
	struct timing_protocol p;
	timing_protocol_defaults(&p);
	if (settle_calls >= 0)
		p.settle_calls = settle_calls;
	p.settle_below_ms = settle_below_ms;
	p.settle_ms = settle_ms;
	p.defer_checks_mb = defer_checks_mb;
	p.warmup_min_calls = 3;
	p.warmup_min_ms = 5;
	p.min_samples = 16;
	p.max_samples = 40;
	p.budget_s = 0.3;
	p.target_rse = 0.001;
	/* CI machines are noisy: the window's tolerance here is wide; the liars below are far
	 * outside it */
	p.tol_abs_us = 2000;
	p.tol_rel = 0.25;
	return p;
}

/* Starts the process, calibrates, loads, runs the loop: the loop's return code. */
static int run_with(struct harness *h, enum mode m, bool with_ref, struct loop_result *r,
		    struct loop_fail *f)
{
	struct timing_protocol p = protocol();
	json_t *ans = NULL;
	int rc;

	start(h, m, with_ref);
	h->keep_cap = keep_cap;
	memset(r, 0, sizeof *r);
	if ((rc = cand_proc_hello(&h->proc, f)) || (rc = loop_calibrate(&h->L, 11, f)) ||
	    (rc = cand_proc_command(&h->proc, WIRE_CMD_LOAD, NULL, &ans, f)))
		return rc;
	h->refs = 0;
	return loop_time(&h->L, &p, N_SETS, loop_secret, r, f);
}

static int run(struct harness *h, enum mode m, struct loop_result *r, struct loop_fail *f)
{
	return run_with(h, m, false, r, f);
}

static void test_honest_passes(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	if (run(&h, HONEST, &r, &f) != 0)
		print_message("honest failed: %s: %s\n", f.code, f.message);
	assert_string_equal(f.code, "");
	assert_true(r.n >= 16);
	assert_true(r.final_done);
	assert_int_equal(r.checks_failed, 0);
	assert_true(r.special_checks == 2);
	assert_true(r.spot_checks >= 3); /* checks spread over the loop, decided after each call */
	assert_false(r.verdict.tampering);
	/* the claims decide, and they are the work's time */
	assert_true(r.verdict.median_ms > 0.8 * WORK_MS && r.verdict.median_ms < 2 * WORK_MS);
	/* the supervisor's own bound saw the work too */
	assert_true(r.verdict.outside_ms > 0.8 * WORK_MS);
	loop_result_free(&r);
	stop(&h);
}

static void test_lying_times_are_tampering(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	assert_int_not_equal(run(&h, LIE_TIME, &r, &f), 0);
	assert_string_equal(f.code, "hack.timer_tampering");
	assert_true(r.verdict.tampering);
	assert_true(r.verdict.outside_bound);
	/* held to the outside clock: the median is the work's time, not the claim */
	assert_true(r.verdict.median_ms > 0.5 * WORK_MS);
	loop_result_free(&r);
	stop(&h);
}

static void test_slight_lie_is_held_to_outside(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	if (run(&h, LIE_SLIGHT, &r, &f) != 0)
		print_message("slight liar: %s: %s\n", f.code, f.message);
	assert_string_equal(f.code, "");
	assert_true(r.verdict.outside_bound);
	assert_false(r.verdict.tampering);
	/* no gain: a held candidate is charged the outside time itself */
	assert_true(fabs(r.verdict.median_ms - r.verdict.outside_ms) < 1e-9);
	assert_true(r.verdict.median_ms > r.verdict.claims_median_ms);
	loop_result_free(&r);
	stop(&h);
}

static void test_skipping_later_calls_is_caught(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	assert_int_not_equal(run(&h, SKIP_AFTER, &r, &f), 0);
	assert_true(strcmp(f.code, "hack.inconsistent_output") == 0 ||
		    strcmp(f.code, "hack.final_mismatch") == 0);
	loop_result_free(&r);
	stop(&h);
}

static void test_late_writes_are_caught(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	/* it answers before it works; it is stopped at once, so a checked call sees the poison */
	assert_int_not_equal(run(&h, LATE_WRITE, &r, &f), 0);
	assert_true(strcmp(f.code, "hack.inconsistent_output") == 0 ||
		    strcmp(f.code, "hack.final_mismatch") == 0);
	assert_true(h.wrong >= 1);
	loop_result_free(&r);
	stop(&h);
}

static void test_buffer_cache_is_caught(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	/* perturbed sets stay within tolerance of the cache; a fresh set placed in a used buffer
	 * (a special or the final call) does not */
	assert_int_not_equal(run(&h, CACHE_BUFFER, &r, &f), 0);
	assert_true(strcmp(f.code, "hack.inconsistent_output") == 0 ||
		    strcmp(f.code, "hack.final_mismatch") == 0);
	loop_result_free(&r);
	stop(&h);
}

static void test_unasked_event_is_tampering(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	/* caught as tampering when the second answer is in the pipe before the process is
	 * stopped, else as wrong outputs: every later answer is one call late */
	assert_int_not_equal(run(&h, EXTRA_EVENT, &r, &f), 0);
	assert_true(strcmp(f.code, "hack.harness_tampering") == 0 ||
		    strcmp(f.code, "hack.inconsistent_output") == 0);
	loop_result_free(&r);
	stop(&h);
}

static void test_blaming_the_environment_is_tampering(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	assert_int_not_equal(run(&h, BLAME_ENV, &r, &f), 0);
	assert_string_equal(f.code, "hack.harness_tampering");
	assert_non_null(strstr(f.message, "env.bridge"));
	loop_result_free(&r);
	stop(&h);
}

static void test_calibration_is_made_before_load(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	/* a process that is slow at empty calls makes E0 large; that only subtracts from the
	 * outside bound, which only matters when claims are below it: honest claims still
	 * decide, and a process cannot make E0 large after it loaded a candidate */
	assert_int_equal(run(&h, SLOW_EMPTY, &r, &f), 0);
	assert_true(h.L.cal.window_s > 1.5e-3);
	assert_false(r.verdict.tampering);
	loop_result_free(&r);
	stop(&h);
}

static void test_paired_honest_passes(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	if (run_with(&h, HONEST, true, &r, &f) != 0)
		print_message("honest (paired) failed: %s: %s\n", f.code, f.message);
	assert_string_equal(f.code, "");
	assert_true(r.paired);
	assert_false(r.verdict.tampering);
	assert_true(r.verdict.median_ms > 0.8 * WORK_MS && r.verdict.median_ms < 2 * WORK_MS);
	/* each call less the twin's empty window after it: about the work */
	assert_true(r.verdict.outside_ms > 0.8 * WORK_MS && r.verdict.outside_ms < 2 * WORK_MS);
	assert_true(r.verdict.outside_se_ms >= 0);
	loop_result_free(&r);
	stop(&h);
}

/* The checked timed calls that another timed call follows (each is followed by settling). */
static size_t checks_followed(const struct loop_result *r)
{
	size_t i, n = 0;
	json_t *c;
	json_array_foreach(r->checks, i, c) {
		json_t *at = json_object_get(c, "call");
		if (json_is_integer(at) && (size_t)json_integer_value(at) + 1 < r->n)
			n++;
	}
	return n;
}

/* settle_calls: after every checked timed call that another follows, that many calls that are
 * sent like timed ones (the reference's window after each) but never sampled nor checked; the
 * sample and the checks are as without them, and a candidate that stops working is still
 * caught. */
static void test_settle_calls(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	size_t followed;
	(void)state;
	settle_calls = 2;
	if (run_with(&h, HONEST, true, &r, &f) != 0)
		print_message("honest (settle) failed: %s: %s\n", f.code, f.message);
	assert_string_equal(f.code, "");
	assert_true(r.n >= 16);
	assert_true(r.special_checks == 2 && r.spot_checks >= 3);
	followed = checks_followed(&r);
	assert_true(followed >= 4);
	assert_int_equal(r.settle_calls, 2 * (int)followed);
	/* every call sent: warm-up, timed, settling, the final one */
	assert_int_equal(h.calls, r.warmup_calls + (int)r.n + r.settle_calls + 1);
	/* a reference window after each timed and each settling call */
	assert_int_equal(h.refs, (int)r.n + r.settle_calls);
	assert_false(r.verdict.tampering);
	assert_true(r.verdict.median_ms > 0.8 * WORK_MS && r.verdict.median_ms < 2 * WORK_MS);
	loop_result_free(&r);
	stop(&h);

	/* settle_ms shorter than one call (WORK_MS): one settling call after each checked call,
	 * even one longer than settle_below_ms, which settle_ms overrides */
	memset(&f, 0, sizeof f);
	settle_ms = 1.0;
	settle_below_ms = 1.0;
	assert_int_equal(run_with(&h, HONEST, true, &r, &f), 0);
	followed = checks_followed(&r);
	assert_true(followed >= 4);
	assert_int_equal(r.settle_calls, (int)followed);
	assert_int_equal(h.calls, r.warmup_calls + (int)r.n + r.settle_calls + 1);
	assert_int_equal(h.refs, (int)r.n + r.settle_calls);
	assert_false(r.verdict.tampering);
	loop_result_free(&r);
	stop(&h);
	/* settle_ms longer than settle_calls calls take: settle_calls still caps them */
	memset(&f, 0, sizeof f);
	settle_ms = 1000.0;
	assert_int_equal(run_with(&h, HONEST, true, &r, &f), 0);
	followed = checks_followed(&r);
	assert_int_equal(r.settle_calls, 2 * (int)followed);
	loop_result_free(&r);
	stop(&h);
	settle_ms = 0;
	settle_below_ms = 1e4;

	memset(&f, 0, sizeof f);
	assert_int_not_equal(run_with(&h, SKIP_AFTER, true, &r, &f), 0);
	assert_true(strcmp(f.code, "hack.inconsistent_output") == 0 ||
		    strcmp(f.code, "hack.final_mismatch") == 0);
	loop_result_free(&r);
	stop(&h);

	/* checked calls longer than settle_below_ms are not followed by any */
	memset(&f, 0, sizeof f);
	settle_below_ms = 1.0;
	assert_int_equal(run_with(&h, HONEST, true, &r, &f), 0);
	assert_true(r.special_checks == 2 && r.spot_checks >= 3);
	assert_int_equal(r.settle_calls, 0);
	assert_int_equal(h.calls, r.warmup_calls + (int)r.n + 1);
	loop_result_free(&r);
	stop(&h);
	settle_below_ms = 1e4;
	settle_calls = -1;
}

/* Checks kept for after the loop (defer_checks_mb): every checked timed call is copied at once
 * and judged after the last timed call, before the final one; none is followed by settling
 * calls; the verdicts are those of checks made at once, so the liars that checks catch are
 * caught. A call that finds no room is checked at once and settled after, as without. */
static void test_deferred_checks(void **state)
{
	static const enum mode liars[] = {SKIP_AFTER, LATE_WRITE, CACHE_BUFFER};
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	size_t i;
	json_t *c;
	int deferred = 0;
	(void)state;
	defer_checks_mb = 1;
	keep_cap = 64;
	if (run_with(&h, HONEST, true, &r, &f) != 0)
		print_message("honest (deferred) failed: %s: %s\n", f.code, f.message);
	assert_string_equal(f.code, "");
	assert_true(r.special_checks == 2 && r.spot_checks >= 3);
	assert_int_equal(r.deferred_checks, r.special_checks + r.spot_checks);
	assert_int_equal(h.kept_calls, r.deferred_checks);
	assert_int_equal(r.settle_calls, 0); /* settling follows only checks made at once */
	assert_int_equal(h.calls, r.warmup_calls + (int)r.n + 1);
	/* judged after the loop, in call order, and the final call last, at once */
	json_array_foreach(r.checks, i, c) {
		bool final = json_is_string(json_object_get(c, "call"));
		assert_true(json_is_true(json_object_get(c, "ok")));
		assert_int_equal(json_is_true(json_object_get(c, "deferred")), !final);
		assert_int_equal(final, i + 1 == json_array_size(r.checks));
		deferred += !final;
	}
	assert_int_equal(deferred, r.deferred_checks);
	assert_int_equal(h.checks, r.deferred_checks + 1);
	assert_false(r.verdict.tampering);
	assert_true(r.verdict.median_ms > 0.8 * WORK_MS && r.verdict.median_ms < 2 * WORK_MS);
	loop_result_free(&r);
	stop(&h);

	for (size_t k = 0; k < sizeof liars / sizeof liars[0]; k++) {
		memset(&f, 0, sizeof f);
		assert_int_not_equal(run_with(&h, liars[k], true, &r, &f), 0);
		assert_true(strcmp(f.code, "hack.inconsistent_output") == 0 ||
			    strcmp(f.code, "hack.final_mismatch") == 0);
		assert_true(h.wrong >= 1);
		loop_result_free(&r);
		stop(&h);
	}

	/* wrong outputs in kept calls, then the process dies before the loop ends: the kept calls
	 * are still judged, and the wrong output is the reason, as a check made at once would have
	 * found it before the death */
	memset(&f, 0, sizeof f);
	assert_int_not_equal(run_with(&h, SKIP_THEN_DIE, true, &r, &f), 0);
	assert_string_equal(f.code, "hack.inconsistent_output");
	assert_true(r.deferred_checks >= 1 && h.wrong >= 1 && !r.final_done);
	loop_result_free(&r);
	stop(&h);

	/* room for two: those two kept, the rest checked at once and settled after */
	memset(&f, 0, sizeof f);
	keep_cap = 2;
	assert_int_equal(run_with(&h, HONEST, true, &r, &f), 0);
	assert_int_equal(r.deferred_checks, 2);
	{
		size_t settled = 0;
		json_array_foreach(r.checks, i, c) {
			json_t *at = json_object_get(c, "call");
			if (!json_is_true(json_object_get(c, "deferred")) && json_is_integer(at) &&
			    (size_t)json_integer_value(at) + 1 < r.n)
				settled++;
		}
		assert_true(settled >= 1);
		assert_int_equal(r.settle_calls, 3 * (int)settled);
	}
	loop_result_free(&r);
	stop(&h);
	defer_checks_mb = 0;
	keep_cap = 0;
}

static void test_paired_lie_is_tampering(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	assert_int_not_equal(run_with(&h, LIE_TIME, true, &r, &f), 0);
	assert_string_equal(f.code, "hack.timer_tampering");
	assert_true(r.verdict.outside_bound);
	assert_true(r.verdict.median_ms > 0.5 * WORK_MS);
	loop_result_free(&r);
	stop(&h);
}

/* An answer written while the call's GPU work still runs (a forged `called`, a hooked
 * synchronize) is seen by the probe launched when it arrives: a candidate that does so on
 * every call is hack.harness_tampering; one that does so once is not, but those
 * calls' claims are not used; an honest one has none. The scripted GPU stands in for the GPU's
 * timer (h_probe_waits). */
static void test_early_answers(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;

	assert_int_not_equal(run_with(&h, EARLY_ANSWER, true, &r, &f), 0);
	assert_string_equal(f.code, "hack.harness_tampering");
	assert_non_null(strstr(f.message, "while their GPU work was still running"));
	assert_true(r.early_calls >= LOOP_EARLY_REFUSE_MIN);
	print_message("early answers: %d of %zu calls, up to %.3f ms; threshold %.1f us\n",
		      r.early_calls, r.n, r.early_max_ms, h.L.cal.early_s * 1e6);
	assert_true(r.early_max_ms > 0.5 * EARLY_MS && r.early_max_ms < 1.5 * EARLY_MS);
	assert_true(h.L.cal.early_s >= LOOP_EARLY_MIN_S && h.L.cal.early_s < 1e-3);
	loop_result_free(&r);
	stop(&h);

	memset(&f, 0, sizeof f);
	settle_calls = 0; /* so that its 9th call is a timed one: 3 warm-up calls come first */
	if (run_with(&h, EARLY_ONCE, true, &r, &f) != 0)
		print_message("early once failed: %s: %s\n", f.code, f.message);
	settle_calls = -1;
	assert_string_equal(f.code, "");
	assert_true(r.early_calls >= 1);
	assert_true((double)r.early_calls < LOOP_EARLY_REFUSE_SHARE * (double)r.n);
	assert_true(r.claims_invalid >= r.early_calls);
	loop_result_free(&r);
	stop(&h);

	memset(&f, 0, sizeof f);
	if (run_with(&h, HONEST, true, &r, &f) != 0)
		print_message("honest failed: %s: %s\n", f.code, f.message);
	assert_string_equal(f.code, "");
	assert_int_equal(r.early_calls, 0);
	loop_result_free(&r);
	stop(&h);
}

/* A busy host is not tampering (issue 45, item 6): the scripted process claims the 1 ms of CPU
 * time its call takes, while six processes of higher priority share its CPU, so its windows
 * grow by the time it waits for the CPU and its claims do not, as a GPU kernel's events do not.
 * The accusation is checked against the windows less those waits (the kernel's schedstat). */
static void test_busy_host_is_not_tampering(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	struct timing_protocol p = protocol();
	json_t *ans = NULL;
	pid_t hogs[6];
	cpu_set_t one;
	(void)state;

	if (!isfinite(ca_run_delay_s(0)) || geteuid() != 0) {
		skip(); /* no schedstat on this kernel; raising the load's priority needs root */
		return;
	}
	p.tol_abs_us = 50;
	p.tol_rel = 0.03;
	memset(&r, 0, sizeof r);
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	start(&h, HONEST_CPU, false);
	assert_int_equal(sched_setaffinity(h.child.pid, sizeof one, &one), 0);
	/* calibrated on a quiet host; the load comes after, as another job's compiles do */
	assert_int_equal(cand_proc_hello(&h.proc, &f), 0);
	assert_int_equal(loop_calibrate(&h.L, 11, &f), 0);
	assert_int_equal(cand_proc_command(&h.proc, WIRE_CMD_LOAD, NULL, &ans, &f), 0);
	for (int i = 0; i < 6; i++) {
		hogs[i] = fork();
		assert_true(hogs[i] >= 0);
		if (hogs[i] == 0) {
			(void)sched_setaffinity(0, sizeof one, &one);
			(void)setpriority(PRIO_PROCESS, 0, -15);
			for (double t0 = ca_now(); ca_now() - t0 < 120;) {
			}
			_exit(0);
		}
	}
	(void)loop_time(&h.L, &p, N_SETS, 0xC0FFEEull, &r, &f);
	for (int i = 0; i < 6; i++) {
		kill(hogs[i], SIGKILL);
		waitpid(hogs[i], NULL, 0);
	}
	print_message("busy host: %s; claims %.3f ms, outside %.3f ms, tampering by the plain "
		      "bound %d, waived %d\n",
		      f.code[0] ? f.code : "ok", r.verdict.claims_median_ms, r.verdict.outside_ms,
		      (int)r.verdict.tampering, (int)r.load_waived);
	assert_string_equal(f.code, "");
	/* the load was heavy enough to matter: without the waits taken out it was an accusation */
	assert_true(r.verdict.tampering);
	assert_true(r.load_waived);
	loop_result_free(&r);
	stop(&h);
}

/* Issue 45 item 5: what a candidate can see before a call (the gap since its last return, a
 * fresh set's placing) may tell it which calls are special; it gains nothing, because spot
 * checks are chosen after each call from the secret, on every call with probability
 * min(1, spot_density / (i + 1)). The oracle here knows the special calls for certain, better
 * than any timing could, and serves stale outputs on every other call: it is caught under every
 * secret, with checks kept for after the loop and with checks made at once. */
static void test_knowing_special_calls_gains_nothing(void **state)
{
	struct harness h;
	struct loop_result r;
	struct loop_fail f = {0};
	(void)state;
	for (int k = 0; k < 6; k++) {
		loop_secret = 0x5EC0ull + (uint64_t)k * 7919u;
		defer_checks_mb = k % 2 ? 4096 : 0;
		keep_cap = k % 2 ? 64 : 0;
		memset(&f, 0, sizeof f);
		assert_int_not_equal(run_with(&h, ORACLE_STALE, false, &r, &f), 0);
		if (strcmp(f.code, "hack.inconsistent_output") != 0 &&
		    strcmp(f.code, "hack.final_mismatch") != 0)
			fail_msg("secret %d: %s: %s", k, f.code, f.message);
		assert_true(r.spot_checks >= 1);
		loop_result_free(&r);
		stop(&h);
	}
	loop_secret = 0xC0FFEEull;
	defer_checks_mb = 0;
	keep_cap = 0;
}

static void test_sample_rule_paired_and_trusted(void **state)
{
	double claims[8] = {1, 1, 1, 1, 1, 1, 1, 1},
	       outside[8] = {2.0, 2.1, 1.9, 2.0, 2.05, 1.95, 2.0, 2.0}, scratch[8];
	struct sample_verdict v;
	struct ca_diag d = {{0}};
	(void)state;
	/* paired: the median of the pairs, its standard error added to the tolerance */
	assert_int_equal(sample_decide(claims, outside, 8, 0.003, 0.03, 0.0, SAMPLE_PAIRED, false, &v,
				       &d),
			 0);
	assert_true(fabs(v.outside_ms - 2.0) < 1e-12);
	assert_true(v.outside_se_ms > 0 && v.outside_se_ms < 0.05);
	assert_true(fabs(v.tol_ms - (0.06 + 2 * v.outside_se_ms)) < 1e-12);
	assert_true(v.outside_bound);
	assert_true(fabs(v.median_ms - 2.0) < 1e-12); /* held: the outside time itself */
	assert_true(fabs(sample_median_se(outside, 8, scratch) - v.outside_se_ms) < 1e-15);
	/* the offset's own standard error widens the tolerance in quadrature; claims within it
	 * decide again */
	{
		double se = v.outside_se_ms;
		assert_int_equal(sample_decide(claims, outside, 8, 0.003, 0.03, 0.5, SAMPLE_PAIRED,
					       false, &v, &d),
				 0);
		assert_true(fabs(v.offset_se_ms - 0.5) < 1e-12);
		assert_true(fabs(v.tol_ms - (0.06 + 2 * sqrt(se * se + 0.25))) < 1e-12);
		assert_false(v.outside_bound);
		assert_true(fabs(v.median_ms - 1.0) < 1e-12);
	}
	/* a trusted callee (a baseline) is decided by its claims */
	assert_int_equal(sample_decide(claims, outside, 8, 0.003, 0.03, 0.0, SAMPLE_PAIRED, true, &v,
				       &d),
			 0);
	assert_false(v.outside_bound);
	assert_false(v.tampering);
	assert_true(fabs(v.median_ms - 1.0) < 1e-12);
	assert_true(sample_median_se(outside, 1, scratch) == 0.0);
}

static void test_sample_rule(void **state)
{
	double claims[5] = {1.0, 1.0, 1.0, 1.0, 1.0}, outside[5] = {1.02, 0.98, 1.01, 1.0, 0.99};
	double low[5] = {0.1, 0.1, 0.1, 0.1, 0.1};
	struct sample_verdict v;
	struct ca_diag d;
	(void)state;
	/* agreeing: the claims decide */
	assert_int_equal(sample_decide(claims, outside, 5, 0.003, 0.03, 0.0, SAMPLE_CALIBRATED, false, &v, &d), 0);
	assert_false(v.outside_bound);
	assert_true(v.median_ms == 1.0);
	/* claims far below the bound: held to it, and gross tampering (the bound is the lower
	 * quartile of the outside figures: 0.99 here) */
	assert_int_equal(sample_decide(low, outside, 5, 0.003, 0.03, 0.0, SAMPLE_CALIBRATED, false, &v, &d), 0);
	assert_true(v.outside_bound && v.tampering);
	assert_true(fabs(v.outside_ms - 0.99) < 1e-9);
	assert_true(fabs(v.median_ms - 0.99) < 1e-9); /* charged the bound itself */
	/* below, but not a fraction of it: held, not tampering */
	for (int i = 0; i < 5; i++)
		low[i] = 0.5;
	assert_int_equal(sample_decide(low, outside, 5, 0.003, 0.03, 0.0, SAMPLE_CALIBRATED, false, &v, &d), 0);
	assert_true(v.outside_bound && !v.tampering);
	/* short kernels: within 100 us of the bound is never gross */
	{
		double c[3] = {0.001, 0.001, 0.001}, o[3] = {0.090, 0.090, 0.090};
		assert_int_equal(sample_decide(c, o, 3, 0.003, 0.03, 0.0, SAMPLE_CALIBRATED, false, &v, &d), 0);
		assert_true(v.outside_bound && !v.tampering);
	}
	assert_int_equal(sample_decide(claims, outside, 0, 0.003, 0.03, 0.0, SAMPLE_CALIBRATED, false, &v, &d), CA_ERR_INVALID);
}

static void test_code_allowlist(void **state)
{
	(void)state;
	assert_true(cand_proc_code_allowed("abi.forward_failed"));
	assert_true(cand_proc_code_allowed("fault.illegal_address"));
	assert_true(cand_proc_code_allowed("hack.torch_compute"));
	assert_true(cand_proc_code_allowed("worker.oom"));
	assert_false(cand_proc_code_allowed("env.bridge"));
	assert_false(cand_proc_code_allowed("task.forward_raised"));
	assert_false(cand_proc_code_allowed("internal"));
	assert_false(cand_proc_code_allowed("abi."));
	assert_false(cand_proc_code_allowed("hack.invented_by_the_candidate"));
	assert_false(cand_proc_code_allowed("timeout"));           /* the supervisor's to say */
	assert_false(cand_proc_code_allowed("sandbox.violation")); /* likewise */
	assert_false(cand_proc_code_allowed(NULL));
}

/* The perturbation keeps what a task's inputs guarantee (device/prep.h layouts, on the CPU
 * backend: the same arithmetic as the GPU kernels): a symmetric tensor stays symmetric, a sorted
 * one sorted, zeros stay zero, every element is at its value or half of it, and state 0 is the
 * set as placed again. */
static void test_perturbation_keeps_structure(void **state)
{
	enum { B = 2, N = 16, SYM = B * N * N, SORTED = 512, TOTAL = SYM + SORTED };
	struct device dev;
	struct device_slot slot;
	struct ca_diag d = {{0}};
	float orig[TOTAL], *x;
	unsigned seed = 7;
	int fd = memfd_create("slot", MFD_CLOEXEC);
	(void)state;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, TOTAL * sizeof(float)), 0);
	assert_int_equal(device_open(&dev, DEVICE_CPU, 0, &d), 0);
	assert_int_equal(device_slot_import(&dev, fd, TOTAL * sizeof(float), &slot, &d), 0);
	x = slot.host;
	for (int b = 0; b < B; b++) /* symmetric, lower-left corner of each zero */
		for (int r = 0; r < N; r++)
			for (int c = r; c < N; c++) {
				float v = r > N / 2 && c < N / 2 + r - N / 2
						  ? 0.0f
						  : (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
				x[b * N * N + r * N + c] = x[b * N * N + c * N + r] = v;
			}
	for (int i = 0; i < SORTED; i++) /* ascending, through zero */
		x[SYM + i] = (float)(i - SORTED / 2) * 0.37f;
	memcpy(orig, x, sizeof orig);
	uint64_t states[] = {0, 11, 12, 13, 99, 0};
	for (size_t k = 1; k < sizeof states / sizeof *states; k++) {
		assert_int_equal(device_perturb(&dev, &slot, 0, SYM, CA_DTYPE_F32, N, states[k - 1],
						states[k], 0.5, &d),
				 0);
		assert_int_equal(device_perturb(&dev, &slot, SYM * sizeof(float), SORTED,
						CA_DTYPE_F32, CA_PREP_UNIFORM, states[k - 1],
						states[k], 0.5, &d),
				 0);
		int halved = 0;
		for (int b = 0; b < B; b++)
			for (int r = 0; r < N; r++)
				for (int c = 0; c < N; c++) {
					int i = b * N * N + r * N + c;
					assert_true(x[i] == x[b * N * N + c * N + r]);
					assert_true(x[i] == orig[i] || x[i] == 0.5f * orig[i]);
					halved += x[i] != orig[i];
				}
		for (int i = 1; i < SORTED; i++)
			assert_true(x[SYM + i - 1] <= x[SYM + i]);
		if (states[k] == 0)
			assert_memory_equal(x, orig, sizeof orig);
		else
			assert_true(halved > SYM / 8 && halved < SYM * 7 / 8); /* about half moved */
	}
	/* plain elements: (r, c) and (c, r) move on their own */
	assert_int_equal(device_perturb(&dev, &slot, 0, SYM, CA_DTYPE_F32, CA_PREP_ELEMENTS, 0, 5,
					0.5, &d),
			 0);
	int asym = 0;
	for (int r = 0; r < N; r++)
		for (int c = 0; c < N; c++)
			asym += x[r * N + c] != x[c * N + r];
	assert_true(asym > 0);
	assert_int_equal(ca_prep_key(5, CA_PREP_ELEMENTS), 5);
	assert_int_equal(ca_prep_key(12345, CA_PREP_UNIFORM), 0);
	assert_int_equal(ca_prep_key(1 * 4 + 2, 4), ca_prep_key(2 * 4 + 1, 4));
	assert_int_equal(ca_prep_key(16 + 1 * 4 + 2, 4), 16 + 1 * 4 + 2);
	device_slot_unmap(&slot);
	device_close(&dev);
	close(fd);
}

/* Evaluations running at once claim different CPUs (flock), share the last one when all are
 * taken, and a released CPU can be claimed again; too few CPUs: no claim. */
static void test_cpu_claims(void **state)
{
	char dir[] = "/tmp/ca-test-cpu-claim-XXXXXX";
	struct cpu_claim a, b, c, d;
	cpu_set_t cpus;
	(void)state;
	assert_non_null(mkdtemp(dir));
	CPU_ZERO(&cpus);
	CPU_SET(0, &cpus);
	CPU_SET(1, &cpus);
	assert_int_equal(cpu_claim_take_from(&a, &cpus, dir, CPU_CLAIM_MIN_CPUS), -1);
	assert_int_equal(a.cpu, -1);
	cpu_claim_release(&a);
	assert_int_equal(cpu_claim_take_from(&a, &cpus, dir, 2), 0); /* forced: two suffice */
	assert_int_equal(a.cpu, 1);
	a.saved_valid = false;
	cpu_claim_release(&a);
	CPU_SET(5, &cpus);
	assert_int_equal(cpu_claim_take_from(&a, &cpus, dir, CPU_CLAIM_MIN_CPUS), 0);
	assert_int_equal(a.cpu, 5);
	assert_true(a.lock_fd >= 0);
	assert_int_equal(cpu_claim_take_from(&b, &cpus, dir, CPU_CLAIM_MIN_CPUS), 0);
	assert_int_equal(b.cpu, 1);
	assert_int_equal(cpu_claim_take_from(&c, &cpus, dir, CPU_CLAIM_MIN_CPUS), 0);
	assert_int_equal(c.cpu, 0);
	assert_int_equal(cpu_claim_take_from(&d, &cpus, dir, CPU_CLAIM_MIN_CPUS), 0);
	assert_int_equal(d.cpu, 5); /* all taken: the last one, shared, without a lock */
	assert_int_equal(d.lock_fd, -1);
	d.saved_valid = false; /* these sets are made up: never applied to this thread */
	cpu_claim_release(&d);
	b.saved_valid = false;
	cpu_claim_release(&b);
	assert_int_equal(cpu_claim_take_from(&d, &cpus, dir, CPU_CLAIM_MIN_CPUS), 0);
	assert_int_equal(d.cpu, 1);
	assert_true(d.lock_fd >= 0);
	a.saved_valid = c.saved_valid = d.saved_valid = false;
	cpu_claim_release(&a);
	cpu_claim_release(&c);
	cpu_claim_release(&d);
	assert_int_equal(a.cpu, -1);
	cpu_claim_release(&a); /* twice is fine */
	{
		struct ca_diag dd = {{0}};
		assert_int_equal(ca_remove_tree(dir, &dd), 0);
	}
}

/* CPU lists round-trip; malformed ones are refused. */
static void test_cpu_lists(void **state)
{
	cpu_set_t set;
	char buf[64];
	(void)state;
	assert_int_equal(cpu_list_parse("0-3,8,10-11", &set), 0);
	assert_int_equal(CPU_COUNT(&set), 7);
	assert_int_equal(cpu_list_format(&set, buf, sizeof buf), 0);
	assert_string_equal(buf, "0-3,8,10-11");
	assert_int_equal(cpu_list_parse("5,1\n", &set), 0); /* as sysfs writes it */
	assert_int_equal(cpu_list_format(&set, buf, sizeof buf), 0);
	assert_string_equal(buf, "1,5");
	assert_int_equal(cpu_list_format(&set, buf, 3), -1); /* "1,5" does not fit in 3 bytes */
	const char *bad[] = {"", "a", "1-", "3-1", "1,", ",1", "1 2", "-1", "99999", "1,,2", NULL};
	for (int i = 0; bad[i]; i++)
		assert_int_equal(cpu_list_parse(bad[i], &set), -1);
	assert_int_equal(cpu_list_parse(NULL, &set), -1);
	/* a less b, also in place, b not within a */
	cpu_set_t a, b;
	assert_int_equal(cpu_list_parse("0-7", &a), 0);
	assert_int_equal(cpu_list_parse("2-3,6,9", &b), 0);
	cpu_set_minus(&set, &a, &b);
	assert_int_equal(cpu_list_format(&set, buf, sizeof buf), 0);
	assert_string_equal(buf, "0-1,4-5,7");
	cpu_set_minus(&a, &a, &a);
	assert_int_equal(CPU_COUNT(&a), 0);
}

static void write_siblings(const char *root, int cpu, const char *list)
{
	char path[256];
	FILE *f;
	snprintf(path, sizeof path, "%s/cpu%d/topology", root, cpu);
	{
		struct ca_diag d = {{0}};
		assert_int_equal(ca_mkdirs(path, 0700, &d), 0);
	}
	snprintf(path, sizeof path, "%s/cpu%d/topology/thread_siblings_list", root, cpu);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "%s\n", list);
	fclose(f);
}

/* Timing CPUs: the highest, at most a quarter; their hyperthread siblings idle while half the
 * CPUs stay for the rest; too few CPUs: none. A claim takes a free timing CPU first. */
static void test_timing_cpus(void **state)
{
	char root[] = "/tmp/ca-test-sysfs-XXXXXX", dir[] = "/tmp/ca-test-cpu-claim-XXXXXX";
	char buf[64];
	cpu_set_t allowed, timing, rest;
	struct cpu_claim a, b, c;
	(void)state;
	assert_non_null(mkdtemp(root));
	assert_non_null(mkdtemp(dir));
	for (int cpu = 0; cpu < 8; cpu++) { /* 8 CPUs, siblings k and k + 4 */
		char list[16];
		snprintf(list, sizeof list, "%d,%d", cpu % 4, cpu % 4 + 4);
		write_siblings(root, cpu, list);
	}
	CPU_ZERO(&allowed);
	for (int cpu = 0; cpu < 8; cpu++)
		CPU_SET((size_t)cpu, &allowed);
	assert_int_equal(cpu_claim_reserve(&allowed, 4, root, &timing, &rest), 0);
	assert_int_equal(cpu_list_format(&timing, buf, sizeof buf), 0);
	assert_string_equal(buf, "6-7"); /* a quarter of 8 */
	assert_int_equal(cpu_list_format(&rest, buf, sizeof buf), 0);
	assert_string_equal(buf, "0-1,4-5"); /* 2 and 3, their siblings, idle */
	assert_int_equal(cpu_claim_reserve(&allowed, 1, root, &timing, &rest), 0);
	assert_int_equal(cpu_list_format(&timing, buf, sizeof buf), 0);
	assert_string_equal(buf, "7");
	assert_int_equal(cpu_list_format(&rest, buf, sizeof buf), 0);
	assert_string_equal(buf, "0-2,4-6");
	assert_int_equal(cpu_claim_reserve(&allowed, 1, "/nonexistent", &timing, &rest), 0);
	assert_int_equal(cpu_list_format(&rest, buf, sizeof buf), 0);
	assert_string_equal(buf, "0-6"); /* no topology: no siblings */
	CPU_ZERO(&allowed);
	CPU_SET(0, &allowed);
	CPU_SET(1, &allowed);
	assert_int_equal(cpu_claim_reserve(&allowed, 1, root, &timing, &rest), -1);
	assert_int_equal(CPU_COUNT(&timing), 0);
	assert_int_equal(CPU_COUNT(&rest), 2);

	/* Claims: the free timing CPUs first (highest), then this thread's own CPUs. */
	assert_int_equal(setenv(CPU_CLAIM_TIMING_ENV, "0", 1), 0);
	assert_int_equal(cpu_claim_take(&a, dir, 1), 0);
	assert_int_equal(a.cpu, 0);
	assert_true(a.lock_fd >= 0);
	assert_int_equal(cpu_claim_take(&b, dir, 1), 0);
	assert_true(b.cpu != 0); /* the timing CPU is taken: one of the thread's own */
	assert_int_equal(setenv(CPU_CLAIM_TIMING_ENV, "not a list", 1), 0);
	assert_int_equal(cpu_claim_take(&c, dir, 1), 0);
	assert_true(c.cpu != 0);
	assert_int_equal(unsetenv(CPU_CLAIM_TIMING_ENV), 0);
	cpu_claim_release(&a);
	cpu_claim_release(&b);
	cpu_claim_release(&c);
	{
		struct ca_diag dd = {{0}};
		assert_int_equal(ca_remove_tree(dir, &dd), 0);
		assert_int_equal(ca_remove_tree(root, &dd), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sample_rule),
		cmocka_unit_test(test_sample_rule_paired_and_trusted),
		cmocka_unit_test(test_paired_honest_passes),
		cmocka_unit_test(test_settle_calls),
		cmocka_unit_test(test_deferred_checks),
		cmocka_unit_test(test_paired_lie_is_tampering),
		cmocka_unit_test(test_early_answers),
		cmocka_unit_test(test_busy_host_is_not_tampering),
		cmocka_unit_test(test_knowing_special_calls_gains_nothing),
		cmocka_unit_test(test_code_allowlist),
		cmocka_unit_test(test_honest_passes),
		cmocka_unit_test(test_lying_times_are_tampering),
		cmocka_unit_test(test_slight_lie_is_held_to_outside),
		cmocka_unit_test(test_skipping_later_calls_is_caught),
		cmocka_unit_test(test_late_writes_are_caught),
		cmocka_unit_test(test_buffer_cache_is_caught),
		cmocka_unit_test(test_unasked_event_is_tampering),
		cmocka_unit_test(test_blaming_the_environment_is_tampering),
		cmocka_unit_test(test_calibration_is_made_before_load),
		cmocka_unit_test(test_perturbation_keeps_structure),
		cmocka_unit_test(test_cpu_claims),
		cmocka_unit_test(test_cpu_lists),
		cmocka_unit_test(test_timing_cpus),
	};
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
