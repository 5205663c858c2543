/* Unit tests for src/task/task: loading a task directory (model.py + optional task.json), the
 * defaults, the content hash, and every rejection with its message. Each test works in a fresh
 * temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "task/task.h"
#include "util/fs.h"

#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("'%s' does not contain '%s'", (hay), (needle));            \
	} while (0)

static const char model_py[] =
	"import torch\n"
	"\n"
	"class Model(torch.nn.Module):\n"
	"    def forward(self, x):\n"
	"        return torch.relu(x)\n"
	"\n"
	"def get_inputs():\n"
	"    return [torch.randn(16, 16)]\n"
	"\n"
	"def get_init_inputs():\n"
	"    return []\n";

static char tmpdir[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-task-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

static void write_bytes(const char *dir, const char *name, const void *data, size_t len)
{
	char path[PATH_MAX];
	struct ca_diag d;
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	if (ca_write_file_atomic(path, data, len, &d) != 0)
		fail_msg("%s", d.msg);
}

static void write_text(const char *dir, const char *name, const char *text)
{
	write_bytes(dir, name, text, strlen(text));
}

/* <tmpdir>/<name> holding model.py (model text) and task.json (NULL: none). */
static void make_task(char *out, size_t size, const char *name, const char *model,
		      const char *task_json)
{
	struct ca_diag d;
	assert_int_equal(ca_path_join(out, size, tmpdir, name), 0);
	assert_int_equal(ca_mkdirs(out, 0700, &d), 0);
	if (model)
		write_text(out, "model.py", model);
	if (task_json)
		write_text(out, "task.json", task_json);
}

/* Loads a task expected to fail with code; returns with d holding the message. */
static void expect_fail(const char *dir, int code, struct ca_diag *d)
{
	struct task t;
	int rc = task_load(&t, dir, d);
	if (rc != code)
		fail_msg("task_load(%s) gave %d (%s), expected %d", dir, rc, rc ? d->msg : "ok",
			 code);
	assert_null(t.model_py); /* nothing left to free after a failure */
}

static void test_load_with_task_json(void **state)
{
	(void)state;
	char dir[PATH_MAX];
	struct task t;
	struct ca_diag d;

	make_task(dir, sizeof dir, "relu", model_py,
		  "{\"id\": \"kb/level1/19_ReLU\", \"source\": \"KernelBench\",\n"
		  " \"precision\": \"bf16\", \"atol\": 0.05, \"rtol\": 0.002,\n"
		  " \"notes\": \"n\", \"level\": 1, \"ops\": [\"relu\"]}\n");
	if (task_load(&t, dir, &d) != 0)
		fail_msg("%s", d.msg);
	assert_string_equal(t.id, "kb/level1/19_ReLU");
	assert_string_equal(t.source, "KernelBench");
	assert_int_equal(t.precision, TASK_BF16);
	assert_string_equal(task_precision_name(t.precision), "bf16");
	assert_true(t.atol == 0.05);
	assert_true(t.rtol == 0.002);
	assert_int_equal(t.model_py_len, strlen(model_py));
	assert_memory_equal(t.model_py, model_py, t.model_py_len);
	assert_true(t.dir[0] == '/');
	char real[PATH_MAX];
	assert_int_equal(ca_realpath(dir, real, sizeof real, &d), 0);
	assert_string_equal(t.dir, real);
	task_free(&t);
	assert_null(t.model_py);

	make_task(dir, sizeof dir, "half", model_py, "{\"precision\": \"fp16\"}");
	assert_int_equal(task_load(&t, dir, &d), 0);
	assert_int_equal(t.precision, TASK_FP16);
	assert_string_equal(task_precision_name(t.precision), "fp16");
	assert_string_equal(t.id, "half");       /* not given: the directory name */
	assert_string_equal(t.source, "local");
	assert_true(t.atol == 1e-2 && t.rtol == 1e-2);
	task_free(&t);
}

