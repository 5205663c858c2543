/* Unit tests for src/build/host_pch: the prefix scan on synthetic cudafe++ output (what ends
 * the prefix, what it refuses, what it replays), and the whole cycle with the real gcc on a
 * generated unit: first sighting, the header built and kept, the rewritten unit's assembly
 * against the plain compile's, and a candidate file that shadows what the header read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/host_pch.h"
#include "util/clock.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/proc.h"

#define LOCAL "/cand/kernels"

/* A prefix of toolkit text over HOST_PCH_MIN_PREFIX: filler declarations under a system
 * header's marker, with head before them and tail after. */
static char *make_text(const char *head, const char *tail, const char *rest, size_t *prefix_len)
{
	size_t cap = HOST_PCH_MIN_PREFIX * 2 + strlen(head) + strlen(tail) + strlen(rest) + 4096;
	char *t = malloc(cap);
	size_t n = 0;
	assert_non_null(t);
	n += (size_t)snprintf(t + n, cap - n, "# 1 \"" LOCAL "/x.cu\"\n%s", head);
	n += (size_t)snprintf(t + n, cap - n, "# 61 \"/usr/local/cuda/include/cuda_runtime.h\"\n");
	for (int i = 0; n < HOST_PCH_MIN_PREFIX + 1024; i++)
		n += (size_t)snprintf(t + n, cap - n, "int ca_filler_%d(int);\n# 1\n", i);
	n += (size_t)snprintf(t + n, cap - n, "%s", tail);
	if (prefix_len)
		*prefix_len = n;
	snprintf(t + n, cap - n, "%s", rest);
	return t;
}

static int scan(const char *text, struct host_pch_prefix *p)
{
	return host_pch_scan(text, strlen(text), LOCAL, p);
}

static void test_scan_prefix_and_replay(void **state)
{
	(void)state;
	struct host_pch_prefix p;
	size_t want;
	char *t = make_text("#pragma GCC diagnostic push\n"
			    "#pragma GCC diagnostic ignored \"-Wattributes\"\n",
			    "#if 0\n#pragma GCC diagnostic ignored \"-Wnot-replayed\"\n#pragma pack(1)\n"
			    "#include <stdio.h>\n#endif\n"
			    "#pragma GCC visibility push(default)\nint v;\n#pragma GCC visibility pop\n"
			    "#if !defined(X)\n#define X 1\n#endif\n#undef Y\n"
			    "#define M(a) \\\n#a\n"
			    "#include \"crt/host_runtime.h\"\n"
			    "# 1 \"<built-in>\"\n# 7 \"/cand/kernelsX/other.h\"\n"
			    "  #  pragma GCC diagnostic pop\n",
			    "# 4 \"" LOCAL "/x.cu\"\nint user;\n#pragma weird\n", &want);
	assert_int_equal(scan(t, &p), 0);
	assert_int_equal(p.len, want);
	assert_int_equal(p.head, strlen("# 1 \"" LOCAL "/x.cu\"\n")); /* kept out of the header */
	assert_string_equal(p.replay, "#pragma GCC diagnostic push\n"
				      "#pragma GCC diagnostic ignored \"-Wattributes\"\n"
				      "#  pragma GCC diagnostic pop\n");
	assert_int_equal(p.replay_len, strlen(p.replay));
	host_pch_prefix_free(&p);
	free(t);

	/* a relative name (a header found beside the unit) ends it too, as does #line */
	t = make_text("", "", "# 3 \"helpers.cuh\"\nint h;\n", &want);
	assert_int_equal(scan(t, &p), 0);
	assert_int_equal(p.len, want);
	assert_null(p.replay);
	host_pch_prefix_free(&p);
	free(t);
	t = make_text("", "", "#line 9 \"" LOCAL "/sub/h.cuh\"\nint h;\n", &want);
	assert_int_equal(scan(t, &p), 0);
	assert_int_equal(p.len, want);
	host_pch_prefix_free(&p);
	free(t);
}

