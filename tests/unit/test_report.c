/* Unit tests for src/report: per-level statistics of hand-built results with hand-computed
 * expectations (levels and "other", replaced duplicates, incorrect results, a failed
 * torch.compile baseline, untimed modes, geometric means, fast_p at the p = 0, 1, 2 boundaries),
 * invalid results, JSONL reading with line numbers and the line cap, the terminal table, and the
 * HTML (escaping, chart elements, atomic write), and KernelBench's verdicts beside ours: the
 * agreement table with both sides' reasons and the timing ratio's geometric means. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "report"
#include "helpers.h"
#include "report/report.h"

#define NO_LEVEL   (-1) /* task.level absent */
#define NULL_LEVEL (-2) /* task.level null */
#define ABSENT     0.0  /* a baseline that is not in timing */
#define FAILED     (-1.0) /* timing.compile = {"error": ...} */

#define assert_near(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-9)

/* A result object as `cuda-agent eval --json` writes it, reduced to what the report reads.
 * correct: 1 true, 0 false, -1 null. cand/eager/compile: medians in ms (see ABSENT, FAILED). */
static json_t *result(const char *id, int level, const char *mode, int correct, int reward,
		      double cand, double eager, double compile)
{
	json_t *r = json_object(), *task = json_object(), *timing = json_object();
	json_object_set_new(r, "schema", json_string("cuda-agent.result/1"));
	json_object_set_new(r, "mode", json_string(mode));
	json_object_set_new(task, "id", json_string(id));
	if (level >= 0)
		json_object_set_new(task, "level", json_integer(level));
	else if (level == NULL_LEVEL)
		json_object_set_new(task, "level", json_null());
	json_object_set_new(r, "task", task);
	json_object_set_new(r, "correct", correct < 0 ? json_null() : json_boolean(correct));
	json_object_set_new(r, "reward", reward ? json_integer(reward) : json_null());
	json_object_set_new(r, "reason", json_pack("{s:s}", "code", correct == 1 ? "ok" : "verify.mismatch"));
	if (cand > 0)
		json_object_set_new(timing, "candidate", json_pack("{s:f}", "median_ms", cand));
	if (eager > 0)
		json_object_set_new(timing, "eager", json_pack("{s:f}", "median_ms", eager));
	if (compile > 0)
		json_object_set_new(timing, "compile", json_pack("{s:f}", "median_ms", compile));
	else if (compile == FAILED)
		json_object_set_new(timing, "compile", json_pack("{s:s}", "error", "inductor failed"));
	json_object_set_new(r, "timing", timing);
	return r;
}

static void add(struct report *r, json_t *res)
{
	struct ca_diag d;
	int rc = report_add(r, res, &d);
	if (rc)
		fail_msg("report_add: %s", d.msg);
	json_decref(res);
}

/* A correct, timed result with the given speed-ups (candidate 1 ms). */
static void add_timed(struct report *r, const char *id, int level, double s_eager,
		      double s_compile)
{
	add(r, result(id, level, "eval", 1, 1, 1.0, s_eager, s_compile));
}

static struct report *fresh(void)
{
	struct report *r = NULL;
	struct ca_diag d;
	assert_int_equal(report_new(&r, &d), 0);
	return r;
}

/* The row of report_json for level (an integer) or "other" (level < 0). */
static const json_t *row(const json_t *j, int level)
{
	size_t i;
	const json_t *l;
	json_array_foreach(json_object_get(j, "levels"), i, l) {
		const json_t *v = json_object_get(l, "level");
		if (level >= 0 ? json_is_integer(v) && json_integer_value(v) == level
			       : json_is_string(v) && strcmp(json_string_value(v), "other") == 0)
			return l;
	}
	fail_msg("no row for level %d", level);
	return NULL;
}

static long long ival(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);
	if (!json_is_integer(v))
		fail_msg("%s is not an integer", k);
	return (long long)json_integer_value(v);
}

static double rval(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);
	if (!json_is_number(v))
		fail_msg("%s is not a number", k);
	return json_number_value(v);
}

static double fast(const json_t *j, const char *baseline, size_t i)
{
	return json_number_value(json_array_get(json_object_get(json_object_get(j, "fast_p"),
								 baseline), i));
}

