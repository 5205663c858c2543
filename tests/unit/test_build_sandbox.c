/* Unit tests for the build's sandbox (src/build/box.c, src/sandbox/run.c): sandbox_run, the log
 * filter, and real nvcc builds of hostile candidates (a host file read through a macro-built
 * #include, a visible file outside the candidate's directory quoted in errors, memory
 * exhaustion, a build that runs past its time) into a temporary cache. nvcc as in
 * test_build.c ($CA_TEST_NVCC, $NVCC, PATH, /usr/local/cuda); the tests that need nvcc or
 * namespaces are skipped, saying so, when there are none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "build/build.h"
#include "build/build_int.h"
#include "sandbox/sandbox.h"
#include "util/clock.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/str.h"

static char tmpdir[PATH_MAX];
static char cache[PATH_MAX + 16];
static char include_dir[PATH_MAX];
static char nvcc[PATH_MAX];
static bool have_nvcc, have_sandbox;
static time_t started;

static bool executable(const char *path)
{
	return access(path, X_OK) == 0 && ca_is_file(path);
}

static void find_nvcc(void)
{
	const char *env = getenv("CA_TEST_NVCC");
	if (!env || !env[0])
		env = getenv("NVCC");
	if (env && env[0]) {
		snprintf(nvcc, sizeof nvcc, "%s", env);
	} else if (!ca_find_in_path(getenv("PATH"), "nvcc", nvcc, sizeof nvcc)) {
		snprintf(nvcc, sizeof nvcc, "/usr/local/cuda/bin/nvcc");
	}
	have_nvcc = executable(nvcc);
}

/* Whether this machine gives the build profile its required layers. */
static bool probe_sandbox(void)
{
	const char *argv[] = {"/bin/true", NULL};
	struct sandbox_opts so;
	struct ca_run_result r;
	struct ca_diag d = {{0}};
	sandbox_build_opts(&so);
	if (sandbox_run(argv, &so, NULL, &r, NULL, &d) != 0) {
		fprintf(stderr, "test_build_sandbox: no sandbox here (%s): its tests are skipped\n",
			d.msg);
		return false;
	}
	ca_run_result_free(&r);
	return true;
}

