/* Unit tests for src/bench/results_db: what counts as done (every key part, final and non-final
 * reasons), replacement, persistence across reopening, iteration in the caller's order, a corrupt
 * row, and a database of another schema version. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/results_db.h"
#include "util/fs.h"

static char tmpdir[PATH_MAX];
static char dbpath[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-results-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	return ca_path_join(dbpath, sizeof dbpath, tmpdir, "bench.sqlite") == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

static void open_db(struct results_db *r)
{
	struct ca_diag d;
	if (results_db_open(r, dbpath, &d) != 0)
		fail_msg("%s", d.msg);
}

static json_t *result_with(const char *code, bool correct)
{
	json_t *r = json_pack("{s:s, s:{s:s, s:s}, s:b}", "schema", "cuda-agent.result/1", "reason",
			      "code", code, "message", "m", "correct", correct);
	assert_non_null(r);
	return r;
}

static void put(struct results_db *r, const struct results_key *k, const char *code)
{
	struct ca_diag d;
	json_t *res = result_with(code, strcmp(code, "ok") == 0);
	if (results_db_put(r, k, res, &d) != 0)
		fail_msg("%s", d.msg);
	json_decref(res);
}

static bool is_done(struct results_db *r, const struct results_key *k)
{
	struct ca_diag d;
	bool done = true;
	if (results_db_done(r, k, &done, &d) != 0)
		fail_msg("%s", d.msg);
	return done;
}

static void test_done_needs_every_key_part(void **state)
{
	struct results_db r;
	const struct results_key k = {"level1/1_relu", "th", "cf", "sf"};
	(void)state;
	open_db(&r);
	assert_false(is_done(&r, &k));
	put(&r, &k, "ok");
	assert_true(is_done(&r, &k));
	const struct results_key other_task = {"level1/2_gelu", "th", "cf", "sf"};
	const struct results_key changed_task = {"level1/1_relu", "th2", "cf", "sf"};
	const struct results_key changed_cand = {"level1/1_relu", "th", "cf2", "sf"};
	const struct results_key changed_settings = {"level1/1_relu", "th", "cf", "sf2"};
	assert_false(is_done(&r, &other_task));
	assert_false(is_done(&r, &changed_task));
	assert_false(is_done(&r, &changed_cand));
	assert_false(is_done(&r, &changed_settings));
	results_db_close(&r);
}

static void test_environment_failures_are_not_final(void **state)
{
	struct results_db r;
	const struct results_key k = {"t", "th", "cf", "sf"};
	(void)state;
	assert_true(results_reason_final("ok"));
	assert_true(results_reason_final("build.error"));
	assert_true(results_reason_final("candidate.missing"));
	assert_true(results_reason_final("verify.mismatch"));
	assert_false(results_reason_final("env.no_gpu"));
	assert_false(results_reason_final("env.bridge"));
	assert_false(results_reason_final("internal"));
	assert_false(results_reason_final(NULL));
	open_db(&r);
	put(&r, &k, "env.no_gpu");
	assert_false(is_done(&r, &k));
	put(&r, &k, "verify.mismatch"); /* replaces the row */
	assert_true(is_done(&r, &k));
	results_db_close(&r);
}

struct seen {
	char keys[8][32];
	char codes[8][32];
	int n;
};

static int remember(const char *key, json_t *result, void *ctx)
{
	struct seen *s = ctx;
	assert_true(s->n < 8);
	snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
	snprintf(s->codes[s->n], sizeof s->codes[0], "%s",
		 json_string_value(json_object_get(json_object_get(result, "reason"), "code")));
	s->n++;
	return 0;
}

static void test_persistence_and_order(void **state)
{
	struct results_db r;
	struct ca_diag d;
	struct seen s = {0};
	char *order[] = {"b", "missing", "a"};
	const struct results_key ka = {"a", "1", "1", "1"}, kb = {"b", "1", "1", "1"};
	(void)state;
	open_db(&r);
	put(&r, &ka, "ok");
	put(&r, &kb, "build.error");
	results_db_close(&r);
	open_db(&r); /* reopened: still there */
	assert_int_equal(results_db_each(&r, order, 3, remember, &s, &d), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.keys[0], "b");
	assert_string_equal(s.codes[0], "build.error");
	assert_string_equal(s.keys[1], "a");
	assert_string_equal(s.codes[1], "ok");
	results_db_close(&r);
}

static void test_corrupt_row_and_schema(void **state)
{
	struct results_db r;
	struct ca_diag d;
	struct seen s = {0};
	char *order[] = {"x"};
	sqlite3 *db = NULL;
	(void)state;
	open_db(&r);
	results_db_close(&r);
	assert_int_equal(sqlite3_open(dbpath, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "INSERT INTO results VALUES ('x','1','1','1','ok',0,'{not json')",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	open_db(&r);
	assert_int_equal(results_db_each(&r, order, 1, remember, &s, &d), CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "x"));
	results_db_close(&r);

	assert_int_equal(sqlite3_open(dbpath, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(results_db_open(&r, dbpath, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "schema version 99"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_done_needs_every_key_part, setup, teardown),
		cmocka_unit_test_setup_teardown(test_environment_failures_are_not_final, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_persistence_and_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_row_and_schema, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