static void test_levels_and_rates(void **state)
{
	(void)state;
	struct report *r = fresh();
	/* level 1: 4 tasks; 3 passed; vs eager 2, 0.5, 4; vs compile 1.5, 0.25, 0.5 */
	add_timed(r, "a", 1, 2.0, 1.5);
	add_timed(r, "b", 1, 0.5, 0.25);
	add_timed(r, "c", 1, 4.0, 0.5);
	add(r, result("d", 1, "eval", 0, -1, 0, 0, 0));
	/* level 2: 1 task, faster than both */
	add_timed(r, "e", 2, 3.0, 3.0);
	/* no level and a null level: "other" */
	add_timed(r, "f", NO_LEVEL, 1.0, 1.0);
	add(r, result("g", NULL_LEVEL, "eval", 0, -1, 0, 0, 0));
	json_t *j = report_json(r);
	assert_non_null(j);

	const json_t *l1 = row(j, 1), *l2 = row(j, 2), *other = row(j, -1);
	const json_t *all = json_object_get(j, "all");
	assert_int_equal(json_array_size(json_object_get(j, "levels")), 3);
	/* sorted: 1, 2, other */
	assert_ptr_equal(json_array_get(json_object_get(j, "levels"), 0), l1);
	assert_ptr_equal(json_array_get(json_object_get(j, "levels"), 2), other);
	assert_int_equal(ival(l1, "tasks"), 4);
	assert_int_equal(ival(l1, "passed"), 3);
	assert_near(rval(l1, "pass_rate"), 0.75);
	assert_int_equal(ival(l1, "faster_eager"), 2);
	assert_near(rval(l1, "faster_eager_rate"), 0.5);
	assert_int_equal(ival(l1, "faster_compile"), 1);
	assert_near(rval(l1, "faster_compile_rate"), 0.25);
	assert_near(rval(l1, "geomean_eager"), cbrt(4.0));          /* cbrt(2 * 0.5 * 4) */
	assert_near(rval(l1, "geomean_compile"), cbrt(1.5 * 0.25 * 0.5));
	assert_int_equal(ival(l1, "n_eager"), 3);
	assert_near(rval(l2, "pass_rate"), 1.0);
	assert_near(rval(l2, "faster_compile_rate"), 1.0);
	/* speed-up exactly 1 is not faster */
	assert_int_equal(ival(other, "tasks"), 2);
	assert_int_equal(ival(other, "faster_eager"), 0);
	assert_near(rval(other, "geomean_eager"), 1.0);
	assert_near(rval(other, "pass_rate"), 0.5);
	/* overall: 7 tasks, 5 passed, faster than eager: a, c, e; than compile: a, e */
	assert_int_equal(ival(all, "tasks"), 7);
	assert_int_equal(ival(all, "passed"), 5);
	assert_near(rval(all, "faster_eager_rate"), 3.0 / 7);
	assert_near(rval(all, "faster_compile_rate"), 2.0 / 7);
	assert_near(rval(all, "geomean_eager"), pow(2.0 * 0.5 * 4 * 3 * 1, 1.0 / 5));
	assert_true(json_is_string(json_object_get(all, "level")));
	assert_int_equal(ival(j, "tasks"), 7);
	assert_int_equal(ival(j, "results"), 7);
	assert_int_equal(ival(j, "replaced"), 0);
	json_decref(j);
	report_free(r);
}

static void test_replaced_duplicates(void **state)
{
	(void)state;
	struct report *r = fresh();
	add_timed(r, "t", 1, 4.0, 4.0);
	add(r, result("t", 1, "eval", 0, -1, 0, 0, 0)); /* a re-run that failed replaces it */
	add(r, result("u", 1, "eval", 0, -1, 0, 0, 0));
	add_timed(r, "u", 3, 2.0, 0.5); /* a later success, now at level 3 */
	assert_int_equal(report_tasks(r), 2);
	assert_int_equal(report_results(r), 4);
	json_t *j = report_json(r);
	const json_t *l1 = row(j, 1), *l3 = row(j, 3);
	assert_int_equal(ival(l1, "tasks"), 1);
	assert_int_equal(ival(l1, "passed"), 0);
	assert_true(json_is_null(json_object_get(l1, "geomean_eager")));
	assert_int_equal(ival(l1, "n_eager"), 0);
	assert_int_equal(ival(l3, "passed"), 1);
	assert_near(rval(l3, "geomean_compile"), 0.5);
	assert_int_equal(ival(j, "replaced"), 2);
	json_decref(j);
	report_free(r);
}

static void test_incorrect_results(void **state)
{
	(void)state;
	struct report *r = fresh();
	/* wrong but fast timings never count */
	add(r, result("wrong", 1, "eval", 0, -1, 1.0, 10.0, 10.0));
	/* build failure: correct null */
	add(r, result("build", 1, "eval", -1, -1, 0, 0, 0));
	/* inconsistent import: correct true but reward -1 (a hack caught after verification) */
	add(r, result("hack", 1, "eval", 1, -1, 1.0, 10.0, 10.0));
	add_timed(r, "good", 1, 0.5, 0.5);
	json_t *j = report_json(r);
	const json_t *l1 = row(j, 1);
	assert_int_equal(ival(l1, "passed"), 1);
	assert_int_equal(ival(l1, "faster_eager"), 0);
	assert_int_equal(ival(l1, "n_eager"), 1);
	assert_near(rval(l1, "geomean_eager"), 0.5);
	assert_near(fast(j, "eager", 0), 0.25); /* fast_0: 1 of 4 */
	json_decref(j);
	report_free(r);
}

