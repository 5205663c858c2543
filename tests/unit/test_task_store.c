/* Unit tests for src/store/task_store: creating and opening a store, the schema version, put/get
 * with NULL level and data_source, replacing, the list order and filters, transactions, two
 * handles, a newer schema and a non-database refused, the default directory, and record
 * directories that would leave the store. */
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

#include "store/task_store.h"
#include "util/fs.h"
#include "util/str.h"

#define TEST_NAME "task-store"
#include "helpers.h"

#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("'%s' does not contain '%s'", (hay), (needle));            \
	} while (0)

static char root[PATH_MAX];

static int setup(void **state)
{
	if (setup_dir(state))
		return -1;
	tmp_path(root, sizeof root, "store");
	return 0;
}

static void open_store(struct task_store *s, bool create)
{
	struct ca_diag d;
	if (task_store_open(s, root, create, &d) != 0)
		fail_msg("%s", d.msg);
	assert_non_null(s->db);
}

static struct task_record record(const char *id, const char *source, int level,
				 const char *name)
{
	struct task_record r;
	memset(&r, 0, sizeof r);
	ca_strlcpy(r.id, id, sizeof r.id);
	ca_strlcpy(r.source, source, sizeof r.source);
	r.level = level;
	ca_strlcpy(r.name, name, sizeof r.name);
	ca_strlcpy(r.dir, id, sizeof r.dir);
	ca_strlcpy(r.hash, "0123456789abcdef0123456789abcdef", sizeof r.hash);
	r.imported_at = 1700000000.5;
	return r;
}

static void put(struct task_store *s, const struct task_record *r)
{
	struct ca_diag d;
	if (task_store_put(s, r, &d) != 0)
		fail_msg("%s", d.msg);
}

