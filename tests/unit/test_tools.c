/* Unit tests for src/agent/tools: schema validation, path confinement, read-only names, the file
 * tools and their caps, the output cap, bash without the sandbox, and bash in the real sandbox
 * (no network, no writes outside the workspace, no reference data, no GPU nodes, the time limit,
 * the output cap). The sandbox part is skipped (with the reason printed) only where the sandbox
 * lacks a layer the tool requires. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/tools.h"
#include "util/diag.h"
#include "util/fs.h"

#define TEST_NAME "tools"
#include "unit/helpers.h"

/* Paths here are built from the short mkdtemp directory: truncation cannot happen. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static char ws[PATH_MAX], outside[PATH_MAX], scratch[PATH_MAX];
static const char *const read_only[] = {"model.py", "task.json", "SKILL.md", "INTERFACE.md", NULL};

static void put(const char *rel, const char *text)
{
	char p[PATH_MAX];
	assert_true((size_t)snprintf(p, sizeof p, "%s/%s", ws, rel) < sizeof p);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *slurp_ws(const char *rel)
{
	char p[PATH_MAX], *out = NULL;
	size_t len;
	struct ca_diag d;
	snprintf(p, sizeof p, "%s/%s", ws, rel);
	if (ca_read_file(p, 64u << 20, &out, &len, &d) != 0)
		return NULL;
	return out;
}

static int setup(void **state)
{
	char p[PATH_MAX];
	if (setup_dir(state))
		return -1;
	tmp_path(ws, sizeof ws, "ws");
	snprintf(outside, sizeof outside, "%s/outside.txt", tmpdir);
	snprintf(scratch, sizeof scratch, "%s/scratch", tmpdir);
	if (mkdir(ws, 0755) || mkdir(scratch, 0700))
		return -1;
	snprintf(p, sizeof p, "%s/kernels", ws);
	if (mkdir(p, 0755))
		return -1;
	FILE *f = fopen(outside, "w");
	if (!f)
		return -1;
	fputs("host secret 4711\n", f);
	fclose(f);
	f = NULL;
	snprintf(p, sizeof p, "%s/model.py", ws);
	if (!(f = fopen(p, "w")))
		return -1;
	fputs("import torch\nclass Model: pass\n", f);
	fclose(f);
	chmod(p, 0444);
	snprintf(p, sizeof p, "%s/kernels/kernel.cu", ws);
	if (!(f = fopen(p, "w")))
		return -1;
	fputs("#include <cuda_agent/abi.h>\n// TODO: implement\nint ca_forward(void) { return 2; }\n",
	      f);
	fclose(f);
	/* symlinks that point outside: to a file, to a directory; one to a read-only name */
	snprintf(p, sizeof p, "%s/link_out", ws);
	if (symlink(outside, p))
		return -1;
	snprintf(p, sizeof p, "%s/escape", ws);
	if (symlink(tmpdir, p))
		return -1;
	snprintf(p, sizeof p, "%s/model_link.py", ws);
	if (symlink("model.py", p))
		return -1;
	return 0;
}

static struct tool_ctx ctx_plain(void)
{
	struct tool_ctx c = {.workspace = ws, .read_only = read_only, .scratch_dir = scratch};
	return c;
}

/* Runs a tool with arguments given as JSON text. */
static int run(const struct tool_ctx *c, const char *name, const char *args_json,
	       struct tool_result *res, struct ca_diag *d)
{
	json_error_t je;
	json_t *args = json_loads(args_json, 0, &je);
	if (!args)
		fail_msg("bad test JSON %s: %s", args_json, je.text);
	int rc = tools_run(c, name, args, res, d);
	json_decref(args);
	return rc;
}

