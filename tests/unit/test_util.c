/* Unit tests for src/util: diag, fs, proc, hash, clock, log, str. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/proc.h"
#include "util/pylaunch.h"
#include "util/str.h"
#include "util/timeline.h"

#define TEST_NAME "util"
#include "unit/helpers.h"

static void touch(const char *dir, const char *name, const char *content)
{
	char path[PATH_MAX];
	struct ca_diag d;
	assert_int_equal(ca_path_join(path, sizeof path, dir, name), 0);
	assert_int_equal(ca_write_file_atomic(path, content, strlen(content), &d), 0);
}

/* ---- diag ------------------------------------------------------------------------------------ */

static void test_diag(void **state)
{
	(void)state;
	struct ca_diag d;

	assert_int_equal(ca_fail(&d, CA_ERR_IO, "cannot open %s: %d", "x", 5), CA_ERR_IO);
	assert_string_equal(d.msg, "cannot open x: 5");
	assert_int_equal(ca_fail_prefix(&d, CA_ERR_PARSE, "task %s", "t1"), CA_ERR_PARSE);
	assert_string_equal(d.msg, "task t1: cannot open x: 5");
	assert_int_equal(ca_fail(NULL, CA_ERR_LIMIT, "ignored %d", 1), CA_ERR_LIMIT);
	assert_int_equal(ca_fail_prefix(NULL, CA_ERR_LIMIT, "ignored"), CA_ERR_LIMIT);
	ca_diag_clear(&d);
	assert_string_equal(d.msg, "");
	ca_diag_clear(NULL);

	/* long messages are truncated, never overflowed */
	{
		char big[3 * CA_DIAG_MAX];
		memset(big, 'x', sizeof big - 1);
		big[sizeof big - 1] = '\0';
		ca_fail(&d, CA_ERR_IO, "%s", big);
		assert_int_equal(strlen(d.msg), CA_DIAG_MAX - 1);
		ca_fail_prefix(&d, CA_ERR_IO, "%s", big);
		assert_int_equal(strlen(d.msg), CA_DIAG_MAX - 1);
	}

	assert_string_equal(ca_err_name(CA_OK), "ok");
	assert_string_equal(ca_err_name(CA_ERR_NOMEM), "nomem");
	assert_string_equal(ca_err_name(CA_ERR_PARSE), "parse");
	assert_string_equal(ca_err_name(CA_ERR_TIMEOUT), "timeout");
	assert_string_equal(ca_err_name(CA_ERR_REJECTED), "rejected");
	assert_string_equal(ca_err_name(-999), "unknown");
	/* every code has a distinct name */
	assert_string_equal(ca_err_name(CA_ERR_INTERRUPTED), "interrupted");
	for (int a = CA_ERR_INTERRUPTED; a <= 0; a++)
		for (int b = a + 1; b <= 0; b++)
			assert_string_not_equal(ca_err_name(a), ca_err_name(b));
}

/* ---- fs -------------------------------------------------------------------------------------- */

static void test_read_file(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	char *buf = (char *)1;
	size_t len = 99;

	tmp_path(path, sizeof path, "read.txt");
	assert_int_equal(ca_write_file_atomic(path, "hello\0world", 11, &d), 0);
	assert_int_equal(ca_read_file(path, 11, &buf, &len, &d), 0);
	assert_int_equal(len, 11);
	assert_memory_equal(buf, "hello\0world", 11);
	assert_int_equal(buf[11], '\0'); /* NUL-terminated past the length */
	free(buf);
	assert_int_equal(ca_read_file(path, 1000, &buf, NULL, &d), 0);
	free(buf);

	/* over the cap: an error, not a truncation */
	buf = (char *)1;
	assert_int_equal(ca_read_file(path, 10, &buf, &len, &d), CA_ERR_LIMIT);
	assert_null(buf);
	assert_int_equal(len, 0);
	assert_non_null(strstr(d.msg, "over the limit of 10"));

	/* empty file */
	tmp_path(path, sizeof path, "empty.txt");
	assert_int_equal(ca_write_file_atomic(path, "", 0, &d), 0);
	assert_int_equal(ca_read_file(path, 0, &buf, &len, &d), 0);
	assert_int_equal(len, 0);
	assert_string_equal(buf, "");
	free(buf);

	tmp_path(path, sizeof path, "missing.txt");
	assert_int_equal(ca_read_file(path, 100, &buf, &len, &d), CA_ERR_NOTFOUND);
	assert_null(buf);
	assert_non_null(strstr(d.msg, path));

	assert_int_equal(ca_read_file(tmpdir, 100, &buf, &len, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "not a regular file"));

	/* a FIFO is refused at once (no writer: blocking in open() would hang) */
	tmp_path(path, sizeof path, "fifo");
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(ca_read_file(path, 100, &buf, &len, &d), CA_ERR_INVALID);
	unlink(path);
}