static void test_missing_baselines(void **state)
{
	(void)state;
	struct report *r = fresh();
	json_t *res;
	/* torch.compile failed: eager counts, compile does not */
	add(r, result("nocompile", 1, "eval", 1, 2, 1.0, 2.0, FAILED));
	/* no baselines at all */
	add(r, result("none", 1, "eval", 1, 1, 1.0, ABSENT, ABSENT));
	/* medians missing: timing.speedup_* is used */
	res = result("fallback", 1, "eval", 1, 3, 0, 0, 0);
	json_object_set_new(json_object_get(res, "timing"), "speedup_eager", json_real(8.0));
	json_object_set_new(json_object_get(res, "timing"), "speedup_compile", json_null());
	add(r, res);
	/* medians present: they win over a disagreeing speedup field */
	res = result("medians", 1, "eval", 1, 3, 2.0, 4.0, 1.0);
	json_object_set_new(json_object_get(res, "timing"), "speedup_eager", json_real(100.0));
	add(r, res);
	/* non-positive or huge timings count as untimed */
	res = result("zero", 1, "eval", 1, 1, 1e-300, ABSENT, ABSENT);
	json_object_set_new(json_object_get(res, "timing"), "eager",
			    json_pack("{s:f}", "median_ms", -5.0));
	json_object_set_new(json_object_get(res, "timing"), "compile",
			    json_pack("{s:f}", "median_ms", 1e300)); /* ratio overflows */
	add(r, res);
	json_t *j = report_json(r);
	const json_t *l1 = row(j, 1);
	assert_int_equal(ival(l1, "tasks"), 5);
	assert_int_equal(ival(l1, "passed"), 5);
	assert_int_equal(ival(l1, "timed"), 3);
	assert_int_equal(ival(l1, "n_eager"), 3);                   /* 2, 8, 2 */
	assert_near(rval(l1, "geomean_eager"), cbrt(2.0 * 8.0 * 2.0));
	assert_int_equal(ival(l1, "n_compile"), 1);                 /* 0.5 */
	assert_near(rval(l1, "geomean_compile"), 0.5);
	assert_int_equal(ival(l1, "faster_eager"), 3);
	assert_int_equal(ival(l1, "faster_compile"), 0);
	assert_near(rval(l1, "faster_compile_rate"), 0.0);
	json_decref(j);
	report_free(r);
}

static void test_untimed_modes(void **state)
{
	(void)state;
	struct report *r = fresh();
	add(r, result("v", 2, "verify", 1, 0, 0, 0, 0));
	add(r, result("p", 2, "profile", 1, 3, 1.0, 2.0, 2.0)); /* timed, but not an eval */
	add(r, result("c", 2, "compile", -1, 0, 0, 0, 0));
	json_t *j = report_json(r);
	const json_t *l2 = row(j, 2);
	assert_int_equal(ival(l2, "passed"), 2);
	assert_int_equal(ival(l2, "timed"), 0);
	assert_int_equal(ival(l2, "faster_eager"), 0);
	assert_true(json_is_null(json_object_get(l2, "geomean_compile")));
	assert_near(fast(j, "eager", 0), 0.0); /* passed but never timed */
	json_decref(j);
	report_free(r);
}

static void test_geomeans(void **state)
{
	(void)state;
	struct report *r = fresh();
	add_timed(r, "a", 1, 2.0, 0.5);
	add_timed(r, "b", 1, 8.0, 2.0);
	add_timed(r, "c", 2, 1e-3, 1e3);
	add_timed(r, "d", 2, 1e3, 1e-3);
	json_t *j = report_json(r);
	assert_near(rval(row(j, 1), "geomean_eager"), 4.0);
	assert_near(rval(row(j, 1), "geomean_compile"), 1.0);
	assert_true(fabs(rval(row(j, 2), "geomean_eager") - 1.0) < 1e-12);
	assert_true(fabs(rval(json_object_get(j, "all"), "geomean_eager") -
			 pow(2.0 * 8.0, 0.25)) < 1e-12);
	json_decref(j);
	report_free(r);
}

