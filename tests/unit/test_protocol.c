/* Unit tests for src/protocol/protocol: the defaults, the range checks (one message per bad
 * field), and the timing object against docs/protocol.md and its parser (protocol/stats). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/protocol.h"
#include "protocol/reasons.h"
#include "protocol/stats.h"
#include "util/fs.h"

#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("'%s' does not contain '%s'", (hay), (needle));            \
	} while (0)

static void test_defaults_validate(void **state)
{
	(void)state;
	struct eval_protocol p;
	struct ca_diag d;
	memset(&p, 0xff, sizeof p);
	eval_protocol_defaults(&p);
	assert_int_equal(eval_protocol_validate(&p, &d), 0);
	assert_int_equal(p.trials, 5);
	assert_int_equal(p.rotation_sets, 3);
	assert_int_equal(p.timing.warmup_min_calls, 3);
	assert_true(p.timing.warmup_min_ms == 25.0);
	assert_int_equal(p.timing.min_samples, 10);
	assert_int_equal(p.timing.max_samples, 2000);
	assert_true(p.timing.target_rse == 0.005);
	assert_true(p.timing.budget_s == 2.0);
	assert_true(p.timing.l2_flush_factor == 2.0);
	assert_true(p.timing.perturb_scale == 0.5);
	assert_int_equal(p.timing.checks, 2);
}

enum field { TRIALS, ROTATION, WARMUP_CALLS, WARMUP_MS, MIN_SAMPLES, MAX_SAMPLES, RSE, BUDGET,
	     FLUSH, PERTURB, CHECKS };

struct bad_case {
	enum field f;
	double value;
	const char *needle; /* the message names the field */
};

static void set_field(struct eval_protocol *p, enum field f, double v)
{
	switch (f) {
	case TRIALS: p->trials = (int)v; break;
	case ROTATION: p->rotation_sets = (int)v; break;
	case WARMUP_CALLS: p->timing.warmup_min_calls = (int)v; break;
	case WARMUP_MS: p->timing.warmup_min_ms = v; break;
	case MIN_SAMPLES: p->timing.min_samples = (int)v; break;
	case MAX_SAMPLES: p->timing.max_samples = (int)v; break;
	case RSE: p->timing.target_rse = v; break;
	case BUDGET: p->timing.budget_s = v; break;
	case FLUSH: p->timing.l2_flush_factor = v; break;
	case PERTURB: p->timing.perturb_scale = v; break;
	case CHECKS: p->timing.checks = (int)v; break;
	}
}

static void test_each_invalid_field_rejected(void **state)
{
	(void)state;
	const struct bad_case cases[] = {
		{TRIALS, 0, "trials"},
		{TRIALS, 101, "trials"},
		{TRIALS, -3, "trials"},
		{ROTATION, 0, "rotation sets"},
		{ROTATION, 17, "rotation sets"},
		{WARMUP_CALLS, -1, "warmup_min_calls"},
		{WARMUP_CALLS, 100001, "warmup_min_calls"},
		{WARMUP_MS, -1, "warmup_min_ms"},
		{WARMUP_MS, NAN, "warmup_min_ms"},
		{WARMUP_MS, INFINITY, "warmup_min_ms"},
		{MIN_SAMPLES, 2, "min_samples"},
		{MIN_SAMPLES, 2001, "min_samples"}, /* above max_samples */
		{MAX_SAMPLES, 9, "max_samples"},    /* below min_samples */
		{MAX_SAMPLES, 100001, "max_samples"},
		{RSE, 0, "target_rse"},
		{RSE, 1, "target_rse"},
		{RSE, -0.1, "target_rse"},
		{RSE, NAN, "target_rse"},
		{BUDGET, 0, "budget"},
		{BUDGET, 3600.5, "budget"},
		{BUDGET, NAN, "budget"},
		{FLUSH, -0.5, "l2_flush_factor"},
		{FLUSH, 64.5, "l2_flush_factor"},
		{FLUSH, NAN, "l2_flush_factor"},
		{PERTURB, -0.001, "perturb_scale"},
		{PERTURB, 0.75, "perturb_scale"},
		{PERTURB, NAN, "perturb_scale"},
		{CHECKS, -1, "checks"},
		{CHECKS, 11, "checks"}, /* more than min_samples */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct eval_protocol p;
		struct ca_diag d = {{0}};
		eval_protocol_defaults(&p);
		set_field(&p, cases[i].f, cases[i].value);
		int rc = eval_protocol_validate(&p, &d);
		if (rc >= 0)
			fail_msg("case %zu (%s = %g) was accepted", i, cases[i].needle, cases[i].value);
		assert_contains(d.msg, cases[i].needle);
	}
}

