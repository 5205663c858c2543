/* Unit tests for src/import (and the importer's task.json fields in src/task/task):
 * sanitized names, Ops-6K short op names, the Ops-6K row parser (ops as a list, a JSON string, a
 * Python list, comma-separated; every rejection), KernelBench imports in all three layouts of
 * tests/data/kernelbench_mini, re-imports (unchanged, updated, repaired), hostile file names,
 * JSONL imports of tests/data/ops6k_mini.jsonl and of edge cases (CRLF, an over-long line, no
 * final newline, empty files), parquet through a fake Python (rows, _skip, no pyarrow, a bad
 * file, a crash) and, when $CA_TEST_PYTHON has pyarrow, through the real rows.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/task_store.h"
#include "import/import.h"
#include "task/task.h"
#include "util/fs.h"
#include "util/proc.h"
#include "util/str.h"

#define TEST_NAME "import"
#include "helpers.h"

#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("'%s' does not contain '%s'", (hay), (needle));            \
	} while (0)

#define KB_FIXTURE "tests/data/kernelbench_mini"
#define OPS_FIXTURE "tests/data/ops6k_mini.jsonl"

static const char good_model[] =
	"import torch\n"
	"\n"
	"class Model(torch.nn.Module):\n"
	"    def forward(self, x):\n"
	"        return torch.relu(x)\n"
	"\n"
	"def get_inputs():\n"
	"    return [torch.randn(4, 4)]\n"
	"\n"
	"def get_init_inputs():\n"
	"    return []\n";

static struct import_opts quiet_opts(void)
{
	struct import_opts o;
	import_opts_defaults(&o);
	o.progress_s = 0;
	o.show_skips = 0;
	return o;
}

static void write_at(const char *dir, const char *name, const void *data, size_t len)
{
	char path[PATH_MAX], parent[PATH_MAX];
	struct ca_diag d;
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	ca_strlcpy(parent, path, sizeof parent);
	*strrchr(parent, '/') = '\0';
	assert_int_equal(ca_mkdirs(parent, 0755, &d), 0);
	if (ca_write_file_atomic(path, data, len, &d) != 0)
		fail_msg("%s", d.msg);
}

static void write_text_at(const char *dir, const char *name, const char *text)
{
	write_at(dir, name, text, strlen(text));
}

static void open_store(struct task_store *s, const char *name)
{
	char root[PATH_MAX];
	struct ca_diag d;
	tmp_path(root, sizeof root, name);
	if (task_store_open(s, root, true, &d) != 0)
		fail_msg("%s", d.msg);
}

static void need_fixture(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		fail_msg("%s is missing: run the unit tests from the repository root (make "
			 "test-unit)", path);
}

static void expect_counts(const struct import_stats *st, size_t imported, size_t unchanged,
			  size_t updated, size_t skipped)
{
	if (st->imported != imported || st->unchanged != unchanged || st->updated != updated ||
	    st->skipped != skipped)
		fail_msg("got imported %zu, unchanged %zu, updated %zu, skipped %zu (first: %s); "
			 "expected %zu, %zu, %zu, %zu",
			 st->imported, st->unchanged, st->updated, st->skipped, st->first_skip,
			 imported, unchanged, updated, skipped);
}

static int count_visit(const struct task_record *r, void *arg)
{
	(void)r;
	(*(size_t *)arg)++;
	return 0;
}

static size_t count_tasks(struct task_store *s, const char *source, int level)
{
	struct task_filter f = {.source = source, .level = level};
	struct ca_diag d;
	size_t n = 0;
	assert_int_equal(task_store_list(s, &f, count_visit, &n, &d), 0);
	return n;
}

/* The store's record for id must load as a task with these fields and the record's hash. */
static void expect_task(struct task_store *s, const char *id, const char *source, int level,
			const char *name)
{
	struct task_record r;
	struct task t;
	struct ca_diag d;
	char dir[PATH_MAX];

	if (task_store_get(s, id, &r, &d) != 0)
		fail_msg("no record %s", id);
	assert_int_equal(task_store_task_dir(s, &r, dir, sizeof dir), 0);
	if (task_load(&t, dir, &d) != 0)
		fail_msg("%s: %s", dir, d.msg);
	assert_string_equal(t.id, id);
	assert_string_equal(t.source, source);
	assert_int_equal(t.level, level);
	assert_string_equal(t.name, name);
	assert_string_equal(t.hash, r.hash);
	assert_true(t.atol == 1e-2 && t.rtol == 1e-2);
	assert_string_equal(r.source, source);
	assert_int_equal(r.level, level);
	assert_string_equal(r.name, name);
	assert_string_equal(r.dir, id);
	task_free(&t);
}

/* root holds a .import-* staging directory */
static bool has_staging(const char *root)
{
	DIR *dp = opendir(root);
	struct dirent *e;
	bool found = false;
	assert_non_null(dp);
	while ((e = readdir(dp)) != NULL)
		found |= strncmp(e->d_name, ".import-", 8) == 0;
	closedir(dp);
	return found;
}

/* ---- names ---------------------------------------------------------------------------- */