static void test_defaults_without_task_json(void **state)
{
	(void)state;
	char dir[PATH_MAX], rel[PATH_MAX + 8];
	struct task t;
	struct ca_diag d;

	make_task(dir, sizeof dir, "19_ReLU", model_py, NULL);
	/* a trailing slash does not change the id */
	snprintf(rel, sizeof rel, "%s/", dir);
	if (task_load(&t, rel, &d) != 0)
		fail_msg("%s", d.msg);
	assert_string_equal(t.id, "19_ReLU");
	assert_string_equal(t.source, "local");
	assert_int_equal(t.precision, TASK_FP32);
	assert_string_equal(task_precision_name(t.precision), "fp32");
	assert_true(t.atol == 1e-2);
	assert_true(t.rtol == 1e-2);
	task_free(&t);
}

static void load_hash(const char *dir, char out[CA_HASH_HEX_LEN + 1])
{
	struct task t;
	struct ca_diag d;
	if (task_load(&t, dir, &d) != 0)
		fail_msg("%s", d.msg);
	memcpy(out, t.hash, CA_HASH_HEX_LEN + 1);
	task_free(&t);
}

static void test_hash(void **state)
{
	(void)state;
	char a[PATH_MAX], b[PATH_MAX];
	char h1[CA_HASH_HEX_LEN + 1], h2[CA_HASH_HEX_LEN + 1], h3[CA_HASH_HEX_LEN + 1];
	char h4[CA_HASH_HEX_LEN + 1], h5[CA_HASH_HEX_LEN + 1];

	make_task(a, sizeof a, "a", model_py, "{\"atol\": 0.1}");
	load_hash(a, h1);
	assert_int_equal(strlen(h1), CA_HASH_HEX_LEN);
	assert_int_equal(CA_HASH_HEX_LEN, 32);
	for (int i = 0; i < CA_HASH_HEX_LEN; i++)
		assert_true(isxdigit((unsigned char)h1[i]) && !isupper((unsigned char)h1[i]));

	/* stable: same bytes, same hash, also in another directory */
	load_hash(a, h2);
	assert_string_equal(h1, h2);
	make_task(b, sizeof b, "b", model_py, "{\"atol\": 0.1}");
	load_hash(b, h2);
	assert_string_equal(h1, h2);

	/* model.py changes */
	write_text(b, "model.py", "# v2\n" "class Model: pass\n" "def get_inputs(): return []\n" "def get_init_inputs(): return []\n");
	load_hash(b, h3);
	assert_string_not_equal(h1, h3);

	/* task.json changes (even only in whitespace: the bytes are hashed) */
	make_task(b, sizeof b, "c", model_py, "{\"atol\": 0.2}");
	load_hash(b, h4);
	assert_string_not_equal(h1, h4);
	make_task(b, sizeof b, "d", model_py, "{\"atol\":  0.1}");
	load_hash(b, h5);
	assert_string_not_equal(h1, h5);

	/* no task.json at all differs from an empty-object task.json, and both from h1 */
	make_task(b, sizeof b, "e", model_py, NULL);
	load_hash(b, h4);
	make_task(b, sizeof b, "f", model_py, "{}");
	load_hash(b, h5);
	assert_string_not_equal(h4, h5);
	assert_string_not_equal(h1, h4);

	/* moving a byte from the end of model.py to the start of task.json changes the hash (the
	 * lengths are part of it, not just the concatenated bytes) */
	char m1[PATH_MAX], m2[PATH_MAX], moved[sizeof model_py + 1];
	snprintf(moved, sizeof moved, "%s ", model_py);
	make_task(m1, sizeof m1, "g", moved, "{}");
	make_task(m2, sizeof m2, "h", model_py, " {}");
	load_hash(m1, h4);
	load_hash(m2, h5);
	assert_string_not_equal(h4, h5);
}

