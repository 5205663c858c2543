#include "protocol/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/stats.h"

double sample_median_se(const double *x, size_t n, double *scratch)
{
	if (n < 2)
		return 0.0;
	memcpy(scratch, x, n * sizeof *scratch);
	stats_sort(scratch, n);
	return STATS_MEDIAN_SE_FACTOR * stats_sigma_sorted(scratch, n) / sqrt((double)n);
}

int sample_decide(const double *claims_ms, const double *outside_ms, size_t n, double tol_abs_ms,
		  double tol_rel, double offset_se_ms, enum sample_mode mode, bool trusted,
		  struct sample_verdict *v, struct ca_diag *d)
{
	struct stats_summary c, o;
	double floor_ms, *sorted;
	int rc;

	memset(v, 0, sizeof *v);
	v->rse = INFINITY;
	if (n == 0)
		return ca_fail(d, CA_ERR_INVALID, "no timed calls to decide from");
	if ((rc = stats_summarize(claims_ms, n, &c, d)) ||
	    (rc = stats_summarize(outside_ms, n, &o, d)))
		return rc;
	if (!(sorted = malloc(n * sizeof *sorted)))
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	if (mode == SAMPLE_PAIRED) {
		v->outside_ms = o.median;
		v->outside_se_ms = sample_median_se(outside_ms, n, sorted);
		v->offset_se_ms = fmax(offset_se_ms, 0.0);
	} else {
		memcpy(sorted, outside_ms, n * sizeof *sorted);
		stats_sort(sorted, n);
		v->outside_ms = stats_quantile_sorted(sorted, n, SAMPLE_OUTSIDE_Q);
	}
	free(sorted);
	v->claims_median_ms = c.median;
	v->outside_median_ms = o.median;
	v->tol_ms = fmax(tol_abs_ms, tol_rel * fmax(v->outside_ms, 0.0)) +
		    2.0 * hypot(v->outside_se_ms, v->offset_se_ms);
	floor_ms = fmax(v->outside_ms - v->tol_ms, 0.0);
	if (trusted || c.median >= floor_ms) {
		v->median_ms = c.median;
		v->rse = c.rse;
		return 0;
	}
	/* claims not believed: charged the supervisor's own measure, not the floor (the
	 * tolerance is for claims that agree with it; at 64 us it was 7 %, enough for a liar to
	 * pass a reward threshold its honest twin missed: got_event_elapsed_only, H100) */
	v->median_ms = v->outside_ms;
	v->rse = o.rse;
	v->outside_bound = true;
	v->gap_ms = floor_ms - c.median;
	v->tampering = c.median < SAMPLE_GROSS_FRACTION * floor_ms && v->gap_ms > SAMPLE_GROSS_MS;
	return 0;
}