static void test_fast_p_boundaries(void **state)
{
	(void)state;
	struct report *r = fresh();
	/* speed-ups vs eager: 0.5, 1 (exactly), 1.0000001, 2 (exactly), 2.5; one failed task */
	add(r, result("s05", 1, "eval", 1, 1, 2.0, 1.0, 2.0));
	add(r, result("s1", 1, "eval", 1, 1, 1.0, 1.0, 1.0));
	add(r, result("s1+", 1, "eval", 1, 2, 1.0, 1.0000001, 1.0000001));
	add(r, result("s2", 1, "eval", 1, 3, 0.5, 1.0, 1.0));
	add(r, result("s25", 1, "eval", 1, 3, 1.0, 2.5, 2.5));
	add(r, result("bad", 1, "eval", 0, -1, 0, 0, 0));
	json_t *j = report_json(r);
	const json_t *p = json_object_get(json_object_get(j, "fast_p"), "p");
	assert_int_equal(json_array_size(p), REPORT_FAST_P_POINTS);
	/* the grid is exact at whole numbers */
	assert_true(json_real_value(json_array_get(p, 0)) == 0.0);
	assert_true(json_real_value(json_array_get(p, 10)) == 1.0);
	assert_true(json_real_value(json_array_get(p, 20)) == 2.0);
	assert_true(json_real_value(json_array_get(p, 30)) == 3.0);
	assert_true(json_real_value(json_array_get(p, 40)) == REPORT_FAST_P_MAX);
	assert_near(fast(j, "eager", 0), 5.0 / 6);  /* every timed task */
	assert_near(fast(j, "eager", 5), 4.0 / 6);  /* p = 0.5: 0.5 itself is out */
	assert_near(fast(j, "eager", 10), 3.0 / 6); /* p = 1: exactly 1 is out */
	assert_near(fast(j, "eager", 20), 1.0 / 6); /* p = 2: exactly 2 is out */
	assert_near(fast(j, "eager", 25), 0.0);     /* p = 2.5 */
	assert_near(fast(j, "compile", 10), 3.0 / 6);
	assert_near(fast(j, "compile", 20), 1.0 / 6);
	/* fast_1 equals the faster-than rate; the per-level curve equals the overall one here */
	assert_near(fast(j, "eager", 10), rval(json_object_get(j, "all"), "faster_eager_rate"));
	assert_near(json_number_value(json_array_get(
			    json_object_get(json_object_get(row(j, 1), "fast_p"), "eager"), 20)),
		    1.0 / 6);
	/* fast_p never increases */
	for (size_t i = 1; i < REPORT_FAST_P_POINTS; i++)
		assert_true(fast(j, "eager", i) <= fast(j, "eager", i - 1));
	json_decref(j);
	report_free(r);
}

static void expect_invalid(struct report *r, const char *text, const char *msg_part)
{
	struct ca_diag d = {{0}};
	json_error_t err;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &err);
	size_t before = report_results(r);
	assert_non_null(v);
	assert_int_not_equal(report_add(r, v, &d), 0);
	if (!strstr(d.msg, msg_part))
		fail_msg("'%s' lacks '%s'", d.msg, msg_part);
	assert_null(strchr(d.msg, '\n'));
	assert_int_equal(report_results(r), before);
	json_decref(v);
}