static void test_sanitize_name(void **state)
{
	(void)state;
	char out[CA_IMPORT_NAME_MAX + 1], a[CA_IMPORT_NAME_MAX + 1], b[CA_IMPORT_NAME_MAX + 1];
	char long_in[400];

	assert_int_equal(import_sanitize_name("19_ReLU", out, sizeof out), 0);
	assert_string_equal(out, "19_ReLU"); /* untouched: no hash suffix */
	assert_int_equal(import_sanitize_name("1_Conv-2d+bias.v2", out, sizeof out), 0);
	assert_string_equal(out, "1_Conv-2d+bias.v2");

	static const char *const hostile[] = {"a/b", "..", ".hidden", "a b", "tab\there",
					      "nl\nx", "\x1b[31mred", "caf\xc3\xa9", "../../etc",
					      "/abs", NULL};
	for (const char *const *h = hostile; *h; h++) {
		assert_int_equal(import_sanitize_name(*h, out, sizeof out), 0);
		assert_null(strchr(out, '/'));
		assert_true(out[0] != '.');
		assert_null(strstr(out, ".."));
		for (const char *p = out; *p; p++)
			if (!(((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			       (*p >= '0' && *p <= '9') || strchr("_.+-", *p))))
				fail_msg("'%s' holds 0x%02x", out, (unsigned char)*p);
	}
	/* changed names carry a hash of the original, so distinct inputs stay distinct */
	assert_int_equal(import_sanitize_name("3_a b", a, sizeof a), 0);
	assert_int_equal(import_sanitize_name("3_a_b", b, sizeof b), 0);
	assert_string_equal(b, "3_a_b");
	assert_string_not_equal(a, b);
	assert_int_equal(strncmp(a, "3_a_b_", 6), 0);
	assert_int_equal(strlen(a), 5 + 9);
	assert_int_equal(import_sanitize_name("3_a\tb", b, sizeof b), 0);
	assert_string_not_equal(a, b);

	/* capped at CA_IMPORT_NAME_MAX, still distinct */
	memset(long_in, 'x', sizeof long_in - 1);
	long_in[sizeof long_in - 1] = '\0';
	assert_int_equal(import_sanitize_name(long_in, a, sizeof a), 0);
	assert_true(strlen(a) <= CA_IMPORT_NAME_MAX);
	long_in[300] = 'y';
	assert_int_equal(import_sanitize_name(long_in, b, sizeof b), 0);
	assert_true(strlen(b) <= CA_IMPORT_NAME_MAX);
	assert_string_not_equal(a, b);

	assert_int_equal(import_sanitize_name("", out, sizeof out), CA_ERR_INVALID);
	char small[8];
	assert_int_equal(import_sanitize_name("abc", small, sizeof small), CA_ERR_LIMIT);
}

static void set_ops(struct ops6k_row *row, const char *const *ops)
{
	memset(row, 0, sizeof *row);
	for (; *ops; ops++)
		ca_strlcpy(row->ops[row->n_ops++], *ops, sizeof row->ops[0]);
}

static void expect_short(const char *const *ops, const char *want)
{
	struct ops6k_row row;
	char out[CA_IMPORT_SHORT_OPS_MAX + 1];
	set_ops(&row, ops);
	ops6k_short_name(&row, out, sizeof out);
	assert_string_equal(out, want);
}

static void test_short_name(void **state)
{
	(void)state;
	expect_short((const char *const[]){"torch.nn.Conv2d", "torch.relu", NULL}, "conv2d_relu");
	expect_short((const char *const[]){"torch.nn.functional.gelu", NULL}, "gelu");
	expect_short((const char *const[]){"torch.relu", "F.relu", "torch.add", NULL},
		     "relu_add"); /* duplicates dropped */
	expect_short((const char *const[]){"relu", "relu6", NULL}, "relu_relu6");
	expect_short((const char *const[]){"torch.nn.ConvTranspose3d", "layer_norm", NULL},
		     "convtranspose3d_layer_norm");
	expect_short((const char *const[]){"../../x/..", "a/b c", NULL}, "x_abc");
	expect_short((const char *const[]){"!!!", "...", NULL}, "task");
	expect_short((const char *const[]){NULL}, "task");
	/* long: cut at CA_IMPORT_SHORT_OPS_MAX, no trailing '_' */
	struct ops6k_row row;
	char out[CA_IMPORT_SHORT_OPS_MAX + 1];
	set_ops(&row, (const char *const[]){"torch.aaaaaaaaaaaaaaaaaaaa", "torch.bbbbbbbbbbbbbbbbbbbb",
					     "torch.cccccccccccccccccccc", NULL});
	ops6k_short_name(&row, out, sizeof out);
	assert_true(strlen(out) <= CA_IMPORT_SHORT_OPS_MAX);
	assert_true(out[strlen(out) - 1] != '_');
	assert_int_equal(strncmp(out, "aaaaaaaaaaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbb", 40), 0);
	set_ops(&row, (const char *const[]){"torch.zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
					     NULL});
	ops6k_short_name(&row, out, sizeof out);
	assert_int_equal(strlen(out), CA_IMPORT_SHORT_OPS_MAX);
}

/* ---- the row parser ------------------------------------------------------------------- */

static void parse_ok(const char *text, struct ops6k_row *row)
{
	struct ca_diag d;
	if (ops6k_parse_row(text, strlen(text), row, &d) != 0)
		fail_msg("%s: %s", text, d.msg);
}

static void parse_bad(const char *text, int code, const char *msg)
{
	struct ops6k_row row;
	struct ca_diag d;
	int rc = ops6k_parse_row(text, strlen(text), &row, &d);
	if (rc != code)
		fail_msg("%s: got %d (%s), expected %d", text, rc, rc ? d.msg : "ok", code);
	assert_contains(d.msg, msg);
	assert_null(strchr(d.msg, '\n'));
	assert_null(row.code);
}

static void test_parse_row(void **state)
{
	(void)state;
	struct ops6k_row row;

	parse_ok("{\"code\": \"x = 1\\n\", \"ops\": [\"torch.relu\", \"torch.add\"], "
		 "\"data_source\": \"gen\", \"extra\": 5}",
		 &row);
	assert_string_equal(row.code, "x = 1\n");
	assert_int_equal(row.code_len, 6);
	assert_int_equal(row.n_ops, 2);
	assert_string_equal(row.ops[0], "torch.relu");
	assert_string_equal(row.ops[1], "torch.add");
	assert_string_equal(row.data_source, "gen");
	ops6k_row_free(&row);
	assert_null(row.code);

	parse_ok("{\"code\": \"c\", \"ops\": \"[\\\"torch.nn.Conv2d\\\", \\\"torch.relu\\\"]\"}",
		 &row); /* a string holding a JSON list */
	assert_int_equal(row.n_ops, 2);
	assert_string_equal(row.ops[0], "torch.nn.Conv2d");
	assert_string_equal(row.data_source, "");
	ops6k_row_free(&row);

	parse_ok("{\"code\": \"c\", \"ops\": \"['torch.nn.LayerNorm', 'F.gelu', \\\"x,y\\\"]\"}",
		 &row); /* a Python list, quotes of both kinds, a comma inside quotes */
	assert_int_equal(row.n_ops, 3);
	assert_string_equal(row.ops[0], "torch.nn.LayerNorm");
	assert_string_equal(row.ops[1], "F.gelu");
	assert_string_equal(row.ops[2], "x,y");
	ops6k_row_free(&row);

	parse_ok("{\"code\": \"c\", \"ops\": \"['it\\\\'s']\"}", &row); /* backslash escape */
	assert_int_equal(row.n_ops, 1);
	assert_string_equal(row.ops[0], "it's");
	ops6k_row_free(&row);

	parse_ok("{\"code\": \"c\", \"ops\": \" torch.sum ,  torch.mul \"}", &row);
	assert_int_equal(row.n_ops, 2);
	assert_string_equal(row.ops[0], "torch.sum");
	assert_string_equal(row.ops[1], "torch.mul");
	ops6k_row_free(&row);

	parse_ok("{\"code\": \"c\", \"ops\": \"[]\", \"data_source\": null}", &row);
	assert_int_equal(row.n_ops, 0);
	ops6k_row_free(&row);
	parse_ok("{\"code\": \"c\", \"ops\": \"[ ]\"}", &row);
	assert_int_equal(row.n_ops, 0);
	ops6k_row_free(&row);
	parse_ok("{\"code\": \"c\", \"ops\": \"\"}", &row);
	assert_int_equal(row.n_ops, 0);
	ops6k_row_free(&row);
	parse_ok("{\"code\": \"c\", \"ops\": null}", &row);
	assert_int_equal(row.n_ops, 0);
	ops6k_row_free(&row);
	parse_ok("{\"code\": \"c\"}", &row);
	assert_int_equal(row.n_ops, 0);
	ops6k_row_free(&row);

	/* exactly CA_TASK_MAX_OPS names is fine; one more is not */
	char many[CA_TASK_MAX_OPS * 8 + 64];
	size_t off = 0;
	ca_appendf(many, sizeof many, &off, "{\"code\": \"c\", \"ops\": [");
	for (int i = 0; i < CA_TASK_MAX_OPS; i++)
		ca_appendf(many, sizeof many, &off, "%s\"op%d\"", i ? "," : "", i);
	ca_appendf(many, sizeof many, &off, "]}");
	parse_ok(many, &row);
	assert_int_equal(row.n_ops, CA_TASK_MAX_OPS);
	ops6k_row_free(&row);
	many[off - 2] = '\0';
	off -= 2;
	ca_appendf(many, sizeof many, &off, ",\"one_more\"]}");
	parse_bad(many, CA_ERR_LIMIT, "more than 64");

	parse_bad("", CA_ERR_PARSE, "invalid JSON");
	parse_bad("{\"code\": \"c\"", CA_ERR_PARSE, "invalid JSON");
	parse_bad("[1, 2]", CA_ERR_PARSE, "not a JSON object");
	parse_bad("\"code\"", CA_ERR_PARSE, "invalid JSON");
	parse_bad("{\"code\": \"a\", \"code\": \"b\"}", CA_ERR_PARSE, "duplicate");
	parse_bad("{\"ops\": []}", CA_ERR_INVALID, "no code");
	parse_bad("{\"code\": null}", CA_ERR_INVALID, "no code");
	parse_bad("{\"code\": 5}", CA_ERR_INVALID, "code is not a string");
	parse_bad("{\"code\": \"\"}", CA_ERR_INVALID, "code is empty");
	parse_bad("{\"code\": \"a\\u0000b\"}", CA_ERR_PARSE, "invalid JSON"); /* NUL refused */
	parse_bad("{\"code\": \"c\", \"ops\": 3}", CA_ERR_INVALID, "neither a list nor a string");
	parse_bad("{\"code\": \"c\", \"ops\": [\"a\", 1]}", CA_ERR_INVALID, "entry 2 is not a string");
	parse_bad("{\"code\": \"c\", \"ops\": [\"\"]}", CA_ERR_INVALID, "entry 1");
	parse_bad("{\"code\": \"c\", \"ops\": [\"a\\nb\"]}", CA_ERR_INVALID, "printable");
	parse_bad("{\"code\": \"c\", \"ops\": \"['a', 'b]\"}", CA_ERR_PARSE, "unterminated");
	parse_bad("{\"code\": \"c\", \"ops\": \"['a' 'b']\"}", CA_ERR_PARSE, "expected ','");
	parse_bad("{\"code\": \"c\", \"ops\": \"['a', 'b'\"}", CA_ERR_PARSE, "closing");
	parse_bad("{\"code\": \"c\", \"ops\": \"a,,b\"}", CA_ERR_INVALID, "entry 2");
	parse_bad("{\"code\": \"c\", \"data_source\": 1}", CA_ERR_INVALID, "data_source");
	parse_bad("{\"code\": \"c\", \"data_source\": \"a\\u001bb\"}", CA_ERR_INVALID,
		  "printable");
	parse_bad("{\"_skip\": \"code is over the limit\\nof 1 MiB\", \"code\": \"c\"}",
		  CA_ERR_INVALID, "code is over the limit?of 1 MiB");

	/* a 200-byte op name; a 300-byte data_source */
	char big[700];
	memset(big, 0, sizeof big);
	strcpy(big, "{\"code\": \"c\", \"ops\": [\"");
	memset(big + strlen(big), 'o', 200);
	strcat(big, "\"]}");
	parse_bad(big, CA_ERR_INVALID, "entry 1");
	memset(big, 0, sizeof big);
	strcpy(big, "{\"code\": \"c\", \"ops\": \"['");
	memset(big + strlen(big), 'o', 200);
	strcat(big, "']\"}");
	parse_bad(big, CA_ERR_INVALID, "longer than");
	memset(big, 0, sizeof big);
	strcpy(big, "{\"code\": \"c\", \"data_source\": \"");
	memset(big + strlen(big), 'd', 300);
	strcat(big, "\"}");
	parse_bad(big, CA_ERR_INVALID, "data_source");

	/* code: 1 MiB is fine, one byte more is not */
	size_t n = CA_IMPORT_MAX_CODE;
	char *text = malloc(n + 64);
	assert_non_null(text);
	strcpy(text, "{\"code\": \"");
	memset(text + 10, 'x', n);
	strcpy(text + 10 + n, "\"}");
	parse_ok(text, &row);
	assert_int_equal(row.code_len, n);
	ops6k_row_free(&row);
	memset(text + 10, 'x', n + 1);
	strcpy(text + 10 + n + 1, "\"}");
	parse_bad(text, CA_ERR_LIMIT, "over the limit");
	free(text);
}

/* ---- task.json: the importer's fields -------------------------------------------------- */

static int load_with_json(const char *json, struct task *t, struct ca_diag *d)
{
	char dir[PATH_MAX];
	tmp_path(dir, sizeof dir, "tj");
	write_text_at(dir, "model.py", good_model);
	write_text_at(dir, "task.json", json);
	return task_load(t, dir, d);
}

static void test_task_json_fields(void **state)
{
	(void)state;
	struct task t;
	struct ca_diag d;

	assert_int_equal(load_with_json("{}", &t, &d), 0);
	assert_int_equal(t.level, -1);
	assert_string_equal(t.name, "");
	assert_string_equal(t.data_source, "");
	task_free(&t);

	assert_int_equal(load_with_json("{\"level\": 0, \"name\": \"19_ReLU\", \"data_source\": "
					"\"gen-v2\", \"ops\": [\"torch.relu\"]}",
					&t, &d),
			 0);
	assert_int_equal(t.level, 0);
	assert_string_equal(t.name, "19_ReLU");
	assert_string_equal(t.data_source, "gen-v2");
	task_free(&t);
	assert_int_equal(load_with_json("{\"level\": 99, \"ops\": [], \"data_source\": null}", &t,
					&d),
			 0);
	assert_int_equal(t.level, 99);
	task_free(&t);
	assert_int_equal(load_with_json("{\"level\": null}", &t, &d), 0);
	assert_int_equal(t.level, -1);
	task_free(&t);

	static const struct {
		const char *json, *msg;
	} bad[] = {
		{"{\"level\": 100}", "'level' must be a whole number 0-99"},
		{"{\"level\": -1}", "'level'"},
		{"{\"level\": 1.5}", "'level'"},
		{"{\"level\": \"1\"}", "'level'"},
		{"{\"level\": true}", "'level'"},
		{"{\"name\": \"\"}", "'name' must be a string"},
		{"{\"name\": 3}", "'name'"},
		{"{\"name\": \"a\\u001b[2Jb\"}", "control characters"},
		{"{\"data_source\": []}", "'data_source'"},
		{"{\"ops\": \"relu\"}", "'ops' must be an array"},
		{"{\"ops\": [1]}", "'ops' entries"},
		{"{\"ops\": [\"\"]}", "'ops' entries"},
		{"{\"label\": 1}", "unknown field 'label'"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = load_with_json(bad[i].json, &t, &d);
		if (rc != CA_ERR_INVALID)
			fail_msg("%s: got %d, expected invalid", bad[i].json, rc);
		assert_contains(d.msg, bad[i].msg);
	}
	/* the known-field list names the new fields */
	assert_int_equal(load_with_json("{\"x\": 1}", &t, &d), CA_ERR_INVALID);
	assert_contains(d.msg, "data_source");
	/* the level is part of the task's identity (task.json bytes are hashed) */
	char h1[CA_HASH_HEX_LEN + 1];
	assert_int_equal(load_with_json("{\"level\": 1}", &t, &d), 0);
	strcpy(h1, t.hash);
	task_free(&t);
	assert_int_equal(load_with_json("{\"level\": 2}", &t, &d), 0);
	assert_string_not_equal(h1, t.hash);
	task_free(&t);
}

/* ---- KernelBench ---------------------------------------------------------------------- */

static void test_kernelbench_fixture_layouts(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct ca_diag d;

	need_fixture(KB_FIXTURE);
	/* the checkout root */
	open_store(&s, "kb-root");
	if (import_kernelbench(&s, KB_FIXTURE, &o, &st, &d) != 0)
		fail_msg("%s", d.msg);
	expect_counts(&st, 5, 0, 0, 2);
	assert_int_equal(st.rows, 7);
	assert_contains(st.first_skip, "level1/7_NoInitInputs.py: ");
	assert_contains(st.first_skip, "get_init_inputs");
	assert_int_equal(count_tasks(&s, "kernelbench", -1), 5);
	assert_int_equal(count_tasks(&s, NULL, 1), 3);
	assert_int_equal(count_tasks(&s, NULL, 2), 1);
	assert_int_equal(count_tasks(&s, NULL, 3), 1);
	expect_task(&s, "kernelbench/level1/19_ReLU", "kernelbench", 1, "19_ReLU");
	expect_task(&s, "kernelbench/level1/2_Scale_rows", "kernelbench", 1, "2_Scale_rows");
	expect_task(&s, "kernelbench/level2/1_Matmul_Add_ReLU", "kernelbench", 2,
		    "1_Matmul_Add_ReLU");
	expect_task(&s, "kernelbench/level3/4_Two_Layer_MLP", "kernelbench", 3, "4_Two_Layer_MLP");
	struct task_record r;
	assert_int_equal(task_store_get(&s, "kernelbench/level1/7_NoInitInputs", &r, &d),
			 CA_ERR_NOTFOUND);
	/* the staging directory is gone */
	assert_false(has_staging(s.root));

	/* again: nothing changes */
	if (import_kernelbench(&s, KB_FIXTURE, &o, &st, &d) != 0)
		fail_msg("%s", d.msg);
	expect_counts(&st, 0, 5, 0, 2);
	task_store_close(&s);

	/* the KernelBench/ folder itself */
	open_store(&s, "kb-folder");
	assert_int_equal(import_kernelbench(&s, KB_FIXTURE "/KernelBench", &o, &st, &d), 0);
	expect_counts(&st, 5, 0, 0, 2);
	task_store_close(&s);

	/* one level folder */
	open_store(&s, "kb-level");
	assert_int_equal(import_kernelbench(&s, KB_FIXTURE "/KernelBench/level1/", &o, &st, &d), 0);
	expect_counts(&st, 3, 0, 0, 2);
	assert_int_equal(count_tasks(&s, NULL, 1), 3);
	assert_int_equal(count_tasks(&s, NULL, 2), 0);
	expect_task(&s, "kernelbench/level1/23_Softmax", "kernelbench", 1, "23_Softmax");
	task_store_close(&s);
}

static void test_kernelbench_reimport(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct ca_diag d;
	char kb[PATH_MAX], path[PATH_MAX];
	char *text = NULL;

	tmp_path(kb, sizeof kb, "kb/KernelBench");
	write_text_at(kb, "level2/1_A.py", good_model);
	write_text_at(kb, "level2/2_B.py", good_model);
	tmp_path(kb, sizeof kb, "kb");
	open_store(&s, "store");
	assert_int_equal(import_kernelbench(&s, kb, &o, &st, &d), 0);
	expect_counts(&st, 2, 0, 0, 0);

	/* the source file changed: updated, and the store has the new text */
	char changed[sizeof good_model + 32];
	snprintf(changed, sizeof changed, "%s# v2\n", good_model);
	write_text_at(kb, "KernelBench/level2/1_A.py", changed);
	assert_int_equal(import_kernelbench(&s, kb, &o, &st, &d), 0);
	expect_counts(&st, 0, 1, 1, 0);
	assert_int_equal(ca_path_join(path, sizeof path, s.root,
				      "kernelbench/level2/1_A/model.py"), 0);
	assert_int_equal(ca_read_file(path, 1 << 20, &text, NULL, &d), 0);
	assert_string_equal(text, changed);
	free(text);

	/* the task in the store was edited by hand: the import restores it */
	assert_int_equal(ca_path_join(path, sizeof path, s.root,
				      "kernelbench/level2/2_B/model.py"), 0);
	assert_int_equal(ca_write_file_atomic(path, "edited", 6, &d), 0);
	assert_int_equal(import_kernelbench(&s, kb, &o, &st, &d), 0);
	expect_counts(&st, 0, 1, 1, 0);
	assert_int_equal(ca_read_file(path, 1 << 20, &text, NULL, &d), 0);
	assert_string_equal(text, good_model);
	free(text);

	/* the task directory was deleted: recreated */
	assert_int_equal(ca_path_join(path, sizeof path, s.root, "kernelbench/level2/2_B"), 0);
	assert_int_equal(ca_remove_tree(path, &d), 0);
	assert_int_equal(import_kernelbench(&s, kb, &o, &st, &d), 0);
	expect_counts(&st, 0, 1, 1, 0);
	expect_task(&s, "kernelbench/level2/2_B", "kernelbench", 2, "2_B");
	task_store_close(&s);
}

static void test_kernelbench_hostile_files(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct ca_diag d;
	char lv[PATH_MAX];

	tmp_path(lv, sizeof lv, "hostile/level4");
	write_text_at(lv, "3_a b.py", good_model);
	write_text_at(lv, "4_\x1b[2Jclear.py", good_model);
	write_text_at(lv, "5_.py", good_model);            /* no name */
	write_text_at(lv, "x_1.py", good_model);           /* no number */
	write_text_at(lv, "1234567_Long.py", good_model);  /* 7 digits */
	write_text_at(lv, "6_Empty.py", "");               /* empty file */
	write_text_at(lv, "7_Dir.py/model.py", good_model); /* a directory named .py: ignored */
	write_text_at(lv, "8_NoModel.py", "def get_inputs(): pass\ndef get_init_inputs(): pass\n");
	static const char nul[] = "class Model\0 def get_inputs def get_init_inputs";
	write_at(lv, "9_Nul.py", nul, sizeof nul - 1);
	char *huge = malloc(CA_IMPORT_MAX_CODE + 2);
	assert_non_null(huge);
	memset(huge, '#', CA_IMPORT_MAX_CODE + 1);
	memcpy(huge, good_model, sizeof good_model - 1);
	write_at(lv, "10_Huge.py", huge, CA_IMPORT_MAX_CODE + 1);
	free(huge);
	write_text_at(lv, "notes.txt", "not python");      /* not .py: not looked at */

	open_store(&s, "store");
	assert_int_equal(import_kernelbench(&s, lv, &o, &st, &d), 0);
	expect_counts(&st, 2, 0, 0, 7);
	assert_int_equal(st.rows, 9);
	assert_contains(st.first_skip, "10_Huge.py");
	assert_contains(st.first_skip, "over the limit");
	assert_null(strchr(st.first_skip, '\x1b'));

	/* the two odd names are sanitized: no space, no escape, a hash suffix */
	size_t n = count_tasks(&s, NULL, 4);
	assert_int_equal(n, 2);
	char name_a[CA_IMPORT_NAME_MAX + 1], id[CA_TASK_ID_MAX + 16];
	assert_int_equal(import_sanitize_name("3_a b", name_a, sizeof name_a), 0);
	snprintf(id, sizeof id, "kernelbench/level4/%s", name_a);
	expect_task(&s, id, "kernelbench", 4, name_a);
	assert_int_equal(import_sanitize_name("4_\x1b[2Jclear", name_a, sizeof name_a), 0);
	snprintf(id, sizeof id, "kernelbench/level4/%s", name_a);
	expect_task(&s, id, "kernelbench", 4, name_a);
	task_store_close(&s);
}

static void test_kernelbench_errors(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct ca_diag d;
	char dir[PATH_MAX];

	open_store(&s, "store");
	tmp_path(dir, sizeof dir, "missing");
	assert_int_equal(import_kernelbench(&s, dir, &o, &st, &d), CA_ERR_NOTFOUND);
	assert_true(st.input_bad);
	assert_contains(d.msg, "does not exist");

	tmp_path(dir, sizeof dir, "nolevels");
	write_text_at(dir, "README.md", "hi");
	write_text_at(dir, "level100/1_A.py", good_model); /* levels are 0..99 */
	write_text_at(dir, "levelx/1_A.py", good_model);
	assert_int_equal(import_kernelbench(&s, dir, &o, &st, &d), CA_ERR_INVALID);
	assert_true(st.input_bad);
	assert_contains(d.msg, "holds no KernelBench levels");

	tmp_path(dir, sizeof dir, "emptylevels/KernelBench/level1");
	assert_int_equal(ca_mkdirs(dir, 0755, &d), 0);
	tmp_path(dir, sizeof dir, "emptylevels");
	assert_int_equal(import_kernelbench(&s, dir, &o, &st, &d), CA_ERR_INVALID);
	assert_true(st.input_bad);
	assert_contains(d.msg, "no .py files");
	assert_int_equal(count_tasks(&s, NULL, -1), 0);
	task_store_close(&s);
}

/* ---- Ops-6K JSONL --------------------------------------------------------------------- */

static void test_ops6k_fixture(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct task_record r;
	struct ca_diag d;
	struct task t;
	char dir[PATH_MAX];

	need_fixture(OPS_FIXTURE);
	open_store(&s, "store");
	if (import_ops6k(&s, OPS_FIXTURE, &o, &st, &d) != 0)
		fail_msg("%s", d.msg);
	expect_counts(&st, 5, 0, 0, 2);
	assert_int_equal(st.rows, 7); /* the blank line is not a row */
	assert_contains(st.first_skip, "row 3 (line 4): ");
	assert_contains(st.first_skip, "class Model");
	expect_task(&s, "ops6k/000000_relu_add", "ops6k", -1, "000000_relu_add");
	expect_task(&s, "ops6k/000001_conv2d_relu", "ops6k", -1, "000001_conv2d_relu");
	expect_task(&s, "ops6k/000002_layernorm_gelu", "ops6k", -1, "000002_layernorm_gelu");
	expect_task(&s, "ops6k/000006_sum_mul", "ops6k", -1, "000006_sum_mul");
	expect_task(&s, "ops6k/000007_task", "ops6k", -1, "000007_task");

	assert_int_equal(task_store_get(&s, "ops6k/000001_conv2d_relu", &r, &d), 0);
	assert_string_equal(r.ops, "[\"torch.nn.Conv2d\",\"torch.relu\"]");
	assert_string_equal(r.data_source, "synthetic-b");
	assert_int_equal(task_store_task_dir(&s, &r, dir, sizeof dir), 0);
	assert_int_equal(task_load(&t, dir, &d), 0);
	assert_string_equal(t.data_source, "synthetic-b");
	assert_non_null(strstr(t.model_py, "nn.Conv2d(channels"));
	task_free(&t);
	assert_int_equal(task_store_get(&s, "ops6k/000002_layernorm_gelu", &r, &d), 0);
	assert_string_equal(r.data_source, "");
	assert_string_equal(r.ops, "[\"torch.nn.LayerNorm\",\"torch.nn.functional.gelu\"]");
	assert_int_equal(task_store_get(&s, "ops6k/000007_task", &r, &d), 0);
	assert_string_equal(r.ops, "[]");

	if (import_ops6k(&s, OPS_FIXTURE, &o, &st, &d) != 0)
		fail_msg("%s", d.msg);
	expect_counts(&st, 0, 5, 0, 2);
	assert_int_equal(count_tasks(&s, "ops6k", -1), 5);
	task_store_close(&s);
}

/* A JSONL row {"code": code, "ops": ops} as one line (no newline); caller frees. */
static char *row_line(const char *code, const char *op)
{
	json_t *j = json_pack("{s:s, s:[s]}", "code", code, "ops", op);
	char *text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	assert_non_null(text);
	return text;
}

static void test_ops6k_jsonl_edges(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct ca_diag d;
	char file[PATH_MAX];
	char *r1 = row_line(good_model, "torch.relu"), *r3 = row_line(good_model, "torch.exp");

	/* CRLF, an over-long line (skipped whole, the next line still read), no final newline */
	size_t long_len = CA_IMPORT_MAX_LINE + 100;
	size_t cap = strlen(r1) + long_len + strlen(r3) + 64;
	char *buf = malloc(cap);
	size_t off = 0;
	assert_non_null(buf);
	off += (size_t)sprintf(buf + off, "%s\r\n", r1);
	off += (size_t)sprintf(buf + off, "{\"code\": \"");
	memset(buf + off, 'x', long_len);
	off += long_len;
	off += (size_t)sprintf(buf + off, "\"}\n   \n%s", r3);
	tmp_path(file, sizeof file, "edges.jsonl");
	write_at(tmpdir, "edges.jsonl", buf, off);
	free(buf);
	open_store(&s, "store");
	if (import_ops6k(&s, file, &o, &st, &d) != 0)
		fail_msg("%s", d.msg);
	expect_counts(&st, 2, 0, 0, 1);
	assert_int_equal(st.rows, 3);
	assert_contains(st.first_skip, "row 1 (line 2): longer than");
	expect_task(&s, "ops6k/000000_relu", "ops6k", -1, "000000_relu");
	expect_task(&s, "ops6k/000003_exp", "ops6k", -1, "000003_exp");

	/* every row bad: the import succeeds with nothing imported (the CLI exits 3) */
	write_text_at(tmpdir, "bad.jsonl", "not json\n{\"code\": 1}\n");
	tmp_path(file, sizeof file, "bad.jsonl");
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), 0);
	expect_counts(&st, 0, 0, 0, 2);
	assert_contains(st.first_skip, "row 0 (line 1): invalid JSON");

	/* an empty file, only blank lines: no rows */
	write_text_at(tmpdir, "empty.jsonl", "");
	tmp_path(file, sizeof file, "empty.jsonl");
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_INVALID);
	assert_true(st.input_bad);
	assert_contains(d.msg, "holds no rows");
	write_text_at(tmpdir, "blank.jsonl", "\n  \n\r\n");
	tmp_path(file, sizeof file, "blank.jsonl");
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_INVALID);
	assert_true(st.input_bad);

	/* missing, a directory */
	tmp_path(file, sizeof file, "nope.jsonl");
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_NOTFOUND);
	assert_true(st.input_bad);
	assert_int_equal(import_ops6k(&s, tmpdir, &o, &st, &d), CA_ERR_INVALID);
	assert_true(st.input_bad);
	assert_contains(d.msg, "not a regular file");

	assert_int_equal(count_tasks(&s, NULL, -1), 2);
	task_store_close(&s);
	free(r1);
	free(r3);
}