static void test_write_file_atomic(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	char *buf;
	size_t len;
	char **names;
	size_t count;

	tmp_path(path, sizeof path, "atomic.bin");
	assert_int_equal(ca_write_file_atomic(path, "first version", 13, &d), 0);
	assert_int_equal(ca_write_file_atomic(path, "v2", 2, &d), 0);
	assert_int_equal(ca_read_file(path, 100, &buf, &len, &d), 0);
	assert_int_equal(len, 2); /* replaced whole, not overwritten in place */
	assert_string_equal(buf, "v2");
	free(buf);

	/* a missing directory: I/O error naming the temporary file, nothing left behind */
	tmp_path(path, sizeof path, "nodir/atomic.bin");
	assert_int_equal(ca_write_file_atomic(path, "x", 1, &d), CA_ERR_IO);
	assert_non_null(strstr(d.msg, "cannot create"));
	/* renaming over a directory fails and removes the temporary */
	tmp_path(path, sizeof path, "adir");
	assert_int_equal(ca_mkdirs(path, 0755, &d), 0);
	assert_int_equal(ca_write_file_atomic(path, "x", 1, &d), CA_ERR_IO);
	assert_non_null(strstr(d.msg, "rename"));
	assert_int_equal(ca_list_files(tmpdir, NULL, 100, &names, &count, &d), 0);
	for (size_t i = 0; i < count; i++)
		assert_null(strstr(names[i], ".tmp."));
	ca_free_names(names, count);
	assert_int_equal(rmdir(path), 0);

	{
		char longp[PATH_MAX + 16];
		memset(longp, 'a', sizeof longp - 1);
		longp[sizeof longp - 1] = '\0';
		assert_int_equal(ca_write_file_atomic(longp, "x", 1, &d), CA_ERR_LIMIT);
	}
}