static void test_missing_dir_and_model(void **state)
{
	(void)state;
	char dir[PATH_MAX];
	struct ca_diag d;

	assert_int_equal(ca_path_join(dir, sizeof dir, tmpdir, "nope"), 0);
	expect_fail(dir, CA_ERR_NOTFOUND, &d);
	assert_contains(d.msg, "nope");

	/* a file is not a task directory */
	make_task(dir, sizeof dir, "x", model_py, NULL);
	char file[PATH_MAX];
	assert_int_equal(ca_path_join(file, sizeof file, dir, "model.py"), 0);
	expect_fail(file, CA_ERR_NOTFOUND, &d);

	make_task(dir, sizeof dir, "empty", NULL, "{}");
	expect_fail(dir, CA_ERR_NOTFOUND, &d);
	assert_contains(d.msg, "model.py");
	assert_contains(d.msg, "empty");
}

static void test_model_py_checks(void **state)
{
	(void)state;
	char dir[PATH_MAX];
	struct ca_diag d;

	make_task(dir, sizeof dir, "nomodel", "def get_inputs():\n    return []\n", NULL);
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "class Model");

	make_task(dir, sizeof dir, "noinputs", "class Model:\n    pass\n", NULL);
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "get_inputs");
	/* using the name is not defining it */
	make_task(dir, sizeof dir, "usesinputs",
		  "class Model:\n    pass\n\nx = get_inputs()\ndef get_init_inputs(): return []\n",
		  NULL);
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "get_inputs");

	/* get_init_inputs is required too */
	make_task(dir, sizeof dir, "noinit", "class Model:\n    pass\n\ndef get_inputs():\n    return []\n",
		  NULL);
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "get_init_inputs");

	/* NUL bytes: text before and after the NUL would otherwise satisfy the checks */
	static const char nul[] = "class Model:\n    pass\n\0def get_inputs():\n    return []\n";
	make_task(dir, sizeof dir, "nul", NULL, NULL);
	write_bytes(dir, "model.py", nul, sizeof nul - 1);
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "NUL");

	/* model.py must be a regular file */
	make_task(dir, sizeof dir, "dirmodel", NULL, NULL);
	char sub[PATH_MAX];
	assert_int_equal(ca_path_join(sub, sizeof sub, dir, "model.py"), 0);
	assert_int_equal(ca_mkdirs(sub, 0700, &d), 0);
	expect_fail(dir, CA_ERR_INVALID, &d);
}