/* ---- parquet through a fake Python ---------------------------------------------------- */

/* A shell script standing in for python: checks its command line and PYTHONPATH, then behaves
 * as $FAKE_ROWS says (the rows to print are in <tmpdir>/rows.out). */
static const char fake_python[] =
	"#!/bin/sh\n"
	"[ \"$1\" = -m ] && [ \"$2\" = cuda_agent_bridge.rows ] && [ -n \"$3\" ] || "
	"{ echo \"bad argv: $*\" >&2; exit 9; }\n"
	"case \"$PYTHONPATH\" in \"$CUDA_AGENT_ROOT/python\"*) ;; "
	"*) echo \"bad PYTHONPATH $PYTHONPATH\" >&2; exit 9;; esac\n"
	"head -c 4 \"$3\" | grep -q PAR1 || { echo 'not given the file' >&2; exit 9; }\n"
	"case \"$FAKE_ROWS\" in\n"
	"ok) cat \"$ROWS_OUT\"; exit 0;;\n"
	"nopyarrow) echo 'parquet needs pyarrow: pip install pyarrow, or convert to JSONL' >&2; "
	"exit 3;;\n"
	"bad) echo \"$3: not a readable parquet file: magic bytes\" >&2; exit 2;;\n"
	"crash) head -n 1 \"$ROWS_OUT\"; kill -9 $$;;\n"
	"esac\n"
	"exit 9\n";

