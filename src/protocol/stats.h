/* stats: the arithmetic of the shared timing protocol (docs/protocol.md, "Shared timing
 * protocol"): median, standard deviation, relative standard error of the median, the stopping
 * rule, the protocol object itself, and the seeded random choices (perturbation factors, checked
 * call indices). Pure C, no CUDA: the GPU worker, the supervisor and the unit tests share it.
 *
 * Ownership: functions that sort take a caller buffer or allocate a private copy and free it;
 * struct stats_running owns its sample array (stats_running_free). Nothing here keeps global
 * state; the RNG is a caller-owned value. */
#ifndef CA_PROTOCOL_STATS_H
#define CA_PROTOCOL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/diag.h"

/* sqrt(pi / 2): the standard error of the median of normal samples relative to the mean's. */
#define STATS_MEDIAN_SE_FACTOR 1.2533
/* 1 / Phi^-1(3/4): the standard deviation of normal samples relative to their median absolute
 * deviation. */
#define STATS_MAD_SIGMA 1.4826

/* ---- descriptive statistics ----------------------------------------------------------------- */

/* Sorts x ascending in place (NaN last). */
void stats_sort(double *x, size_t n);
/* Median of an ascending array; NAN when n == 0. */
double stats_median_sorted(const double *sorted, size_t n);
/* The q-quantile of an ascending array (linear interpolation, q in [0, 1]); NAN when n == 0. */
double stats_quantile_sorted(const double *sorted, size_t n, double q);
/* Sample standard deviation (n - 1 in the denominator); 0 when n < 2. */
double stats_stdev(const double *x, size_t n);
/* A robust standard deviation of an ascending array: 1.4826 * its median absolute deviation
 * from the median, or, when more than half the samples are equal (MAD 0: times quantized by the
 * event clock), 1.2533 * their mean absolute deviation from the median. Both estimate sigma for
 * normal samples; unlike the sample standard deviation, neither is driven by a few outliers
 * (docs/protocol.md, "Stopping"). 0 when n < 2. */
double stats_sigma_sorted(const double *sorted, size_t n);
/* Relative standard error of the median: 1.2533 * sigma / sqrt(n) / median, with sigma
 * stats_sigma_sorted's; INFINITY when undefined (n < 2, or median <= 0). */
double stats_rse_median(double sigma, size_t n, double median);

struct stats_summary {
	size_t n;
	double median, mean, stdev, rse, min, max;
};

/* Summarizes n samples (x is not modified; a sorted copy is made). n == 0 gives n = 0 and NAN
 * fields with rse INFINITY. Returns 0 or CA_ERR_NOMEM. */
int stats_summarize(const double *x, size_t n, struct stats_summary *out, struct ca_diag *d);

/* Samples kept sorted as they arrive (O(n) insertion, O(1) median, O(n) robust sigma) with
 * Welford's running mean and variance, so the stopping rule costs microseconds per timed call.
 * Capacity is fixed at init; adding past it is CA_ERR_LIMIT. */
struct stats_running {
	double *sorted;
	size_t n, cap;
	double mean, m2;
};

int stats_running_init(struct stats_running *r, size_t cap, struct ca_diag *d);
int stats_running_add(struct stats_running *r, double x, struct ca_diag *d);
double stats_running_median(const struct stats_running *r);
double stats_running_stdev(const struct stats_running *r);
double stats_running_rse(const struct stats_running *r);
void stats_running_free(struct stats_running *r);

/* ---- the protocol object ---------------------------------------------------------------------- */

#define TIMING_PROTOCOL_VERSION 9 /* 5: the median's standard error from robust sigma; 6: three
				   * settling calls after each checked call shorter
				   * than settle_below_ms; 7: checks kept for after
				   * the loop (defer_checks_mb), settling after the
				   * others for settle_ms (10), at most three; 8: the
				   * first probe launched when the answer arrives
				   * (early answers), input sets varied beyond the
				   * generator's distribution (the bridge's vary.py);
				   * 9: a candidate held to the outside bound is
				   * charged the outside time itself (no tolerance),
				   * varied sets add noise and a comb, slow but
				   * correct kernels timed within slow_budget_s */
#define TIMING_MAX_SAMPLES 100000
#define TIMING_MAX_CHECKS 1000
#define TIMING_MAX_WARMUP_CALLS 100000
#define TIMING_MAX_WARMUP_MS 600000.0
#define TIMING_MAX_BUDGET_S 3600.0
#define TIMING_MAX_FLUSH_FACTOR 64.0
#define TIMING_MAX_PERTURB_SCALE 0.5
#define TIMING_MAX_SPOT_DENSITY 1000.0
#define TIMING_MAX_TOL_ABS_US 1000.0
#define TIMING_MAX_TOL_REL 0.5
#define TIMING_MAX_HOLD_US 100000.0
#define TIMING_MAX_SETTLE_CALLS 16
#define TIMING_MAX_SETTLE_BELOW_MS 600000.0
#define TIMING_MAX_SETTLE_MS 1000.0
#define TIMING_MAX_DEFER_CHECKS_MB 65536.0
#define TIMING_MAX_SLOW_BUDGET_S 3600.0

