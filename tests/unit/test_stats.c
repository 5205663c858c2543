/* Unit tests for src/eval/stats: statistics, the protocol object, the stopping rule and the
 * seeded choices of the shared timing protocol. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/stats.h"

/* cmocka 1.1 has no double comparison (assert_float_equal rounds to float). */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

static void test_median(void **state)
{
	(void)state;
	double odd[] = {1.0, 2.0, 3.0, 4.0, 100.0};
	double even[] = {1.0, 2.0, 3.0, 10.0};
	double one[] = {7.5};
	assert_true(stats_median_sorted(odd, 5) == 3.0);
	assert_true(stats_median_sorted(even, 4) == 2.5);
	assert_true(stats_median_sorted(one, 1) == 7.5);
	assert_true(isnan(stats_median_sorted(odd, 0)));
}

static void test_sort(void **state)
{
	(void)state;
	double x[] = {3.0, NAN, -1.0, 2.0, 2.0, 0.0};
	stats_sort(x, 6);
	assert_true(x[0] == -1.0);
	assert_true(x[1] == 0.0);
	assert_true(x[2] == 2.0 && x[3] == 2.0);
	assert_true(x[4] == 3.0);
	assert_true(isnan(x[5]));
}

static void test_stdev_and_rse(void **state)
{
	(void)state;
	double x[] = {2, 4, 4, 4, 5, 5, 7, 9};
	double sd = stats_stdev(x, 8);
	assert_near(sd, sqrt(32.0 / 7.0), 1e-12);
	assert_true(stats_stdev(x, 1) == 0.0);
	assert_true(stats_stdev(x, 0) == 0.0);

	assert_near(stats_rse_median(2.0, 16, 4.0), 1.2533 * 2.0 / 4.0 / 4.0, 1e-15);
	assert_true(stats_rse_median(0.0, 5, 2.0) == 0.0);  /* all equal: converged */
	assert_true(isinf(stats_rse_median(0.0, 5, 0.0)));  /* zero median: undefined */
	assert_true(isinf(stats_rse_median(1.0, 5, -1.0)));
	assert_true(isinf(stats_rse_median(0.0, 1, 1.0)));  /* one sample: undefined */
	assert_true(isinf(stats_rse_median(0.0, 0, 1.0)));
}