static void test_ops6k_parquet_fake(void **state)
{
	(void)state;
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct ca_diag d;
	char root[PATH_MAX], py[PATH_MAX], file[PATH_MAX], rows[PATH_MAX];
	char *r0 = row_line(good_model, "torch.relu"), *r2 = row_line(good_model, "torch.tanh");
	char text[4096];
	const char *old_root = getenv("CUDA_AGENT_ROOT");
	char *saved_root = old_root ? strdup(old_root) : NULL;

	tmp_path(root, sizeof root, "fakeroot");
	write_text_at(root, "python/cuda_agent_bridge/__init__.py", "");
	assert_int_equal(setenv("CUDA_AGENT_ROOT", root, 1), 0);
	tmp_path(py, sizeof py, "fakepython");
	write_text_at(tmpdir, "fakepython", fake_python);
	assert_int_equal(chmod(py, 0755), 0);
	o.python = py;
	snprintf(text, sizeof text, "%s\n{\"_skip\": \"code is over the limit of 1048576 bytes\"}\n"
		 "%s\nnot json\n",
		 r0, r2);
	write_text_at(tmpdir, "rows.out", text);
	tmp_path(rows, sizeof rows, "rows.out");
	assert_int_equal(setenv("ROWS_OUT", rows, 1), 0);
	write_text_at(tmpdir, "x.parquet", "PAR1 stand-in");
	tmp_path(file, sizeof file, "x.parquet");
	open_store(&s, "store");

	assert_int_equal(setenv("FAKE_ROWS", "ok", 1), 0);
	if (import_ops6k(&s, file, &o, &st, &d) != 0)
		fail_msg("%s", d.msg);
	expect_counts(&st, 2, 0, 0, 2);
	assert_int_equal(st.rows, 4);
	assert_string_equal(st.first_skip, "row 1: code is over the limit of 1048576 bytes");
	expect_task(&s, "ops6k/000000_relu", "ops6k", -1, "000000_relu");
	expect_task(&s, "ops6k/000002_tanh", "ops6k", -1, "000002_tanh");
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), 0);
	expect_counts(&st, 0, 2, 0, 2);

	assert_int_equal(setenv("FAKE_ROWS", "nopyarrow", 1), 0);
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_UNSUPPORTED);
	assert_false(st.input_bad);
	assert_string_equal(d.msg, "parquet needs pyarrow: pip install pyarrow, or convert to JSONL");

	assert_int_equal(setenv("FAKE_ROWS", "bad", 1), 0);
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_PARSE);
	assert_true(st.input_bad);
	assert_contains(d.msg, "not a readable parquet file");

	/* killed after one row: that row is in the store, the import reports the crash */
	ca_strlcpy(text, r2, sizeof text);
	strcat(text, "\n");
	write_text_at(tmpdir, "rows.out", text);
	assert_int_equal(setenv("FAKE_ROWS", "crash", 1), 0);
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_CHILD);
	assert_false(st.input_bad);
	assert_contains(d.msg, "signal 9");
	expect_counts(&st, 1, 0, 0, 0);
	expect_task(&s, "ops6k/000000_tanh", "ops6k", -1, "000000_tanh");

	/* a Python that does not exist */
	tmp_path(py, sizeof py, "no-such-python");
	o.python = py;
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_UNSUPPORTED);
	assert_contains(d.msg, "no-such-python");

	/* no python/ folder under the root */
	tmp_path(root, sizeof root, "emptyroot");
	assert_int_equal(ca_mkdirs(root, 0755, &d), 0);
	assert_int_equal(setenv("CUDA_AGENT_ROOT", root, 1), 0);
	assert_int_equal(import_ops6k(&s, file, &o, &st, &d), CA_ERR_NOTFOUND);
	assert_contains(d.msg, "CUDA_AGENT_ROOT");

	task_store_close(&s);
	unsetenv("FAKE_ROWS");
	unsetenv("ROWS_OUT");
	if (saved_root)
		setenv("CUDA_AGENT_ROOT", saved_root, 1);
	else
		unsetenv("CUDA_AGENT_ROOT");
	free(saved_root);
	free(r0);
	free(r2);
}

