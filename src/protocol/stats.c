#include "protocol/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- descriptive statistics ----------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	if (isnan(x) || isnan(y))
		return isnan(x) - isnan(y); /* NaN sorts last */
	return (x > y) - (x < y);
}

void stats_sort(double *x, size_t n)
{
	if (n > 1)
		qsort(x, n, sizeof *x, cmp_double);
}

double stats_quantile_sorted(const double *sorted, size_t n, double q)
{
	double pos, frac;
	size_t lo;
	if (n == 0)
		return NAN;
	if (q <= 0)
		return sorted[0];
	if (q >= 1)
		return sorted[n - 1];
	pos = q * (double)(n - 1);
	lo = (size_t)pos;
	frac = pos - (double)lo;
	return lo + 1 < n ? sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]) : sorted[lo];
}

double stats_median_sorted(const double *sorted, size_t n)
{
	if (n == 0)
		return NAN;
	if (n % 2)
		return sorted[n / 2];
	return 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double stats_stdev(const double *x, size_t n)
{
	double mean = 0.0, m2 = 0.0;
	if (n < 2)
		return 0.0;
	for (size_t i = 0; i < n; i++) {
		double delta = x[i] - mean;
		mean += delta / (double)(i + 1);
		m2 += delta * (x[i] - mean);
	}
	return sqrt(m2 / (double)(n - 1));
}

/* The k-th smallest (from 0) of |x - m| over an ascending array, merging the two sides of m
 * outward from it: O(k). */
static double deviation_kth(const double *s, size_t n, double m, size_t k)
{
	size_t lo = 0, hi = n, left, right;
	double dev = 0.0;
	while (lo < hi) { /* the first element above m */
		size_t mid = lo + (hi - lo) / 2;
		if (s[mid] <= m)
			lo = mid + 1;
		else
			hi = mid;
	}
	left = lo;
	right = lo;
	for (size_t c = 0; c <= k; c++) {
		if (left > 0 && (right >= n || m - s[left - 1] <= s[right] - m))
			dev = m - s[--left];
		else
			dev = s[right++] - m;
	}
	return dev;
}

double stats_sigma_sorted(const double *sorted, size_t n)
{
	double m, mad, sum = 0.0;
	if (n < 2)
		return 0.0;
	m = stats_median_sorted(sorted, n);
	mad = n % 2 ? deviation_kth(sorted, n, m, n / 2)
		    : 0.5 * (deviation_kth(sorted, n, m, n / 2 - 1) +
			     deviation_kth(sorted, n, m, n / 2));
	if (mad > 0.0)
		return STATS_MAD_SIGMA * mad;
	for (size_t i = 0; i < n; i++)
		sum += fabs(sorted[i] - m);
	return STATS_MEDIAN_SE_FACTOR * sum / (double)n;
}

double stats_rse_median(double sigma, size_t n, double median)
{
	if (n < 2 || !(median > 0.0) || isnan(sigma))
		return INFINITY;
	return STATS_MEDIAN_SE_FACTOR * sigma / sqrt((double)n) / median;
}

int stats_summarize(const double *x, size_t n, struct stats_summary *out, struct ca_diag *d)
{
	double *copy;
	double sum = 0.0;

	memset(out, 0, sizeof *out);
	out->n = n;
	if (n == 0) {
		out->median = out->mean = out->stdev = out->min = out->max = NAN;
		out->rse = INFINITY;
		return 0;
	}
	copy = malloc(n * sizeof *copy);
	if (!copy)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory summarizing %zu samples", n);
	memcpy(copy, x, n * sizeof *copy);
	stats_sort(copy, n);
	for (size_t i = 0; i < n; i++)
		sum += x[i];
	out->median = stats_median_sorted(copy, n);
	out->mean = sum / (double)n;
	out->stdev = stats_stdev(x, n);
	out->rse = stats_rse_median(stats_sigma_sorted(copy, n), n, out->median);
	out->min = copy[0];
	out->max = copy[n - 1];
	free(copy);
	return 0;
}

int stats_running_init(struct stats_running *r, size_t cap, struct ca_diag *d)
{
	memset(r, 0, sizeof *r);
	if (cap == 0)
		return ca_fail(d, CA_ERR_INVALID, "stats: capacity must be positive");
	r->sorted = malloc(cap * sizeof *r->sorted);
	if (!r->sorted)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory for %zu samples", cap);
	r->cap = cap;
	return 0;
}

int stats_running_add(struct stats_running *r, double x, struct ca_diag *d)
{
	size_t lo = 0, hi;
	double delta;

	if (r->n >= r->cap)
		return ca_fail(d, CA_ERR_LIMIT, "stats: more than %zu samples", r->cap);
	if (isnan(x))
		return ca_fail(d, CA_ERR_INVALID, "stats: a sample is NaN");
	/* First position whose value is greater than x (stable for equal values). */
	hi = r->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->sorted[mid] <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	memmove(r->sorted + lo + 1, r->sorted + lo, (r->n - lo) * sizeof *r->sorted);
	r->sorted[lo] = x;
	r->n++;
	delta = x - r->mean;
	r->mean += delta / (double)r->n;
	r->m2 += delta * (x - r->mean);
	return 0;
}

double stats_running_median(const struct stats_running *r)
{
	return stats_median_sorted(r->sorted, r->n);
}

double stats_running_stdev(const struct stats_running *r)
{
	if (r->n < 2 || r->m2 <= 0.0)
		return 0.0;
	return sqrt(r->m2 / (double)(r->n - 1));
}

double stats_running_rse(const struct stats_running *r)
{
	return stats_rse_median(stats_sigma_sorted(r->sorted, r->n), r->n, stats_running_median(r));
}

void stats_running_free(struct stats_running *r)
{
	free(r->sorted);
	memset(r, 0, sizeof *r);
}

/* ---- the protocol object ---------------------------------------------------------------------- */

void timing_protocol_defaults(struct timing_protocol *p)
{
	p->version = TIMING_PROTOCOL_VERSION;
	p->warmup_min_calls = 3;
	p->warmup_min_ms = 25.0;
	p->min_samples = 10;
	p->max_samples = 2000;
	p->target_rse = 0.005;
	p->budget_s = 2.0;
	p->l2_flush_factor = 2.0;
	p->perturb_scale = 0.5;
	p->checks = 2;
	p->spot_density = 6.0;
	p->tol_abs_us = 3.0;
	p->tol_rel = 0.03;
	p->hold_us = 100.0;
	p->hold_python_us = 400.0;
	p->settle_calls = 3;
	p->settle_below_ms = 5.0;
	p->settle_ms = 10.0;
	p->defer_checks_mb = 4096.0;
	p->slow_budget_s = 30.0;
}

bool timing_protocol_slow(struct timing_protocol *p, double call_s)
{
	if (p->slow_budget_s <= 0.0 || !(call_s > 0.0) ||
	    (double)(p->warmup_min_calls + p->min_samples + 1) * call_s <= p->slow_budget_s)
		return false;
	double fit = floor(p->slow_budget_s / call_s) - 2.0; /* one warm-up call, the final one */
	int least = p->checks + 1 > 3 ? p->checks + 1 : 3;
	int n = fit > (double)least ? (int)fit : least;
	if (n < p->min_samples)
		p->min_samples = n;
	if (p->max_samples < p->min_samples)
		p->max_samples = p->min_samples;
	p->warmup_min_calls = 1;
	p->warmup_min_ms = 0.0;
	p->settle_calls = 0;
	return true;
}

static int get_int(const json_t *obj, const char *key, int lo, int hi, int *out,
		   struct ca_diag *d)
{
	const json_t *v = json_object_get(obj, key);
	json_int_t x;
	if (!v)
		return 0;
	if (!json_is_integer(v))
		return ca_fail(d, CA_ERR_PARSE, "timing protocol: '%s' must be an integer", key);
	x = json_integer_value(v);
	if (x < lo || x > hi)
		return ca_fail(d, x > hi ? CA_ERR_LIMIT : CA_ERR_INVALID,
			       "timing protocol: '%s' is %lld, outside [%d, %d]", key, (long long)x,
			       lo, hi);
	*out = (int)x;
	return 0;
}

static int get_num(const json_t *obj, const char *key, double lo, double hi, bool lo_open,
		   double *out, struct ca_diag *d)
{
	const json_t *v = json_object_get(obj, key);
	double x;
	if (!v)
		return 0;
	if (!json_is_number(v))
		return ca_fail(d, CA_ERR_PARSE, "timing protocol: '%s' must be a number", key);
	x = json_number_value(v);
	if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
		return ca_fail(d, x > hi ? CA_ERR_LIMIT : CA_ERR_INVALID,
			       "timing protocol: '%s' is %g, outside %s%g, %g]", key, x,
			       lo_open ? "(" : "[", lo, hi);
	*out = x;
	return 0;
}

int timing_protocol_from_json(struct timing_protocol *p, const json_t *obj, struct ca_diag *d)
{
	int rc;

	timing_protocol_defaults(p);
	if (!json_is_object(obj))
		return ca_fail(d, CA_ERR_PARSE, "timing protocol: expected an object");
	if ((rc = get_int(obj, "version", 0, 1000, &p->version, d)))
		return rc;
	if (p->version != TIMING_PROTOCOL_VERSION)
		return ca_fail(d, CA_ERR_INVALID,
			       "timing protocol: version %d is not supported (this build speaks %d)",
			       p->version, TIMING_PROTOCOL_VERSION);
	if ((rc = get_int(obj, "warmup_min_calls", 0, TIMING_MAX_WARMUP_CALLS,
			  &p->warmup_min_calls, d)) ||
	    (rc = get_num(obj, "warmup_min_ms", 0.0, TIMING_MAX_WARMUP_MS, false, &p->warmup_min_ms,
			  d)) ||
	    (rc = get_int(obj, "min_samples", 1, TIMING_MAX_SAMPLES, &p->min_samples, d)) ||
	    (rc = get_int(obj, "max_samples", 1, TIMING_MAX_SAMPLES, &p->max_samples, d)) ||
	    (rc = get_num(obj, "target_rse", 0.0, 1.0, false, &p->target_rse, d)) ||
	    (rc = get_num(obj, "budget_s", 0.0, TIMING_MAX_BUDGET_S, true, &p->budget_s, d)) ||
	    (rc = get_num(obj, "l2_flush_factor", 0.0, TIMING_MAX_FLUSH_FACTOR, false,
			  &p->l2_flush_factor, d)) ||
	    (rc = get_num(obj, "perturb_scale", 0.0, TIMING_MAX_PERTURB_SCALE, false,
			  &p->perturb_scale, d)) ||
	    (rc = get_int(obj, "checks", 0, TIMING_MAX_CHECKS, &p->checks, d)) ||
	    (rc = get_num(obj, "spot_density", 0.0, TIMING_MAX_SPOT_DENSITY, false,
			  &p->spot_density, d)) ||
	    (rc = get_num(obj, "tol_abs_us", 0.0, TIMING_MAX_TOL_ABS_US, false, &p->tol_abs_us,
			  d)) ||
	    (rc = get_num(obj, "tol_rel", 0.0, TIMING_MAX_TOL_REL, false, &p->tol_rel, d)) ||
	    (rc = get_num(obj, "hold_us", 0.0, TIMING_MAX_HOLD_US, false, &p->hold_us, d)) ||
	    (rc = get_num(obj, "hold_python_us", 0.0, TIMING_MAX_HOLD_US, false,
			  &p->hold_python_us, d)) ||
	    (rc = get_int(obj, "settle_calls", 0, TIMING_MAX_SETTLE_CALLS, &p->settle_calls, d)) ||
	    (rc = get_num(obj, "settle_below_ms", 0.0, TIMING_MAX_SETTLE_BELOW_MS, true,
			  &p->settle_below_ms, d)) ||
	    (rc = get_num(obj, "settle_ms", 0.0, TIMING_MAX_SETTLE_MS, false, &p->settle_ms, d)) ||
	    (rc = get_num(obj, "defer_checks_mb", 0.0, TIMING_MAX_DEFER_CHECKS_MB, false,
			  &p->defer_checks_mb, d)) ||
	    (rc = get_num(obj, "slow_budget_s", 0.0, TIMING_MAX_SLOW_BUDGET_S, false,
			  &p->slow_budget_s, d)))
		return rc;
	if (p->min_samples > p->max_samples)
		return ca_fail(d, CA_ERR_INVALID,
			       "timing protocol: min_samples (%d) exceeds max_samples (%d)",
			       p->min_samples, p->max_samples);
	if (p->checks > p->min_samples)
		return ca_fail(d, CA_ERR_INVALID,
			       "timing protocol: %d checks cannot be distinct calls among the first "
			       "min_samples (%d)",
			       p->checks, p->min_samples);
	return 0;
}

json_t *timing_protocol_to_json(const struct timing_protocol *p)
{
	return json_pack("{s:i, s:i, s:f, s:i, s:i, s:f, s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:f, "
			 "s:f, s:i, s:f, s:f, s:f, s:f}",
			 "version", p->version, "warmup_min_calls", p->warmup_min_calls,
			 "warmup_min_ms", p->warmup_min_ms, "min_samples", p->min_samples,
			 "max_samples", p->max_samples, "target_rse", p->target_rse, "budget_s",
			 p->budget_s, "l2_flush_factor", p->l2_flush_factor, "perturb_scale",
			 p->perturb_scale, "checks", p->checks, "spot_density", p->spot_density,
			 "tol_abs_us", p->tol_abs_us, "tol_rel", p->tol_rel, "hold_us", p->hold_us,
			 "hold_python_us", p->hold_python_us, "settle_calls", p->settle_calls,
			 "settle_below_ms", p->settle_below_ms, "settle_ms", p->settle_ms,
			 "defer_checks_mb", p->defer_checks_mb, "slow_budget_s", p->slow_budget_s);
}

/* ---- the stopping rule ------------------------------------------------------------------------- */

enum timing_stop timing_protocol_stop(const struct timing_protocol *p, size_t n, double rse,
				      double loop_s, bool checks_pending)
{
	if (n >= (size_t)p->max_samples)
		return TIMING_STOP_MAX_SAMPLES;
	if (checks_pending)
		return TIMING_CONTINUE;
	if (n < (size_t)p->min_samples)
		return TIMING_CONTINUE;
	if (rse < p->target_rse)
		return TIMING_STOP_CONVERGED;
	if (loop_s >= p->budget_s)
		return TIMING_STOP_BUDGET;
	return TIMING_CONTINUE;
}

/* ---- seeded randomness ------------------------------------------------------------------------- */

void stats_rng_seed(struct stats_rng *r, uint64_t seed)
{
	r->state = seed;
}

uint64_t stats_rng_next(struct stats_rng *r)
{
	uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double stats_rng_uniform(struct stats_rng *r)
{
	return (double)(stats_rng_next(r) >> 11) * 0x1.0p-53;
}

double stats_rng_signed_nonzero(struct stats_rng *r)
{
	for (;;) {
		/* 2^53 + 1 equally likely values -2^52/2^52 .. 2^52/2^52, zero rejected. */
		uint64_t k = stats_rng_below(r, (1ull << 53) + 1);
		double u = ((double)k - 0x1.0p52) * 0x1.0p-52;
		if (u != 0.0)
			return u;
	}
}

uint64_t stats_rng_below(struct stats_rng *r, uint64_t n)
{
	/* Rejection: accept x below the largest multiple of n. */
	uint64_t limit, x;
	if (n <= 1)
		return 0;
	limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
	do
		x = stats_rng_next(r);
	while (x > limit);
	return x % n;
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return (x > y) - (x < y);
}

int stats_choose_distinct(struct stats_rng *r, size_t n, size_t k, size_t *out,
			  struct ca_diag *d)
{
	if (k > n)
		return ca_fail(d, CA_ERR_INVALID, "cannot choose %zu distinct indices among %zu", k,
			       n);
	if (k > TIMING_MAX_CHECKS || n > TIMING_MAX_SAMPLES)
		return ca_fail(d, CA_ERR_LIMIT, "cannot choose %zu of %zu indices: over the caps",
			       k, n);
	/* Floyd's algorithm: every k-subset equally likely, no allocation. */
	for (size_t j = n - k, m = 0; j < n; j++, m++) {
		size_t t = (size_t)stats_rng_below(r, (uint64_t)j + 1);
		bool seen = false;
		for (size_t i = 0; i < m; i++)
			if (out[i] == t) {
				seen = true;
				break;
			}
		out[m] = seen ? j : t;
	}
	if (k > 1)
		qsort(out, k, sizeof *out, cmp_size);
	return 0;
}