struct timing_protocol {
	int version;
	int warmup_min_calls;
	double warmup_min_ms;
	int min_samples;
	int max_samples;
	double target_rse;
	double budget_s;
	double l2_flush_factor;
	double perturb_scale; /* the fraction of a set's float elements halved in each of its states
				 (device/prep.h), in (0, 0.5]; 0 turns perturbation off */
	int checks;          /* special checked calls (fresh, near-duplicates) among min_samples */
	double spot_density; /* timed call i is checked with probability min(1, this / (i + 1)) */
	double tol_abs_us;   /* claims may be below the outside bound by max(tol_abs_us, tol_rel *  */
	double tol_rel;      /* outside) + 2 se (protocol/sample.h; docs/protocol.md "The sample") */
	/* The hold (docs/protocol.md): the supervisor keeps the GPU busy this long at the start
	 * of every window, so that the callee's wake-up and launches happen while it waits and its
	 * events time the device work alone. hold_us for the native worker, hold_python_us for
	 * Python callees (the PyTorch runner, the bridge's baselines): at least the host time from
	 * the command to the call's last launch. */
	double hold_us;
	double hold_python_us;
	/* After each checked timed call (not the final one), up to this many calls driven exactly
	 * like timed ones (the call's window, then the reference's) that are neither sampled nor
	 * checked (docs/protocol.md, "After a checked call"). Default 3; 0: none. */
	int settle_calls;
	/* Protocol 6's rule, used only when settle_ms is 0: settle_calls calls after each checked
	 * call whose window was shorter than this (default 5), a threshold set when the excess was
	 * taken for a constant ~27 us; it is ~15 % of the kernel for ~8 ms after the check. */
	double settle_below_ms;
	/* When > 0 (default 10): settling follows every checked timed call whatever its window,
	 * and stops once this many milliseconds have passed since the first settling call began:
	 * at least one call, at most settle_calls. */
	double settle_ms;
	/* When > 0 (default 4096): a checked timed call's outputs and inputs are copied at once,
	 * on the GPU, into a buffer of the supervisor's of at most this many MiB, and judged after
	 * the timed loop, so that no check pauses the loop (and no settling follows it); a checked
	 * call that does not fit is judged at once, as with 0 (docs/protocol.md, "Kept checks"). */
	double defer_checks_mb;
	/* Slow but correct (issue 46): when a verification call took call_s and the warm-up,
	 * min_samples and the final call would take longer than this many seconds, the loop
	 * warms up with one call and takes as many samples as fit (at least checks + 1, at least
	 * 3), with no settling (timing_protocol_slow). Default 30; 0: never. */
	double slow_budget_s;
};

/* The defaults of docs/protocol.md: 3 calls / 25 ms warm-up, 10..2000 samples, RSE 0.5%, 2 s,
 * flush 2x L2, perturbation 0.5, 2 special checks, spot density 6, tolerance 3 us / 3%, holds
 * of 100 us (native) and 400 us (Python), checked calls kept for after the loop in up to
 * 4096 MiB, and for checks made at once, settling calls after them for 10 ms (1 to 3). */
void timing_protocol_defaults(struct timing_protocol *p);
/* Parses the protocol object. Absent keys keep their defaults; unknown keys are ignored; present
 * keys must have the right type and lie in range (caps above, min_samples <= max_samples,
 * checks <= min_samples); version must be TIMING_PROTOCOL_VERSION. CA_ERR_PARSE / CA_ERR_INVALID / CA_ERR_LIMIT. */
int timing_protocol_from_json(struct timing_protocol *p, const json_t *obj, struct ca_diag *d);
json_t *timing_protocol_to_json(const struct timing_protocol *p);

/* The protocol for a candidate whose calls take call_s (the slowest verification call): p
 * unchanged (false) while one warm-up plus min_samples plus the final call fit slow_budget_s,
 * else fewer samples (true): min_samples the calls that fit, at least max(3, checks + 1) and at
 * most as before; one warm-up call; no settling calls. */
bool timing_protocol_slow(struct timing_protocol *p, double call_s);

/* ---- the stopping rule ------------------------------------------------------------------------- */

enum timing_stop {
	TIMING_CONTINUE = 0,
	TIMING_STOP_CONVERGED,   /* >= min_samples and rse < target_rse */
	TIMING_STOP_BUDGET,      /* budget_s of loop wall time spent (budget_exhausted) */
	TIMING_STOP_MAX_SAMPLES, /* max_samples taken (budget_exhausted) */
};

/* Decides after n samples, the current rse and loop_s seconds of timed-loop wall time (checks
 * excluded). Never stops before min_samples calls, nor while a special checked call is pending
 * (checks_pending: a slow candidate cannot dodge a check by exhausting the budget); then stops
 * when converged, or when the budget is spent; max_samples always stops. */
enum timing_stop timing_protocol_stop(const struct timing_protocol *p, size_t n, double rse,
				      double loop_s, bool checks_pending);

/* ---- seeded randomness ------------------------------------------------------------------------- */

/* splitmix64: small, fast, and identical everywhere for a given seed. */
struct stats_rng {
	uint64_t state;
};

void stats_rng_seed(struct stats_rng *r, uint64_t seed);
uint64_t stats_rng_next(struct stats_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double stats_rng_uniform(struct stats_rng *r);
/* Uniform in [-1, 1], never 0: the perturbation draw of the protocol. */
double stats_rng_signed_nonzero(struct stats_rng *r);
/* Uniform integer in [0, n) without modulo bias; n > 0. */
uint64_t stats_rng_below(struct stats_rng *r, uint64_t n);

/* Chooses k distinct indices uniformly from [0, n) and writes them ascending into out[k].
 * k <= n <= TIMING_MAX_SAMPLES. Returns 0, CA_ERR_INVALID or CA_ERR_NOMEM. */
int stats_choose_distinct(struct stats_rng *r, size_t n, size_t k, size_t *out,
			  struct ca_diag *d);

#endif