static void test_summarize(void **state)
{
	(void)state;
	double x[] = {5.0, 1.0, 3.0, 2.0, 4.0};
	double keep[5];
	struct stats_summary s;
	struct ca_diag d;

	memcpy(keep, x, sizeof x);
	assert_int_equal(stats_summarize(x, 5, &s, &d), 0);
	assert_memory_equal(x, keep, sizeof x); /* input untouched */
	assert_int_equal(s.n, 5);
	assert_true(s.median == 3.0);
	assert_true(s.mean == 3.0);
	assert_true(s.min == 1.0 && s.max == 5.0);
	assert_near(s.stdev, sqrt(2.5), 1e-12);
	/* deviations from 3: 2 1 0 1 2, MAD 1 */
	assert_near(s.rse, 1.2533 * 1.4826 / sqrt(5.0) / 3.0, 1e-12);

	assert_int_equal(stats_summarize(x, 0, &s, &d), 0);
	assert_int_equal(s.n, 0);
	assert_true(isnan(s.median));
	assert_true(isinf(s.rse));
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void test_running_matches_batch(void **state)
{
	(void)state;
	enum { N = 501 };
	double x[N], sorted[N];
	struct stats_running r;
	struct stats_rng rng;
	struct ca_diag d;

	stats_rng_seed(&rng, 42);
	assert_int_equal(stats_running_init(&r, N, &d), 0);
	for (int i = 0; i < N; i++) {
		/* duplicates on purpose: quantized values */
		x[i] = 1.0 + floor(stats_rng_uniform(&rng) * 50.0) / 10.0;
		assert_int_equal(stats_running_add(&r, x[i], &d), 0);
		if (i == 0)
			assert_true(isinf(stats_running_rse(&r)));
	}
	memcpy(sorted, x, sizeof x);
	qsort(sorted, N, sizeof *sorted, cmp_d);
	assert_int_equal(r.n, N);
	assert_memory_equal(r.sorted, sorted, sizeof sorted);
	assert_true(stats_running_median(&r) == sorted[N / 2]);
	assert_near(stats_running_stdev(&r), stats_stdev(x, N), 1e-9);
	{ /* the MAD by brute force: the median of the sorted deviations */
		double dev[N], med = sorted[N / 2];
		for (int i = 0; i < N; i++)
			dev[i] = fabs(x[i] - med);
		qsort(dev, N, sizeof *dev, cmp_d);
		assert_true(dev[N / 2] > 0.0);
		assert_near(stats_running_rse(&r), 1.2533 * 1.4826 * dev[N / 2] / sqrt((double)N) / med,
			    1e-9);
	}

	/* full: further samples are refused, not dropped silently */
	assert_int_equal(stats_running_add(&r, 1.0, &d), CA_ERR_LIMIT);
	assert_int_equal(r.n, N);
	stats_running_free(&r);
	assert_null(r.sorted);
}

/* The robust sigma: the MAD of even and odd counts; a few outliers barely move it (they would
 * multiply the standard deviation); more than half equal: the mean absolute deviation. */
static void test_sigma_robust(void **state)
{
	(void)state;
	enum { N = 200 };
	double even[] = {1.0, 2.0, 3.0, 4.0}; /* median 2.5, deviations 1.5 .5 .5 1.5: MAD 1 */
	double odd[] = {1.0, 1.0, 2.0, 7.0, 9.0}; /* median 2, deviations 1 1 0 5 7: MAD 1 */
	double x[N], sorted[N], q[] = {5.0, 5.0, 5.0, 5.0, 6.0, 7.0}; /* MAD 0 */
	struct stats_rng rng;
	struct stats_summary clean, dirty;
	struct ca_diag d;

	assert_near(stats_sigma_sorted(even, 4), 1.4826, 1e-12);
	assert_near(stats_sigma_sorted(odd, 5), 1.4826, 1e-12);
	assert_true(stats_sigma_sorted(odd, 1) == 0.0);
	assert_near(stats_sigma_sorted(q, 6), 1.2533 * 3.0 / 6.0, 1e-12);
	stats_rng_seed(&rng, 7);
	for (int i = 0; i < N; i++)
		x[i] = 1.0 + 0.01 * (stats_rng_uniform(&rng) - 0.5);
	assert_int_equal(stats_summarize(x, N, &clean, &d), 0);
	for (int i = 0; i < N; i += 40)
		x[i] = 10.0; /* 5 calls that another process held up */
	assert_int_equal(stats_summarize(x, N, &dirty, &d), 0);
	assert_true(dirty.rse < 1.1 * clean.rse);
	assert_true(dirty.rse < 0.005); /* converged by the default rule */
	assert_true(dirty.stdev > 100.0 * clean.stdev);
	memcpy(sorted, x, sizeof x);
	qsort(sorted, N, sizeof *sorted, cmp_d);
	assert_near(stats_sigma_sorted(sorted, N) / sqrt((double)N) * 1.2533 / dirty.median,
		    dirty.rse, 1e-12);
}

static void test_running_rejects_nan(void **state)
{
	(void)state;
	struct stats_running r;
	struct ca_diag d;
	assert_int_equal(stats_running_init(&r, 4, &d), 0);
	assert_int_equal(stats_running_add(&r, NAN, &d), CA_ERR_INVALID);
	assert_int_equal(r.n, 0);
	assert_int_equal(stats_running_add(&r, 2.0, &d), 0);
	assert_int_equal(stats_running_add(&r, 4.0, &d), 0);
	assert_true(stats_running_median(&r) == 3.0);
	stats_running_free(&r);
	assert_int_equal(stats_running_init(&r, 0, &d), CA_ERR_INVALID);
}

static int parse(const char *text, struct timing_protocol *p, struct ca_diag *d)
{
	json_error_t err;
	json_t *obj = json_loads(text, 0, &err);
	int rc;
	assert_non_null(obj);
	rc = timing_protocol_from_json(p, obj, d);
	json_decref(obj);
	return rc;
}

static void assert_protocol_equal(const struct timing_protocol *a, const struct timing_protocol *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->warmup_min_calls, b->warmup_min_calls);
	assert_true(a->warmup_min_ms == b->warmup_min_ms);
	assert_int_equal(a->min_samples, b->min_samples);
	assert_int_equal(a->max_samples, b->max_samples);
	assert_true(a->target_rse == b->target_rse);
	assert_true(a->budget_s == b->budget_s);
	assert_true(a->l2_flush_factor == b->l2_flush_factor);
	assert_true(a->perturb_scale == b->perturb_scale);
	assert_int_equal(a->checks, b->checks);
	assert_true(a->spot_density == b->spot_density);
	assert_true(a->tol_abs_us == b->tol_abs_us);
	assert_true(a->tol_rel == b->tol_rel);
	assert_true(a->hold_us == b->hold_us);
	assert_true(a->hold_python_us == b->hold_python_us);
	assert_int_equal(a->settle_calls, b->settle_calls);
	assert_true(a->settle_below_ms == b->settle_below_ms);
	assert_true(a->settle_ms == b->settle_ms);
	assert_true(a->defer_checks_mb == b->defer_checks_mb);
	assert_true(a->slow_budget_s == b->slow_budget_s);
}