static void test_scan_refusals(void **state)
{
	(void)state;
	static const char *const tails[] = {
		"#pragma pack(1)\n",                          /* state a header may not keep */
		"#pragma GCC push_options\n",
		"#pragma once\n",
		"#include <stdio.h>\n",                        /* only cudafe++'s include */
		"#include \"crt/host_runtime.h\" x\n",
		"#ident \"x\"\n",
		"#error no\n",
		"#pragma GCC visibility push(hidden)\n",       /* open at the split */
		"#pragma GCC visibility pop\n",                /* more pops than pushes */
		"#if 1\n",                                     /* a conditional open at the split */
		"#if 1\n#pragma GCC diagnostic ignored \"-Wx\"\n#endif\n", /* can't tell to replay */
		"#endif\n",
		"#else\n",
	};
	struct host_pch_prefix p;
	for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
		char *t = make_text("", tails[i], "# 4 \"" LOCAL "/x.cu\"\nint u;\n", NULL);
		assert_int_equal(scan(t, &p), CA_ERR_REJECTED);
		assert_int_equal(p.len, 0);
		assert_null(p.replay);
		free(t);
	}
	/* no line of the candidate's own */
	char *t = make_text("", "", "int more;\n", NULL);
	assert_int_equal(scan(t, &p), CA_ERR_REJECTED);
	free(t);
	/* a prefix too short to be worth a header */
	const char *s = "# 1 \"" LOCAL "/x.cu\"\nint a;\n# 2 \"" LOCAL "/x.cu\"\nint b;\n";
	assert_int_equal(scan(s, &p), CA_ERR_REJECTED);
	/* nothing at all */
	assert_int_equal(host_pch_scan("", 0, LOCAL, &p), CA_ERR_REJECTED);
}

static char dir[PATH_MAX], local[PATH_MAX + 8], other[PATH_MAX + 16], sys[PATH_MAX + 8],
	pch[PATH_MAX + 8],
	scratch[PATH_MAX + 8], unit[PATH_MAX + 32];

/* <root>/crt/host_runtime.h: a macro and an inline function that multiplies by k */
static void write_host_runtime(const char *root, int k)
{
	char path[PATH_MAX + 32], text[128];
	snprintf(path, sizeof path, "%s/crt", root);
	assert_int_equal(ca_mkdirs(path, 0755, NULL), 0);
	snprintf(path, sizeof path, "%s/crt/host_runtime.h", root);
	snprintf(text, sizeof text,
		 "#define CA_HOST_RUNTIME %d\ninline int ca_rt(int x) { return x * %d; }\n", k, k);
	assert_int_equal(ca_write_file_atomic(path, text, strlen(text), NULL), 0);
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(ca_make_temp_dir("/tmp", "ca-test-pch-", dir, sizeof dir, NULL), 0);
	snprintf(local, sizeof local, "%s/cand", dir);
	snprintf(other, sizeof other, "%s/elsewhere", dir);
	assert_int_equal(ca_mkdirs(other, 0755, NULL), 0);
	snprintf(sys, sizeof sys, "%s/sys", dir);
	snprintf(pch, sizeof pch, "%s/pch", dir);
	snprintf(scratch, sizeof scratch, "%s/scratch", dir);
	snprintf(unit, sizeof unit, "%s/x.cudafe1.cpp", scratch);
	assert_int_equal(ca_mkdirs(local, 0755, NULL), 0);
	assert_int_equal(ca_mkdirs(scratch, 0755, NULL), 0);
	write_host_runtime(sys, 3);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ca_remove_tree(dir, NULL);
	return 0;
}

/* The candidate's directory the next units come from (local, or other). */
static const char *unit_dir = local;

/* The unit's text, as cudafe++ would write it for a source in unit_dir; extra goes in the
 * prefix. */
