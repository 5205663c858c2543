/* loop: the timed loop of docs/protocol.md ("The timed loop"): one implementation for
 * candidates of every format and for both baselines.
 *
 * The loop owns the clock and every decision: which input set a call uses, how it is
 * perturbed, which calls are checked (decided after the call, from a generator seeded with the
 * supervisor's secret), when to stop, and how the median is decided (protocol/sample.h). What a
 * call is, is the caller's (struct loop_ops): preparing the inputs (the supervisor's device and
 * the bridge), sending the command and waiting for its answer (the candidate's process, stopped
 * between calls; or the bridge for a baseline), checking outputs (the bridge). After every
 * answer the loop probes the GPU from the supervisor's own context until a probe finds it idle,
 * so work the callee left running is inside the call's window.
 *
 * Windows (loop_window): stamped on this process's monotonic clock from just before `send` to
 * the return of the first quiet probe. Calibration (loop_calibrate) runs empty calls before any
 * candidate code is loaded: their median claim (ev0) is subtracted from every later claim. With
 * a reference process (loop_ops.has_ref) every timed window is paired with an empty window of the
 * reference right after it, less their offset calibrated before load; without one, the median
 * calibration window (E0) is subtracted. Every window is prepared like a call. A checked call
 * may be kept instead (ops.keep, protocol defer_checks_mb): copied at once, judged after the
 * last timed call (ops.check_kept), with no settling after it. Diagnostics:
 * CUDA_AGENT_LOOP_TRACE=FILE appends one line per window.
 *
 * Ownership: loop_result owns its arrays and the `checks` JSON (loop_result_free). */
#ifndef CA_PROTOCOL_LOOP_H
#define CA_PROTOCOL_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "device/device.h"
#include "protocol/sample.h"
#include "protocol/stats.h"
#include "util/diag.h"

#define LOOP_NORMAL (-1) /* prepare: perturb the set in place */
#define LOOP_FINAL  (-2) /* prepare: place the final (fresh) set */
enum loop_keep { LOOP_KEEP_WRONG = 0, LOOP_KEPT = 1, LOOP_KEEP_FULL = 2 };
#define LOOP_CALIBRATION_RUNS 31
#define LOOP_CALIBRATION_WARM 24 /* untimed empty windows first (a new process is slow) */
#define LOOP_REF_MIN_PAIRS 32   /* timed calls before the outside bound can be settled */
/* With a reference, the calibration takes pairs (empty call, reference call) until the offset's
 * standard error is at most LOOP_REF_OFFSET_SE_S, checked every LOOP_REF_CAL_STEP pairs from
 * LOOP_REF_CAL_MIN on, LOOP_REF_CAL_MAX at most (a pair costs about 1.5 ms on the H200). */
#define LOOP_REF_CAL_MIN     64
#define LOOP_REF_CAL_STEP    32
#define LOOP_REF_CAL_MAX     512
#define LOOP_REF_OFFSET_SE_S 3e-6
#define LOOP_PROBE_MAX_S 5.0        /* a callee's GPU work still running after this: failure */
#define LOOP_PROBE_QUIET_MIN_S 200e-6
/* Early answers (docs/protocol.md, "Early answers"): a timed call whose probes waited on the
 * GPU at least this much longer than the reference's did after it (or more, from the
 * calibration's spread) answered while its work was still running; LOOP_EARLY_REFUSE_MIN such
 * calls, and at least LOOP_EARLY_REFUSE_SHARE of the timed calls, are hack.harness_tampering. */
#define LOOP_EARLY_MIN_S        15e-6
#define LOOP_EARLY_REFUSE_MIN   3
#define LOOP_EARLY_REFUSE_SHARE 0.25

/* LOOP_SEND_REF: an empty call to the reference process (loop_ops.has_ref), never to the
 * candidate's. */
enum loop_send { LOOP_SEND_CALL, LOOP_SEND_EMPTY, LOOP_SEND_AUDIT, LOOP_SEND_REF };

/* Why a step failed: a reason code (docs/result.md) and a message a person understands. */
struct loop_fail {
	char code[48];
	char message[CA_DIAG_MAX];
};