/* Valid extremes pass, and the worker's own parser accepts what eval serializes from them. */
static void test_boundaries_accepted_by_worker_parser(void **state)
{
	(void)state;
	const struct bad_case ok[] = {
		{TRIALS, 1, ""},         {TRIALS, 100, ""},      {ROTATION, 1, ""},
		{ROTATION, 16, ""},      {WARMUP_CALLS, 0, ""},  {WARMUP_CALLS, 100000, ""},
		{WARMUP_MS, 0, ""},      {WARMUP_MS, 600000, ""}, {MIN_SAMPLES, 3, ""},
		{MAX_SAMPLES, 100000, ""}, {RSE, 0.999, ""},     {BUDGET, 600, ""},
		{FLUSH, 0, ""},          {FLUSH, 16, ""},        {PERTURB, 0, ""},
		{PERTURB, 0.5, ""},      {CHECKS, 0, ""},        {CHECKS, 10, ""},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		struct eval_protocol p;
		struct timing_protocol t;
		struct ca_diag d = {{0}};
		eval_protocol_defaults(&p);
		set_field(&p, ok[i].f, ok[i].value);
		if (eval_protocol_validate(&p, &d) != 0)
			fail_msg("case %zu rejected: %s", i, d.msg);
		json_t *j = eval_protocol_timing_json(&p);
		assert_non_null(j);
		if (timing_protocol_from_json(&t, j, &d) != 0)
			fail_msg("case %zu: the worker rejects the plan's protocol: %s", i, d.msg);
		json_decref(j);
		assert_int_equal(t.warmup_min_calls, p.timing.warmup_min_calls);
		assert_true(t.warmup_min_ms == p.timing.warmup_min_ms);
		assert_int_equal(t.min_samples, p.timing.min_samples);
		assert_int_equal(t.max_samples, p.timing.max_samples);
		assert_true(t.target_rse == p.timing.target_rse);
		assert_true(t.budget_s == p.timing.budget_s);
		assert_true(t.l2_flush_factor == p.timing.l2_flush_factor);
		assert_true(t.perturb_scale == p.timing.perturb_scale);
		assert_int_equal(t.checks, p.timing.checks);
	}
}

/* The ```json block under "## The timed loop" in docs/protocol.md. */
static json_t *load_doc_timing_object(void)
{
	char path[PATH_MAX];
	const char *b = getenv("CA_BUILD");
	char *text = NULL;
	size_t len;
	struct ca_diag d;
	json_error_t jerr;

	snprintf(path, sizeof path, "docs/protocol.md");
	if (!ca_is_file(path) && b)
		snprintf(path, sizeof path, "%s/../docs/protocol.md", b);
	if (ca_read_file(path, 1u << 20, &text, &len, &d) != 0)
		fail_msg("cannot read docs/protocol.md (run from the repository root): %s", d.msg);
	char *sec = strstr(text, "## The timed loop");
	assert_non_null(sec);
	char *start = strstr(sec, "```json\n");
	assert_non_null(start);
	start += strlen("```json\n");
	char *end = strstr(start, "```");
	assert_non_null(end);
	json_t *obj = json_loadb(start, (size_t)(end - start), 0, &jerr);
	free(text);
	if (!obj)
		fail_msg("docs/protocol.md timing object: %s", jerr.text);
	return obj;
}

