/* Unit tests for src/bench/kb_runs: task keys, and KernelBench's verdicts as bench reads them
 * from an eval_results.json (KernelBench's own shapes and the "L<L>P<P>" one of cuda-agent's
 * harness): the four fields of a plain record, and, only where a record has them, its reason
 * (its own, else the first error field of its metadata, one line, capped at a character
 * boundary), KernelBench's reference time and its excessive-speed-up flag. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "kb_runs"
#include "helpers.h"
#include "bench/kb_runs.h"

static json_t *parse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);
	if (!j)
		fail_msg("bad test JSON: %s", e.text);
	return j;
}

static void test_keys(void **state)
{
	(void)state;
	int l = 0, p = 0;
	assert_int_equal(kb_key_parse("level1/19_ReLU", &l, &p), 0);
	assert_int_equal(l, 1);
	assert_int_equal(p, 19);
	assert_int_equal(kb_key_parse("kernelbench/level3/7", &l, &p), 0);
	assert_int_equal(l, 3);
	assert_int_equal(p, 7);
	assert_int_not_equal(kb_key_parse("19_ReLU", &l, &p), 0);
	assert_int_not_equal(kb_key_parse("levelx/19_ReLU", &l, &p), 0);
	assert_int_not_equal(kb_key_parse("level1/ReLU", &l, &p), 0);
	assert_int_not_equal(kb_key_parse("level1/19ReLU", &l, &p), 0);
}

static void test_plain_records(void **state)
{
	(void)state;
	json_t *res = parse("{\"19\": [{\"sample_id\": 0, \"compiled\": true, \"correctness\": true,"
			    " \"runtime\": 0.5, \"metadata\": {\"hardware\": \"A100\"}}],"
			    " \"L2P7\": {\"compiled\": false, \"correctness\": false,"
			    " \"runtime\": -1}}");
	json_t *v = kb_results_lookup(res, "level1/19_ReLU", 0);
	assert_non_null(v);
	assert_int_equal(json_object_size(v), 4); /* nothing the record does not have */
	assert_true(json_is_true(json_object_get(v, "correctness")));
	json_decref(v);
	v = kb_results_lookup(res, "level2/7_X", 0);
	assert_non_null(v);
	assert_int_equal(json_object_size(v), 4);
	assert_false(json_is_true(json_object_get(v, "compiled")));
	json_decref(v);
	assert_null(kb_results_lookup(res, "level1/19_ReLU", 1));
	assert_null(kb_results_lookup(res, "level3/20_X", 0));
	/* a plain "<P>" key names the problem of any level (a KernelBench run is one level) */
	json_decref(kb_results_lookup(res, "level3/19_X", 0));
	json_decref(res);
}

static const char *reason(const json_t *v)
{
	return json_string_value(json_object_get(v, "reason"));
}

static void test_reasons_and_timing(void **state)
{
	(void)state;
	char big[1024], text[4096];
	/* 199 ASCII bytes, then a two-byte character across the 200-byte cap */
	memset(big, 'x', 199);
	snprintf(big + 199, sizeof big - 199, "\xc3\xa9tail");
	snprintf(text, sizeof text,
		 "{\"L1P1\": [{\"sample_id\": 0, \"compiled\": true, \"correctness\": true,"
		 " \"runtime\": 1.25, \"ref_runtime\": 2.5, \"reason\": \"\","
		 " \"metadata\": {\"excessive_speedup\": true, \"other_error\": \"ignored\"}}],"
		 " \"L1P2\": [{\"sample_id\": 0, \"compiled\": true, \"correctness\": false,"
		 " \"runtime\": -1, \"ref_runtime\": -1, \"reason\": \"Output\\n  mismatch:  (0 / 5)\","
		 " \"metadata\": {\"excessive_speedup\": false}}],"
		 " \"L1P3\": [{\"sample_id\": 0, \"compiled\": false, \"correctness\": false,"
		 " \"metadata\": {\"compilation_error_name\": \"RuntimeError\","
		 " \"error\": \"Evaluation timed out\"}}],"
		 " \"L1P4\": [{\"sample_id\": 0, \"compiled\": true, \"correctness\": false,"
		 " \"metadata\": {\"correctness_issue\": \"%s\"}}],"
		 " \"L1P5\": [{\"sample_id\": 0, \"compiled\": false, \"correctness\": false,"
		 " \"metadata\": {\"hardware\": \"H100\", \"cuda_error\": \"CUDA Error: illegal\"}}],"
		 " \"_harness\": {\"schema\": \"cuda-agent.kernelbench-eval/1\"}}",
		 big);
	json_t *res = parse(text);
	json_t *v = kb_results_lookup(res, "level1/1_A", 0);
	assert_non_null(v);
	assert_null(json_object_get(v, "reason")); /* an empty reason of its own: none */
	assert_true(json_is_true(json_object_get(v, "excessive_speedup")));
	assert_true(json_real_value(json_object_get(v, "ref_runtime")) == 2.5);
	json_decref(v);
	v = kb_results_lookup(res, "level1/2_B", 0);
	assert_string_equal(reason(v), "Output mismatch: (0 / 5)");
	assert_null(json_object_get(v, "ref_runtime"));
	assert_null(json_object_get(v, "excessive_speedup"));
	json_decref(v);
	v = kb_results_lookup(res, "level1/3_C", 0);
	assert_string_equal(reason(v), "Evaluation timed out"); /* error comes first */
	json_decref(v);
	v = kb_results_lookup(res, "level1/4_D", 0);
	assert_non_null(reason(v));
	assert_int_equal(strlen(reason(v)), 199); /* not half of the two-byte character */
	assert_int_equal(strspn(reason(v), "x"), 199);
	json_decref(v);
	v = kb_results_lookup(res, "level1/5_E", 0);
	assert_string_equal(reason(v), "CUDA Error: illegal");
	json_decref(v);
	json_decref(res);
}

static void test_load_harness_file(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d;
	json_t *res = NULL;
	tmp_path(path, sizeof path, "kernelbench_eval.json");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"L3P1\": [{\"sample_id\": 2, \"compiled\": null, \"correctness\": null,"
	      " \"reason\": \"the KernelBench checkout has no 1_MLP\", \"harness\": {}}],"
	      " \"_harness\": {\"settings\": {}}}\n",
	      f);
	fclose(f);
	assert_int_equal(kb_results_load(path, &res, &d), 0);
	json_t *v = kb_results_lookup(res, "x/level3/1_MLP", 2);
	assert_non_null(v);
	assert_true(json_is_null(json_object_get(v, "correctness")));
	assert_string_equal(reason(v), "the KernelBench checkout has no 1_MLP");
	json_decref(v);
	json_decref(res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_plain_records),
		cmocka_unit_test(test_reasons_and_timing),
		cmocka_unit_test(test_load_harness_file),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