static void test_task_json_errors(void **state)
{
	(void)state;
	char dir[PATH_MAX];
	struct ca_diag d;

	/* the syntax error is on line 3 */
	make_task(dir, sizeof dir, "syntax", model_py, "{\n  \"atol\": 0.1,\n  \"rtol\": ,\n}\n");
	expect_fail(dir, CA_ERR_PARSE, &d);
	assert_contains(d.msg, "task.json");
	assert_contains(d.msg, "line 3");

	make_task(dir, sizeof dir, "array", model_py, "[1, 2]");
	expect_fail(dir, CA_ERR_PARSE, &d);
	assert_contains(d.msg, "object");

	make_task(dir, sizeof dir, "unknown", model_py, "{\"atol\": 0.1, \"tolerance\": 3}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "unknown field 'tolerance'");

	make_task(dir, sizeof dir, "prec", model_py, "{\"precision\": \"fp8\"}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "precision");
	make_task(dir, sizeof dir, "prec2", model_py, "{\"precision\": 32}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "precision");

	make_task(dir, sizeof dir, "negatol", model_py, "{\"atol\": -0.001}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "'atol'");
	make_task(dir, sizeof dir, "bigrtol", model_py, "{\"rtol\": 1001}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "'rtol'");
	make_task(dir, sizeof dir, "stratol", model_py, "{\"atol\": \"0.1\"}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "'atol'");

	make_task(dir, sizeof dir, "dup", model_py, "{\"atol\": 0.1, \"atol\": 0.2}");
	expect_fail(dir, CA_ERR_PARSE, &d);
	assert_contains(d.msg, "duplicate");

	make_task(dir, sizeof dir, "emptyid", model_py, "{\"id\": \"\"}");
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "'id'");
	char longid[CA_TASK_ID_MAX + 32];
	memset(longid, 'x', sizeof longid);
	memcpy(longid, "{\"id\": \"", 8);
	memcpy(longid + 8 + CA_TASK_ID_MAX, "\"}", 3); /* an id of CA_TASK_ID_MAX characters */
	make_task(dir, sizeof dir, "longid", model_py, longid);
	expect_fail(dir, CA_ERR_INVALID, &d);
	assert_contains(d.msg, "'id'");

	/* the boundaries themselves are fine: atol 0, rtol 1000, a 127-character id */
	memcpy(longid + 8 + CA_TASK_ID_MAX - 1, "\"}", 3);
	make_task(dir, sizeof dir, "edges", model_py, longid);
	struct task t;
	if (task_load(&t, dir, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(strlen(t.id), CA_TASK_ID_MAX - 1);
	task_free(&t);
	make_task(dir, sizeof dir, "edges2", model_py, "{\"atol\": 0, \"rtol\": 1000}");
	assert_int_equal(task_load(&t, dir, &d), 0);
	assert_true(t.atol == 0.0 && t.rtol == 1000.0);
	task_free(&t);
}

static void test_size_caps(void **state)
{
	(void)state;
	char dir[PATH_MAX];
	struct ca_diag d;
	struct task t;
	size_t cap = CA_TASK_MAX_MODEL_BYTES;
	char *big = malloc(cap + 1);
	assert_non_null(big);

	/* exactly at the cap: loads; one byte over: CA_ERR_LIMIT */
	memset(big, '#', cap + 1);
	memcpy(big, model_py, strlen(model_py));
	big[strlen(model_py)] = '\n';
	make_task(dir, sizeof dir, "atcap", NULL, NULL);
	write_bytes(dir, "model.py", big, cap);
	if (task_load(&t, dir, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(t.model_py_len, cap);
	task_free(&t);

	make_task(dir, sizeof dir, "overcap", NULL, NULL);
	write_bytes(dir, "model.py", big, cap + 1);
	expect_fail(dir, CA_ERR_LIMIT, &d);
	assert_contains(d.msg, "model.py");

	/* task.json over its cap (a valid object padded with spaces) */
	size_t jcap = CA_TASK_MAX_JSON_BYTES;
	memset(big, ' ', jcap + 1);
	big[0] = '{';
	big[jcap] = '}';
	make_task(dir, sizeof dir, "bigjson", model_py, NULL);
	write_bytes(dir, "task.json", big, jcap + 1);
	expect_fail(dir, CA_ERR_LIMIT, &d);
	assert_contains(d.msg, "task.json");
	big[jcap - 1] = '}';
	write_bytes(dir, "task.json", big, jcap);
	assert_int_equal(task_load(&t, dir, &d), 0);
	task_free(&t);
	free(big);
}

/* A directory whose path is so long that <dir>/model.py fits in PATH_MAX but <dir>/task.json
 * does not: task_load fails with CA_ERR_LIMIT and keeps nothing allocated (model.py was already
 * read at that point). */
static void test_path_limit(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d;
	const size_t want = PATH_MAX - 1 - strlen("/model.py"); /* strlen of the directory */

	assert_int_equal(ca_realpath(tmpdir, path, sizeof path, &d), 0);
	size_t len = strlen(path);
	while (len < want) {
		size_t r = want - len, n = r > 203 ? 200 : r - 1;
		path[len++] = '/';
		memset(path + len, 'd', n);
		len += n;
		path[len] = '\0';
	}
	assert_int_equal(strlen(path), want);
	assert_int_equal(ca_mkdirs(path, 0700, &d), 0);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	int fd = openat(dfd, "model.py", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, model_py, strlen(model_py)), (ssize_t)strlen(model_py));
	close(fd);
	close(dfd);

	expect_fail(path, CA_ERR_LIMIT, &d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_load_with_task_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_defaults_without_task_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_dir_and_model, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_py_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_task_json_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_size_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_path_limit, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
