/* Unit tests for src/eval/reward: the reward table (-1 / 1 / 2 / 3), the strict 5% margin, the
 * continuous variant, the untimed case and a missing torch.compile baseline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "eval/reward.h"
#include "util/diag.h"

#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

static struct reward_output run(bool compiled, bool correct, double t, double eager,
				double compile)
{
	struct reward_input in = {.compiled = compiled, .correct = correct, .t_candidate_ms = t,
				  .t_eager_ms = eager, .t_compile_ms = compile};
	struct reward_output out;
	memset(&out, 0x5a, sizeof out); /* reward_compute must set every field */
	reward_compute(&in, &out);
	return out;
}

static void test_not_compiled_or_incorrect(void **state)
{
	(void)state;
	/* fast timings do not matter when the kernel is wrong */
	struct reward_output o = run(false, true, 1.0, 10.0, 10.0);
	assert_int_equal(o.reward, -1);
	o = run(true, false, 1.0, 10.0, 10.0);
	assert_int_equal(o.reward, -1);
	assert_true(o.continuous == 0.0);
	assert_true(o.speedup_eager == 0.0 && o.speedup_compile == 0.0);
	assert_false(o.faster_than_eager);
	assert_false(o.faster_than_compile);
	o = run(false, false, 0, 0, 0);
	assert_int_equal(o.reward, -1);
}

static void test_faster_than_both(void **state)
{
	(void)state;
	struct reward_output o = run(true, true, 1.0, 2.0, 4.0);
	assert_int_equal(o.reward, 3);
	assert_true(o.faster_than_eager && o.faster_than_compile);
	assert_near(o.speedup_eager, 2.0, 1e-12);
	assert_near(o.speedup_compile, 4.0, 1e-12);
	assert_near(o.continuous, 4.0, 1e-12); /* t_compile / t */
}

static void test_eager_only(void **state)
{
	(void)state;
	/* 2x faster than eager, slower than compile */
	struct reward_output o = run(true, true, 1.0, 2.0, 0.5);
	assert_int_equal(o.reward, 2);
	assert_true(o.faster_than_eager);
	assert_false(o.faster_than_compile);
	assert_near(o.continuous, 0.5, 1e-12);
	/* faster than eager, exactly 5% faster than compile: not faster */
	o = run(true, true, 95.0, 200.0, 100.0);
	assert_int_equal(o.reward, 2);
	assert_false(o.faster_than_compile);
}

static void test_otherwise_one(void **state)
{
	(void)state;
	/* equal to both */
	struct reward_output o = run(true, true, 1.0, 1.0, 1.0);
	assert_int_equal(o.reward, 1);
	assert_near(o.continuous, 1.0, 1e-12);
	/* slower than both */
	o = run(true, true, 3.0, 1.0, 1.5);
	assert_int_equal(o.reward, 1);
	assert_near(o.speedup_eager, 1.0 / 3.0, 1e-12);
	assert_near(o.continuous, 0.5, 1e-12);
	/* 4% faster than both: under the margin */
	o = run(true, true, 96.0, 100.0, 100.0);
	assert_int_equal(o.reward, 1);
	assert_false(o.faster_than_eager || o.faster_than_compile);
}

/* (t0 - t) / t0 == 0.05 exactly is not "more than 5% faster"; a hair faster is. */
static void test_margin_boundary(void **state)
{
	(void)state;
	assert_true((100.0 - 95.0) / 100.0 == CA_REWARD_MARGIN); /* the boundary is exact */
	struct reward_output o = run(true, true, 95.0, 100.0, 100.0);
	assert_int_equal(o.reward, 1);
	assert_false(o.faster_than_eager);
	assert_false(o.faster_than_compile);

	o = run(true, true, 94.99, 100.0, 100.0);
	assert_int_equal(o.reward, 3);

	o = run(true, true, 94.99, 100.0, 99.0); /* compile: (99 - 94.99) / 99 < 0.05 */
	assert_int_equal(o.reward, 2);
}

static void test_faster_than_compile_not_eager(void **state)
{
	(void)state;
	/* eager 100, compile 200 (compile is slower here), candidate 99: only compile beaten */
	struct reward_output o = run(true, true, 99.0, 100.0, 200.0);
	assert_int_equal(o.reward, 1);
	assert_false(o.faster_than_eager);
	assert_true(o.faster_than_compile);
	assert_near(o.continuous, 200.0 / 99.0, 1e-12);
	assert_near(o.speedup_compile, 200.0 / 99.0, 1e-12);
}

static void test_untimed(void **state)
{
	(void)state;
	/* no candidate time: reward 0 and nothing derived */
	struct reward_output o = run(true, true, 0.0, 2.0, 2.0);
	assert_int_equal(o.reward, 0);
	assert_true(o.speedup_eager == 0.0 && o.speedup_compile == 0.0 && o.continuous == 0.0);
	assert_false(o.faster_than_eager || o.faster_than_compile);
	o = run(true, true, -1.0, 2.0, 2.0);
	assert_int_equal(o.reward, 0);
	assert_true(o.speedup_eager == 0.0 && o.speedup_compile == 0.0);

	/* no baselines at all */
	o = run(true, true, 1.0, 0.0, 0.0);
	assert_int_equal(o.reward, 0);
	assert_true(o.speedup_eager == 0.0 && o.speedup_compile == 0.0 && o.continuous == 0.0);

	/* a missing eager time: untimed; the known compile speed-up is still reported */
	o = run(true, true, 1.0, 0.0, 3.0);
	assert_int_equal(o.reward, 0);
	assert_true(o.speedup_eager == 0.0);
	assert_near(o.speedup_compile, 3.0, 1e-12);
	assert_false(o.faster_than_eager || o.faster_than_compile);

}