static void test_protocol_parse(void **state)
{
	(void)state;
	struct timing_protocol p, def;
	struct ca_diag d;

	assert_int_equal(parse("{\"version\": 9, \"warmup_min_calls\": 5, \"warmup_min_ms\": 30,"
			       " \"min_samples\": 20, \"max_samples\": 500, \"target_rse\": 0.01,"
			       " \"budget_s\": 1.5, \"l2_flush_factor\": 3, \"perturb_scale\": 0.001,"
			       " \"checks\": 4, \"spot_density\": 8, \"tol_abs_us\": 2.5,"
			       " \"tol_rel\": 0.02, \"future_key\": [1]}",
			       &p, &d),
			 0);
	assert_int_equal(p.version, TIMING_PROTOCOL_VERSION);
	assert_true(p.spot_density == 8.0);
	assert_true(p.tol_abs_us == 2.5);
	assert_true(p.tol_rel == 0.02);
	assert_int_equal(p.warmup_min_calls, 5);
	assert_true(p.warmup_min_ms == 30.0);
	assert_int_equal(p.min_samples, 20);
	assert_int_equal(p.max_samples, 500);
	assert_true(p.target_rse == 0.01);
	assert_true(p.budget_s == 1.5);
	assert_true(p.l2_flush_factor == 3.0);
	assert_true(p.perturb_scale == 0.001);
	assert_int_equal(p.checks, 4);

	/* absent keys keep the documented defaults */
	assert_int_equal(parse("{}", &p, &d), 0);
	timing_protocol_defaults(&def);
	assert_protocol_equal(&p, &def);
	assert_int_equal(def.min_samples, 10);
	assert_int_equal(def.max_samples, 2000);
	assert_true(def.target_rse == 0.005);
	assert_true(def.perturb_scale == 0.5);
	assert_int_equal(def.settle_calls, 3);
	assert_true(def.settle_below_ms == 5.0);
	assert_true(def.settle_ms == 10.0);
	assert_true(def.defer_checks_mb == 4096.0);
	assert_true(def.slow_budget_s == 30.0);
}

/* Slow but correct (issue 46): unchanged while warm-up, samples and the final call fit the
 * budget; else as many samples as fit, never fewer than 3 or checks + 1, one warm-up call and
 * no settling. */
static void test_protocol_slow(void **state)
{
	(void)state;
	struct timing_protocol p, def;
	timing_protocol_defaults(&def);
	p = def;
	assert_false(timing_protocol_slow(&p, 0.002)); /* 14 calls of 2 ms */
	assert_false(timing_protocol_slow(&p, 2.0));   /* 28 s: fits 30 s */
	assert_protocol_equal(&p, &def);
	assert_true(timing_protocol_slow(&p, 3.0)); /* 42 s: 10 fit, less 2 */
	assert_int_equal(p.min_samples, 8);
	assert_int_equal(p.warmup_min_calls, 1);
	assert_true(p.warmup_min_ms == 0.0);
	assert_int_equal(p.settle_calls, 0);
	p = def;
	assert_true(timing_protocol_slow(&p, 40.0)); /* nothing fits: the least */
	assert_int_equal(p.min_samples, 3);
	p = def;
	p.checks = 5;
	assert_true(timing_protocol_slow(&p, 40.0));
	assert_int_equal(p.min_samples, 6);
	p = def;
	p.slow_budget_s = 0.0; /* off */
	assert_false(timing_protocol_slow(&p, 40.0));
	assert_int_equal(p.min_samples, 10);
	p = def;
	p.min_samples = p.max_samples = 4;
	assert_true(timing_protocol_slow(&p, 20.0)); /* never more samples than asked */
	assert_int_equal(p.min_samples, 3);
	assert_int_equal(p.max_samples, 4);
}