static void test_invalid_results(void **state)
{
	(void)state;
	struct report *r = fresh();
	char id[REPORT_MAX_ID + 64];
	expect_invalid(r, "[1, 2]", "JSON object");
	expect_invalid(r, "{\"task\": {\"id\": \"x\"}}", "schema is missing");
	expect_invalid(r, "{\"schema\": \"x\\ny\", \"task\": {\"id\": \"x\"}}", "schema is 'x?y'");
	expect_invalid(r, "{\"schema\": \"cuda-agent.result/1\"}", "no task object");
	expect_invalid(r, "{\"schema\": \"cuda-agent.result/1\", \"task\": {}}", "no task.id");
	expect_invalid(r, "{\"schema\": \"cuda-agent.result/1\", \"task\": {\"id\": \"\"}}",
		       "no task.id");
	expect_invalid(r, "{\"schema\": \"cuda-agent.result/1\", \"task\": {\"id\": \"x\", "
			  "\"level\": \"1\"}}", "task.level");
	expect_invalid(r, "{\"schema\": \"cuda-agent.result/1\", \"task\": {\"id\": \"x\", "
			  "\"level\": -1}}", "task.level");
	expect_invalid(r, "{\"schema\": \"cuda-agent.result/1\", \"task\": {\"id\": \"x\", "
			  "\"level\": 1.5}}", "task.level");
	memset(id, 'a', sizeof id);
	id[sizeof id - 1] = '\0';
	json_t *big = result(id, 1, "eval", 1, 1, 1, 1, 1);
	struct ca_diag d;
	assert_int_equal(report_add(r, big, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "longer than"));
	json_decref(big);
	/* a task that failed to load has only task.dir */
	json_t *dir_only = json_pack("{s:s, s:s, s:{s:s}, s:b}", "schema", "cuda-agent.result/1",
				     "mode", "eval", "task", "dir", "tasks/broken", "correct", 0);
	assert_int_equal(report_add(r, dir_only, &d), 0);
	json_decref(dir_only);
	assert_int_equal(report_tasks(r), 1);
	report_free(r);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_jsonl(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d;
	struct report *r = fresh();
	static const char good[] =
		"{\"schema\":\"cuda-agent.result/1\",\"mode\":\"eval\",\"task\":{\"id\":\"a\","
		"\"level\":1},\"correct\":true,\"reward\":3,\"timing\":{\"candidate\":"
		"{\"median_ms\":1},\"eager\":{\"median_ms\":2},\"compile\":{\"median_ms\":4}}}\r\n"
		"\n   \n"
		"{\"schema\":\"cuda-agent.result/1\",\"mode\":\"eval\",\"task\":{\"id\":\"b\"},"
		"\"correct\":false,\"reward\":-1}";          /* no final newline */
	tmp_path(path, sizeof path, "good.jsonl");
	write_text(path, good);
	assert_int_equal(report_add_jsonl(r, path, &d), 0);
	assert_int_equal(report_tasks(r), 2);

	tmp_path(path, sizeof path, "bad.jsonl");
	write_text(path, "{\"schema\":\"cuda-agent.result/1\",\"task\":{\"id\":\"c\"}}\n\n"
			 "{\"schema\": 1, \"task\": {\"id\": \"d\"}}\n");
	assert_int_not_equal(report_add_jsonl(r, path, &d), 0);
	assert_non_null(strstr(d.msg, "bad.jsonl:3: schema is not a string"));
	assert_int_equal(report_tasks(r), 3); /* the line before it stays */

	tmp_path(path, sizeof path, "notjson.jsonl");
	write_text(path, "{\"schema\":\n");
	assert_int_equal(report_add_jsonl(r, path, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "notjson.jsonl:1: not JSON"));
	assert_null(strchr(d.msg, '\n'));

	tmp_path(path, sizeof path, "missing.jsonl");
	assert_int_equal(report_add_jsonl(r, path, &d), CA_ERR_NOTFOUND);
	assert_int_not_equal(report_add_jsonl(r, tmpdir, &d), 0); /* a directory */

	/* a line one byte over the cap, after a good one */
	tmp_path(path, sizeof path, "long.jsonl");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"schema\":\"cuda-agent.result/1\",\"task\":{\"id\":\"e\"}}\n", f);
	for (size_t i = 0; i < (size_t)REPORT_MAX_LINE + 1; i++)
		fputc(' ', f);
	fputs("\n", f);
	fclose(f);
	assert_int_equal(report_add_jsonl(r, path, &d), CA_ERR_LIMIT);
	assert_non_null(strstr(d.msg, "long.jsonl:2: the line is longer than"));

	/* a line of exactly the cap is read (blank: skipped) */
	f = fopen(path, "w");
	assert_non_null(f);
	for (size_t i = 0; i < (size_t)REPORT_MAX_LINE; i++)
		fputc(' ', f);
	fclose(f);
	assert_int_equal(report_add_jsonl(r, path, &d), 0);
	report_free(r);
}

static char *printed(const struct report *r)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	report_print(r, f);
	fclose(f);
	return buf;
}

static void test_table(void **state)
{
	(void)state;
	struct report *r = fresh();
	add_timed(r, "a", 1, 2.0, 0.5);
	add_timed(r, "b", 1, 8.0, 2.0);
	add(r, result("c", 12, "eval", 0, -1, 0, 0, 0));
	add(r, result("d", NO_LEVEL, "verify", 1, 0, 0, 0, 0));
	char *t = printed(r);
	const char *want[] = {
		"level  tasks  pass %  faster than eager %  faster than compile %  "
		"geomean vs eager (n)  geomean vs compile (n)\n",
		"1          2   100.0                100.0                   50.0            "
		"4.000x (2)              1.000x (2)\n",
		"12         1     0.0                  0.0                    0.0                 "
		"- (0)                   - (0)\n",
		"other      1   100.0                  0.0                    0.0                 "
		"- (0)                   - (0)\n",
		"all        4    75.0                 50.0                   25.0            "
		"4.000x (2)              1.000x (2)\n",
		"4 tasks from 4 results (0 replaced by a later result for the same task)\n",
	};
	const char *p = t;
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		if (strncmp(p, want[i], strlen(want[i])) != 0)
			fail_msg("line %zu:\n%s\nwanted:\n%s", i, t, want[i]);
		p += strlen(want[i]);
	}
	assert_string_equal(p, "");
	free(t);
	report_free(r);
}