static void test_timing_json_matches_docs(void **state)
{
	(void)state;
	struct eval_protocol p;
	json_t *doc = load_doc_timing_object();
	const char *key;
	json_t *val;

	eval_protocol_defaults(&p);
	json_t *j = eval_protocol_timing_json(&p);
	assert_non_null(j);
	assert_true(json_is_object(j));
	assert_int_equal(json_object_size(j), json_object_size(doc));
	json_object_foreach(doc, key, val) {
		json_t *mine = json_object_get(j, key);
		if (!mine)
			fail_msg("eval_protocol_timing_json lacks '%s'", key);
		assert_true(json_is_number(mine));
		if (json_number_value(mine) != json_number_value(val))
			fail_msg("'%s': %g, docs say %g", key, json_number_value(mine),
				 json_number_value(val));
	}
	assert_true(json_is_integer(json_object_get(j, "version")));
	assert_int_equal(json_integer_value(json_object_get(j, "version")), CA_PROTOCOL_VERSION);
	assert_true(json_is_integer(json_object_get(j, "min_samples")));
	assert_true(json_is_integer(json_object_get(j, "checks")));

	/* a changed field is serialized */
	p.timing.min_samples = 42;
	p.timing.perturb_scale = 0.125;
	json_decref(j);
	j = eval_protocol_timing_json(&p);
	assert_int_equal(json_integer_value(json_object_get(j, "min_samples")), 42);
	assert_true(json_real_value(json_object_get(j, "perturb_scale")) == 0.125);
	json_decref(j);
	json_decref(doc);
}

/* The registry (protocol/reasons.h): classes decide the reward and the exit code; unregistered
 * codes are our bug (internal, exit 5); the candidate's process may report only its own codes. */
static void test_reason_registry(void **state)
{
	size_t n = 0;
	const struct reason *t = reason_table(&n);
	(void)state;
	assert_true(n > 60);
	for (size_t i = 0; i < n; i++) {
		assert_ptr_equal(reason_find(t[i].code), &t[i]); /* each code once */
		assert_non_null(t[i].stem);
		if (t[i].candidate_may_report)
			assert_int_equal(t[i].cls, REASON_CANDIDATE);
	}
	assert_int_equal(reason_exit_code(NULL), 0);
	assert_int_equal(reason_exit_code("ok"), 0);
	assert_int_equal(reason_exit_code("verify.mismatch"), 1);
	assert_int_equal(reason_exit_code("candidate.missing"), 1);
	assert_int_equal(reason_exit_code("task.forward_raised"), 3);
	assert_int_equal(reason_exit_code("env.no_gpu"), 4);
	assert_int_equal(reason_exit_code("build.internal"), 4);
	assert_int_equal(reason_exit_code("internal"), 5);
	assert_int_equal(reason_exit_code("no.such_code"), 5);
	assert_true(reason_judged("ok"));
	assert_true(reason_judged("hack.timer_tampering"));
	assert_true(reason_judged("timeout"));
	assert_false(reason_judged("task.invalid"));
	assert_false(reason_judged("env.bridge"));
	assert_false(reason_judged("build.internal"));
	assert_false(reason_judged("internal"));
	assert_false(reason_judged("no.such_code"));
	assert_true(reason_candidate_may_report("fault.crash"));
	assert_false(reason_candidate_may_report("env.gpu"));
	assert_false(reason_candidate_may_report("baseline.compile_failed"));
	assert_string_equal(reason_class_name(reason_class_of("task.no_model")), "task");
	assert_null(reason_find("hack."));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reason_registry),
		cmocka_unit_test(test_defaults_validate),
		cmocka_unit_test(test_each_invalid_field_rejected),
		cmocka_unit_test(test_boundaries_accepted_by_worker_parser),
		cmocka_unit_test(test_timing_json_matches_docs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