/* Runs a tool that must run (rc 0) and returns its result. */
static struct tool_result must(const struct tool_ctx *c, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static struct tool_result must(const struct tool_ctx *c, const char *name, const char *fmt, ...)
{
	char args[8192];
	struct tool_result res;
	struct ca_diag d = {{0}};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	int rc = run(c, name, args, &res, &d);
	if (rc != 0)
		fail_msg("%s %s: rc %d: %s", name, args, rc, d.msg);
	assert_non_null(res.output);
	return res;
}

static void expect_refused(const struct tool_ctx *c, const char *name, const char *args,
			   const char *why)
{
	struct tool_result r = must(c, name, "%s", args);
	if (r.ok || !strstr(r.output, why))
		fail_msg("%s %s: expected a refusal with '%s', got ok=%d: %s", name, args, why, r.ok,
			 r.output);
	tool_result_free(&r);
}

static void test_schemas(void **state)
{
	(void)state;
	static const char *const names[] = {"bash",	  "read_file", "write_file", "edit",
					    "multi_edit", "glob",      "grep"};
	json_t *s = tools_schemas();
	assert_non_null(s);
	assert_int_equal(json_array_size(s), 7);
	for (size_t i = 0; i < 7; i++) {
		json_t *e = json_array_get(s, i), *fn = json_object_get(e, "function");
		assert_string_equal(json_string_value(json_object_get(e, "type")), "function");
		assert_string_equal(json_string_value(json_object_get(fn, "name")), names[i]);
		assert_true(strlen(json_string_value(json_object_get(fn, "description"))) > 20);
		json_t *p = json_object_get(fn, "parameters");
		assert_string_equal(json_string_value(json_object_get(p, "type")), "object");
		assert_true(json_array_size(json_object_get(p, "required")) >= 1);
		assert_true(json_is_false(json_object_get(p, "additionalProperties")));
	}
	json_decref(s);
}

static void test_validation(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	struct ca_diag d;
	static const struct {
		const char *tool, *args, *msg;
		int rc;
	} cases[] = {
		{"rm_rf", "{}", "unknown tool 'rm_rf'", CA_ERR_NOTFOUND},
		{"read_file", "{}", "missing required field 'path'", CA_ERR_INVALID},
		{"read_file", "{\"path\": 3}", "'path' must be a string, not integer", CA_ERR_INVALID},
		{"read_file", "{\"path\": \"a\", \"mode\": \"x\"}", "unexpected field 'mode'",
		 CA_ERR_INVALID},
		{"read_file", "{\"path\": \"a\", \"offset_line\": 0}", "at least 1", CA_ERR_INVALID},
		{"read_file", "{\"path\": \"a\", \"limit_lines\": 2.5}", "must be an integer",
		 CA_ERR_INVALID},
		{"bash", "{\"command\": [\"ls\"]}", "must be a string, not array", CA_ERR_INVALID},
		{"bash", "{\"command\": \"ls\", \"timeout_s\": \"5\"}", "must be a number",
		 CA_ERR_INVALID},
		{"edit", "{\"path\": \"a\", \"old_string\": \"x\"}", "missing required field 'new_string'",
		 CA_ERR_INVALID},
		{"edit", "{\"path\": \"a\", \"old_string\": \"x\", \"new_string\": \"y\", \"replace_all\": 1}",
		 "must be a boolean", CA_ERR_INVALID},
		{"multi_edit", "{\"path\": \"a\", \"edits\": []}", "at least 1", CA_ERR_INVALID},
		{"multi_edit", "{\"path\": \"a\", \"edits\": [{\"old_string\": \"x\"}]}",
		 "missing required field 'new_string' in 'edits'[0]", CA_ERR_INVALID},
		{"multi_edit", "{\"path\": \"a\", \"edits\": [{\"old_string\": \"x\", \"new_string\": \"y\", \"z\": 1}]}",
		 "unexpected field 'z' in 'edits'[0]", CA_ERR_INVALID},
		{"grep", "{\"pattern\": \"x\", \"max_results\": 5000}", "at most 1000", CA_ERR_INVALID},
		{"glob", "[]", "must be a JSON object", CA_ERR_INVALID},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(&d, 0, sizeof d);
		int rc = run(&c, cases[i].tool, cases[i].args, &r, &d);
		if (rc != cases[i].rc || !strstr(d.msg, cases[i].msg))
			fail_msg("%s %s: rc %d (want %d), message '%s' (want '%s')", cases[i].tool,
				 cases[i].args, rc, cases[i].rc, d.msg, cases[i].msg);
		assert_null(r.output);
		assert_null(strchr(d.msg, '\n'));
		tool_result_free(&r);
	}
}

static void test_paths(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	char args[PATH_MAX + 64];
	expect_refused(&c, "read_file", "{\"path\": \"../outside.txt\"}", "outside the workspace");
	expect_refused(&c, "read_file", "{\"path\": \"kernels/../../outside.txt\"}",
		       "outside the workspace");
	snprintf(args, sizeof args, "{\"path\": \"%s\"}", outside);
	expect_refused(&c, "read_file", args, "outside the workspace");
	expect_refused(&c, "read_file", "{\"path\": \"/etc/passwd\"}", "outside the workspace");
	expect_refused(&c, "read_file", "{\"path\": \"link_out\"}", "outside the workspace");
	expect_refused(&c, "read_file", "{\"path\": \"escape/outside.txt\"}",
		       "outside the workspace");
	expect_refused(&c, "write_file", "{\"path\": \"escape/new.txt\", \"content\": \"x\"}",
		       "outside the workspace");
	expect_refused(&c, "write_file", "{\"path\": \"../new.txt\", \"content\": \"x\"}",
		       "outside the workspace");
	expect_refused(&c, "write_file", "{\"path\": \"link_out\", \"content\": \"x\"}",
		       "outside the workspace");
	expect_refused(&c, "write_file", "{\"path\": \"nodir/../../x\", \"content\": \"x\"}",
		       "'..'");
	expect_refused(&c, "edit",
		       "{\"path\": \"link_out\", \"old_string\": \"host\", \"new_string\": \"x\"}",
		       "outside the workspace");
	expect_refused(&c, "grep", "{\"pattern\": \"secret\", \"path\": \"..\"}",
		       "outside the workspace");
	expect_refused(&c, "glob", "{\"pattern\": \"../*\"}", "'..'");
	expect_refused(&c, "grep", "{\"pattern\": \"x\", \"path\": \"\"}", "empty");
	/* nothing was written outside, the host file is unchanged */
	char p[PATH_MAX], *text = NULL;
	size_t len;
	struct ca_diag d;
	snprintf(p, sizeof p, "%s/new.txt", tmpdir);
	assert_false(ca_is_file(p));
	assert_int_equal(ca_read_file(outside, 1024, &text, &len, &d), 0);
	assert_string_equal(text, "host secret 4711\n");
	free(text);
	/* grep over the workspace does not follow the directory symlink out */
	struct tool_result r = must(&c, "grep", "{\"pattern\": \"secret 4711\"}");
	assert_true(r.ok);
	assert_null(strstr(r.output, "4711"));
	tool_result_free(&r);

	/* read-only names: readable, not writable, not even through a symlink or ./ */
	r = must(&c, "read_file", "{\"path\": \"model.py\"}");
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "     1\timport torch\n"));
	tool_result_free(&r);
	expect_refused(&c, "write_file", "{\"path\": \"model.py\", \"content\": \"x\"}", "read-only");
	expect_refused(&c, "write_file", "{\"path\": \"./model.py\", \"content\": \"x\"}",
		       "read-only");
	expect_refused(&c, "write_file", "{\"path\": \"model_link.py\", \"content\": \"x\"}",
		       "read-only");
	expect_refused(&c, "write_file", "{\"path\": \"task.json\", \"content\": \"{}\"}",
		       "read-only");
	expect_refused(&c, "edit",
		       "{\"path\": \"model.py\", \"old_string\": \"torch\", \"new_string\": \"x\"}",
		       "read-only");
	expect_refused(&c, "multi_edit",
		       "{\"path\": \"model.py\", \"edits\": [{\"old_string\": \"torch\", "
		       "\"new_string\": \"x\"}]}",
		       "read-only");
	expect_refused(&c, "write_file", "{\"path\": \"kernels\", \"content\": \"x\"}",
		       "is a directory");
	expect_refused(&c, "write_file", "{\"path\": \".\", \"content\": \"x\"}", "is a directory");
	text = slurp_ws("model.py");
	assert_string_equal(text, "import torch\nclass Model: pass\n");
	free(text);
	/* absolute paths inside the workspace are fine */
	snprintf(args, sizeof args, "{\"path\": \"%s/kernels/kernel.cu\"}", ws);
	r = must(&c, "read_file", "%s", args);
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "     2\t// TODO: implement\n"));
	tool_result_free(&r);
}

