/* Unit tests for src/store/baseline_cache: get/put/replace/delete, every key component, a
 * corrupt entry, persistence across reopening, and two handles on one database file. */
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

#include "store/baseline_cache.h"
#include "util/fs.h"

static char tmpdir[PATH_MAX];
static char dbpath[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-baseline-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	return ca_path_join(dbpath, sizeof dbpath, tmpdir, "baselines.sqlite") == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

static const struct baseline_key key = {
	.task_hash = "0123456789abcdef0123456789abcdef",
	.gpu_name = "NVIDIA H200",
	.torch_version = "2.11.0+cu130",
	.protocol_version = 1,
};

static json_t *timing_value(double eager_ms, double compile_ms)
{
	json_t *t = json_pack("{s:{s:f, s:i, s:[f, f]}, s:{s:f, s:f}}", "eager", "median_ms",
			      eager_ms, "samples", 2, "samples_ms", eager_ms, eager_ms, "compile",
			      "median_ms", compile_ms, "compile_seconds", 12.5);
	assert_non_null(t);
	return t;
}

static void open_db(struct baseline_cache *c)
{
	struct ca_diag d;
	if (baseline_cache_open(c, dbpath, &d) != 0)
		fail_msg("%s", d.msg);
	assert_non_null(c->db);
}

/* get must hit with a value equal to want */
static void expect_hit(struct baseline_cache *c, const struct baseline_key *k, const json_t *want)
{
	struct ca_diag d;
	json_t *got = (json_t *)0x1;
	int rc = baseline_cache_get(c, k, &got, &d);
	if (rc != 0)
		fail_msg("get: %d %s", rc, d.msg);
	assert_non_null(got);
	assert_true(json_equal(got, want));
	json_decref(got);
}

static void expect_miss(struct baseline_cache *c, const struct baseline_key *k)
{
	struct ca_diag d;
	json_t *got = (json_t *)0x1;
	assert_int_equal(baseline_cache_get(c, k, &got, &d), CA_ERR_NOTFOUND);
	assert_null(got);
}

static void test_get_put(void **state)
{
	(void)state;
	struct baseline_cache c;
	struct ca_diag d;
	json_t *v = timing_value(1.5, 0.75);

	open_db(&c);
	expect_miss(&c, &key);
	assert_int_equal(baseline_cache_put(&c, &key, v, &d), 0);
	expect_hit(&c, &key, v);
	expect_hit(&c, &key, v); /* a get does not consume */
	baseline_cache_close(&c);
	assert_null(c.db);
	baseline_cache_close(&c); /* closing twice is harmless */
	json_decref(v);
}

static void test_key_components(void **state)
{
	(void)state;
	struct baseline_cache c;
	struct ca_diag d;
	json_t *v = timing_value(2.0, 1.0);

	open_db(&c);
	assert_int_equal(baseline_cache_put(&c, &key, v, &d), 0);

	struct baseline_key k = key;
	k.task_hash = "fedcba9876543210fedcba9876543210";
	expect_miss(&c, &k);
	k = key;
	k.gpu_name = "NVIDIA A100-SXM4-80GB";
	expect_miss(&c, &k);
	k = key;
	k.gpu_name = "nvidia h200"; /* exact match, no case folding */
	expect_miss(&c, &k);
	k = key;
	k.torch_version = "2.11.1+cu130";
	expect_miss(&c, &k);
	k = key;
	k.protocol_version = 2;
	expect_miss(&c, &k);
	expect_hit(&c, &key, v);

	/* a second entry under another key lives next to the first */
	json_t *w = timing_value(9.0, 8.0);
	k = key;
	k.protocol_version = 2;
	assert_int_equal(baseline_cache_put(&c, &k, w, &d), 0);
	expect_hit(&c, &k, w);
	expect_hit(&c, &key, v);

	baseline_cache_close(&c);
	json_decref(v);
	json_decref(w);
}

static void test_replace_and_delete(void **state)
{
	(void)state;
	struct baseline_cache c;
	struct ca_diag d;
	json_t *v1 = timing_value(2.0, 1.0), *v2 = timing_value(3.0, 4.0);
	struct baseline_key other = key;
	other.torch_version = "2.10.0";

	open_db(&c);
	assert_int_equal(baseline_cache_put(&c, &key, v1, &d), 0);
	assert_int_equal(baseline_cache_put(&c, &other, v1, &d), 0);
	assert_int_equal(baseline_cache_put(&c, &key, v2, &d), 0);
	expect_hit(&c, &key, v2);
	assert_false(json_equal(v1, v2));

	assert_int_equal(baseline_cache_delete(&c, &key, &d), 0);
	expect_miss(&c, &key);
	expect_hit(&c, &other, v1); /* only that key */
	/* deleting what is absent is not an error */
	assert_int_equal(baseline_cache_delete(&c, &key, &d), 0);

	/* the table holds one row per key */
	sqlite3 *db = c.db;
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM baselines", -1, &st, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 1);
	sqlite3_finalize(st);

	baseline_cache_close(&c);
	json_decref(v1);
	json_decref(v2);
}

static void test_persistence_and_two_handles(void **state)
{
	(void)state;
	struct baseline_cache a, b;
	struct ca_diag d;
	json_t *v1 = timing_value(5.0, 6.0), *v2 = timing_value(7.0, 8.0);

	open_db(&a);
	assert_int_equal(baseline_cache_put(&a, &key, v1, &d), 0);
	baseline_cache_close(&a);
	open_db(&a); /* reopened: still there */
	expect_hit(&a, &key, v1);

	open_db(&b); /* a second handle on the same file sees it, and vice versa */
	expect_hit(&b, &key, v1);
	assert_int_equal(baseline_cache_put(&b, &key, v2, &d), 0);
	expect_hit(&a, &key, v2);
	assert_int_equal(baseline_cache_delete(&a, &key, &d), 0);
	expect_miss(&b, &key);
	struct baseline_key k2 = key;
	k2.task_hash = "00000000000000000000000000000000";
	assert_int_equal(baseline_cache_put(&a, &k2, v1, &d), 0);
	expect_hit(&b, &k2, v1);
	baseline_cache_close(&a);
	baseline_cache_close(&b);

	json_decref(v1);
	json_decref(v2);
}

static void test_corrupt_entry_and_bad_path(void **state)
{
	(void)state;
	struct baseline_cache c;
	struct ca_diag d;
	json_t *got = NULL;

	open_db(&c);
	assert_int_equal(sqlite3_exec(c.db,
				      "INSERT INTO baselines VALUES ('h', 'g', 't', 1, '{not json', 0)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	struct baseline_key k = {.task_hash = "h", .gpu_name = "g", .torch_version = "t",
				 .protocol_version = 1};
	assert_int_equal(baseline_cache_get(&c, &k, &got, &d), CA_ERR_PARSE);
	assert_null(got);
	assert_non_null(strstr(d.msg, "corrupt"));
	/* a put over it repairs the entry */
	json_t *v = timing_value(1.0, 1.0);
	assert_int_equal(baseline_cache_put(&c, &k, v, &d), 0);
	expect_hit(&c, &k, v);
	json_decref(v);
	baseline_cache_close(&c);

	/* a database in a directory that does not exist cannot be opened */
	char bad[PATH_MAX];
	assert_int_equal(ca_path_join(bad, sizeof bad, tmpdir, "missing/dir/b.sqlite"), 0);
	c.db = (void *)0x1;
	assert_int_equal(baseline_cache_open(&c, bad, &d), CA_ERR_IO);
	assert_null(c.db);
	assert_non_null(strstr(d.msg, "b.sqlite"));

	/* nor is a file that is not a database */
	char junk[PATH_MAX];
	assert_int_equal(ca_path_join(junk, sizeof junk, tmpdir, "junk.sqlite"), 0);
	static const char text[] = "this is not an SQLite database, just some text in a file....."
				   "..................................................................";
	assert_int_equal(ca_write_file_atomic(junk, text, sizeof text - 1, &d), 0);
	assert_int_equal(baseline_cache_open(&c, junk, &d), CA_ERR_IO);
	assert_null(c.db);
}

/* path NULL: <cache dir>/baselines.sqlite, with the cache dir from $CUDA_AGENT_CACHE. */
static void test_default_path(void **state)
{
	(void)state;
	struct baseline_cache c;
	struct ca_diag d;
	char cache[PATH_MAX], expect[PATH_MAX];
	const char *old = getenv("CUDA_AGENT_CACHE");
	char *saved = old ? strdup(old) : NULL;

	assert_int_equal(ca_path_join(cache, sizeof cache, tmpdir, "cache"), 0);
	assert_int_equal(setenv("CUDA_AGENT_CACHE", cache, 1), 0);
	int rc = baseline_cache_open(&c, NULL, &d);
	if (saved) {
		setenv("CUDA_AGENT_CACHE", saved, 1);
		free(saved);
	} else {
		unsetenv("CUDA_AGENT_CACHE");
	}
	if (rc != 0)
		fail_msg("%s", d.msg);
	json_t *v = timing_value(1.0, 2.0);
	assert_int_equal(baseline_cache_put(&c, &key, v, &d), 0);
	baseline_cache_close(&c);
	assert_int_equal(ca_path_join(expect, sizeof expect, cache, "baselines.sqlite"), 0);
	assert_true(ca_is_file(expect));
	strcpy(dbpath, expect);
	open_db(&c);
	expect_hit(&c, &key, v);
	baseline_cache_close(&c);
	json_decref(v);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* Export then import into another table: the same entries, the same measured_at; a newer
 * measurement wins unless --replace; a bad line imports nothing and names FILE:LINE. */
static void test_export_import(void **state)
{
	(void)state;
	struct baseline_cache a, b;
	struct baseline_key k2 = key;
	struct ca_diag d;
	char other[PATH_MAX], exported[PATH_MAX], bad[PATH_MAX], *text = NULL;
	size_t n = 0, added, skipped, len = 0;
	json_t *got, *t1 = timing_value(1.5, 0.9), *t2 = timing_value(3.0, 2.0);
	FILE *mem;

	k2.gpu_name = "NVIDIA H100";
	open_db(&a);
	assert_int_equal(baseline_cache_put(&a, &key, t1, &d), 0);
	assert_int_equal(baseline_cache_put(&a, &k2, t2, &d), 0);
	assert_int_equal(ca_path_join(exported, sizeof exported, tmpdir, "out.jsonl"), 0);
	mem = fopen(exported, "w");
	assert_int_equal(baseline_cache_export(&a, mem, &n, &d), 0);
	assert_int_equal(fclose(mem), 0);
	assert_int_equal(n, 2);

	assert_int_equal(ca_path_join(other, sizeof other, tmpdir, "other.sqlite"), 0);
	assert_int_equal(baseline_cache_open(&b, other, &d), 0);
	assert_int_equal(baseline_cache_import(&b, exported, false, &added, &skipped, &d), 0);
	assert_int_equal(added, 2);
	assert_int_equal(skipped, 0);
	assert_int_equal(baseline_cache_get(&b, &key, &got, &d), 0);
	assert_true(json_equal(got, t1));
	json_decref(got);
	assert_int_equal(baseline_cache_get(&b, &k2, &got, &d), 0);
	assert_true(json_equal(got, t2));
	json_decref(got);
	/* the same file again: nothing newer, nothing changes */
	assert_int_equal(baseline_cache_import(&b, exported, false, &added, &skipped, &d), 0);
	assert_int_equal(added, 0);
	assert_int_equal(skipped, 2);
	/* a newer measurement in the table is kept over the file's; --replace takes the file's */
	json_t *t3 = timing_value(9.0, 9.0);
	assert_int_equal(baseline_cache_put(&b, &key, t3, &d), 0);
	assert_int_equal(baseline_cache_import(&b, exported, false, &added, &skipped, &d), 0);
	assert_int_equal(baseline_cache_get(&b, &key, &got, &d), 0);
	assert_true(json_equal(got, t3));
	json_decref(got);
	assert_int_equal(baseline_cache_import(&b, exported, true, &added, &skipped, &d), 0);
	assert_int_equal(added, 2);
	assert_int_equal(baseline_cache_get(&b, &key, &got, &d), 0);
	assert_true(json_equal(got, t1));
	json_decref(got);

	/* a bad line: nothing of the file is imported, the message names the line */
	mem = open_memstream(&text, &len);
	assert_int_equal(baseline_cache_export(&a, mem, &n, &d), 0);
	assert_int_equal(fclose(mem), 0);
	assert_int_equal(ca_path_join(bad, sizeof bad, tmpdir, "bad.jsonl"), 0);
	{
		char *body = malloc(len + 256);
		assert_non_null(body);
		snprintf(body, len + 256, "%s\n{\"task_hash\": \"x\"}\n", text);
		write_file(bad, body);
		free(body);
	}
	baseline_cache_close(&b);
	assert_int_equal(ca_path_join(other, sizeof other, tmpdir, "third.sqlite"), 0);
	assert_int_equal(baseline_cache_open(&b, other, &d), 0);
	assert_int_equal(baseline_cache_import(&b, bad, false, &added, &skipped, &d),
			 CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "bad.jsonl:4"));
	assert_non_null(strstr(d.msg, "gpu_name"));
	assert_int_equal(baseline_cache_get(&b, &key, &got, &d), CA_ERR_NOTFOUND);
	write_file(bad, "{\"task_hash\": \"h\", \"gpu_name\": \"g\", \"torch_version\": \"t\", "
			"\"protocol_version\": 3, \"measured_at\": 1, \"timing\": {}, \"x\": 1}\n");
	assert_int_equal(baseline_cache_import(&b, bad, false, &added, &skipped, &d),
			 CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "unknown key 'x'"));
	write_file(bad, "not json\n");
	assert_int_equal(baseline_cache_import(&b, bad, false, &added, &skipped, &d),
			 CA_ERR_PARSE);
	assert_non_null(strstr(d.msg, "bad.jsonl:1: not JSON"));
	free(text);
	json_decref(t1);
	json_decref(t2);
	json_decref(t3);
	baseline_cache_close(&a);
	baseline_cache_close(&b);
}

static void test_entry_checks(void **state)
{
	(void)state;
	struct baseline_entry e;
	struct ca_diag d;
	static const char *const bad[] = {
		"[]",
		"{\"task_hash\": \"\", \"gpu_name\": \"g\", \"torch_version\": \"t\", "
		"\"protocol_version\": 3, \"measured_at\": 1, \"timing\": {}}",
		"{\"task_hash\": \"h\\u0001\", \"gpu_name\": \"g\", \"torch_version\": \"t\", "
		"\"protocol_version\": 3, \"measured_at\": 1, \"timing\": {}}",
		"{\"task_hash\": \"h\", \"gpu_name\": \"g\", \"torch_version\": \"t\", "
		"\"protocol_version\": 0, \"measured_at\": 1, \"timing\": {}}",
		"{\"task_hash\": \"h\", \"gpu_name\": \"g\", \"torch_version\": \"t\", "
		"\"protocol_version\": 3, \"measured_at\": -1, \"timing\": {}}",
		"{\"task_hash\": \"h\", \"gpu_name\": \"g\", \"torch_version\": \"t\", "
		"\"protocol_version\": 3, \"measured_at\": 1, \"timing\": []}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		json_t *j = json_loads(bad[i], 0, NULL);
		assert_non_null(j);
		assert_int_equal(baseline_entry_from_json(j, &e, &d), CA_ERR_INVALID);
		json_decref(j);
	}
	json_t *ok = json_loads("{\"task_hash\": \"h\", \"gpu_name\": \"NVIDIA H200\", "
				"\"torch_version\": \"2.11\", \"protocol_version\": 3, "
				"\"measured_at\": 1.5, \"timing\": {\"eager\": {}}}",
				0, NULL);
	assert_int_equal(baseline_entry_from_json(ok, &e, &d), 0);
	assert_string_equal(e.gpu_name, "NVIDIA H200");
	assert_int_equal(e.protocol_version, 3);
	assert_true(e.measured_at == 1.5 && json_is_object(e.timing));
	json_decref(ok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_get_put, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_components, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace_and_delete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_persistence_and_two_handles, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_entry_and_bad_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_default_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_export_import, setup, teardown),
		cmocka_unit_test(test_entry_checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