static void test_protocol_rejects(void **state)
{
	(void)state;
	struct timing_protocol p;
	struct ca_diag d;

	assert_int_equal(parse("[]", &p, &d), CA_ERR_PARSE);
	assert_int_equal(parse("{\"version\": 1}", &p, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "version 1"));
	assert_int_equal(parse("{\"tol_rel\": 0.9}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"spot_density\": -1}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"min_samples\": \"10\"}", &p, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "min_samples"));
	assert_int_equal(parse("{\"min_samples\": 0}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"max_samples\": 100000000}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"min_samples\": 50, \"max_samples\": 40}", &p, &d),
			 CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "exceeds"));
	assert_int_equal(parse("{\"min_samples\": 3, \"checks\": 4}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"budget_s\": 0}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"target_rse\": -0.1}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"perturb_scale\": 2}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"warmup_min_calls\": 1.5}", &p, &d), CA_ERR_PARSE);
	assert_int_equal(parse("{\"settle_calls\": 17}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"settle_calls\": -1}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"settle_calls\": 2}", &p, &d), 0);
	assert_int_equal(p.settle_calls, 2);
	assert_int_equal(parse("{\"settle_below_ms\": 0}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"settle_below_ms\": 600001}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"settle_below_ms\": 0.5}", &p, &d), 0);
	assert_true(p.settle_below_ms == 0.5);
	assert_int_equal(parse("{\"settle_ms\": -1}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"settle_ms\": 1001}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"settle_ms\": \"8\"}", &p, &d), CA_ERR_PARSE);
	assert_int_equal(parse("{\"settle_ms\": 8}", &p, &d), 0);
	assert_true(p.settle_ms == 8.0);
	assert_int_equal(parse("{\"defer_checks_mb\": -1}", &p, &d), CA_ERR_INVALID);
	assert_int_equal(parse("{\"defer_checks_mb\": 65537}", &p, &d), CA_ERR_LIMIT);
	assert_int_equal(parse("{\"defer_checks_mb\": true}", &p, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "defer_checks_mb"));
	assert_int_equal(parse("{\"defer_checks_mb\": 256}", &p, &d), 0);
	assert_true(p.defer_checks_mb == 256.0);
}

static void test_protocol_roundtrip(void **state)
{
	(void)state;
	struct timing_protocol p, q;
	struct ca_diag d;
	json_t *j;

	timing_protocol_defaults(&p);
	p.min_samples = 33;
	p.budget_s = 0.25;
	p.checks = 7;
	p.settle_calls = 5;
	p.settle_below_ms = 7.5;
	p.settle_ms = 12.5;
	p.defer_checks_mb = 96.5;
	j = timing_protocol_to_json(&p);
	assert_non_null(j);
	assert_int_equal(timing_protocol_from_json(&q, j, &d), 0);
	json_decref(j);
	assert_protocol_equal(&p, &q);
}

static void test_stop_rule(void **state)
{
	(void)state;
	struct timing_protocol p;
	timing_protocol_defaults(&p); /* min 10, max 2000, rse 0.005, budget 2 s */

	assert_int_equal(timing_protocol_stop(&p, 5, 0.0, 0.1, false), TIMING_CONTINUE);
	assert_int_equal(timing_protocol_stop(&p, 10, 0.004, 0.1, false), TIMING_STOP_CONVERGED);
	assert_int_equal(timing_protocol_stop(&p, 10, 0.005, 0.1, false), TIMING_CONTINUE);
	assert_int_equal(timing_protocol_stop(&p, 10, 0.02, 2.0, false), TIMING_STOP_BUDGET);
	/* the budget never stops the loop before min_samples calls (the statistics and the spot
	 * checks need them) ... */
	assert_int_equal(timing_protocol_stop(&p, 3, INFINITY, 2.5, false), TIMING_CONTINUE);
	assert_int_equal(timing_protocol_stop(&p, 10, INFINITY, 2.5, false), TIMING_STOP_BUDGET);
	/* ... nor while a checked call is still to come */
	assert_int_equal(timing_protocol_stop(&p, 10, INFINITY, 2.5, true), TIMING_CONTINUE);
	assert_int_equal(timing_protocol_stop(&p, 12, 0.0, 0.1, true), TIMING_CONTINUE);
	assert_int_equal(timing_protocol_stop(&p, 2000, 0.5, 0.1, true), TIMING_STOP_MAX_SAMPLES);
	assert_int_equal(timing_protocol_stop(&p, 2000, 0.0, 0.1, false), TIMING_STOP_MAX_SAMPLES);
}