static size_t occurrences(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* Degenerate tasks (task.degenerate in the results) are listed after the table and in JSON. */
static void test_degenerate_tasks(void **state)
{
	(void)state;
	struct report *r = fresh();
	json_t *a = result("b/gn_mean", 2, "eval", 1, 1, 1.0, 2.0, 2.0);
	json_t *b = result("a/x_minus_x", 1, "eval", 1, 1, 1.0, 2.0, 2.0);
	json_object_set_new(json_object_get(a, "task"), "degenerate",
			    json_pack("{s:s, s:b, s:n}", "kind", "zeros", "params_perturbed", 1,
				      "after"));
	json_object_set_new(json_object_get(b, "task"), "degenerate",
			    json_pack("{s:s, s:b, s:n}", "kind", "seed_invariant",
				      "params_perturbed", 0, "after"));
	add(r, a);
	add(r, b);
	add_timed(r, "c/plain", 1, 2.0, 2.0);
	char *t = printed(r);
	const char *tail = strstr(t, "2 degenerate tasks");
	assert_non_null(tail);
	assert_non_null(strstr(tail, "  a/x_minus_x: seed_invariant, a kernel that does not "
				     "compute can pass it\n"));
	assert_non_null(strstr(tail, "  b/gn_mean: zeros, verified with perturbed parameters\n"));
	assert_null(strstr(t, "c/plain"));
	assert_true(strstr(tail, "a/x_minus_x") < strstr(tail, "b/gn_mean")); /* level order */
	free(t);
	json_t *j = report_json(r);
	const json_t *deg = json_object_get(j, "degenerate");
	assert_int_equal(json_array_size(deg), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(deg, 1), "id")),
			    "b/gn_mean");
	assert_false(json_is_true(json_object_get(json_array_get(deg, 1), "passable")));
	assert_true(json_is_true(json_object_get(json_array_get(deg, 0), "passable")));
	json_decref(j);
	report_free(r);
	r = fresh();
	add_timed(r, "c/plain", 1, 2.0, 2.0);
	t = printed(r);
	assert_null(strstr(t, "degenerate"));
	free(t);
	j = report_json(r);
	assert_int_equal(json_array_size(json_object_get(j, "degenerate")), 0);
	json_decref(j);
	report_free(r);
}