static void test_write_and_read(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	char *text;

	r = must(&c, "write_file", "{\"path\": \"a/b/c.txt\", \"content\": \"%s\"}",
		 "l1\\nl2\\nl3\\nl4\\nl5\\nl6\\nl7\\nl8\\nl9\\nl10\\n");
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "created a/b/c.txt: 31 bytes, 10 lines"));
	tool_result_free(&r);
	text = slurp_ws("a/b/c.txt");
	assert_non_null(text);
	assert_int_equal(strlen(text), 31);
	free(text);

	r = must(&c, "read_file", "{\"path\": \"a/b/c.txt\", \"offset_line\": 3, \"limit_lines\": 2}");
	assert_true(r.ok);
	assert_string_equal(r.output, "     3\tl3\n     4\tl4\n"
				      "[limit reached: the file goes on; read on with offset_line=5]\n");
	tool_result_free(&r);
	r = must(&c, "read_file", "{\"path\": \"a/b/c.txt\", \"offset_line\": 10}");
	assert_true(r.ok);
	assert_string_equal(r.output, "    10\tl10\n");
	tool_result_free(&r);
	expect_refused(&c, "read_file", "{\"path\": \"a/b/c.txt\", \"offset_line\": 11}",
		       "past the end of a/b/c.txt (10 lines)");
	expect_refused(&c, "read_file", "{\"path\": \"nope.txt\"}", "no such file");
	expect_refused(&c, "read_file", "{\"path\": \"kernels\"}", "a directory");

	/* replacing keeps the mode, reports it */
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof p, "%s/a/b/c.txt", ws);
	chmod(p, 0750);
	r = must(&c, "write_file", "{\"path\": \"a/b/c.txt\", \"content\": \"no newline\"}");
	assert_non_null(strstr(r.output, "replaced a/b/c.txt: 10 bytes, 1 lines"));
	tool_result_free(&r);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0750);
	r = must(&c, "read_file", "{\"path\": \"a/b/c.txt\"}");
	assert_string_equal(r.output, "     1\tno newline\n");
	tool_result_free(&r);

	/* a long line is cut; a binary file is refused; an empty one says so */
	{
		size_t n = 5000;
		char *line = malloc(n + 2);
		memset(line, 'x', n);
		line[n] = '\n';
		line[n + 1] = '\0';
		put("long.txt", line);
		free(line);
	}
	r = must(&c, "read_file", "{\"path\": \"long.txt\"}");
	assert_non_null(strstr(r.output, " [... line cut, 3000 more bytes]\n"));
	tool_result_free(&r);
	{
		snprintf(p, sizeof p, "%s/bin.dat", ws);
		FILE *f = fopen(p, "wb");
		fwrite("ab\0cd", 1, 5, f);
		fclose(f);
	}
	expect_refused(&c, "read_file", "{\"path\": \"bin.dat\"}", "binary file");
	put("empty.txt", "");
	r = must(&c, "read_file", "{\"path\": \"empty.txt\"}");
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "empty"));
	tool_result_free(&r);

	/* a big file: at most 1 MiB of it per call, then the output cap of the context */
	{
		snprintf(p, sizeof p, "%s/big.txt", ws);
		FILE *f = fopen(p, "w");
		for (int i = 0; i < 200000; i++)
			fprintf(f, "line %06d of the big file\n", i + 1); /* 27 bytes each: 5.4 MB */
		fclose(f);
	}
	c.output_cap = 4u << 20; /* large enough to see the 1 MiB read cap */
	r = must(&c, "read_file", "{\"path\": \"big.txt\", \"limit_lines\": 1000000}");
	assert_true(r.ok);
	assert_true(strlen(r.output) >= TOOLS_READ_MAX);
	assert_true(strlen(r.output) < TOOLS_READ_MAX + 4096);
	assert_non_null(strstr(r.output, "[1 MiB shown: the file goes on; read on with offset_line="));
	assert_int_equal(r.bytes_omitted, 0);
	tool_result_free(&r);
	c.output_cap = 0; /* default: 30000 */
	r = must(&c, "read_file", "{\"path\": \"big.txt\", \"offset_line\": 150001, \"limit_lines\": 5000}");
	assert_true(r.ok);
	assert_true(strlen(r.output) <= TOOLS_DEFAULT_CAP + 64);
	assert_true(r.bytes_omitted > 100000);
	assert_non_null(strstr(r.output, "bytes omitted ...]"));
	assert_non_null(strstr(r.output, "150001\tline 150001 of the big file\n")); /* head */
	assert_non_null(strstr(r.output, "155000\tline 155000 of the big file\n")); /* tail */
	tool_result_free(&r);

	/* write cap: 4 MiB */
	{
		size_t n = TOOLS_WRITE_MAX + 1;
		char *big = malloc(n + 1);
		memset(big, 'a', n);
		big[n] = '\0';
		json_t *args = json_pack("{s:s, s:s}", "path", "huge.txt", "content", big);
		struct ca_diag d;
		assert_int_equal(tools_run(&c, "write_file", args, &r, &d), 0);
		assert_false(r.ok);
		assert_non_null(strstr(r.output, "more than the 4194304"));
		tool_result_free(&r);
		json_decref(args);
		free(big);
		snprintf(p, sizeof p, "%s/huge.txt", ws);
		assert_false(ca_is_file(p));
	}
}