static char *unit_text(const char *extra)
{
	size_t cap = HOST_PCH_MIN_PREFIX * 3 + 8192, n = 0;
	char *t = malloc(cap);
	assert_non_null(t);
	n += (size_t)snprintf(t + n, cap - n,
			      "# 1 \"%s/x.cu\"\n#pragma GCC diagnostic ignored \"-Wattributes\"\n"
			      "#include \"crt/host_runtime.h\"\n# 1 \"/usr/include/fake.h\"\n%s",
			      unit_dir, extra);
	for (int i = 0; n < HOST_PCH_MIN_PREFIX * 2; i++)
		n += (size_t)snprintf(t + n, cap - n,
				      "template <typename T> T ca_f%d(T x) { return x + %d; }\n", i, i);
	snprintf(t + n, cap - n,
		 "# 3 \"%s/x.cu\"\n__attribute__((bogus)) int g;\n"
		 "int ca_overflow(void) { unsigned char c = 300; return c; }\n"
		 "int ca_user(int x) { return ca_f7(x) + ca_rt(x) + CA_HOST_RUNTIME; }\n", unit_dir);
	return t;
}

/* One host compile of the unit by the shell line, its assembly into out (owned). */
static void compile(const char *line, char **asm_text, char **err)
{
	const char *argv[] = {"/bin/sh", "-c", line, NULL};
	struct ca_run_opts ro = {.timeout_s = 60};
	struct ca_run_result rr;
	struct ca_diag d;
	char out[PATH_MAX + 16];
	size_t len;
	assert_int_equal(ca_run(argv, &ro, &rr, &d), 0);
	assert_int_equal(rr.exit_code, 0);
	*err = strdup(rr.err ? rr.err : "");
	ca_run_result_free(&rr);
	snprintf(out, sizeof out, "%s/x.s", scratch);
	assert_int_equal(ca_read_file(out, 16u << 20, asm_text, &len, NULL), 0);
}

static enum host_pch_state cycle_with(const char *extra, const char *line, char **asm_text,
				      char **err, char **unit_after)
{
	struct host_pch p;
	struct host_pch_job job = {.line = line, .unit = unit, .dir = pch, .scratch = scratch,
				   .local_dir = unit_dir, .nvcc = "/bin/sh", .env = NULL,
				   .deadline = ca_now() + 60};
	char *t = unit_text(extra);
	size_t len;
	assert_int_equal(ca_write_file_atomic(unit, t, strlen(t), NULL), 0);
	free(t);
	host_pch_begin(&p, &job);
	enum host_pch_state s = p.state;
	assert_int_equal(ca_read_file(unit, 64u << 20, unit_after, &len, NULL), 0);
	compile(line, asm_text, err);
	host_pch_end(&p);
	assert_int_equal(p.state, HOST_PCH_OFF);
	assert_null(p.header);
	return s;
}

static enum host_pch_state cycle(const char *line, char **asm_text, char **err, char **unit_after)
{
	return cycle_with("", line, asm_text, err, unit_after);
}

static size_t count_files(const char *ext)
{
	char **names = NULL;
	size_t count = 0;
	const char *const exts[] = {ext, NULL};
	if (ca_list_files(pch, exts, 64, &names, &count, NULL) != 0)
		return 0;
	ca_free_names(names, count);
	return count;
}