static void test_rng_reference_and_determinism(void **state)
{
	(void)state;
	struct stats_rng a, b, c;
	/* splitmix64 reference output for seed 0 */
	stats_rng_seed(&a, 0);
	assert_true(stats_rng_next(&a) == 0xe220a8397b1dcdafull);
	stats_rng_seed(&a, 1234567);
	stats_rng_seed(&b, 1234567);
	stats_rng_seed(&c, 1234568);
	int differ = 0;
	for (int i = 0; i < 100; i++) {
		uint64_t x = stats_rng_next(&a);
		assert_true(x == stats_rng_next(&b));
		differ += x != stats_rng_next(&c);
	}
	assert_true(differ > 95);
}

static void test_rng_ranges(void **state)
{
	(void)state;
	struct stats_rng r;
	double sum = 0.0, umin = 1.0, umax = -1.0;
	int counts[7] = {0};
	enum { N = 70000 };

	stats_rng_seed(&r, 99);
	for (int i = 0; i < N; i++) {
		double u = stats_rng_uniform(&r);
		assert_true(u >= 0.0 && u < 1.0);
		double s = stats_rng_signed_nonzero(&r);
		assert_true(s >= -1.0 && s <= 1.0 && s != 0.0);
		sum += s;
		umin = fmin(umin, s);
		umax = fmax(umax, s);
		uint64_t k = stats_rng_below(&r, 7);
		assert_true(k < 7);
		counts[k]++;
	}
	assert_true(fabs(sum / N) < 0.02);
	assert_true(umin < -0.99 && umax > 0.99);
	for (int k = 0; k < 7; k++)
		assert_true(abs(counts[k] - N / 7) < 500); /* ~5 sigma */
	assert_true(stats_rng_below(&r, 1) == 0);
}

static void test_choose_distinct(void **state)
{
	(void)state;
	struct stats_rng r, r2;
	struct ca_diag d;
	size_t out[10], out2[10];
	int hits[10] = {0};
	enum { ROUNDS = 20000 };

	/* distinct, sorted, in range, reproducible from the seed */
	stats_rng_seed(&r, 7);
	stats_rng_seed(&r2, 7);
	assert_int_equal(stats_choose_distinct(&r, 10, 4, out, &d), 0);
	assert_int_equal(stats_choose_distinct(&r2, 10, 4, out2, &d), 0);
	assert_memory_equal(out, out2, 4 * sizeof *out);
	for (int i = 0; i < 4; i++) {
		assert_true(out[i] < 10);
		if (i)
			assert_true(out[i - 1] < out[i]);
	}

	/* k == n: all of them */
	assert_int_equal(stats_choose_distinct(&r, 10, 10, out, &d), 0);
	for (size_t i = 0; i < 10; i++)
		assert_int_equal(out[i], i);

	/* k == 0 is fine, k > n is not */
	assert_int_equal(stats_choose_distinct(&r, 10, 0, out, &d), 0);
	assert_int_equal(stats_choose_distinct(&r, 3, 4, out, &d), CA_ERR_INVALID);

	/* uniform: each index chosen with probability k/n = 0.2 */
	for (int round = 0; round < ROUNDS; round++) {
		assert_int_equal(stats_choose_distinct(&r, 10, 2, out, &d), 0);
		assert_true(out[0] != out[1]);
		hits[out[0]]++;
		hits[out[1]]++;
	}
	for (int i = 0; i < 10; i++)
		assert_true(abs(hits[i] - ROUNDS / 5) < 400); /* ~7 sigma */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_median),
		cmocka_unit_test(test_sort),
		cmocka_unit_test(test_stdev_and_rse),
		cmocka_unit_test(test_summarize),
		cmocka_unit_test(test_running_matches_batch),
		cmocka_unit_test(test_sigma_robust),
		cmocka_unit_test(test_running_rejects_nan),
		cmocka_unit_test(test_protocol_parse),
		cmocka_unit_test(test_protocol_slow),
		cmocka_unit_test(test_protocol_rejects),
		cmocka_unit_test(test_protocol_roundtrip),
		cmocka_unit_test(test_stop_rule),
		cmocka_unit_test(test_rng_reference_and_determinism),
		cmocka_unit_test(test_rng_ranges),
		cmocka_unit_test(test_choose_distinct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