/* torch.compile failed on the task (no compile time): the eager comparison still gives a reward,
 * at most 2, and the continuous variant (t_compile / t) is unknown. */
static void test_no_compile_baseline(void **state)
{
	(void)state;
	struct reward_output o = run(true, true, 1.0, 3.0, 0.0);
	assert_int_equal(o.reward, 2);
	assert_true(o.faster_than_eager);
	assert_false(o.faster_than_compile);
	assert_near(o.speedup_eager, 3.0, 1e-12);
	assert_true(o.speedup_compile == 0.0 && o.continuous == 0.0);

	o = run(true, true, 1.0, 1.0, 0.0);
	assert_int_equal(o.reward, 1);
	assert_false(o.faster_than_eager || o.faster_than_compile);
	o = run(true, true, 1.0, 3.0, -1.0);
	assert_int_equal(o.reward, 2);
	o = run(true, false, 1.0, 3.0, 0.0);
	assert_int_equal(o.reward, -1);
}

static void test_explain(void **state)
{
	(void)state;
	const int rewards[] = {-1, 0, 1, 2, 3};
	const char *texts[5];
	for (int i = 0; i < 5; i++) {
		struct reward_output o = {.reward = rewards[i]};
		texts[i] = reward_explain(&o);
		assert_non_null(texts[i]);
		assert_true(strlen(texts[i]) > 10);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(texts[i], texts[j]);
	}
	assert_non_null(strstr(texts[0], "not correct"));
	assert_non_null(strstr(texts[2], "not more than 5% faster"));
	assert_non_null(strstr(texts[3], "more than 5% faster than eager"));
	assert_null(strstr(texts[3], "not more"));
	assert_non_null(strstr(texts[4], "both"));
	/* and what reward_compute produces explains itself consistently */
	struct reward_output o = run(true, true, 1.0, 2.0, 4.0);
	assert_string_equal(reward_explain(&o), texts[4]);
	o = run(true, false, 1.0, 2.0, 4.0);
	assert_string_equal(reward_explain(&o), texts[0]);
}

/* The interval around a speed-up, and whether it holds the threshold (1/0.95). */
static void test_interval_near_threshold(void **state)
{
	struct reward_interval iv;
	(void)state;
	/* 1.05x with 1% errors on each side: u = 1.414%, the interval 1.0203..1.0797 holds 1.0526 */
	assert_int_equal(reward_interval(1.0, 0.01, 1.05, 0.0105, &iv), 0);
	assert_near(iv.speedup, 1.05, 1e-12);
	assert_near(iv.lo, 1.05 * (1 - 2 * sqrt(2) * 0.01), 1e-9);
	assert_near(iv.hi, 1.05 * (1 + 2 * sqrt(2) * 0.01), 1e-9);
	assert_true(iv.near);
	/* 1.04x measured to 0.1%: 1.0371..1.0429, below the threshold, decided by the medians */
	assert_int_equal(reward_interval(1.0, 0.001, 1.04, 0.00104, &iv), 0);
	assert_false(iv.near);
	assert_true(iv.hi < CA_REWARD_THRESHOLD);
	/* far from it: 2x with 5% errors */
	assert_int_equal(reward_interval(1.0, 0.05, 2.0, 0.1, &iv), 0);
	assert_false(iv.near);
	/* huge errors: the lower end stops at 0, and the interval holds the threshold */
	assert_int_equal(reward_interval(1.0, 1.0, 1.0, 1.0, &iv), 0);
	assert_near(iv.lo, 0.0, 0.0);
	assert_true(iv.near);
	/* bad input */
	assert_int_equal(reward_interval(0.0, 0.1, 1.0, 0.1, &iv), CA_ERR_INVALID);
	assert_int_equal(reward_interval(1.0, -0.1, 1.0, 0.1, &iv), CA_ERR_INVALID);
	assert_int_equal(reward_interval(1.0, 0.1, NAN, 0.1, &iv), CA_ERR_INVALID);
	assert_near(CA_REWARD_THRESHOLD, 1.0 / 0.95, 1e-12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_compiled_or_incorrect),
		cmocka_unit_test(test_faster_than_both),
		cmocka_unit_test(test_eager_only),
		cmocka_unit_test(test_otherwise_one),
		cmocka_unit_test(test_margin_boundary),
		cmocka_unit_test(test_faster_than_compile_not_eager),
		cmocka_unit_test(test_untimed),
		cmocka_unit_test(test_no_compile_baseline),
		cmocka_unit_test(test_explain),
		cmocka_unit_test(test_interval_near_threshold),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
