/* Unit tests for src/eval/summary: the text printed for hand-built result objects (a correct,
 * timed, profiled candidate; a build failure; partial verification; missing baselines) and its
 * bound on hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/summary.h"

#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("summary lacks '%s':\n%s", (needle), (hay));               \
	} while (0)

/* Asserts that text has a line exactly equal to want. */
static void assert_line(const char *text, const char *want)
{
	size_t n = strlen(want);
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, want, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
			return;
	fail_msg("summary lacks the line\n  '%s'\nin:\n%s", want, text);
}

/* The line of text starting with prefix ("" if none), copied into out. */
static const char *line_of(const char *text, const char *prefix, char *out, size_t size)
{
	out[0] = '\0';
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, prefix, strlen(prefix)) == 0) {
			const char *e = strchr(p, '\n');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), p);
			break;
		}
	return out;
}

static json_t *trial(int i, int ok, double abs_err, double rel_err)
{
	return json_pack("{s:i, s:b, s:f, s:f, s:f, s:i}", "trial", i, "ok", ok, "seconds", 0.01,
			 "max_abs_err", abs_err, "max_rel_err", rel_err, "mismatches", ok ? 0 : 7);
}

static json_t *timing_entry(double median_ms, int samples, double rse)
{
	return json_pack("{s:f, s:f, s:f, s:f, s:i, s:s}", "median_ms", median_ms,
			 "event_median_ms", median_ms, "host_median_ms", median_ms * 0.9, "rse", rse,
			 "samples", samples, "stop_reason", "converged");
}

/* A correct candidate, 2x faster than eager and 1.5x faster than torch.compile. */
static json_t *ok_result(void)
{
	json_t *r = json_pack(
		"{s:s, s:s, s:{s:s, s:s, s:s, s:s, s:f, s:f}, s:{s:s, s:s}, s:i, s:f, s:s, s:b, "
		"s:b, s:{s:s, s:s}, s:{s:s, s:f, s:b, s:s, s:i, s:i}}",
		"schema", "cuda-agent.result/1", "mode", "eval",
		"task", "id", "kb/19_ReLU", "dir", "/tasks/relu", "hash",
		"0123456789abcdef0123456789abcdef", "precision", "fp32", "atol", 0.01, "rtol", 0.02,
		"candidate", "format", "native", "dir", "/cands/relu1",
		"reward", 3, "reward_continuous", 1.5,
		"reward_explanation", "correct and more than 5% faster than both",
		"compiled", 1, "correct", 1,
		"reason", "code", "ok", "message", "correct and timed",
		"build", "status", "ok", "seconds", 3.25, "cached", 0, "arch", "sm_90",
		"units_compiled", 2, "units_cached", 1);
	assert_non_null(r);
	json_t *trials = json_array();
	for (int i = 0; i < 5; i++)
		json_array_append_new(trials, trial(i, 1, 1e-4 * (i + 1), 2e-3 * (5 - i)));
	json_object_set_new(r, "trials", trials);
	json_t *timing = json_object();
	json_object_set_new(timing, "candidate", timing_entry(0.5, 120, 0.003));
	json_object_set_new(timing, "eager", timing_entry(1.0, 80, 0.004));
	json_object_set_new(timing, "compile", timing_entry(0.75, 90, 0.002));
	json_object_set_new(timing, "speedup_eager", json_real(2.0));
	json_object_set_new(timing, "speedup_compile", json_real(1.5));
	json_object_set_new(timing, "baselines_cached", json_false());
	json_object_set_new(r, "timing", timing);
	return r;
}

static void test_ok_result(void **state)
{
	(void)state;
	json_t *r = ok_result();
	char *s = eval_summary_text(r);
	assert_non_null(s);

	assert_line(s, "task      kb/19_ReLU  (0123456789ab, fp32, atol 0.01 rtol 0.02)");
	assert_line(s, "candidate /cands/relu1 (native)");
	assert_line(s, "build     ok in 3.25 s (sm_90, 2 compiled, 1 cached)");
	assert_line(s, "verify    5/5 trials correct (max abs err 0.0005, max rel err 0.01)");
	assert_line(s, "time      0.5000 ms   eager 1.0000 ms (2.00x)   torch.compile 0.7500 ms "
		       "(1.50x)   [120 samples, rse 0.30%]");
	assert_line(s, "result    ok: correct and timed");
	assert_line(s, "reward    3 (continuous 1.500): correct and more than 5% faster than both");
	assert_null(strstr(s, "FAIL"));
	assert_null(strstr(s, "profile"));
	assert_null(strstr(s, "baselines cached"));
	/* the lines come in this order */
	assert_true(strstr(s, "task ") < strstr(s, "candidate ") &&
		    strstr(s, "candidate ") < strstr(s, "build ") &&
		    strstr(s, "build ") < strstr(s, "verify ") &&
		    strstr(s, "verify ") < strstr(s, "time ") &&
		    strstr(s, "time ") < strstr(s, "result ") &&
		    strstr(s, "result ") < strstr(s, "reward "));
	assert_true(s[strlen(s) - 1] == '\n');
	free(s);
	json_decref(r);
}

