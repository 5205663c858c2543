/* sample: how a timing's median is decided (docs/protocol.md, "The sample").
 *
 * Each timed call gives two numbers: the callee's claim (its CUDA-event time less the event
 * overhead calibrated before any candidate code was loaded) and the outside bound, measured on
 * the supervisor's clock where the candidate cannot reach. Claims are precise but come from a
 * process the candidate owns. The outside bound spans two processes, their wake-ups and two GPU
 * context switches: a few hundred microseconds of fixed cost that drifts by tens of
 * microseconds within a second on a busy or virtualized host. How that cost is taken out:
 *
 *   SAMPLE_PAIRED: every call's window less the window of an empty call to a reference process
 *     (a twin of the callee's process that runs no candidate code) made right after it, less
 *     their offset calibrated before any candidate code was loaded. Drift cancels pair by pair;
 *     what is left is symmetric noise, so the statistic is the median of the pairs, with its
 *     standard error se (from the MAD) added to the tolerance, together with the standard
 *     error of the offset itself (se_offset: the calibration's pairs are as noisy as the timed
 *     loop's, and its error is shared by every pair, so no number of timed calls averages it
 *     away; measured on the H200 with 31 calibration pairs, it moved honest kernels' bounds by
 *     -25..+52 us from one evaluation to the next).
 *   SAMPLE_CALIBRATED: every window less the median empty window of the calibration (no
 *     reference process: the CPU backend, scripted tests). Delays only add, so the statistic
 *     is a low quantile, SAMPLE_OUTSIDE_Q.
 *
 * The median is
 *
 *     max(median(claims), stat(outside) - tol),
 *     tol = max(tol_abs, tol_rel * stat) + 2 sqrt(se^2 + se_offset^2)
 *
 * so honest claims decide wherever they agree with the outside clock, and a candidate that
 * understates its time gains at most tol. A claimed median below SAMPLE_GROSS_FRACTION of the
 * bound, by more than SAMPLE_GROSS_MS, is tampering: no honest call claims a fraction of what the
 * outside clock saw. A trusted callee (the bridge timing a baseline) is decided by its claims.
 *
 * Pure arithmetic, no state. */
#ifndef CA_PROTOCOL_SAMPLE_H
#define CA_PROTOCOL_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/diag.h"

#define SAMPLE_OUTSIDE_Q      0.25
#define SAMPLE_GROSS_FRACTION 0.25
/* Honest calls spend host time the events do not see (a pool release of cudaFreeAsync: +0.10 ms
 * per call on the H200), which the bound charges but is no tampering. */
#define SAMPLE_GROSS_MS       0.500

enum sample_mode { SAMPLE_CALIBRATED, SAMPLE_PAIRED };

struct sample_verdict {
	double median_ms;         /* what the reward uses */
	double claims_median_ms;  /* median of the claims */
	double outside_ms;        /* the outside statistic (paired: the median; calibrated: the
				     SAMPLE_OUTSIDE_Q quantile) */
	double outside_median_ms; /* their median (reported) */
	double outside_se_ms;     /* paired: the median's standard error (0 otherwise) */
	double offset_se_ms;      /* paired: the calibrated offset's standard error (as given) */
	double tol_ms;
	double rse;               /* of the side that decided (INFINITY when undefined) */
	bool outside_bound;       /* the outside bound decided */
	bool tampering;           /* claims grossly below the bound */
	double gap_ms;            /* q(outside) - tol - median(claims), when positive */
};

/* n >= 1 samples of each; offset_se_ms: the standard error of the offset taken out of every
 * paired outside bound (0 when calibrated). CA_ERR_NOMEM, CA_ERR_INVALID (n == 0). */
int sample_decide(const double *claims_ms, const double *outside_ms, size_t n, double tol_abs_ms,
		  double tol_rel, double offset_se_ms, enum sample_mode mode, bool trusted,
		  struct sample_verdict *v, struct ca_diag *d);
/* The standard error of the median of x[0..n) (1.2533 * stats_sigma_sorted / sqrt(n): 1.4826 *
 * MAD in the robust sigma); scratch holds n doubles. 0 for n < 2. */
double sample_median_se(const double *x, size_t n, double *scratch);

#endif