static void test_html(void **state)
{
	(void)state;
	struct report *r = fresh();
	struct ca_diag d;
	char *html = NULL, path[PATH_MAX];
	size_t len = 0;
	add_timed(r, "kb/1_relu", 1, 2.0, 1.5);
	add_timed(r, "kb/2_fused", 2, 0.5, 0.25);
	add(r, result("<script>alert(1)</script>&\"'\x01", 3, "eval", 0, -1, 0, 0, 0));
	assert_int_equal(report_html(r, "T <i>x</i> & \"q\"", &html, &len, &d), 0);
	assert_int_equal(strlen(html), len);
	assert_non_null(strstr(html, "<title>T &lt;i&gt;x&lt;/i&gt; &amp; &quot;q&quot;</title>"));
	assert_non_null(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#39;&#xfffd;"));
	assert_null(strstr(html, "<script"));
	assert_null(strstr(html, "<i>"));
	/* the charts: 3 bars per level and overall, two fast_p lines, 18 histogram bins */
	assert_non_null(strstr(html, "<svg id=\"chart-rates\""));
	assert_non_null(strstr(html, "<svg id=\"chart-fastp\""));
	assert_non_null(strstr(html, "<svg id=\"chart-hist\""));
	assert_int_equal(occurrences(html, "<rect class=\"bar bar-pass\""), 4);
	assert_int_equal(occurrences(html, "<rect class=\"bar bar-compile\""), 4);
	assert_int_equal(occurrences(html, "<polyline id=\"fastp-"), 2);
	assert_int_equal(occurrences(html, "<rect class=\"hist-bar "), 18);
	/* speed-ups 1.5 (bin 10) and 0.25 (bin 4) against compile */
	assert_non_null(strstr(html, "data-bin=\"10\" data-count=\"1\""));
	assert_non_null(strstr(html, "data-bin=\"4\" data-count=\"1\""));
	assert_non_null(strstr(html, "<tr class=\"all\"><td>All</td><td>3</td><td>66.7%</td>"));
	assert_null(strstr(html, "https://"));
	free(html);

	/* written atomically: the file and nothing else */
	char dir[PATH_MAX];
	tmp_path(dir, sizeof dir, "site");
	assert_int_equal(ca_mkdirs(dir, 0755, &d), 0);
	assert_int_equal(ca_path_join(path, sizeof path, dir, "r.html"), 0);
	assert_int_equal(report_write_html(r, path, NULL, &d), 0);
	char *text = NULL;
	assert_int_equal(ca_read_file(path, 1u << 20, &text, &len, &d), 0);
	assert_non_null(strstr(text, "<h1 id=\"title\">cuda-agent benchmark report</h1>"));
	free(text);
	DIR *dh = opendir(dir);
	struct dirent *e;
	int files = 0;
	assert_non_null(dh);
	while ((e = readdir(dh)))
		files += e->d_name[0] != '.';
	closedir(dh);
	assert_int_equal(files, 1);
	assert_int_equal(ca_path_join(path, sizeof path, dir, "no/such/dir.html"), 0);
	assert_int_not_equal(report_write_html(r, path, NULL, &d), 0);
	report_free(r);
}

/* A result carrying KernelBench's verdict (kb: 1 correct, 0 incorrect, -1 null) with its runtime
 * (ms, <= 0: none) and reason (NULL: none); ours: correct with candidate median cand_ms, or not. */
static json_t *kb_result(const char *id, int level, bool ours, double cand_ms, int kb,
			 double kb_ms, const char *why)
{
	json_t *r = result(id, level, "eval", ours ? 1 : 0, ours ? 1 : -1, ours ? cand_ms : 0,
			   ours ? 2 * cand_ms : 0, 0);
	json_t *v = json_pack("{s:i, s:b, s:o, s:o}", "sample_id", 0, "compiled", 1,
			      "correctness", kb < 0 ? json_null() : json_boolean(kb), "runtime",
			      kb_ms > 0 ? json_real(kb_ms) : json_real(-1.0));
	if (why)
		json_object_set_new(v, "reason", json_string(why));
	json_object_set_new(r, "rules", json_string("kernelbench"));
	json_object_set_new(r, "kernelbench_eval", v);
	return r;
}

static const json_t *kb_row(const json_t *j, const char *id)
{
	size_t i;
	const json_t *row_;
	json_array_foreach(json_object_get(j, "kernelbench"), i, row_)
		if (strcmp(json_string_value(json_object_get(row_, "id")), id) == 0)
			return row_;
	fail_msg("no kernelbench row %s", id);
	return NULL;
}

/* The agreement table (both correct, both incorrect, we refuse / KernelBench accepts with our
 * reason, KernelBench refuses / we accept with its reason, no verdict) and the timing ratio: our
 * median over KernelBench's runtime, geometric means per level and overall, hand-computed. */
static void test_kernelbench_agreement(void **state)
{
	(void)state;
	struct report *r = fresh();
	json_t *first = kb_result("level1/1_a", 1, true, 2.0, 1, 1.0, NULL); /* ratio 2 */
	/* KernelBench's own speed-up 3 (its reference 3 ms over its 1 ms); ours 2 (eager 4 ms) */
	json_object_set_new(json_object_get(first, "kernelbench_eval"), "ref_runtime",
			    json_real(3.0));
	add(r, first);
	add(r, kb_result("level1/2_b", 1, true, 1.0, 1, 2.0, NULL));   /* ratio 0.5 */
	add(r, kb_result("level1/3_c", 1, true, 3.0, 1, 1.5, NULL));   /* ratio 2 */
	add(r, kb_result("level2/1_d", 2, true, 8.0, 1, 1.0, NULL));   /* ratio 8 */
	add(r, kb_result("level2/2_e", 2, false, 0, 1, 4.0, NULL));    /* we refuse */
	add(r, kb_result("level2/3_f", 2, true, 1.0, 0, 0, "Output mismatch: (0 / 5)"));
	add(r, kb_result("level3/1_g", 3, false, 0, 0, 0, "RuntimeError: build"));
	add(r, kb_result("level3/2_h", 3, true, 1.0, -1, 0, "lock-file error"));
	add_timed(r, "level3/3_plain", 3, 2.0, 2.0); /* no KernelBench verdict at all */

	json_t *j = report_json(r);
	const json_t *a = json_object_get(j, "kernelbench_agreement");
	assert_int_equal(ival(a, "tasks"), 8);
	assert_int_equal(ival(a, "both_correct"), 4);
	assert_int_equal(ival(a, "both_incorrect"), 1);
	assert_int_equal(ival(a, "we_refuse_kb_accepts"), 1);
	assert_int_equal(ival(a, "kb_refuses_we_accept"), 1);
	assert_int_equal(ival(a, "no_verdict"), 1);
	const json_t *timing = json_object_get(a, "timing");
	assert_int_equal(json_array_size(timing), 3); /* levels 1 and 2, then all */
	const json_t *l1 = json_array_get(timing, 0), *l2 = json_array_get(timing, 1);
	const json_t *all = json_array_get(timing, 2);
	assert_int_equal(ival(l1, "level"), 1);
	assert_int_equal(ival(l1, "tasks"), 3);
	assert_near(rval(l1, "geomean_ratio"), cbrt(2.0 * 0.5 * 2.0)); /* 1.260 */
	assert_near(rval(l1, "min_ratio"), 0.5);
	assert_near(rval(l1, "max_ratio"), 2.0);
	assert_int_equal(ival(l2, "tasks"), 1);
	assert_near(rval(l2, "geomean_ratio"), 8.0);
	assert_string_equal(json_string_value(json_object_get(all, "level")), "all");
	assert_int_equal(ival(all, "tasks"), 4);
	assert_near(rval(all, "geomean_ratio"), pow(2.0 * 0.5 * 2.0 * 8.0, 0.25)); /* 2 */
	assert_int_equal(ival(all, "speedups"), 1);
	assert_near(rval(all, "geomean_speedup_ours"), 2.0);
	assert_near(rval(all, "geomean_speedup_kb"), 3.0);
	assert_true(json_is_null(json_object_get(l2, "geomean_speedup_kb")));
	assert_near(rval(json_object_get(kb_row(j, "level1/1_a"), "kernelbench"), "speedup"), 3.0);
	const json_t *f = kb_row(j, "level2/3_f");
	assert_true(json_is_true(json_object_get(f, "differ")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(f, "kernelbench"),
							      "reason")),
			    "Output mismatch: (0 / 5)");
	assert_true(json_is_null(json_object_get(f, "time_ratio")));
	assert_near(rval(kb_row(j, "level1/2_b"), "time_ratio"), 0.5);
	assert_near(rval(json_object_get(kb_row(j, "level1/2_b"), "ours"), "median_ms"), 1.0);
	json_decref(j);

	char *t = printed(r);
	assert_non_null(strstr(t, "beside KernelBench's own eval (8 tasks, 2 where the verdicts "
				  "differ):\n"));
	assert_non_null(strstr(t, "correct, 1 ms (ours 2 ms, 2x)"));
	assert_non_null(strstr(t, "incorrect: Output mismatch: (0 / 5)  <- differ"));
	assert_non_null(strstr(t, "    ours correct                                        4"
				  "                    1\n"));
	assert_non_null(strstr(t, "    ours refuses                                        1"
				  "                    1\n"));
	assert_non_null(strstr(t, "    (1 task without KernelBench's verdict)\n"));
	assert_non_null(strstr(t, "  we refuse, KernelBench accepts (1), with our reason:\n"
				  "    level2/2_e: verify.mismatch (kernelbench)\n"));
	assert_non_null(strstr(t, "  KernelBench refuses, we accept (1), with its reason:\n"
				  "    level2/3_f: Output mismatch: (0 / 5)\n"));
	assert_non_null(strstr(t, "    1           3     1.260x     0.500x     2.000x   "
				  "2.000x / 3.000x (1)\n"));
	assert_non_null(strstr(t, "    2           1     8.000x     8.000x     8.000x   -\n"));
	assert_non_null(strstr(t, "    all         4     2.000x     0.500x     8.000x   "
				  "2.000x / 3.000x (1)\n"));
	assert_null(strstr(t, "level3/3_plain"));
	free(t);
	report_free(r);

	/* No KernelBench verdict anywhere: no section, an empty agreement. */
	r = fresh();
	add_timed(r, "level1/1_a", 1, 2.0, 2.0);
	t = printed(r);
	assert_null(strstr(t, "KernelBench"));
	free(t);
	j = report_json(r);
	a = json_object_get(j, "kernelbench_agreement");
	assert_int_equal(ival(a, "tasks"), 0);
	assert_int_equal(json_array_size(json_object_get(a, "timing")), 0);
	json_decref(j);
	report_free(r);
}