static void test_edit(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	char *text;
	put("e.cu", "alpha beta\ngamma beta\ndelta\n");

	expect_refused(&c, "edit", "{\"path\": \"e.cu\", \"old_string\": \"beta\", \"new_string\": \"B\"}",
		       "occurs 2 times");
	expect_refused(&c, "edit", "{\"path\": \"e.cu\", \"old_string\": \"zeta\", \"new_string\": \"Z\"}",
		       "old_string not found");
	expect_refused(&c, "edit", "{\"path\": \"e.cu\", \"old_string\": \"delta\", \"new_string\": \"delta\"}",
		       "the same");
	expect_refused(&c, "edit", "{\"path\": \"e.cu\", \"old_string\": \"\", \"new_string\": \"x\"}",
		       "empty");
	expect_refused(&c, "edit", "{\"path\": \"missing.cu\", \"old_string\": \"a\", \"new_string\": \"b\"}",
		       "no such file");
	text = slurp_ws("e.cu");
	assert_string_equal(text, "alpha beta\ngamma beta\ndelta\n");
	free(text);

	r = must(&c, "edit", "{\"path\": \"e.cu\", \"old_string\": \"gamma beta\", \"new_string\": \"G\"}");
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "1 replacement"));
	tool_result_free(&r);
	text = slurp_ws("e.cu");
	assert_string_equal(text, "alpha beta\nG\ndelta\n");
	free(text);

	put("e.cu", "x x x\n");
	r = must(&c, "edit", "{\"path\": \"e.cu\", \"old_string\": \"x\", \"new_string\": \"yy\", \"replace_all\": true}");
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "3 replacements"));
	tool_result_free(&r);
	text = slurp_ws("e.cu");
	assert_string_equal(text, "yy yy yy\n");
	free(text);

	/* multi_edit: in order, on the result of the previous edit; all or nothing */
	put("m.cu", "one two three\n");
	r = must(&c, "multi_edit",
		 "{\"path\": \"m.cu\", \"edits\": [{\"old_string\": \"one\", \"new_string\": \"1\"},"
		 " {\"old_string\": \"1 two\", \"new_string\": \"12\"}]}");
	assert_true(r.ok);
	tool_result_free(&r);
	text = slurp_ws("m.cu");
	assert_string_equal(text, "12 three\n");
	free(text);
	r = must(&c, "multi_edit",
		 "{\"path\": \"m.cu\", \"edits\": [{\"old_string\": \"12\", \"new_string\": \"X\"},"
		 " {\"old_string\": \"nope\", \"new_string\": \"Y\"}]}");
	assert_false(r.ok);
	assert_non_null(strstr(r.output, "edit 2 of 2: old_string not found; nothing was written"));
	tool_result_free(&r);
	text = slurp_ws("m.cu");
	assert_string_equal(text, "12 three\n"); /* the first edit was not written either */
	free(text);
	/* no temp file is left behind */
	r = must(&c, "glob", "{\"pattern\": \"m.cu*\"}");
	assert_string_equal(r.output, "m.cu\n");
	tool_result_free(&r);
}

static void test_glob(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/g", ws);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/g/sub", ws);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/g/.git", ws);
	mkdir(p, 0755);
	put("g/z.cu", "z\n");
	put("g/a.cu", "a\n");
	put("g/sub/b.cu", "b\n");
	put("g/sub/b.h", "h\n");
	put("g/.git/c.cu", "c\n");

	r = must(&c, "glob", "{\"pattern\": \"*.cu\"}");
	assert_string_equal(r.output, "e.cu\nm.cu\n"); /* top level only (earlier tests' files) */
	tool_result_free(&r);
	r = must(&c, "glob", "{\"pattern\": \"g/**/*.cu\"}");
	assert_true(r.ok);
	assert_string_equal(r.output, "g/a.cu\ng/sub/b.cu\ng/z.cu\n");
	tool_result_free(&r);
	r = must(&c, "glob", "{\"pattern\": \"**/b.*\"}");
	assert_string_equal(r.output, "g/sub/b.cu\ng/sub/b.h\n");
	tool_result_free(&r);
	snprintf(p, sizeof p, "{\"pattern\": \"%s/g/*.cu\"}", ws);
	r = must(&c, "glob", "%s", p);
	assert_string_equal(r.output, "g/a.cu\ng/z.cu\n");
	tool_result_free(&r);
	r = must(&c, "glob", "{\"pattern\": \"g/*.none\"}");
	assert_true(r.ok);
	assert_string_equal(r.output, "no files match\n");
	tool_result_free(&r);
	/* the symlink to a directory outside is an entry, never walked */
	r = must(&c, "glob", "{\"pattern\": \"escape/**\"}");
	assert_string_equal(r.output, "escape\n");
	tool_result_free(&r);

	/* at most 1000 results */
	snprintf(p, sizeof p, "%s/many", ws);
	mkdir(p, 0755);
	for (int i = 0; i < 1200; i++) {
		char name[64];
		snprintf(name, sizeof name, "many/f%04d.txt", i);
		put(name, "");
	}
	c.output_cap = 1u << 20;
	r = must(&c, "glob", "{\"pattern\": \"many/*.txt\"}");
	assert_true(r.ok);
	assert_non_null(strstr(r.output, "many/f0000.txt\nmany/f0001.txt\n"));
	assert_non_null(strstr(r.output, "many/f0999.txt\n[1200 matches, the first 1000 shown]\n"));
	assert_null(strstr(r.output, "many/f1000.txt"));
	tool_result_free(&r);
}