static int pragma_int(struct task_store *s, const char *sql)
{
	sqlite3_stmt *st;
	int v;
	assert_int_equal(sqlite3_prepare_v2(s->db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

static void test_create_and_reopen(void **state)
{
	(void)state;
	struct task_store s;
	struct ca_diag d;
	char db[PATH_MAX];

	/* without create, a store that does not exist is NOTFOUND and nothing is made */
	assert_int_equal(task_store_open(&s, root, false, &d), CA_ERR_NOTFOUND);
	assert_null(s.db);
	assert_contains(d.msg, "no task store");
	assert_false(ca_is_dir(root));
	assert_int_equal(ca_mkdirs(root, 0755, &d), 0);
	assert_int_equal(task_store_open(&s, root, false, &d), CA_ERR_NOTFOUND);
	assert_int_equal(ca_path_join(db, sizeof db, root, CA_TASK_STORE_DB), 0);
	assert_false(ca_is_file(db));

	open_store(&s, true);
	assert_true(ca_is_file(db));
	assert_true(s.root[0] == '/');
	assert_int_equal(pragma_int(&s, "PRAGMA user_version"), CA_TASK_STORE_SCHEMA);
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_prepare_v2(s.db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	struct task_record r = record("kernelbench/level1/19_ReLU", "kernelbench", 1, "19_ReLU");
	put(&s, &r);
	task_store_close(&s);
	assert_null(s.db);
	task_store_close(&s); /* twice is harmless */

	open_store(&s, false); /* now it exists */
	struct task_record got;
	assert_int_equal(task_store_get(&s, r.id, &got, &d), 0);
	assert_string_equal(got.name, "19_ReLU");
	task_store_close(&s);
}

static void test_put_get_fields(void **state)
{
	(void)state;
	struct task_store s;
	struct ca_diag d;
	struct task_record got;

	open_store(&s, true);
	assert_int_equal(task_store_get(&s, "nope", &got, &d), CA_ERR_NOTFOUND);

	struct task_record a = record("kernelbench/level2/3_X", "kernelbench", 2, "3_X");
	ca_strlcpy(a.ops, "[\"torch.relu\"]", sizeof a.ops);
	ca_strlcpy(a.data_source, "gen-v1", sizeof a.data_source);
	put(&s, &a);
	memset(&got, 0x55, sizeof got);
	assert_int_equal(task_store_get(&s, a.id, &got, &d), 0);
	assert_string_equal(got.id, a.id);
	assert_string_equal(got.source, "kernelbench");
	assert_int_equal(got.level, 2);
	assert_string_equal(got.name, "3_X");
	assert_string_equal(got.dir, "kernelbench/level2/3_X");
	assert_string_equal(got.hash, a.hash);
	assert_string_equal(got.ops, "[\"torch.relu\"]");
	assert_string_equal(got.data_source, "gen-v1");
	assert_true(got.imported_at == 1700000000.5);

	/* no level, no ops, no data_source: NULL / '[]' / NULL in the table, -1 / "[]" / "" back */
	struct task_record b = record("ops6k/000001_relu", "ops6k", -1, "000001_relu");
	put(&s, &b);
	assert_int_equal(task_store_get(&s, b.id, &got, &d), 0);
	assert_int_equal(got.level, -1);
	assert_string_equal(got.ops, "[]");
	assert_string_equal(got.data_source, "");
	assert_int_equal(pragma_int(&s, "SELECT count(*) FROM tasks WHERE level IS NULL AND "
				       "data_source IS NULL AND ops = '[]'"),
			 1);
	/* level 0 is a level, not "none" */
	struct task_record z = record("kernelbench/level0/1_Z", "kernelbench", 0, "1_Z");
	put(&s, &z);
	assert_int_equal(task_store_get(&s, z.id, &got, &d), 0);
	assert_int_equal(got.level, 0);

	/* replace: one row per id, the new values win */
	a.level = 3;
	ca_strlcpy(a.hash, "ffffffffffffffffffffffffffffffff", sizeof a.hash);
	put(&s, &a);
	assert_int_equal(task_store_get(&s, a.id, &got, &d), 0);
	assert_int_equal(got.level, 3);
	assert_string_equal(got.hash, "ffffffffffffffffffffffffffffffff");
	assert_int_equal(pragma_int(&s, "SELECT count(*) FROM tasks"), 3);

	/* a record without id, source, dir or hash is refused */
	struct task_record bad = record("x", "s", 1, "x");
	bad.hash[0] = '\0';
	assert_int_equal(task_store_put(&s, &bad, &d), CA_ERR_INVALID);
	bad = record("", "s", 1, "x");
	assert_int_equal(task_store_put(&s, &bad, &d), CA_ERR_INVALID);
	task_store_close(&s);
}

struct seen {
	char ids[16][CA_TASK_ID_MAX];
	size_t n;
	size_t stop_after; /* 0: never */
};

static int visit(const struct task_record *r, void *arg)
{
	struct seen *s = arg;
	assert_true(s->n < 16);
	ca_strlcpy(s->ids[s->n++], r->id, sizeof s->ids[0]);
	return s->stop_after && s->n == s->stop_after ? 42 : 0;
}

static void list(struct task_store *s, const struct task_filter *f, struct seen *out)
{
	struct ca_diag d;
	memset(out, 0, sizeof *out);
	if (task_store_list(s, f, visit, out, &d) != 0)
		fail_msg("%s", d.msg);
}

static void test_list_order_and_filters(void **state)
{
	(void)state;
	struct task_store s;
	struct ca_diag d;
	struct seen got;
	struct task_record rs[] = {
		record("ops6k/000010_b", "ops6k", -1, "000010_b"),
		record("kernelbench/level1/10_A", "kernelbench", 1, "10_A"),
		record("kernelbench/level2/1_D", "kernelbench", 2, "1_D"),
		record("kernelbench/level1/2_B", "kernelbench", 1, "2_B"),
		record("ops6k/000002_a", "ops6k", -1, "000002_a"),
		record("kernelbench/level1/1_C", "kernelbench", 1, "1_C"),
	};

	open_store(&s, true);
	list(&s, NULL, &got);
	assert_int_equal(got.n, 0); /* empty store */
	for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
		put(&s, &rs[i]);

	list(&s, NULL, &got); /* source, level, the name's number (1 < 2 < 10), id */
	assert_int_equal(got.n, 6);
	assert_string_equal(got.ids[0], "kernelbench/level1/1_C");
	assert_string_equal(got.ids[1], "kernelbench/level1/2_B");
	assert_string_equal(got.ids[2], "kernelbench/level1/10_A");
	assert_string_equal(got.ids[3], "kernelbench/level2/1_D");
	assert_string_equal(got.ids[4], "ops6k/000002_a");
	assert_string_equal(got.ids[5], "ops6k/000010_b");

	struct task_filter f = {.source = "ops6k", .level = -1};
	list(&s, &f, &got);
	assert_int_equal(got.n, 2);
	assert_string_equal(got.ids[0], "ops6k/000002_a");
	f = (struct task_filter){.level = 1};
	list(&s, &f, &got);
	assert_int_equal(got.n, 3);
	f = (struct task_filter){.source = "kernelbench", .level = 2};
	list(&s, &f, &got);
	assert_int_equal(got.n, 1);
	assert_string_equal(got.ids[0], "kernelbench/level2/1_D");
	f = (struct task_filter){.source = "ops6k", .level = 1};
	list(&s, &f, &got);
	assert_int_equal(got.n, 0);
	f = (struct task_filter){.level = -1, .name = "2_B"};
	list(&s, &f, &got);
	assert_int_equal(got.n, 1);
	assert_string_equal(got.ids[0], "kernelbench/level1/2_B");
	f = (struct task_filter){.source = "KernelBench", .level = -1}; /* exact, no case folding */
	list(&s, &f, &got);
	assert_int_equal(got.n, 0);

	/* a nonzero return from the visitor stops the walk and comes back */
	memset(&got, 0, sizeof got);
	got.stop_after = 2;
	assert_int_equal(task_store_list(&s, NULL, visit, &got, &d), 42);
	assert_int_equal(got.n, 2);
	task_store_close(&s);
}

static void test_transactions_and_two_handles(void **state)
{
	(void)state;
	struct task_store a, b;
	struct ca_diag d;
	struct task_record got;
	struct task_record r1 = record("kernelbench/level1/1_A", "kernelbench", 1, "1_A");
	struct task_record r2 = record("kernelbench/level1/2_B", "kernelbench", 1, "2_B");

	open_store(&a, true);
	open_store(&b, false);
	put(&a, &r1);
	assert_int_equal(task_store_get(&b, r1.id, &got, &d), 0); /* visible at once */

	assert_int_equal(task_store_begin(&a, &d), 0);
	put(&a, &r2);
	assert_int_equal(task_store_get(&b, r2.id, &got, &d), CA_ERR_NOTFOUND); /* not yet */
	assert_int_equal(task_store_commit(&a, &d), 0);
	assert_int_equal(task_store_get(&b, r2.id, &got, &d), 0);

	assert_int_equal(task_store_begin(&a, &d), 0);
	struct task_record r3 = record("kernelbench/level1/3_C", "kernelbench", 1, "3_C");
	put(&a, &r3);
	task_store_rollback(&a);
	assert_int_equal(task_store_get(&a, r3.id, &got, &d), CA_ERR_NOTFOUND);
	task_store_rollback(&a); /* without a transaction: harmless */

	/* closing inside a transaction drops it */
	assert_int_equal(task_store_begin(&a, &d), 0);
	put(&a, &r3);
	task_store_close(&a);
	assert_int_equal(task_store_get(&b, r3.id, &got, &d), CA_ERR_NOTFOUND);
	task_store_close(&b);
}

static void test_refusals(void **state)
{
	(void)state;
	struct task_store s;
	struct ca_diag d;
	char db[PATH_MAX];

	/* a database of a newer schema */
	open_store(&s, true);
	assert_int_equal(sqlite3_exec(s.db, "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
	task_store_close(&s);
	assert_int_equal(task_store_open(&s, root, false, &d), CA_ERR_UNSUPPORTED);
	assert_null(s.db);
	assert_contains(d.msg, "schema version 7");
	assert_null(strchr(d.msg, '\n'));

	/* a file that is not a database */
	assert_int_equal(ca_path_join(db, sizeof db, root, CA_TASK_STORE_DB), 0);
	static const char junk[] = "this is not an SQLite database, only text.........................."
				   "...................................................................";
	assert_int_equal(ca_write_file_atomic(db, junk, sizeof junk - 1, &d), 0);
	assert_int_equal(task_store_open(&s, root, true, &d), CA_ERR_IO);
	assert_null(s.db);
	assert_contains(d.msg, root);

	/* a store path under a regular file cannot be created */
	char under[PATH_MAX];
	assert_int_equal(ca_path_join(under, sizeof under, db, "sub"), 0);
	assert_int_not_equal(task_store_open(&s, under, true, &d), 0);
	assert_null(s.db);
}

static void test_task_dir(void **state)
{
	(void)state;
	struct task_store s;
	char out[PATH_MAX], want[PATH_MAX];

	open_store(&s, true);
	struct task_record r = record("kernelbench/level1/19_ReLU", "kernelbench", 1, "19_ReLU");
	assert_int_equal(task_store_task_dir(&s, &r, out, sizeof out), 0);
	assert_int_equal(ca_path_join(want, sizeof want, s.root, "kernelbench/level1/19_ReLU"), 0);
	assert_string_equal(out, want);
	/* a damaged row cannot point outside the store */
	ca_strlcpy(r.dir, "/etc", sizeof r.dir);
	assert_int_equal(task_store_task_dir(&s, &r, out, sizeof out), CA_ERR_INVALID);
	ca_strlcpy(r.dir, "kernelbench/../../etc", sizeof r.dir);
	assert_int_equal(task_store_task_dir(&s, &r, out, sizeof out), CA_ERR_INVALID);
	r.dir[0] = '\0';
	assert_int_equal(task_store_task_dir(&s, &r, out, sizeof out), CA_ERR_INVALID);
	task_store_close(&s);
}

static void setenv_or_unset(const char *name, const char *value)
{
	if (value)
		assert_int_equal(setenv(name, value, 1), 0);
	else
		assert_int_equal(unsetenv(name), 0);
}

static void test_default_dir(void **state)
{
	(void)state;
	static const char *const names[] = {"CUDA_AGENT_TASKS", "XDG_DATA_HOME", "HOME"};
	char *saved[3];
	char out[PATH_MAX];
	struct ca_diag d;

	for (int i = 0; i < 3; i++) {
		const char *v = getenv(names[i]);
		saved[i] = v ? strdup(v) : NULL;
	}
	setenv_or_unset("CUDA_AGENT_TASKS", "/srv/tasks");
	setenv_or_unset("XDG_DATA_HOME", "/x/data");
	setenv_or_unset("HOME", "/home/u");
	assert_int_equal(task_store_default_dir("/opt/s", out, sizeof out, &d), 0);
	assert_string_equal(out, "/opt/s"); /* --store wins */
	assert_int_equal(task_store_default_dir(NULL, out, sizeof out, &d), 0);
	assert_string_equal(out, "/srv/tasks");
	assert_int_equal(task_store_default_dir("", out, sizeof out, &d), 0);
	assert_string_equal(out, "/srv/tasks");
	setenv_or_unset("CUDA_AGENT_TASKS", "");
	assert_int_equal(task_store_default_dir(NULL, out, sizeof out, &d), 0);
	assert_string_equal(out, "/x/data/cuda-agent/tasks");
	setenv_or_unset("XDG_DATA_HOME", NULL);
	assert_int_equal(task_store_default_dir(NULL, out, sizeof out, &d), 0);
	assert_string_equal(out, "/home/u/.local/share/cuda-agent/tasks");
	setenv_or_unset("HOME", NULL);
	assert_int_equal(task_store_default_dir(NULL, out, sizeof out, &d), CA_ERR_NOTFOUND);
	assert_contains(d.msg, "--store");
	char small[8];
	assert_int_equal(task_store_default_dir("/a/long/path", small, sizeof small, &d),
			 CA_ERR_LIMIT);
	for (int i = 0; i < 3; i++) {
		setenv_or_unset(names[i], saved[i]);
		free(saved[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_and_reopen, setup, teardown_dir),
		cmocka_unit_test_setup_teardown(test_put_get_fields, setup, teardown_dir),
		cmocka_unit_test_setup_teardown(test_list_order_and_filters, setup, teardown_dir),
		cmocka_unit_test_setup_teardown(test_transactions_and_two_handles, setup,
						teardown_dir),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown_dir),
		cmocka_unit_test_setup_teardown(test_task_dir, setup, teardown_dir),
		cmocka_unit_test_setup_teardown(test_default_dir, setup, teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