void loop_fail_set(struct loop_fail *f, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

struct loop_ops {
	void *ctx;
	/* Untimed, with the callee stopped: make inputs[input] ready (special == LOOP_NORMAL:
	 * perturb its floating tensors into a new state drawn from seed (device/prep.h); special
	 * >= 0: place special checked set `special`; LOOP_FINAL: place the final set), poison the
	 * outputs, flush L2, synchronize. */
	int (*prepare)(void *ctx, int input, int special, uint64_t seed, struct loop_fail *f);
	/* Resume the callee and send one command for inputs[input]. */
	int (*send)(void *ctx, int input, enum loop_send what, struct loop_fail *f);
	/* Wait for the answer, then stop the callee; *ev_ms is its claimed event time. A failed
	 * call (or an audit's verdict) comes back as a negative code with f filled. A callee whose
	 * process is stopped after its answer calls loop_answered() between reading the answer
	 * and stopping it. */
	int (*wait)(void *ctx, double *ev_ms, struct loop_fail *f);
	/* Optional (NULL: no checks, as for baselines): judge the call just made on inputs[input].
	 * 1 correct, 0 wrong (detail says how: "message", and "code" when more specific than a
	 * wrong output such as verify.input_modified), negative on failure (f). */
	int (*check)(void *ctx, int input, int special, json_t *detail, struct loop_fail *f);
	/* Optional (with check; NULL: every check at once): keep the call just made on inputs[input]
	 * as number `kept` (0, 1, ... in each loop) to be judged after the timed loop
	 * (p->defer_checks_mb). What can be judged at once is (an input or parameter modified:
	 * LOOP_KEEP_WRONG, detail filled as by check); the outputs and inputs are then copied
	 * where the callee cannot reach them, without waiting for the copy (LOOP_KEPT), or do not
	 * fit (LOOP_KEEP_FULL: the loop checks the call at once). Negative on failure (f). */
	int (*keep)(void *ctx, int input, int kept, json_t *detail, struct loop_fail *f);
	/* Judges kept call number `kept` as check would have judged it when it was kept. */
	int (*check_kept)(void *ctx, int kept, json_t *detail, struct loop_fail *f);
	bool can_audit; /* a warm-up call may be sent as LOOP_SEND_AUDIT */
	/* Optional: how long the process that serves `what` has waited, runnable, for a CPU since
	 * it started (ca_run_delay_s of its pid; NaN unknown). The loop adds its own thread's and
	 * takes the difference over each window (loop_window.run_delay_s). */
	double (*run_delay)(void *ctx, enum loop_send what);
	/* send/wait also take LOOP_SEND_REF: an empty call to a reference process that runs no
	 * candidate code (a twin of the callee's process, started from the same trusted binary).
	 * Its windows, one after every timed call, are the fixed cost of observing a call at that
	 * moment, so drift in that cost (host scheduling, clocks, the GPU's context switches)
	 * cancels call by call. */
	bool has_ref;
	/* The callee is trusted (the bridge timing a baseline): its claims decide, the outside
	 * bound is only reported. */
	bool trusted;
	/* The hold at the start of every window (device_hold; 0: none): the same for the callee's
	 * and the reference's windows of one loop. */
	double hold_s;
};

struct loop_calibration {
	double window_s;      /* E0: median window of empty calls */
	double ev_ms;         /* ev0: median claimed event time of empty calls */
	double spread_s;      /* robust spread of those windows (1.4826 * MAD) */
	double probe_quiet_s; /* a probe that returns sooner found the GPU idle */
	double first_probe_s; /* median first probe after an empty call */
	double ref_offset_s;  /* with a reference: median(callee's empty window - the reference's
				 window just after it), before any candidate code is loaded */
	double ref_offset_se_s; /* its standard error (sample_median_se) */
	int ref_pairs;          /* how many pairs it is the median of */
	/* With a reference on a GPU: a timed call whose probes waited longer than the reference's
	 * window after it by more than this answered early (loop_window.gpu_wait_s): the
	 * calibration pairs' median difference plus six robust spreads, at least LOOP_EARLY_MIN_S. */
	double early_s;
	double wait_diff_s; /* that median difference (callee's empty window - reference's) */
};

struct loop {
	struct loop_ops ops;
	struct device *dev;
	struct loop_calibration cal;
	bool calibrated;
	/* Where the probes' waits come from (NULL: device_probe_waits on dev); the tests' scripted
	 * processes have no GPU and script one here. */
	int (*probe_waits)(void *ctx, struct device *dev, int n, double *wait_s);
	void *probe_waits_ctx;
	/* loop_answered(): set while a window waits for its answer; the first probe launched then */
	bool armed, probe_launched;
	int probe_rc;
	struct ca_diag probe_d;
};

/* Called by a callee's wait (loop_ops.wait) as soon as the answer has been read, before the
 * process is stopped: launches the window's first probe at once, so that an answer written
 * while the call's GPU work is still running (forged, or from a patched synchronize) finds that
 * work still there (loop_window.gpu_wait_s). Does nothing outside a window. `loop` is a struct
 * loop. */
void loop_answered(void *loop);

struct loop_window {
	double window_s;
	double ev_ms;
	double probe_s;       /* all probes of the window */
	double first_probe_s; /* the first one */
	double answer_s;      /* from the send to the answer */
	int probes;
	bool slow;      /* the first probe found the GPU busy */
	/* The longest a probe of this window waited to start on the GPU's own timer, beyond its
	 * launch (device_probe_waits): the switch back to this context after an idle callee, plus
	 * any work the callee still had running when the probe was launched. NaN when unknown (no
	 * hold, the CPU backend). */
	double gpu_wait_s;
	/* How long, during the window, the callee's main thread and this thread waited runnable
	 * for a CPU (the kernel's schedstat): time a busy host added to the window. NaN unknown. */
	double run_delay_s;
};

/* One call's window: send, wait, probe until quiet. Before calibration a probe is quiet when
 * it returns within LOOP_PROBE_QUIET_MIN_S; the calibration sets the threshold. */
int loop_window(struct loop *L, int input, enum loop_send what, struct loop_window *w,
		struct loop_fail *f);
/* `runs` empty calls (after 3 untimed) on inputs[0]: fills L->cal. With a reference, after
 * LOOP_CALIBRATION_WARM untimed pairs, as many pairs as the offset needs (LOOP_REF_CAL_*; `runs`
 * is then the least). Call before the callee loads anything it does not trust. */
int loop_calibrate(struct loop *L, int runs, struct loop_fail *f);

struct loop_result {
	size_t n;            /* timed calls */
	double *claims_ms;   /* per call: claim - ev0, in [0, window] (the outside bound where
				the claim was unusable) */
	double *outside_ms;  /* per call: window - E0 (with a reference: window - the reference's
				window after it - ref_offset); not floored */
	/* per call: the same less what waiting for a CPU added to the windows (run_delay_s; where
	 * unknown, outside_ms): used only to confirm a hack.timer_tampering accusation, never for
	 * the time (a candidate can make its own main thread wait) */
	double *outside_quiet_ms;
	bool load_waived;    /* claims far below outside_ms, but not below outside_quiet_ms: a busy
				host, not tampering (no accusation; the time is still the bound's) */
	int claims_invalid;  /* claims that were not a number within the window */
	int warmup_calls;
	double warmup_ms;
	double loop_s;       /* timed loop wall time, checks excluded */
	double checks_s;     /* time spent checking */
	const char *stop_reason; /* "converged", "budget", "max_samples" */
	bool budget_exhausted;
	int special_checks, spot_checks, checks_failed;
	int deferred_checks; /* checked calls kept and judged after the loop (keep) */
	int settle_calls;    /* calls run after checks, neither sampled nor checked */
	bool final_done;
	bool paired;         /* outside bounds are paired with reference windows */
	int slow_probes;     /* windows whose first probe found the GPU busy */
	/* timed calls that answered while their GPU work was still running (loop_calibration.
	 * early_s); their claims are not used (the outside bound stands in) */
	int early_calls;
	double early_max_ms; /* the most such a call's probes waited beyond the reference's */
	int sm_clock_before, sm_clock_after; /* -1: unknown */
	struct sample_verdict verdict;
	json_t *checks;      /* [{"call", "kind": special|spot|final, "ok", ...}] */
};

/* The timed loop over `nsets` rotating input sets. Without ops.check there are no checked
 * calls and no final call (baselines). On a failed or wrong call returns a negative code with
 * f filled (hack.inconsistent_output, hack.final_mismatch, the callee's failure codes); r still
 * holds what was measured. secret seeds every random choice. */
int loop_time(struct loop *L, const struct timing_protocol *p, int nsets, uint64_t secret,
	      struct loop_result *r, struct loop_fail *f);
void loop_result_free(struct loop_result *r);

#endif