static void test_grep(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/s", ws);
	mkdir(p, 0755);
	put("s/one.cu", "__global__ void k1() {}\nint x;\n__global__ void K2() {}\n");
	put("s/two.h", "// __global__ in a header\n");
	{
		snprintf(p, sizeof p, "%s/s/bin.o", ws);
		FILE *f = fopen(p, "wb");
		fwrite("__global__\0\1\2", 1, 13, f);
		fclose(f);
		snprintf(p, sizeof p, "%s/s/huge.txt", ws);
		f = fopen(p, "w");
		for (int i = 0; i < 50000; i++)
			fputs("__global__ filler line\n", f); /* 1.15 MB */
		fclose(f);
	}
	r = must(&c, "grep", "{\"pattern\": \"__global__ void k[0-9]\", \"path\": \"s\"}");
	assert_true(r.ok);
	assert_string_equal(r.output, "s/one.cu:1: __global__ void k1() {}\n" "[skipped: 1 binary file, 1 file over 1 MiB]\n");
	tool_result_free(&r);
	r = must(&c, "grep",
		 "{\"pattern\": \"__global__ void k[0-9]\", \"path\": \"s\", \"ignore_case\": true}");
	assert_string_equal(r.output,
			    "s/one.cu:1: __global__ void k1() {}\ns/one.cu:3: __global__ void K2() {}\n"
			    "[skipped: 1 binary file, 1 file over 1 MiB]\n");
	tool_result_free(&r);
	r = must(&c, "grep", "{\"pattern\": \"^(//|int)\", \"path\": \"s\"}");
	assert_string_equal(r.output, "s/one.cu:2: int x;\ns/two.h:1: // __global__ in a header\n"
				      "[skipped: 1 binary file, 1 file over 1 MiB]\n");
	tool_result_free(&r);
	r = must(&c, "grep", "{\"pattern\": \"__global__\", \"path\": \"s\", \"glob\": \"*.h\"}");
	assert_string_equal(r.output, "s/two.h:1: // __global__ in a header\n");
	tool_result_free(&r);
	r = must(&c, "grep", "{\"pattern\": \"__global__\", \"glob\": \"s/**/*.cu\"}");
	assert_non_null(strstr(r.output, "s/one.cu:1: "));
	assert_null(strstr(r.output, "two.h"));
	tool_result_free(&r);
	/* binary and big files are skipped, and that is said */
	r = must(&c, "grep", "{\"pattern\": \"__global__\", \"path\": \"s\"}");
	assert_null(strstr(r.output, "bin.o"));
	assert_null(strstr(r.output, "huge.txt"));
	assert_non_null(strstr(r.output, "[skipped: 1 binary file, 1 file over 1 MiB]"));
	tool_result_free(&r);
	/* max_results */
	r = must(&c, "grep", "{\"pattern\": \"__global__\", \"path\": \"s\", \"max_results\": 2}");
	assert_string_equal(r.output,
			    "s/one.cu:1: __global__ void k1() {}\ns/one.cu:3: __global__ void K2() {}\n"
			    "[stopped at max_results=2; narrow the pattern or path]\n"
			    "[skipped: 1 binary file, 1 file over 1 MiB]\n");
	tool_result_free(&r);
	r = must(&c, "grep", "{\"pattern\": \"nothing-like-this\", \"path\": \"s/one.cu\"}");
	assert_true(r.ok);
	assert_string_equal(r.output, "no matches\n");
	tool_result_free(&r);
	expect_refused(&c, "grep", "{\"pattern\": \"(unclosed\"}", "bad regular expression");
	expect_refused(&c, "grep", "{\"pattern\": \"x\", \"path\": \"s/none\"}", "does not exist");
}

static void test_capture(void **state)
{
	(void)state;
	struct tool_capture cp;
	size_t omitted = 0;
	char *s;
	assert_int_equal(tool_capture_init(&cp, 10), 0);
	tool_capture_add(&cp, "0123", 4);
	tool_capture_add(&cp, "456", 3);
	s = tool_capture_finish(&cp, "|T", &omitted);
	assert_string_equal(s, "0123456|T");
	assert_int_equal(omitted, 0);
	free(s);
	assert_int_equal(tool_capture_init(&cp, 10), 0);
	for (int i = 0; i < 100; i++) {
		char ch = (char)('a' + i % 26);
		tool_capture_add(&cp, &ch, 1);
	}
	tool_capture_add(&cp, "VWXYZ", 5);
	s = tool_capture_finish(&cp, NULL, &omitted);
	assert_int_equal(omitted, 95);
	assert_string_equal(s, "abcde\n[... 95 bytes omitted ...]\nVWXYZ");
	free(s);
	/* one big add larger than the whole cap */
	assert_int_equal(tool_capture_init(&cp, 4), 0);
	tool_capture_add(&cp, "abcdefghij", 10);
	s = tool_capture_finish(&cp, NULL, &omitted);
	assert_string_equal(s, "ab\n[... 6 bytes omitted ...]\nij");
	free(s);
}