static void test_mkdirs(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct ca_diag d = {{0}};
	struct stat sb;

	tmp_path(path, sizeof path, "m/n/o/p");
	assert_int_equal(ca_mkdirs(path, 0750, &d), 0);
	assert_true(ca_is_dir(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0700, 0700);
	assert_int_equal(ca_mkdirs(path, 0750, &d), 0); /* idempotent */
	tmp_path(path, sizeof path, "m/n/trailing/");
	assert_int_equal(ca_mkdirs(path, 0755, &d), 0);
	assert_true(ca_is_dir(path));

	/* a regular file in the way */
	touch(tmpdir, "plain", "x");
	tmp_path(path, sizeof path, "plain");
	assert_int_equal(ca_mkdirs(path, 0755, &d), CA_ERR_IO);
	assert_non_null(strstr(d.msg, "not a directory"));
	tmp_path(path, sizeof path, "plain/sub");
	assert_int_equal(ca_mkdirs(path, 0755, &d), CA_ERR_IO);

	assert_int_equal(ca_mkdirs("", 0755, &d), CA_ERR_INVALID);
}

static void test_remove_tree(void **state)
{
	(void)state;
	char path[PATH_MAX], sub[PATH_MAX];
	struct ca_diag d = {{0}};

	/* the guard */
	const char *refused[] = {"", "/", "//", "///", ".", "./", "/tmp", "/tmp/", "//tmp//",
				 "/tmp/..", "/tmp/x/../..", "..", "a/../..", "/./tmp/.", NULL};
	for (const char *const *p = refused; *p; p++) {
		d.msg[0] = '\0';
		if (ca_remove_tree(*p, &d) != CA_ERR_INVALID)
			fail_msg("ca_remove_tree('%s') was not refused", *p);
		assert_non_null(strstr(d.msg, "refusing"));
	}
	assert_true(ca_is_dir("/tmp"));

	/* a nested tree with files goes away; the parent stays */
	tmp_path(path, sizeof path, "rt");
	tmp_path(sub, sizeof sub, "rt/a/b/c");
	assert_int_equal(ca_mkdirs(sub, 0755, &d), 0);
	touch(sub, "f1", "1");
	tmp_path(sub, sizeof sub, "rt/a");
	touch(sub, "f2", "2");
	/* a symlink inside points out of the tree: the link goes, its target stays */
	touch(tmpdir, "outside", "keep");
	{
		char link[PATH_MAX], target[PATH_MAX];
		tmp_path(link, sizeof link, "rt/a/link");
		tmp_path(target, sizeof target, "outside");
		assert_int_equal(symlink(target, link), 0);
	}
	assert_int_equal(ca_remove_tree(path, &d), 0);
	assert_false(ca_is_dir(path));
	assert_true(ca_is_dir(tmpdir));
	tmp_path(path, sizeof path, "outside");
	assert_true(ca_is_file(path));

	/* a single file; then something that does not exist is not an error */
	assert_int_equal(ca_remove_tree(path, &d), 0);
	assert_false(ca_is_file(path));
	assert_int_equal(ca_remove_tree(path, &d), 0);
}

static void test_is_dir_is_file(void **state)
{
	(void)state;
	char path[PATH_MAX];
	touch(tmpdir, "isfile", "x");
	tmp_path(path, sizeof path, "isfile");
	assert_true(ca_is_file(path));
	assert_false(ca_is_dir(path));
	assert_true(ca_is_dir(tmpdir));
	assert_false(ca_is_file(tmpdir));
	tmp_path(path, sizeof path, "nope");
	assert_false(ca_is_file(path));
	assert_false(ca_is_dir(path));
	unlink(path);
}

static void test_list_files(void **state)
{
	(void)state;
	char dir[PATH_MAX], path[PATH_MAX];
	struct ca_diag d = {{0}};
	char **names = NULL;
	size_t count = 99;
	const char *json[] = {".json", NULL};
	const char *two[] = {".cu", ".json", NULL};

	tmp_path(dir, sizeof dir, "list");
	assert_int_equal(ca_mkdirs(dir, 0755, &d), 0);
	touch(dir, "b.json", "{}");
	touch(dir, "a.json", "{}");
	touch(dir, "C.json", "{}"); /* sorts before lowercase (byte order) */
	touch(dir, "k.cu", "");
	touch(dir, "notes.txt", "");
	touch(dir, ".hidden.json", "{}");
	touch(dir, "json", "");   /* the suffix alone with nothing before it does not match */
	touch(dir, "x.json.bak", "");
	tmp_path(path, sizeof path, "list/sub.json");
	assert_int_equal(ca_mkdirs(path, 0755, &d), 0); /* directories are skipped */

	assert_int_equal(ca_list_files(dir, json, 100, &names, &count, &d), 0);
	assert_int_equal(count, 3);
	assert_string_equal(names[0], "C.json");
	assert_string_equal(names[1], "a.json");
	assert_string_equal(names[2], "b.json");
	ca_free_names(names, count);

	assert_int_equal(ca_list_files(dir, two, 100, &names, &count, &d), 0);
	assert_int_equal(count, 4);
	assert_string_equal(names[3], "k.cu");
	ca_free_names(names, count);

	/* no filter: every regular non-hidden file */
	assert_int_equal(ca_list_files(dir, NULL, 100, &names, &count, &d), 0);
	assert_int_equal(count, 7);
	for (size_t i = 1; i < count; i++)
		assert_true(strcmp(names[i - 1], names[i]) < 0);
	ca_free_names(names, count);

	/* the cap: exactly enough is fine, one fewer is an error */
	assert_int_equal(ca_list_files(dir, json, 3, &names, &count, &d), 0);
	ca_free_names(names, count);
	names = (char **)1;
	assert_int_equal(ca_list_files(dir, json, 2, &names, &count, &d), CA_ERR_LIMIT);
	assert_null(names);
	assert_int_equal(count, 0);
	assert_non_null(strstr(d.msg, "more than 2 files"));
	assert_int_equal(ca_list_files(dir, json, 0, &names, &count, &d), CA_ERR_LIMIT);

	/* an empty directory */
	tmp_path(path, sizeof path, "list/sub.json");
	assert_int_equal(ca_list_files(path, NULL, 10, &names, &count, &d), 0);
	assert_int_equal(count, 0);
	ca_free_names(names, count);

	tmp_path(path, sizeof path, "no-such-dir");
	assert_int_equal(ca_list_files(path, NULL, 10, &names, &count, &d), CA_ERR_NOTFOUND);
	ca_free_names(NULL, 0);
}

static void test_path_join(void **state)
{
	(void)state;
	char out[16];

	assert_int_equal(ca_path_join(out, sizeof out, "a/b", "c"), 0);
	assert_string_equal(out, "a/b/c");
	assert_int_equal(ca_path_join(out, sizeof out, "a/b/", "c"), 0);
	assert_string_equal(out, "a/b/c");
	assert_int_equal(ca_path_join(out, sizeof out, "a/b", "/abs"), 0);
	assert_string_equal(out, "/abs");
	assert_int_equal(ca_path_join(out, sizeof out, "", "rel"), 0);
	assert_string_equal(out, "rel");
	/* 15 characters fit in 16 bytes, 16 do not */
	assert_int_equal(ca_path_join(out, sizeof out, "0123456", "89abcde"), 0);
	assert_string_equal(out, "0123456/89abcde");
	assert_int_equal(ca_path_join(out, sizeof out, "0123456", "89abcdef"), CA_ERR_LIMIT);
	assert_int_equal(ca_path_join(out, sizeof out, "x", "/0123456789abcdef"), CA_ERR_LIMIT);
	assert_true(strlen(out) < sizeof out); /* still terminated */
}

static void test_temp_dir_cache_dir_realpath(void **state)
{
	(void)state;
	char base[PATH_MAX], a[PATH_MAX], b[PATH_MAX], out[PATH_MAX];
	struct ca_diag d = {{0}};
	struct stat sb;
	char *old = getenv("CUDA_AGENT_CACHE") ? strdup(getenv("CUDA_AGENT_CACHE")) : NULL;

	tmp_path(base, sizeof base, "tmpbase/deeper");
	assert_int_equal(ca_make_temp_dir(base, "job-", a, sizeof a, &d), 0);
	assert_int_equal(ca_make_temp_dir(base, "job-", b, sizeof b, &d), 0);
	assert_string_not_equal(a, b);
	assert_true(ca_is_dir(a));
	assert_int_equal(stat(a, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);
	assert_non_null(strstr(a, "/job-"));
	assert_int_equal(ca_make_temp_dir(base, "job-", a, 8, &d), CA_ERR_LIMIT);

	tmp_path(base, sizeof base, "cache-root/x");
	assert_int_equal(setenv("CUDA_AGENT_CACHE", base, 1), 0);
	assert_int_equal(ca_cache_dir(out, sizeof out, &d), 0);
	assert_string_equal(out, base);
	assert_true(ca_is_dir(base));
	assert_int_equal(ca_cache_dir(out, 4, &d), CA_ERR_LIMIT);
	if (old) {
		setenv("CUDA_AGENT_CACHE", old, 1);
		free(old);
	} else {
		unsetenv("CUDA_AGENT_CACHE");
	}

	/* realpath resolves symlinks and dot components */
	touch(tmpdir, "target.txt", "x");
	tmp_path(a, sizeof a, "target.txt");
	tmp_path(b, sizeof b, "link.txt");
	assert_int_equal(symlink(a, b), 0);
	assert_int_equal(ca_realpath(b, out, sizeof out, &d), 0);
	{
		char want[PATH_MAX];
		assert_non_null(realpath(a, want));
		assert_string_equal(out, want);
		assert_int_equal(ca_realpath(b, out, strlen(want), &d), CA_ERR_LIMIT);
	}
	tmp_path(a, sizeof a, "nothing-here");
	assert_int_equal(ca_realpath(a, out, sizeof out, &d), CA_ERR_NOTFOUND);
}

/* ---- proc ------------------------------------------------------------------------------------ */

static void run_ok(const char *const *argv, const struct ca_run_opts *o, struct ca_run_result *r)
{
	struct ca_diag d = {{0}};
	int rc = ca_run(argv, o, r, &d);
	if (rc)
		fail_msg("ca_run(%s): %s", argv[0], d.msg);
}

static void test_run_exit_code(void **state)
{
	(void)state;
	struct ca_run_result r;
	char desc[128];
	const char *argv[] = {"sh", "-c", "exit 3", NULL};

	run_ok(argv, NULL, &r);
	assert_int_equal(r.exit_code, 3);
	assert_int_equal(r.term_signal, 0);
	assert_false(r.timed_out);
	assert_true(r.seconds >= 0);
	ca_run_describe(&r, desc, sizeof desc);
	assert_string_equal(desc, "exit code 3");
	ca_run_result_free(&r);
	assert_null(r.out);
	assert_null(r.err);

	{
		const char *t[] = {"true", NULL};
		run_ok(t, NULL, &r);
		assert_int_equal(r.exit_code, 0);
		assert_int_equal(r.out_len, 0);
		assert_string_equal(r.out, "");
		ca_run_result_free(&r);
	}
	/* a program that does not exist starts (fork works) and exits 127 saying why */
	{
		const char *t[] = {"/nonexistent/ca-no-such-program", NULL};
		run_ok(t, NULL, &r);
		assert_int_equal(r.exit_code, 127);
		assert_non_null(strstr(r.err, "cannot run"));
		ca_run_result_free(&r);
	}
}

static void test_run_capture(void **state)
{
	(void)state;
	struct ca_run_result r;
	const char *argv[] = {"sh", "-c", "printf 'out-%s' 1; printf 'err-%s' 2 >&2", NULL};

	run_ok(argv, NULL, &r);
	assert_string_equal(r.out, "out-1");
	assert_int_equal(r.out_len, 5);
	assert_int_equal(r.out_dropped, 0);
	assert_string_equal(r.err, "err-2");
	assert_int_equal(r.err_len, 5);
	ca_run_result_free(&r);

	/* caps: the first bytes are kept, the rest counted */
	{
		const char *big[] = {"sh", "-c",
				     "head -c 100000 /dev/zero | tr '\\0' a; "
				     "head -c 5000 /dev/zero | tr '\\0' b >&2",
				     NULL};
		struct ca_run_opts o = {.stdout_cap = 10, .stderr_cap = 3, .timeout_s = 60};
		run_ok(big, &o, &r);
		assert_int_equal(r.exit_code, 0);
		assert_int_equal(r.out_len, 10);
		assert_string_equal(r.out, "aaaaaaaaaa");
		assert_int_equal(r.out_dropped, 100000 - 10);
		assert_int_equal(r.err_len, 3);
		assert_string_equal(r.err, "bbb");
		assert_int_equal(r.err_dropped, 5000 - 3);
		ca_run_result_free(&r);
	}
}

static void test_run_stdin_cwd_env(void **state)
{
	(void)state;
	struct ca_run_result r;
	static const char input[] = "line one\nline two\n";

	{
		const char *argv[] = {"cat", NULL};
		struct ca_run_opts o = {.stdin_data = input, .stdin_len = sizeof input - 1,
					.timeout_s = 30};
		run_ok(argv, &o, &r);
		assert_string_equal(r.out, input);
		ca_run_result_free(&r);
	}
	/* large stdin through a pipe: the parent must interleave writing and reading */
	{
		size_t n = 1u << 20;
		char *big = malloc(n);
		const char *argv[] = {"wc", "-c", NULL};
		struct ca_run_opts o = {.stdin_data = big, .stdin_len = n, .timeout_s = 30};
		assert_non_null(big);
		memset(big, 'z', n);
		run_ok(argv, &o, &r);
		assert_int_equal(atol(r.out), (long)n);
		ca_run_result_free(&r);
		free(big);
	}
	/* a child that exits without reading its stdin: no SIGPIPE kills the caller */
	{
		size_t n = 4u << 20;
		char *big = malloc(n);
		const char *argv[] = {"true", NULL};
		struct ca_run_opts o = {.stdin_data = big, .stdin_len = n, .timeout_s = 30};
		sigset_t pending;
		assert_non_null(big);
		memset(big, 'z', n);
		run_ok(argv, &o, &r);
		assert_int_equal(r.exit_code, 0);
		ca_run_result_free(&r);
		free(big);
		sigemptyset(&pending);
		assert_int_equal(sigpending(&pending), 0);
		assert_false(sigismember(&pending, SIGPIPE));
	}
	/* no stdin_data: stdin is at EOF */
	{
		const char *argv[] = {"cat", NULL};
		struct ca_run_opts o = {.timeout_s = 30};
		run_ok(argv, &o, &r);
		assert_false(r.timed_out);
		assert_int_equal(r.out_len, 0);
		ca_run_result_free(&r);
	}
	{
		const char *argv[] = {"pwd", NULL};
		struct ca_run_opts o = {.cwd = tmpdir};
		char want[PATH_MAX + 1];
		assert_non_null(realpath(tmpdir, want));
		strcat(want, "\n");
		run_ok(argv, &o, &r);
		assert_string_equal(r.out, want);
		ca_run_result_free(&r);
	}
	{
		const char *argv[] = {"pwd", NULL};
		struct ca_run_opts o = {.cwd = "/nonexistent/dir"};
		run_ok(argv, &o, &r);
		assert_int_equal(r.exit_code, 127);
		assert_non_null(strstr(r.err, "cannot enter /nonexistent/dir"));
		ca_run_result_free(&r);
	}
	{
		const char *argv[] = {"sh", "-c", "printf '%s,%s' \"$CA_T1\" \"$CA_T2\"", NULL};
		const char *env[] = {"CA_T1=one", "CA_T2=two=2", NULL};
		struct ca_run_opts o = {.env_add = env};
		run_ok(argv, &o, &r);
		assert_string_equal(r.out, "one,two=2");
		ca_run_result_free(&r);
		/* the parent's environment is untouched */
		assert_null(getenv("CA_T1"));
	}
}

static void test_run_timeout(void **state)
{
	(void)state;
	struct ca_run_result r;
	char desc[128];
	double t0 = ca_now();

	{
		const char *argv[] = {"sleep", "100", NULL};
		struct ca_run_opts o = {.timeout_s = 0.3};
		run_ok(argv, &o, &r);
		assert_true(r.timed_out);
		assert_int_equal(r.term_signal, 0);
		assert_true(r.seconds >= 0.25);
		assert_true(ca_now() - t0 < 5.0);
		ca_run_describe(&r, desc, sizeof desc);
		assert_non_null(strstr(desc, "timed out after"));
		ca_run_result_free(&r);
	}
	/* the whole process group goes: a grandchild holding the pipes does not keep us waiting */
	t0 = ca_now();
	{
		const char *argv[] = {"sh", "-c", "sleep 100 & sleep 100; echo never", NULL};
		struct ca_run_opts o = {.timeout_s = 0.3};
		run_ok(argv, &o, &r);
		assert_true(r.timed_out);
		assert_true(ca_now() - t0 < 5.0);
		assert_null(strstr(r.out, "never"));
		ca_run_result_free(&r);
	}
	/* a child that closes its output and keeps running is still bounded by the timeout */
	t0 = ca_now();
	{
		const char *argv[] = {"sh", "-c", "exec >&- 2>&-; sleep 100", NULL};
		struct ca_run_opts o = {.timeout_s = 0.3};
		run_ok(argv, &o, &r);
		assert_true(r.timed_out);
		assert_true(ca_now() - t0 < 5.0);
		ca_run_result_free(&r);
	}
	/* fast children are not reported as timed out */
	{
		const char *argv[] = {"true", NULL};
		struct ca_run_opts o = {.timeout_s = 30};
		run_ok(argv, &o, &r);
		assert_false(r.timed_out);
		assert_true(r.seconds < 30);
		ca_run_result_free(&r);
	}
}

static void test_run_signal(void **state)
{
	(void)state;
	struct ca_run_result r;
	char desc[128];
	const char *argv[] = {"sh", "-c", "kill -SEGV $$", NULL};

	run_ok(argv, NULL, &r);
	assert_false(r.timed_out);
	assert_int_equal(r.term_signal, SIGSEGV);
	ca_run_describe(&r, desc, sizeof desc);
	assert_non_null(strstr(desc, "killed by signal 11"));
	ca_run_result_free(&r);

	{
		const char *k[] = {"sh", "-c", "kill -KILL $$", NULL};
		run_ok(k, NULL, &r);
		assert_int_equal(r.term_signal, SIGKILL);
		ca_run_result_free(&r);
	}
}

static void test_child_cat(void **state)
{
	(void)state;
	struct ca_child c;
	struct ca_diag d = {{0}};
	char *line = NULL;
	const char *argv[] = {"cat", NULL};
	double t0;

	assert_int_equal(ca_child_spawn(&c, argv, NULL, NULL, &d), 0);
	assert_true(c.pid > 0);
	assert_true(ca_child_alive(&c));

	assert_int_equal(ca_child_write(&c, "hello\n", 6, &d), 0);
	assert_int_equal(ca_child_read_line(&c, 1024, 10, &line, &d), 0);
	assert_string_equal(line, "hello");
	free(line);

	/* two lines in one write, then an empty line */
	assert_int_equal(ca_child_write(&c, "a b\n{\"x\":1}\n\n", 13, &d), 0);
	assert_int_equal(ca_child_read_line(&c, 1024, 10, &line, &d), 0);
	assert_string_equal(line, "a b");
	free(line);
	assert_int_equal(ca_child_read_line(&c, 1024, 10, &line, &d), 0);
	assert_string_equal(line, "{\"x\":1}");
	free(line);
	assert_int_equal(ca_child_read_line(&c, 1024, 10, &line, &d), 0);
	assert_string_equal(line, "");
	free(line);

	/* a long line (bigger than the initial buffer) */
	{
		size_t n = 100000; /* fits the pipes and cat's buffer: no write/read deadlock */
		char *big = malloc(n + 1);
		assert_non_null(big);
		memset(big, 'q', n);
		big[n] = '\n';
		assert_int_equal(ca_child_write(&c, big, n + 1, &d), 0);
		assert_int_equal(ca_child_read_line(&c, n, 10, &line, &d), 0);
		assert_int_equal(strlen(line), n);
		free(line);
		free(big);
	}

	/* nothing to read: times out promptly */
	t0 = ca_now();
	line = (char *)1;
	assert_int_equal(ca_child_read_line(&c, 1024, 0.2, &line, &d), CA_ERR_TIMEOUT);
	assert_null(line);
	assert_true(ca_now() - t0 < 5.0);

	/* a line over max_line is an error */
	{
		char big[200];
		memset(big, 'w', sizeof big);
		assert_int_equal(ca_child_write(&c, big, sizeof big, &d), 0);
		usleep(100000);
		assert_int_equal(ca_child_read_line(&c, 50, 2, &line, &d), CA_ERR_LIMIT);
		assert_non_null(strstr(d.msg, "longer than 50"));
	}

	ca_child_close(&c, 2.0);
	assert_int_equal(c.pid, -1);
	assert_false(ca_child_alive(&c));
}

static void test_child_exit(void **state)
{
	(void)state;
	struct ca_child c;
	struct ca_diag d = {{0}};
	char *line = NULL;
	struct ca_run_result r;

	/* the child answers one line and exits: the next read reports the exit */
	{
		const char *argv[] = {"sh", "-c", "echo ready; exit 4", NULL};
		assert_int_equal(ca_child_spawn(&c, argv, NULL, NULL, &d), 0);
		assert_int_equal(ca_child_read_line(&c, 100, 10, &line, &d), 0);
		assert_string_equal(line, "ready");
		free(line);
		assert_int_equal(ca_child_read_line(&c, 100, 10, &line, &d), CA_ERR_CHILD);
		assert_non_null(strstr(d.msg, "exited"));
		ca_child_finish(&c, 5.0, &r);
		assert_int_equal(r.exit_code, 4);
		assert_false(r.timed_out);
	}
	/* writing to a child that is gone is an error, not a SIGPIPE */
	{
		const char *argv[] = {"true", NULL};
		char buf[65536];
		int rc = 0;
		memset(buf, 'x', sizeof buf);
		assert_int_equal(ca_child_spawn(&c, argv, NULL, NULL, &d), 0);
		for (int i = 0; i < 100 && rc == 0; i++) {
			rc = ca_child_write(&c, buf, sizeof buf, &d);
			usleep(1000);
		}
		assert_int_equal(rc, CA_ERR_CHILD);
		assert_non_null(strstr(d.msg, "stopped reading"));
		ca_child_close(&c, 1.0);
	}
	/* a child that ignores EOF is killed after the grace period */
	{
		const char *argv[] = {"sh", "-c", "trap '' TERM; exec sleep 100", NULL};
		double t0 = ca_now();
		assert_int_equal(ca_child_spawn(&c, argv, NULL, NULL, &d), 0);
		ca_child_finish(&c, 0.2, &r);
		assert_true(r.timed_out);
		assert_true(ca_now() - t0 < 5.0);
	}
	/* stderr goes to the named file */
	{
		char path[PATH_MAX];
		char *text;
		const char *argv[] = {"sh", "-c", "echo to-stderr >&2", NULL};
		tmp_path(path, sizeof path, "child.err");
		assert_int_equal(ca_child_spawn(&c, argv, NULL, path, &d), 0);
		ca_child_finish(&c, 5.0, &r);
		assert_int_equal(r.exit_code, 0);
		assert_int_equal(ca_read_file(path, 1000, &text, NULL, &d), 0);
		assert_string_equal(text, "to-stderr\n");
		free(text);
	}
}

/* ---- hash ------------------------------------------------------------------------------------ */

static void test_hash(void **state)
{
	(void)state;
	char a[CA_HASH_HEX_LEN + 1], b[CA_HASH_HEX_LEN + 1];
	struct ca_hasher h;

	/* Stability: cache keys and task ids persist on disk, so these values must never change.
	 * The empty-input values are the published XXH3 test vectors. */
	ca_hash_hex("", 0, a);
	assert_string_equal(a, "99aa06d3014798d86001c324468d497f");
	assert_true(ca_hash64("", 0) == 0x2d06800538d394c2ull);
	ca_hash_hex("abc", 3, a);
	assert_string_equal(a, "06b05ab6733a618578af5f94892f3950");
	assert_true(ca_hash64("abc", 3) == 0x78af5f94892f3950ull);
	assert_int_equal(strlen(a), CA_HASH_HEX_LEN);
	for (size_t i = 0; i < CA_HASH_HEX_LEN; i++)
		assert_non_null(strchr("0123456789abcdef", a[i]));

	/* streaming equals one-shot */
	assert_int_equal(ca_hasher_init(&h), 0);
	ca_hasher_update(&h, "a", 1);
	ca_hasher_update(&h, "bc", 2);
	ca_hasher_final_hex(&h, b);
	ca_hasher_free(&h);
	ca_hasher_free(&h); /* idempotent */
	assert_string_equal(a, b);

	/* length-prefixed strings: ("ab","c") differs from ("a","bc") */
	assert_int_equal(ca_hasher_init(&h), 0);
	ca_hasher_update_str(&h, "ab");
	ca_hasher_update_str(&h, "c");
	ca_hasher_final_hex(&h, a);
	ca_hasher_free(&h);
	assert_int_equal(ca_hasher_init(&h), 0);
	ca_hasher_update_str(&h, "a");
	ca_hasher_update_str(&h, "bc");
	ca_hasher_final_hex(&h, b);
	ca_hasher_free(&h);
	assert_string_not_equal(a, b);
	/* and a stable value for the string form */
	assert_int_equal(ca_hasher_init(&h), 0);
	ca_hasher_update_str(&h, "task");
	ca_hasher_update_str(&h, "x");
	ca_hasher_final_hex(&h, a);
	ca_hasher_free(&h);
	assert_string_equal(a, "339bee5a572065fea6ccd2519c086c63");

	/* one flipped bit changes the hash */
	{
		char buf[64] = {0};
		uint64_t h1 = ca_hash64(buf, sizeof buf);
		buf[40] ^= 1;
		assert_true(ca_hash64(buf, sizeof buf) != h1);
	}
}

/* ---- clock, log, str ------------------------------------------------------------------------- */

static void test_clock(void **state)
{
	(void)state;
	double a = ca_now(), b;
	usleep(20000);
	b = ca_now();
	assert_true(b - a >= 0.015);
	assert_true(b - a < 5.0);
	assert_true(ca_wall_now() > 1.6e9); /* after 2020 */
}

static void test_log_level(void **state)
{
	(void)state;
	enum ca_log_level old = ca_log_get_level();
	ca_log_set_level(CA_LOG_DEBUG);
	assert_int_equal(ca_log_get_level(), CA_LOG_DEBUG);
	ca_log_set_level(CA_LOG_QUIET);
	assert_int_equal(ca_log_get_level(), CA_LOG_QUIET);
	ca_log_info("not shown %d", 1);
	ca_log_debug("not shown %d", 2);
	ca_log_set_level(old);
}

static void test_str(void **state)
{
	(void)state;
	char buf[8];
	size_t off = 0;

	assert_false(ca_strlcpy(buf, "abc", sizeof buf));
	assert_string_equal(buf, "abc");
	assert_true(ca_strlcpy(buf, "0123456789", sizeof buf));
	assert_string_equal(buf, "0123456");
	assert_false(ca_strlcpy(buf, "0123456", sizeof buf));

	ca_appendf(buf, sizeof buf, &off, "%s", "ab");
	ca_appendf(buf, sizeof buf, &off, "%d", 12);
	assert_string_equal(buf, "ab12");
	assert_int_equal(off, 4);
	ca_appendf(buf, sizeof buf, &off, "%s", "xyzwv");
	assert_string_equal(buf, "ab12xyz");
	assert_int_equal(off, sizeof buf - 1);
	ca_appendf(buf, sizeof buf, &off, "%s", "more");
	assert_string_equal(buf, "ab12xyz");
}

/* util/buf: appends grow the text, any length formats whole, the cap and the first failure
 * stick, take hands the text over (an empty string when nothing was added). */
static void test_buf(void **state)
{
	struct ca_buf b = {0}, capped = {.max = 8};
	char big[3000], *t;
	(void)state;
	t = ca_buf_take(&b);
	assert_string_equal(t, "");
	free(t);
	ca_buf_puts(&b, "ab");
	ca_buf_add(&b, "cdef", 2);
	ca_buf_printf(&b, "%d-%s", 12, "x");
	assert_string_equal(b.p, "abcd12-x");
	memset(big, 'z', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	ca_buf_printf(&b, "[%s]", big);
	assert_int_equal(b.len, 8 + sizeof big + 1);
	assert_int_equal(b.err, 0);
	t = ca_buf_take(&b);
	assert_int_equal(strlen(t), 8 + sizeof big + 1);
	free(t);
	assert_null(b.p);
	ca_buf_puts(&capped, "12345678");
	assert_int_equal(capped.err, 0);
	ca_buf_puts(&capped, "9");
	assert_int_equal(capped.err, CA_ERR_LIMIT);
	ca_buf_free(&capped);
	assert_int_equal(capped.err, 0);
	assert_int_equal(capped.max, 8);
	ca_buf_printf(&capped, "%s", "123456789");
	assert_int_equal(capped.err, CA_ERR_LIMIT);
	ca_buf_puts(&capped, "1");
	assert_null(capped.p); /* nothing after the first failure */
	ca_buf_free(&capped);
	ca_buf_free(&b);
}

/* util/pylaunch: one rule for PYTHONPATH; the caller's path follows ours only when inherited. */
static void test_pythonpath(void **state)
{
	char out[256], tiny[16];
	struct ca_diag d = {{0}};
	(void)state;
	setenv("PYTHONPATH", "/user/site", 1);
	assert_int_equal(ca_pythonpath_env(out, sizeof out, "/pkg", PYTHONPATH_OURS, NULL, &d), 0);
	assert_string_equal(out, "PYTHONPATH=/pkg");
	/* inherited: ours first, once (a caller that set it, then execs through this again), and a
	 * prefix of another entry is not the same entry */
	const char *inherited[][2] = {
		{"/user/site", "PYTHONPATH=/pkg:/user/site"},
		{"", "PYTHONPATH=/pkg"},
		{"/pkg:/user/site", "PYTHONPATH=/pkg:/user/site"},
		{"/pkg", "PYTHONPATH=/pkg"},
		{"/pkg2:/x", "PYTHONPATH=/pkg:/pkg2:/x"},
	};
	for (size_t i = 0; i < sizeof inherited / sizeof inherited[0]; i++) {
		setenv("PYTHONPATH", inherited[i][0], 1);
		assert_int_equal(ca_pythonpath_env(out, sizeof out, "/pkg", PYTHONPATH_INHERIT, NULL,
						   &d),
				 0);
		assert_string_equal(out, inherited[i][1]);
	}
	unsetenv("PYTHONPATH");
	assert_int_equal(ca_pythonpath_env(tiny, sizeof tiny, "/a/long/package/dir",
					   PYTHONPATH_OURS, NULL, &d),
			 CA_ERR_LIMIT);
}

struct pool_probe {
	pthread_mutex_t lock;
	size_t ran, sum, stop_at;
	struct ca_pool *pool;
	unsigned char seen[1000];
};

static void pool_item(void *ctx, size_t i)
{
	struct pool_probe *p = ctx;
	pthread_mutex_lock(&p->lock);
	p->ran++;
	p->sum += i;
	p->seen[i]++;
	pthread_mutex_unlock(&p->lock);
	if (p->stop_at && i == p->stop_at)
		ca_pool_stop(p->pool);
}

/* Runs n items on a pool of `threads` workers plus the caller; stop_at > 0 stops the pool at
 * that item. Returns how many threads started; p holds what ran. */
static size_t pool_run(struct pool_probe *p, size_t n, int threads, size_t stop_at)
{
	struct ca_pool pool;
	size_t started;
	memset(p, 0, sizeof *p);
	pthread_mutex_init(&p->lock, NULL);
	p->stop_at = stop_at;
	p->pool = &pool;
	started = ca_pool_start(&pool, n, threads, pool_item, p);
	ca_pool_work(&pool);
	ca_pool_join(&pool);
	pthread_mutex_destroy(&p->lock);
	return started;
}

/* util/pool: every item once, the caller may work too, a stop ends the handing out. */
static void test_pool(void **state)
{
	struct pool_probe p;
	(void)state;
	assert_int_equal(pool_run(&p, 1000, 4, 0), 4);
	assert_int_equal(p.ran, 1000);
	assert_int_equal(p.sum, 999 * 1000 / 2);
	for (size_t i = 0; i < 1000; i++)
		assert_int_equal(p.seen[i], 1);
	assert_int_equal(pool_run(&p, 1000, 0, 10), 0); /* no thread: the caller alone */
	assert_int_equal(p.ran, 11); /* 0..10, then nothing more is handed out */
	assert_int_equal(pool_run(&p, 0, 8, 0), 0);
	assert_int_equal(p.ran, 0);
}


/* timeline: spans from several threads (or processes) appended to one file, a whole line each */
static void *timeline_writer(void *arg)
{
	const char *what = arg;
	for (int i = 0; i < 200; i++)
		ca_timeline_span(what, 1.0 + i, 2.0 + i);
	return NULL;
}

static void test_timeline(void **state)
{
	(void)state;
	char path[] = "/tmp/ca-test-timeline-XXXXXX", line[256];
	const char *names[] = {"build", "verify.call", "gpu_held", "processes"};
	pthread_t t[4];
	int fd = mkstemp(path), lines = 0;
	FILE *f;
	assert_true(fd >= 0);
	close(fd);
	setenv("CUDA_AGENT_TIMELINE", path, 1);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, timeline_writer, (void *)names[i]), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	unsetenv("CUDA_AGENT_TIMELINE");
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		long pid;
		char what[64];
		double a, b;
		assert_int_equal(sscanf(line, "%ld %63s %lf %lf", &pid, what, &a, &b), 4);
		assert_int_equal(pid, (long)getpid());
		assert_true(b - a == 1.0);
		lines++;
	}
	fclose(f);
	assert_int_equal(lines, 800);
	unlink(path);
}

static void test_utf8_sanitize(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"plain ascii", "plain ascii"},
		{"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
		{"cut \xe2\x82", "cut ??"},             /* a character cut by truncation */
		{"stray \x80 byte", "stray ? byte"},     /* a continuation byte alone */
		{"overlong \xc0\xaf", "overlong ??"},    /* an overlong '/' */
		{"surrogate \xed\xa0\x80", "surrogate ???"}, /* U+D800 in UTF-8 */
		{"too big \xf4\x90\x80\x80", "too big ????"}, /* above U+10FFFF */
		{"\xff\xfe", "??"},
		{"", ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char buf[64];
		snprintf(buf, sizeof buf, "%s", cases[i].in);
		ca_utf8_sanitize(buf);
		assert_string_equal(buf, cases[i].out);
		json_t *j = json_string(buf); /* what it is for: a valid JSON string */
		assert_non_null(j);
		json_decref(j);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_diag),
		cmocka_unit_test(test_timeline),
		cmocka_unit_test(test_read_file),
		cmocka_unit_test(test_write_file_atomic),
		cmocka_unit_test(test_mkdirs),
		cmocka_unit_test(test_remove_tree),
		cmocka_unit_test(test_is_dir_is_file),
		cmocka_unit_test(test_list_files),
		cmocka_unit_test(test_path_join),
		cmocka_unit_test(test_temp_dir_cache_dir_realpath),
		cmocka_unit_test(test_run_exit_code),
		cmocka_unit_test(test_run_capture),
		cmocka_unit_test(test_run_stdin_cwd_env),
		cmocka_unit_test(test_run_timeout),
		cmocka_unit_test(test_run_signal),
		cmocka_unit_test(test_child_cat),
		cmocka_unit_test(test_child_exit),
		cmocka_unit_test(test_hash),
		cmocka_unit_test(test_clock),
		cmocka_unit_test(test_log_level),
		cmocka_unit_test(test_str),
		cmocka_unit_test(test_buf),
		cmocka_unit_test(test_pythonpath),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_utf8_sanitize),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
