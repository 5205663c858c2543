/* sample: how a timing's median is decided (docs/protocol.md, "The sample").
 *
 * Each timed call gives two numbers: the callee's claim (its CUDA-event time less the event
 * overhead calibrated before any candidate code was loaded) and the outside bound (the
 * supervisor's window less the window calibrated the same way). Claims are precise but come
 * from a process the candidate owns; the outside bound is measured where the candidate cannot
 * reach but spans two processes and a GPU context switch, so it is noisy call by call, and a
 * busy host (CPU contention delays the wake-ups) only ever makes it larger. Its statistic is
 * therefore a low quantile, SAMPLE_OUTSIDE_Q, robust to delays that hit some calls. The median
 * is
 *
 *     max(median(claims), q(outside) - tol),  tol = max(tol_abs, tol_rel * q(outside))
 *
 * so honest claims decide wherever they agree with the outside clock, and a candidate that
 * understates its time gains at most tol (plus how far the quantile sits below the median of
 * its true times: nothing for a steady kernel). A claimed median below SAMPLE_GROSS_FRACTION of
 * the bound, by more than SAMPLE_GROSS_MS, is tampering: no honest call claims a fraction of what
 * the outside clock saw (the bound already discounts the fixed cost of observing a call).
 *
 * Pure arithmetic, no state. */
#ifndef CA_PROTOCOL_SAMPLE_H
#define CA_PROTOCOL_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/diag.h"

#define SAMPLE_OUTSIDE_Q      0.25
#define SAMPLE_GROSS_FRACTION 0.25
#define SAMPLE_GROSS_MS       0.100

struct sample_verdict {
	double median_ms;         /* what the reward uses */
	double claims_median_ms;  /* median of the claims */
	double outside_ms;        /* SAMPLE_OUTSIDE_Q quantile of the outside bounds */
	double outside_median_ms; /* their median (reported) */
	double tol_ms;
	double rse;               /* of the side that decided (INFINITY when undefined) */
	bool outside_bound;       /* the outside bound decided */
	bool tampering;           /* claims grossly below the bound */
	double gap_ms;            /* q(outside) - tol - median(claims), when positive */
};

/* n >= 1 samples of each. CA_ERR_NOMEM, CA_ERR_INVALID (n == 0). */
int sample_decide(const double *claims_ms, const double *outside_ms, size_t n, double tol_abs_ms,
		  double tol_rel, struct sample_verdict *v, struct ca_diag *d);

#endif