/* ---- bash ---- */

static void test_bash_plain(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	c.sandbox = false;
	r = must(&c, "bash", "{\"command\": \"echo out; echo err >&2; pwd\"}");
	assert_true(r.ok);
	assert_int_equal(r.exit_code, 0);
	char want[PATH_MAX + 32];
	snprintf(want, sizeof want, "out\nerr\n%s\n", ws);
	assert_string_equal(r.output, want);
	tool_result_free(&r);
	r = must(&c, "bash", "{\"command\": \"exit 3\"}");
	assert_false(r.ok);
	assert_int_equal(r.exit_code, 3);
	assert_non_null(strstr(r.output, "[exit code 3]"));
	tool_result_free(&r);
	/* nothing of the caller's environment is inherited */
	setenv("CA_TOOLS_TEST_LEAK", "leaked", 1);
	r = must(&c, "bash", "{\"command\": \"env\"}");
	assert_null(strstr(r.output, "CA_TOOLS_TEST_LEAK"));
	assert_non_null(strstr(r.output, "LANG=C.UTF-8\n"));
	tool_result_free(&r);
	r = must(&c, "bash", "{\"command\": \"echo $CA_TOOLS_TEST_LEAK\"}");
	assert_string_equal(r.output, "\n");
	tool_result_free(&r);
	unsetenv("CA_TOOLS_TEST_LEAK");
	r = must(&c, "bash", "{\"command\": \"sleep 30\", \"timeout_s\": 0.5}");
	assert_true(r.timed_out);
	assert_false(r.ok);
	assert_int_equal(r.exit_code, -1);
	assert_true(r.seconds < 2.0);
	assert_non_null(strstr(r.output, "timed out after 0.5 s"));
	tool_result_free(&r);
}