static void test_profile_section(void **state)
{
	(void)state;
	json_t *r = ok_result();
	json_t *kernels = json_array();
	json_array_append_new(kernels,
			      json_pack("{s:s, s:i, s:i, s:f, s:i, s:i, s:i}", "name", "relu_kernel",
					"calls", 5, "total_ns", 12500, "avg_ns", 2500.0, "registers", 32,
					"static_smem", 1024, "dynamic_smem", 3072));
	/* a name longer than 40 characters is cut, and at most 8 kernels are listed */
	json_array_append_new(
		kernels, json_pack("{s:s, s:i, s:f}", "name",
				   "void very_long_templated_kernel_name<float, 128, 4>(float const*)",
				   "calls", 10, "avg_ns", 100.0));
	for (int i = 0; i < 10; i++) {
		char name[32];
		snprintf(name, sizeof name, "extra_kernel_%d", i);
		json_array_append_new(kernels, json_pack("{s:s, s:i}", "name", name, "calls", 1));
	}
	json_object_set_new(r, "profile",
			    json_pack("{s:o, s:i, s:f, s:f}", "kernels", kernels, "total_ns", 13500,
				      "min_bytes", 12.6e6, "achieved_gbps", 123.45));
	char *s = eval_summary_text(r);
	char line[512];
	assert_non_null(s);

	assert_line(s, "profile   123.5 GB/s achieved over 12.6 MB moved (minimum)");
	line_of(s, "          relu_kernel", line, sizeof line);
	assert_contains(line, "relu_kernel");
	assert_contains(line, "     5 calls");
	assert_contains(line, "2.5 us avg");
	assert_contains(line, "32 regs");
	assert_contains(line, "4096 B smem");
	line_of(s, "          void very_long", line, sizeof line);
	assert_contains(line, "void very_long_templated_kernel_name<flo ");
	assert_null(strstr(line, "float const*"));
	assert_contains(s, "extra_kernel_5");
	assert_null(strstr(s, "extra_kernel_6"));
	/* the profile comes after timing and before the result */
	assert_true(strstr(s, "time ") < strstr(s, "profile ") &&
		    strstr(s, "profile ") < strstr(s, "result "));
	free(s);
	json_decref(r);
}

static void test_build_failure(void **state)
{
	(void)state;
	json_t *r = json_pack(
		"{s:{s:s}, s:{s:s, s:s}, s:i, s:n, s:b, s:b, s:{s:s, s:s}, s:s, "
		"s:{s:s, s:f, s:b, s:s, s:i, s:i}}",
		"task", "dir", "/tasks/relu", "candidate", "format", "native", "dir", "/c/bad",
		"reward", -1, "reward_continuous", "compiled", 0, "correct", 0,
		"reason", "code", "build.error", "message", "kernels/k.cu:12: error: identifier "
		"\"x\" is undefined",
		"reward_explanation", "the candidate did not compile or is not correct",
		"build", "status", "error", "seconds", 1.5, "cached", 0, "arch", "sm_90",
		"units_compiled", 1, "units_cached", 0);
	assert_non_null(r);
	char *s = eval_summary_text(r);
	assert_non_null(s);

	assert_line(s, "task      /tasks/relu"); /* no id: the dir; no hash: no details */
	assert_line(s, "build     error in 1.50 s (sm_90, 1 compiled, 0 cached)");
	assert_line(s, "result    FAIL build.error: kernels/k.cu:12: error: identifier \"x\" is "
		       "undefined");
	assert_line(s, "reward    -1 (continuous 0.000): the candidate did not compile or is not "
		       "correct");
	assert_null(strstr(s, "verify "));
	assert_null(strstr(s, "time "));
	assert_null(strstr(s, "result    ok"));
	free(s);
	json_decref(r);
}