static void test_cycle_with_gcc(void **state)
{
	(void)state;
	char line[6 * PATH_MAX], *plain, *plain_err, *a, *err, *u;
	snprintf(line, sizeof line,
		 "g++ -O2 -c -x c++ -fPIC -S -I\"%s\" -I\"%s\" \"%s\" -o \"%s/x.s\"", local, sys,
		 unit, scratch);

	/* first sighting: marked only, the unit untouched */
	assert_int_equal(cycle(line, &plain, &plain_err, &u), HOST_PCH_OFF);
	assert_int_equal(strncmp(u, "# 1 \"", 5), 0);
	free(u);
	/* the plain compile warns of the overflow, not of the attribute (the pragma) */
	assert_non_null(strstr(plain_err, "overflow"));
	assert_null(strstr(plain_err, "bogus"));

	/* second: built beside the compile (of the untouched unit) and kept */
	assert_int_equal(cycle(line, &a, &err, &u), HOST_PCH_BUILDING);
	assert_string_equal(a, plain);
	assert_string_equal(err, plain_err);
	free(a);
	free(err);
	free(u);
	assert_int_equal(count_files(".gch"), 1);
	assert_int_equal(count_files(".seen"), 1);

	/* third: a hit; the rewritten unit compiles to the same assembly, with the same messages
	 * (the replayed pragma keeps -Wattributes off, which the header alone would not) */
	assert_int_equal(cycle(line, &a, &err, &u), HOST_PCH_HIT);
	assert_non_null(strstr(u, "#include \""));
	assert_non_null(strstr(u, "#pragma GCC diagnostic ignored \"-Wattributes\"\n# 3 \""));
	assert_string_equal(a, plain);
	assert_string_equal(err, plain_err);
	free(a);
	free(err);
	free(u);

	/* a candidate elsewhere with the same headers: the same header serves it (its first line,
	 * which names its path, stays out of the header), and its assembly is its plain one */
	char line2[6 * PATH_MAX], *plain2, *plain2_err;
	snprintf(line2, sizeof line2,
		 "g++ -O2 -c -x c++ -fPIC -S -I\"%s\" -I\"%s\" \"%s\" -o \"%s/x.s\"", other, sys,
		 unit, scratch);
	unit_dir = other;
	char *t2 = unit_text("");
	assert_int_equal(ca_write_file_atomic(unit, t2, strlen(t2), NULL), 0);
	free(t2);
	compile(line2, &plain2, &plain2_err); /* the unit as cudafe++ wrote it */
	assert_int_equal(cycle(line2, &a, &err, &u), HOST_PCH_HIT);
	assert_int_equal(strncmp(u, "# 1 \"", 5), 0);
	assert_non_null(strstr(u, other));
	assert_string_equal(a, plain2);
	assert_string_equal(err, plain2_err);
	assert_int_equal(count_files(".gch"), 1);
	free(a);
	free(err);
	free(u);
	free(plain2);
	free(plain2_err);
	unit_dir = local;

	/* a candidate file named like one the header read: not used (-I local comes first) */
	char shadow[PATH_MAX + 32];
	write_host_runtime(local, 5);
	snprintf(shadow, sizeof shadow, "%s/crt/host_runtime.h", local);
	assert_int_equal(cycle(line, &a, &err, &u), HOST_PCH_OFF);
	assert_true(strcmp(a, plain) != 0); /* the candidate's header is what gcc read */
	free(a);
	free(err);
	free(u);
	unlink(shadow);

	/* a prefix whose header gcc warns about is not kept, and not tried again */
	const char *warns = "int ca_prefix_overflow = 1 << 40;\n";
	size_t gch_before = count_files(".gch");
	enum host_pch_state want[] = {HOST_PCH_OFF, HOST_PCH_BUILDING, HOST_PCH_OFF};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(cycle_with(warns, line, &a, &err, &u), want[i]);
		assert_non_null(strstr(err, "overflow"));
		assert_int_equal(strncmp(u, "# 1 \"", 5), 0); /* never rewritten */
		free(a);
		free(err);
		free(u);
	}
	assert_int_equal(count_files(".gch"), gch_before);
	assert_int_equal(count_files(".nopch"), 1);

	/* turned off */
	setenv("CUDA_AGENT_HOST_PCH", "0", 1);
	assert_false(host_pch_enabled());
	unsetenv("CUDA_AGENT_HOST_PCH");
	assert_true(host_pch_enabled());

	/* a line of another shape (no `-c -x c++`) is compiled without, the second time too */
	char odd[6 * PATH_MAX];
	snprintf(odd, sizeof odd, "g++ -O2 -S -x c++ -I\"%s\" -I\"%s\" \"%s\" -o \"%s/x.s\"", local,
		 sys, unit, scratch);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(cycle(odd, &a, &err, &u), HOST_PCH_OFF);
		assert_string_equal(a, plain);
		free(a);
		free(err);
		free(u);
	}
	free(plain);
	free(plain_err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scan_prefix_and_replay),
		cmocka_unit_test(test_scan_refusals),
		cmocka_unit_test_setup_teardown(test_cycle_with_gcc, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