/* Skips the test (printing why) when the sandbox cannot give bash the layers it requires. */
static struct tool_result sandboxed(const struct tool_ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static struct tool_result sandboxed(const struct tool_ctx *c, const char *fmt, ...)
{
	char args[8192];
	struct tool_result res;
	struct ca_diag d = {{0}};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	int rc = run(c, "bash", args, &res, &d);
	if (rc == CA_ERR_UNSUPPORTED) {
		printf("  skipped: %s\n", d.msg);
		skip();
	}
	if (rc != 0)
		fail_msg("bash %s: rc %d: %s", args, rc, d.msg);
	return res;
}

/* The `cuda-agent` shim: a fake loop side that says what it was asked; verify "fails" (exit 1)
 * and profile takes 1.5 s, longer than the command's own limit. */
static int fake_agent_cmd(void *arg, const char *line, char **output, int *exit_code)
{
	int *calls = arg;
	(*calls)++;
	if (strstr(line, "profile")) {
		struct timespec ts = {1, 500000000};
		nanosleep(&ts, NULL);
	}
	*exit_code = strstr(line, "verify") ? 1 : strstr(line, "bogus") ? 2 : 0;
	return asprintf(output, "ran: %s", line) < 0 ? -1 : 0;
}

static void check_shim(struct tool_ctx *c, bool sandbox)
{
	char dir[PATH_MAX];
	struct ca_diag d = {{0}};
	struct tool_result r;
	int calls = 0;
	tmp_path(dir, sizeof dir, sandbox ? "shim-sb" : "shim-plain");
	assert_int_equal(mkdir(dir, 0755), 0);
	if (tools_bash_write_shim(dir, &d))
		fail_msg("%s", d.msg);
	c->sandbox = sandbox;
	c->agent_cmd = fake_agent_cmd;
	c->agent_cmd_arg = &calls;
	c->shim_dir = dir;
	/* chained, piped, from another directory, with its exit code */
	r = sandbox ? sandboxed(c, "{\"command\": \"cuda-agent compile --json && echo after; "
				"cuda-agent verify; echo rc=$?; cd /tmp && cuda-agent bogus x | "
				"tr a-z A-Z\"}")
		    : must(c, "bash", "{\"command\": \"cuda-agent compile --json && echo after; "
				"cuda-agent verify; echo rc=$?; cd /tmp && cuda-agent bogus x | "
				"tr a-z A-Z\"}");
	if (strcmp(r.output, "ran: cuda-agent compile --json\nafter\nran: cuda-agent verify\n"
			     "rc=1\nRAN: CUDA-AGENT BOGUS X\n") != 0)
		fail_msg("shim (%s): %s", sandbox ? "sandbox" : "plain", r.output);
	assert_int_equal(calls, 3);
	tool_result_free(&r);
	/* the time a request takes is not the command's: 1.5 s of profile under a 1 s limit */
	r = sandbox ? sandboxed(c, "{\"command\": \"cuda-agent profile\", \"timeout_s\": 1}")
		    : must(c, "bash", "{\"command\": \"cuda-agent profile\", \"timeout_s\": 1}");
	assert_false(r.timed_out);
	assert_string_equal(r.output, "ran: cuda-agent profile\n");
	tool_result_free(&r);
	/* a loop of requests is cut off: each one's time extends the command's deadline */
	calls = 0;
	r = sandbox ? sandboxed(c, "{\"command\": \"for i in $(seq 20); do cuda-agent compile "
				"| tail -c 0; done; cuda-agent compile; echo rc=$?\"}")
		    : must(c, "bash", "{\"command\": \"for i in $(seq 20); do cuda-agent compile "
				"| tail -c 0; done; cuda-agent compile; echo rc=$?\"}");
	if (!strstr(r.output, "at most 16 calls") || !strstr(r.output, "rc=2") || calls != 16)
		fail_msg("request limit (%d calls): %s", calls, r.output);
	tool_result_free(&r);
	/* without the loop's side (fd 3), the shim says so */
	c->agent_cmd = NULL;
	c->sandbox = false; /* the sandbox binds the shim only when it is served */
	r = must(c, "bash", "{\"command\": \"export PATH=$PATH:%s; cuda-agent compile; "
			     "echo rc=$?\"}", dir);
	if (!strstr(r.output, "not reachable"))
		fail_msg("no loop side: %s", r.output);
	if (!strstr(r.output, "rc=4"))
		fail_msg("no loop side: %s", r.output);
	tool_result_free(&r);
	c->shim_dir = NULL;
}

static void test_bash_shim(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	check_shim(&c, false);
	c = ctx_plain();
	check_shim(&c, true);
}

static void test_bash_sandbox(void **state)
{
	(void)state;
	struct tool_ctx c = ctx_plain();
	struct tool_result r;
	char ref_dir[PATH_MAX], ref[PATH_MAX], home_file[PATH_MAX], *text;
	size_t len;
	struct ca_diag d;
	c.sandbox = true;

	r = sandboxed(&c, "{\"command\": \"echo hi; echo err >&2; pwd\"}");
	char want[PATH_MAX + 32];
	snprintf(want, sizeof want, "hi\nerr\n%s\n", ws);
	assert_string_equal(r.output, want);
	assert_true(r.ok);
	tool_result_free(&r);
	r = sandboxed(&c, "{\"command\": \"exit 7\"}");
	assert_int_equal(r.exit_code, 7);
	assert_false(r.ok);
	tool_result_free(&r);
	/* only the environment it is given */
	setenv("CA_TOOLS_TEST_LEAK", "leaked", 1);
	r = sandboxed(&c, "{\"command\": \"echo $HOME $LANG $PATH; env | grep -c CA_TOOLS_TEST_LEAK\"}");
	assert_string_equal(r.output, "/tmp C.UTF-8 /usr/local/cuda/bin:/usr/local/sbin:/usr/local/"
				      "bin:/usr/sbin:/usr/bin:/sbin:/bin\n0\n\n[exit code 1]");
	tool_result_free(&r);
	unsetenv("CA_TOOLS_TEST_LEAK");

	/* the workspace is writable, including files made by the caller */
	r = sandboxed(&c, "{\"command\": \"echo made > made.txt && echo more >> kernels/kernel.cu && "
			  "mkdir -p d/e && echo x > d/e/f && cat made.txt\"}");
	if (!r.ok)
		fail_msg("writing in the workspace: %s", r.output);
	tool_result_free(&r);
	text = slurp_ws("made.txt");
	assert_string_equal(text, "made\n");
	free(text);
	text = slurp_ws("kernels/kernel.cu");
	assert_non_null(strstr(text, "return 2; }\nmore\n"));
	free(text);
	/* ... and the file tools still work on what bash made */
	r = must(&c, "edit", "{\"path\": \"made.txt\", \"old_string\": \"made\", \"new_string\": \"edited\"}");
	assert_true(r.ok);
	tool_result_free(&r);
	/* a read-only name stays read-only for bash too (mode 0444; as root, not handed over) */
	r = sandboxed(&c, "{\"command\": \"echo x >> model.py\"}");
	assert_false(r.ok);
	tool_result_free(&r);
	text = slurp_ws("model.py");
	assert_string_equal(text, "import torch\nclass Model: pass\n");
	free(text);

	/* nothing outside the workspace: /etc, the host's $HOME, a sibling of the workspace */
	const char *home = getenv("HOME");
	snprintf(home_file, sizeof home_file, "%s/ca-tools-test-%d", home && home[0] ? home : "/root",
		 (int)getpid());
	char home_cmd[PATH_MAX + 64];
	snprintf(home_cmd, sizeof home_cmd, "echo x > %s", home_file);
	const char *const denied[] = {"echo x > /etc/ca-tools-test", "touch /usr/ca-tools-test",
				      home_cmd};
	for (size_t i = 0; i < 3; i++) {
		const char *cmd = denied[i];
		r = sandboxed(&c, "{\"command\": \"%s\"}", cmd);
		if (r.ok)
			fail_msg("%s succeeded in the sandbox: %s", cmd, r.output);
		tool_result_free(&r);
	}
	/* the workspace's sibling on the host: not visible (what is written at that path lands
	 * in the sandbox's /tmp, the scratch directory, where the workspace's mount point is) */
	r = sandboxed(&c, "{\"command\": \"cat %s; echo pwned > %s; cat %s\"}", outside, outside,
		      outside);
	assert_null(strstr(r.output, "host secret"));
	tool_result_free(&r);
	assert_false(ca_is_file("/etc/ca-tools-test"));
	assert_false(ca_is_file("/usr/ca-tools-test"));
	assert_false(ca_is_file(home_file));
	assert_int_equal(ca_read_file(outside, 1024, &text, &len, &d), 0);
	assert_string_equal(text, "host secret 4711\n");
	free(text);

	/* no network */
	r = sandboxed(&c, "{\"command\": \"exec 3<>/dev/tcp/1.1.1.1/80 && echo CONNECTED\"}");
	assert_false(r.ok);
	assert_null(strstr(r.output, "CONNECTED"));
	tool_result_free(&r);
	r = sandboxed(&c, "{\"command\": \"curl -sS -m 5 http://1.1.1.1/ && echo FETCHED\"}");
	assert_false(r.ok);
	assert_null(strstr(r.output, "FETCHED"));
	tool_result_free(&r);
	r = sandboxed(&c, "{\"command\": \"exec 3<>/dev/tcp/127.0.0.1/22 && echo CONNECTED\"}");
	assert_false(r.ok);
	assert_null(strstr(r.output, "CONNECTED"));
	tool_result_free(&r);

	/* reference data under /dev/shm/cuda-agent-$UID is not reachable */
	snprintf(ref_dir, sizeof ref_dir, "/dev/shm/cuda-agent-%u/run-tools-test-%d/private",
		 (unsigned)getuid(), (int)getpid());
	assert_int_equal(ca_mkdirs(ref_dir, 0700, &d), 0);
	snprintf(ref, sizeof ref, "%s/ref.safetensors", ref_dir);
	{
		FILE *f = fopen(ref, "w");
		assert_non_null(f);
		fputs("REFERENCE-OUTPUT-BYTES\n", f);
		fclose(f);
	}
	r = sandboxed(&c, "{\"command\": \"cat %s\"}", ref);
	assert_false(r.ok);
	assert_null(strstr(r.output, "REFERENCE-OUTPUT-BYTES"));
	assert_non_null(strstr(r.output, "No such file or directory"));
	tool_result_free(&r);
	r = sandboxed(&c, "{\"command\": \"ls -a /dev/shm\"}");
	assert_string_equal(r.output, ".\n..\n"); /* a private, empty /dev/shm */
	tool_result_free(&r);
	/* (the same cat works without the sandbox: the test can fail) */
	c.sandbox = false;
	r = must(&c, "bash", "{\"command\": \"cat %s\"}", ref);
	assert_string_equal(r.output, "REFERENCE-OUTPUT-BYTES\n");
	tool_result_free(&r);
	c.sandbox = true;
	{
		char run_dir[PATH_MAX];
		snprintf(run_dir, sizeof run_dir, "/dev/shm/cuda-agent-%u/run-tools-test-%d",
			 (unsigned)getuid(), (int)getpid());
		assert_int_equal(ca_remove_tree(run_dir, &d), 0);
	}
	/* no GPU device nodes */
	r = sandboxed(&c, "{\"command\": \"ls /dev/nvidia*\"}");
	assert_false(r.ok);
	assert_non_null(strstr(r.output, "No such file or directory"));
	tool_result_free(&r);
	r = sandboxed(&c, "{\"command\": \"ls /dev\"}");
	assert_true(r.ok);
	assert_null(strstr(r.output, "nvidia"));
	assert_non_null(strstr(r.output, "urandom"));
	tool_result_free(&r);

	/* processes: pipelines, background jobs die with the command */
	r = sandboxed(&c, "{\"command\": \"sleep 100 & echo started\"}");
	if (!r.ok)
		fail_msg("background job: %s", r.output);
	assert_true(r.seconds < 5.0);
	assert_string_equal(r.output, "started\n");
	tool_result_free(&r);
	/* the time limit: the call's timeout_s, smaller than the session's */
	c.bash_timeout_s = 60;
	r = sandboxed(&c, "{\"command\": \"echo before; sleep 30\", \"timeout_s\": 1}");
	assert_true(r.timed_out);
	assert_false(r.ok);
	assert_int_equal(r.exit_code, -1);
	assert_true(r.seconds < 2.5);
	assert_non_null(strstr(r.output, "before\n"));
	assert_non_null(strstr(r.output, "[timed out after 1.0 s"));
	tool_result_free(&r);
	/* ... and the session's when it is smaller */
	c.bash_timeout_s = 1;
	r = sandboxed(&c, "{\"command\": \"sleep 30\", \"timeout_s\": 100}");
	assert_true(r.timed_out);
	assert_true(r.seconds < 2.5);
	tool_result_free(&r);
	c.bash_timeout_s = 0;

	/* output capped while read: 10 MB in, head + tail + note out */
	r = sandboxed(&c, "{\"command\": \"yes | head -c 10000000\"}");
	assert_true(r.ok);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.bytes_omitted, 10000000 - TOOLS_DEFAULT_CAP);
	assert_true(strlen(r.output) <= TOOLS_DEFAULT_CAP + 64);
	{
		char note[96];
		snprintf(note, sizeof note, "\n[... %d bytes omitted ...]\n", 10000000 - TOOLS_DEFAULT_CAP);
		assert_non_null(strstr(r.output, note));
	}
	assert_memory_equal(r.output, "y\ny\ny\n", 6);
	tool_result_free(&r);
	/* scratch /tmp is the session's directory */
	r = sandboxed(&c, "{\"command\": \"echo note > /tmp/n.txt && cat /tmp/n.txt\"}");
	assert_true(r.ok);
	tool_result_free(&r);
	{
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%s/n.txt", scratch);
		assert_true(ca_is_file(p));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schemas),
		cmocka_unit_test(test_validation),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_write_and_read),
		cmocka_unit_test(test_edit),
		cmocka_unit_test(test_glob),
		cmocka_unit_test(test_grep),
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_bash_plain),
		cmocka_unit_test(test_bash_sandbox),
		cmocka_unit_test(test_bash_shim),
	};
	return cmocka_run_group_tests(tests, setup, teardown_dir);
}