static void test_partial_verification_and_untimed(void **state)
{
	(void)state;
	json_t *r = ok_result();
	json_t *trials = json_array();
	json_array_append_new(trials, trial(0, 1, 0.001, 0.01));
	json_array_append_new(trials, trial(1, 0, 0.75, 3.5));
	json_array_append_new(trials, trial(2, 1, 0.002, 0.02));
	json_object_set(r, "trials", trials);
	json_decref(trials);
	json_object_del(r, "timing");
	json_object_set_new(r, "reward", json_null());
	json_object_set_new(r, "reward_continuous", json_null());
	json_object_set_new(r, "correct", json_false());
	json_object_set_new(r, "reason", json_pack("{s:s, s:s}", "code", "verify.mismatch",
						   "message", "outputs.0 differs"));
	char *s = eval_summary_text(r);
	assert_non_null(s);
	assert_line(s, "verify    2/3 trials correct (max abs err 0.75, max rel err 3.5)");
	assert_line(s, "result    FAIL verify.mismatch: outputs.0 differs");
	assert_null(strstr(s, "time "));
	assert_null(strstr(s, "reward ")); /* null reward: no reward line */
	free(s);
	json_decref(r);
}

static void test_compile_baseline_failed_and_cached(void **state)
{
	(void)state;
	json_t *r = ok_result();
	json_t *timing = json_object_get(r, "timing");
	json_object_set_new(timing, "compile",
			    json_pack("{s:s}", "error", "torch.compile raised: BackendCompilerFailed"));
	json_object_set_new(timing, "speedup_compile", json_null());
	json_object_set_new(timing, "baselines_cached", json_true());
	json_object_set_new(r, "reward", json_integer(2));
	char *s = eval_summary_text(r);
	char line[512];
	assert_non_null(s);
	line_of(s, "time ", line, sizeof line);
	assert_string_equal(line, "time      0.5000 ms   eager 1.0000 ms (2.00x)   torch.compile "
				  "failed   [120 samples, rse 0.30%, baselines cached]");
	assert_contains(s, "reward    2 ");
	free(s);

	/* no eager time either: only the candidate's */
	json_object_del(timing, "eager");
	s = eval_summary_text(r);
	line_of(s, "time ", line, sizeof line);
	assert_null(strstr(line, "eager"));
	assert_contains(line, "time      0.5000 ms");
	free(s);
	json_decref(r);
}

/* How ModelNew got its parameters (docs/torch-rules.md, "Parameters"): a line only when seeded. */
static void test_params_seeded(void **state)
{
	(void)state;
	json_t *r = ok_result();
	json_object_set_new(r, "params", json_string("paired"));
	char *s = eval_summary_text(r);
	assert_non_null(s);
	assert_null(strstr(s, "params "));
	free(s);
	json_object_set_new(r, "params", json_string("seeded"));
	s = eval_summary_text(r);
	assert_non_null(s);
	assert_line(s, "params    seeded: ModelNew's state_dict does not pair with Model's; both "
		       "built under the same seed (kernelbench rules)");
	free(s);
	json_decref(r);
}

/* Hostile or empty input: the text stays bounded and well-formed. */
static void test_bounded(void **state)
{
	(void)state;
	size_t n = 20000;
	char *big = malloc(n + 1);
	assert_non_null(big);
	memset(big, 'x', n);
	big[n] = '\0';
	json_t *r = ok_result();
	json_object_set_new(r, "reason", json_pack("{s:s, s:s}", "code", "internal", "message", big));
	json_object_set_new(json_object_get(r, "task"), "id", json_string(big));
	char *s = eval_summary_text(r);
	assert_non_null(s);
	assert_true(strlen(s) < 8192);
	assert_true(strncmp(s, "task      xxx", 13) == 0);
	free(s);
	json_decref(r);
	free(big);

	json_t *empty = json_object();
	s = eval_summary_text(empty);
	assert_non_null(s);
	assert_contains(s, "task      ");
	assert_contains(s, "result    FAIL"); /* no reason: not "ok" */
	free(s);
	json_decref(empty);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ok_result),
		cmocka_unit_test(test_profile_section),
		cmocka_unit_test(test_build_failure),
		cmocka_unit_test(test_partial_verification_and_untimed),
		cmocka_unit_test(test_compile_baseline_failed_and_cached),
		cmocka_unit_test(test_params_seeded),
		cmocka_unit_test(test_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