static void test_empty(void **state)
{
	(void)state;
	struct report *r = fresh();
	struct ca_diag d;
	char *html = NULL;
	size_t len;
	json_t *j = report_json(r);
	assert_int_equal(json_array_size(json_object_get(j, "levels")), 0);
	assert_true(json_is_null(json_object_get(json_object_get(j, "all"), "pass_rate")));
	assert_near(fast(j, "compile", 0), 0.0);
	json_decref(j);
	char *t = printed(r);
	assert_non_null(strstr(t, "\nall        0       -"));
	free(t);
	assert_int_equal(report_html(r, NULL, &html, &len, &d), 0);
	assert_non_null(strstr(html, "no task was timed against torch.compile"));
	free(html);
	report_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_levels_and_rates),
		cmocka_unit_test(test_replaced_duplicates),
		cmocka_unit_test(test_incorrect_results),
		cmocka_unit_test(test_missing_baselines),
		cmocka_unit_test(test_untimed_modes),
		cmocka_unit_test(test_geomeans),
		cmocka_unit_test(test_fast_p_boundaries),
		cmocka_unit_test(test_invalid_results),
		cmocka_unit_test(test_jsonl),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_degenerate_tasks),
		cmocka_unit_test(test_kernelbench_agreement),
		cmocka_unit_test(test_html),
		cmocka_unit_test(test_empty),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