static int setup(void **state)
{
	const char *b = getenv("CA_BUILD");
	char abi[PATH_MAX + 32];
	(void)state;
	started = time(NULL);
	find_nvcc();
	have_sandbox = probe_sandbox();
	if (!have_nvcc)
		fprintf(stderr, "test_build_sandbox: nvcc not found (set CA_TEST_NVCC): nvcc builds "
				"are skipped\n");
	snprintf(include_dir, sizeof include_dir, "%s/include", b && b[0] ? b : "build");
	snprintf(abi, sizeof abi, "%s/cuda_agent/abi.h", include_dir);
	if (!ca_is_file(abi)) {
		fprintf(stderr, "test_build_sandbox: %s is missing (run `make headers`)\n", abi);
		return -1;
	}
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-build-sandbox-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(cache, sizeof cache, "%s/cache", tmpdir);
	return 0;
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

/* <tmpdir>/<name>/kernels/a.cu holding text; the kernels directory into out. */
static void write_candidate(const char *name, const char *text, char *out, size_t size)
{
	char path[PATH_MAX + 16];
	struct ca_diag d;
	assert_true(snprintf(out, size, "%s/%s/kernels", tmpdir, name) < (int)size);
	assert_int_equal(ca_mkdirs(out, 0755, &d), 0);
	snprintf(path, sizeof path, "%s/a.cu", out);
	assert_int_equal(ca_write_file_atomic(path, text, strlen(text), &d), 0);
}

static void build(const char *kdir, double timeout_s, unsigned long long as_bytes,
		  struct build_result *r)
{
	struct build_opts o = {.kernels_dir = kdir, .cache_dir = cache, .nvcc = nvcc,
			       .include_dir = include_dir, .arch = "sm_90", .no_cache = true,
			       .timeout_s = timeout_s, .as_bytes = as_bytes};
	struct ca_diag d = {{0}};
	int rc = build_candidate(&o, r, &d);
	if (rc != 0)
		fail_msg("build_candidate failed (%d): %s", rc, d.msg);
}

/* The first line of a file (at most size - 1 bytes), "" when unreadable. */
static void first_line(const char *path, char *out, size_t size)
{
	char *text = NULL;
	size_t len = 0;
	out[0] = '\0';
	if (ca_read_file(path, 1u << 20, &text, &len, NULL) != 0)
		return;
	snprintf(out, size, "%.*s", (int)strcspn(text, "\n"), text);
	free(text);
}

/* How many processes' command lines hold needle (this process excluded). */
static int processes_with(const char *needle)
{
	DIR *dir = opendir("/proc");
	struct dirent *e;
	int found = 0;
	assert_non_null(dir);
	while ((e = readdir(dir))) {
		char path[300], buf[4096];
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == getpid())
			continue;
		snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		for (size_t i = 0; i < n; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
		buf[n] = '\0';
		found += strstr(buf, needle) != NULL;
	}
	closedir(dir);
	return found;
}

/* A preprocessor bomb: 4^11 * 16 (67 million) tokens in one initializer, which the front end
 * holds in memory (gigabytes) and takes minutes over. */
static const char bomb[] =
	"#define A0 x x x x x x x x x x x x x x x x\n"
	"#define A1 A0 A0 A0 A0\n#define A2 A1 A1 A1 A1\n#define A3 A2 A2 A2 A2\n"
	"#define A4 A3 A3 A3 A3\n#define A5 A4 A4 A4 A4\n#define A6 A5 A5 A5 A5\n"
	"#define A7 A6 A6 A6 A6\n#define A8 A7 A7 A7 A7\n#define A9 A8 A8 A8 A8\n"
	"#define A10 A9 A9 A9 A9\n#define A11 A10 A10 A10 A10\n"
	"int v[] = {A11};\n";

/* ---- tests ----------------------------------------------------------------------------------- */

/* sandbox_run captures both streams apart, gives the exit code, feeds stdin. */
static void test_sandbox_run_output(void **state)
{
	const char *argv[] = {"/bin/sh", "-c", "cat; echo out; echo err >&2; exit 3", NULL};
	struct ca_run_opts ro = {.stdin_data = "in\n", .stdin_len = 3, .timeout_s = 20};
	struct sandbox_opts so;
	struct ca_run_result r;
	struct ca_diag d = {{0}};
	(void)state;
	if (!have_sandbox)
		skip();
	sandbox_build_opts(&so);
	assert_int_equal(sandbox_run(argv, &so, &ro, &r, NULL, &d), 0);
	assert_string_equal(r.out, "in\nout\n");
	assert_string_equal(r.err, "err\n");
	assert_int_equal(r.exit_code, 3);
	assert_false(r.timed_out);
	ca_run_result_free(&r);
}

/* The wall-clock limit kills the whole sandbox: a daemon it started does not outlive it. */
static void test_sandbox_run_timeout_and_daemon(void **state)
{
	const char *argv[] = {"/bin/sh", "-c", "sleep 4321.5 & sleep 4321.25", NULL};
	const char *argv2[] = {"/bin/sh", "-c", "sleep 4321.75 & echo started", NULL};
	struct ca_run_opts ro = {.timeout_s = 0.5};
	struct sandbox_opts so;
	struct ca_run_result r;
	struct ca_diag d = {{0}};
	(void)state;
	if (!have_sandbox)
		skip();
	sandbox_build_opts(&so);
	double t0 = ca_now();
	assert_int_equal(sandbox_run(argv, &so, &ro, &r, NULL, &d), 0);
	assert_true(r.timed_out);
	assert_true(ca_now() - t0 < 5);
	ca_run_result_free(&r);
	assert_int_equal(processes_with("sleep 4321.5"), 0);
	assert_int_equal(processes_with("sleep 4321.25"), 0);
	/* the program ends on its own, its background child with it */
	ro.timeout_s = 20;
	assert_int_equal(sandbox_run(argv2, &so, &ro, &r, NULL, &d), 0);
	assert_false(r.timed_out);
	assert_string_equal(r.out, "started\n");
	ca_run_result_free(&r);
	assert_int_equal(processes_with("sleep 4321.75"), 0);
}

/* minimal_etc: /etc holds only the loader's and compilers' files. */
static void test_sandbox_minimal_etc(void **state)
{
	const char *argv[] = {"/bin/sh", "-c", "cat /etc/hostname /etc/os-release /etc/shadow",
			      NULL};
	struct sandbox_opts so;
	struct ca_run_result r;
	struct ca_diag d = {{0}};
	(void)state;
	if (!have_sandbox)
		skip();
	sandbox_build_opts(&so);
	assert_int_equal(sandbox_run(argv, &so, NULL, &r, NULL, &d), 0);
	assert_int_not_equal(r.exit_code, 0);
	assert_string_equal(r.out, "");
	assert_non_null(strstr(r.err, "/etc/hostname: No such file"));
	ca_run_result_free(&r);
}

/* The log filter: a diagnostic located outside the allowed roots is withheld with its quoted
 * lines; one in the candidate's directory is kept; a symlink out of it is withheld too. */
static void test_filter_log(void **state)
{
	struct build_box *bx = calloc(1, sizeof *bx);
	char kdir[PATH_MAX], link[PATH_MAX + 16], log_text[8 * PATH_MAX];
	struct ca_diag d;
	(void)state;
	assert_non_null(bx);
	snprintf(kdir, sizeof kdir, "%.1000s/filter/kernels", tmpdir);
	assert_int_equal(ca_mkdirs(kdir, 0755, &d), 0);
	snprintf(link, sizeof link, "%.1100s/evil.h", kdir);
	assert_int_equal(symlink("/etc/passwd", link), 0);
	ca_strlcpy(bx->roots[bx->n_roots++], kdir, PATH_MAX);
	ca_strlcpy(bx->roots[bx->n_roots++], "/usr/include", PATH_MAX);
	snprintf(log_text, sizeof log_text,
		 "In file included from %s/a.cu:3:\n"
		 "/etc/secret.txt:1:1: error: 'SECRET1' does not name a type\n"
		 "    1 | SECRET1\n"
		 "      | ^~~~~~~\n"
		 "%s/a.cu:4:2: error: expected ';'\n"
		 "    4 | int x\n"
		 "/etc/secret.txt(2): error: identifier \"SECRET2\" is undefined\n"
		 "  SECRET2\n"
		 "  ^\n"
		 "\n"
		 "%s/../../../../etc/secret.txt:3: error: SECRET3\n"
		 "%s:1:1: error: SECRET4\n"
		 "/usr/include/stdio.h:5:1: note: kept\n"
		 "nvcc fatal   : kept too\n",
		 kdir, kdir, kdir, link);
	char *out = build_filter_log(bx, strdup(log_text));
	assert_non_null(out);
	for (int i = 1; i <= 4; i++) {
		char secret[16];
		snprintf(secret, sizeof secret, "SECRET%d", i);
		if (strstr(out, secret))
			fail_msg("%s shown:\n%s", secret, out);
	}
	assert_non_null(strstr(out, "/etc/secret.txt: diagnostic withheld (a file outside the "
				    "candidate's directory)"));
	assert_non_null(strstr(out, "a.cu:4:2: error: expected ';'\n    4 | int x\n"));
	assert_non_null(strstr(out, "/usr/include/stdio.h:5:1: note: kept"));
	assert_non_null(strstr(out, "nvcc fatal   : kept too"));
	free(out);
	free(bx);
}

/* (a) A macro-built #include of /etc/hostname: the file is not in the build's view, and the
 * host's hostname appears nowhere in what the agent is shown. */
static void test_build_host_file_not_visible(void **state)
{
	char kdir[PATH_MAX], host[256];
	struct build_result r;
	(void)state;
	if (!have_nvcc || !have_sandbox)
		skip();
	write_candidate("hostname",
			"#define STR2(x) #x\n#define STR(x) STR2(x)\n#define P /etc/hostname\n"
			"#include STR(P)\n",
			kdir, sizeof kdir);
	build(kdir, 120, 0, &r);
	assert_int_equal(r.status, BUILD_COMPILE_ERROR);
	assert_true(r.sandboxed);
	if (!strstr(r.errors, "/etc/hostname: No such file"))
		fail_msg("expected the file to be missing in the sandbox:\n%s", r.errors);
	first_line("/etc/hostname", host, sizeof host);
	if (host[0] && strstr(r.errors, host) && strlen(host) >= 4)
		fail_msg("the hostname %s is shown:\n%s", host, r.errors);
}

/* (b) A file the sandbox shows (under /usr) but outside the candidate's directory: compiled as
 * source, every diagnostic in it is withheld, so none of its text is shown. */
static void test_build_outside_diagnostics_withheld(void **state)
{
	static const char *const files[] = {"/usr/lib/os-release",
					    "/usr/share/common-licenses/GPL-3", NULL};
	char kdir[PATH_MAX], text[PATH_MAX + 128], line[256] = "";
	const char *file = NULL;
	struct build_result r;
	(void)state;
	if (!have_nvcc || !have_sandbox)
		skip();
	for (size_t i = 0; files[i] && !file; i++)
		if (ca_is_file(files[i]))
			file = files[i];
	if (!file)
		skip();
	first_line(file, line, sizeof line);
	snprintf(text, sizeof text,
		 "#define STR2(x) #x\n#define STR(x) STR2(x)\n#define P %s\n#include STR(P)\n",
		 file);
	write_candidate("outside", text, kdir, sizeof kdir);
	build(kdir, 120, 0, &r);
	assert_int_equal(r.status, BUILD_COMPILE_ERROR);
	if (!strstr(r.errors, "diagnostic withheld"))
		fail_msg("no diagnostic withheld:\n%s", r.errors);
	/* a word of the file's first line, e.g. PRETTY_NAME, or GNU */
	char word[64];
	snprintf(word, sizeof word, "%.*s", (int)strcspn(line, "=\" \t"), line);
	if (strlen(word) >= 3 && strstr(r.errors, word))
		fail_msg("%s's text (%s) is shown:\n%s", file, word, r.errors);
}

/* (c) Memory exhaustion is contained by RLIMIT_AS: the compile fails, well before its time
 * limit, and the test process (the supervisor) is unharmed. */
static void test_build_memory_capped(void **state)
{
	char kdir[PATH_MAX];
	struct build_result r;
	(void)state;
	if (!have_nvcc || !have_sandbox)
		skip();
	write_candidate("memory", bomb, kdir, sizeof kdir);
	double t0 = ca_now();
	build(kdir, 300, 1ull << 30, &r);
	if (r.status != BUILD_COMPILE_ERROR)
		fail_msg("status %s after %.1f s:\n%s", build_status_code(r.status), ca_now() - t0,
			 r.errors);
	assert_true(ca_now() - t0 < 200);
	if (!strstr(r.errors, "memory")) /* "virtual memory exhausted" */
		fail_msg("not stopped by the memory cap:\n%s", r.errors);
}

/* (d) A build past its time is killed with everything it started: no compiler of it remains. */
static void test_build_timeout_leaves_nothing(void **state)
{
	char kdir[PATH_MAX];
	struct build_result r;
	(void)state;
	if (!have_nvcc || !have_sandbox)
		skip();
	write_candidate("slow", bomb, kdir, sizeof kdir);
	double t0 = ca_now();
	build(kdir, 3, 4ull << 30, &r);
	assert_int_equal(r.status, BUILD_TIMEOUT);
	assert_true(ca_now() - t0 < 30);
	/* every step names the source's path: nvcc, cudafe++, the preprocessor */
	assert_int_equal(processes_with(kdir), 0);
}

/* (e) Nothing is left outside the cache's entries: no staging directory, no temporary file in
 * the cache, nothing of the sandbox's uid in /tmp. Runs last. */
static void test_build_leaves_nothing(void **state)
{
	char **names = NULL;
	size_t count = 0;
	struct ca_diag d;
	(void)state;
	if (!have_nvcc || !have_sandbox)
		skip();
	assert_int_equal(ca_list_files(cache, NULL, 100000, &names, &count, &d), 0);
	for (size_t i = 0; i < count; i++)
		if (strstr(names[i], "staging-") || strstr(names[i], ".tmp.") ||
		    strstr(names[i], "ca-nvcc-"))
			fail_msg("left in the cache: %s", names[i]);
	ca_free_names(names, count);
	DIR *dir = opendir("/tmp");
	struct dirent *e;
	assert_non_null(dir);
	while ((e = readdir(dir))) {
		char path[PATH_MAX];
		struct stat st;
		snprintf(path, sizeof path, "/tmp/%.200s", e->d_name);
		if (lstat(path, &st) == 0 && geteuid() == 0 && st.st_uid == 65534 &&
		    st.st_mtime >= started)
			fail_msg("the sandbox's uid left %s in the host's /tmp", path);
	}
	closedir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox_run_output),
		cmocka_unit_test(test_sandbox_run_timeout_and_daemon),
		cmocka_unit_test(test_sandbox_minimal_etc),
		cmocka_unit_test(test_filter_log),
		cmocka_unit_test(test_build_host_file_not_visible),
		cmocka_unit_test(test_build_outside_diagnostics_withheld),
		cmocka_unit_test(test_build_memory_capped),
		cmocka_unit_test(test_build_timeout_leaves_nothing),
		cmocka_unit_test(test_build_leaves_nothing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