/* ---- parquet through the real rows.py ------------------------------------------------- */

static const char make_parquet[] =
	"import sys\n"
	"import pyarrow as pa, pyarrow.parquet as pq\n"
	"good = open(sys.argv[2]).read()\n"
	"pq.write_table(pa.table({\n"
	"    'code': [good, 'class Net: pass', good],\n"
	"    'ops': [['torch.nn.Conv2d', 'torch.relu'], None, ['torch.sigmoid']],\n"
	"    'data_source': ['gen', 'gen', None],\n"
	"    'other': [1, 2, 3],\n"
	"}), sys.argv[1], row_group_size=2)\n";

static void test_ops6k_parquet_real(void **state)
{
	(void)state;
	const char *py = getenv("CA_TEST_PYTHON");
	struct import_opts o = quiet_opts();
	struct import_stats st;
	struct task_store s;
	struct task_record r;
	struct ca_diag d;
	struct ca_run_result res;
	char cwd[PATH_MAX], rows_py[PATH_MAX], file[PATH_MAX], model[PATH_MAX];
	const char *old_root = getenv("CUDA_AGENT_ROOT");
	char *saved_root = old_root ? strdup(old_root) : NULL;

	assert_non_null(getcwd(cwd, sizeof cwd));
	assert_int_equal(ca_path_join(rows_py, sizeof rows_py, cwd,
				      "python/cuda_agent_bridge/rows.py"), 0);
	if (!ca_is_file(rows_py))
		fail_msg("%s is missing: run from the repository root", rows_py);
	if (py && py[0]) {
		const char *probe[] = {py, "-c", "import pyarrow", NULL};
		struct ca_run_opts ro = {.timeout_s = 60};
		if (ca_run(probe, &ro, &res, &d) != 0 || res.exit_code != 0 || res.term_signal)
			py = NULL;
		ca_run_result_free(&res);
	}
	if (!py || !py[0]) {
		printf("  skipped: no Python with pyarrow (CA_TEST_PYTHON unset or without it; "
		       "the fake-Python test covers the C side)\n");
		free(saved_root);
		skip();
	}
	tmp_path(file, sizeof file, "real.parquet");
	write_text_at(tmpdir, "model.txt", good_model);
	tmp_path(model, sizeof model, "model.txt");
	const char *mk[] = {py, "-c", make_parquet, file, model, NULL};
	struct ca_run_opts ro = {.timeout_s = 120};
	assert_int_equal(ca_run(mk, &ro, &res, &d), 0);
	if (res.exit_code != 0)
		fail_msg("making the parquet file: %s", res.err);
	ca_run_result_free(&res);

	assert_int_equal(setenv("CUDA_AGENT_ROOT", cwd, 1), 0);
	o.python = py;
	open_store(&s, "store");
	int rc = import_ops6k(&s, file, &o, &st, &d);
	if (rc)
		fail_msg("%s", d.msg);
	expect_counts(&st, 2, 0, 0, 1);
	assert_contains(st.first_skip, "row 1: ");
	assert_contains(st.first_skip, "class Model");
	expect_task(&s, "ops6k/000000_conv2d_relu", "ops6k", -1, "000000_conv2d_relu");
	expect_task(&s, "ops6k/000002_sigmoid", "ops6k", -1, "000002_sigmoid");
	assert_int_equal(task_store_get(&s, "ops6k/000000_conv2d_relu", &r, &d), 0);
	assert_string_equal(r.ops, "[\"torch.nn.Conv2d\",\"torch.relu\"]");
	assert_string_equal(r.data_source, "gen");
	task_store_close(&s);
	if (saved_root)
		setenv("CUDA_AGENT_ROOT", saved_root, 1);
	else
		unsetenv("CUDA_AGENT_ROOT");
	free(saved_root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sanitize_name),
		cmocka_unit_test(test_short_name),
		cmocka_unit_test(test_parse_row),
		cmocka_unit_test_setup_teardown(test_task_json_fields, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_kernelbench_fixture_layouts, setup_dir,
						teardown_dir),
		cmocka_unit_test_setup_teardown(test_kernelbench_reimport, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_kernelbench_hostile_files, setup_dir,
						teardown_dir),
		cmocka_unit_test_setup_teardown(test_kernelbench_errors, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ops6k_fixture, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ops6k_jsonl_edges, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ops6k_parquet_fake, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_ops6k_parquet_real, setup_dir, teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
