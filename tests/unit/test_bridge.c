/* Unit tests for src/bridge/bridge against fake bridges: small shell scripts written at test time
 * and passed as opts->python. bridge_start runs `<python> -m cuda_agent_bridge --device <d>` with
 * PYTHONPATH=<root>/python, <root> = $CUDA_AGENT_ROOT (a temporary directory here); the scripts
 * check that command line and environment, then speak docs/protocol.md's JSON lines with
 * printf/read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bridge/bridge.h"
#include "util/clock.h"
#include "util/fs.h"

#define assert_contains(hay, needle)                                                       \
	do {                                                                                \
		if (!strstr((hay), (needle)))                                               \
			fail_msg("'%s' does not contain '%s'", (hay), (needle));            \
	} while (0)

static char tmpdir[PATH_MAX];
static char logpath[PATH_MAX];

static int setup(void **state)
{
	char py[PATH_MAX];
	struct ca_diag d;
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-bridge-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	if (ca_path_join(py, sizeof py, tmpdir, "python") || ca_mkdirs(py, 0700, &d) ||
	    ca_path_join(logpath, sizeof logpath, tmpdir, "bridge.log"))
		return -1;
	return setenv("CUDA_AGENT_ROOT", tmpdir, 1);
}

static int teardown(void **state)
{
	struct ca_diag d;
	(void)state;
	unsetenv("CUDA_AGENT_ROOT");
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

/* Checks the command line and PYTHONPATH bridge_start must give; anything else exits 2. */
static const char prologue[] =
	"#!/bin/sh\n"
	"[ \"$*\" = '-m cuda_agent_bridge --device cpu' ] || "
	"{ echo \"fake bridge: bad arguments: $*\" >&2; exit 2; }\n"
	"case \"$PYTHONPATH\" in \"$FAKE_ROOT/python\"|\"$FAKE_ROOT/python:\"*) ;;\n"
	"  *) echo \"fake bridge: bad PYTHONPATH '$PYTHONPATH'\" >&2; exit 2;; esac\n"
	"echo 'fake bridge starting' >&2\n";

static const char ready_line[] =
	"printf '%s\\n' '{\"event\": \"ready\", \"torch\": \"2.11.0\", \"python\": \"3.12.3\", "
	"\"device\": \"cuda\", \"gpu_name\": \"NVIDIA H200\", \"cuda\": \"13.0\", "
	"\"l2_bytes\": 62914560}'\n";

/* Answers echo with ok (after a line for another id, which must be skipped), describe with an
 * error, crash by dying with a message on stderr, shutdown by exiting. */
static const char serve_loop[] =
	"while IFS= read -r line; do\n"
	"  id=$(printf '%s\\n' \"$line\" | sed -n 's/.*\"id\":\\([0-9][0-9]*\\).*/\\1/p')\n"
	"  case \"$line\" in\n"
	"  *'\"op\":\"echo\"'*)\n"
	"    printf '{\"id\":999,\"ok\":false,\"error\":{\"code\":\"x\",\"message\":\"stale\"}}\\n'\n"
	"    printf '{\"id\":%s,\"ok\":true,\"result\":{\"answer\":42,\"id_seen\":%s}}\\n' "
	"\"$id\" \"$id\";;\n"
	"  *'\"op\":\"describe\"'*)\n"
	"    printf '{\"id\":%s,\"ok\":false,\"error\":{\"code\":\"task.forward_raised\",'"
	"'\"message\":\"forward() raised ValueError at model.py:7\"}}\\n' \"$id\";;\n"
	"  *'\"op\":\"crash\"'*)\n"
	"    echo 'Traceback (most recent call last):' >&2\n"
	"    echo 'RuntimeError: boom in the fake bridge' >&2\n"
	"    exit 3;;\n"
	"  *'\"op\":\"slots\"'*)\n"
	"    python3 -c 'import os, socket\n"
	"fd = os.memfd_create(\"slot\"); os.write(fd, b\"slot bytes\")\n"
	"ch = socket.socket(fileno=int(os.environ[\"CUDA_AGENT_FD_CHANNEL\"]))\n"
	"socket.send_fds(ch, [b\"slots\"], [fd, fd]); ch.detach()'\n"
	"    printf '{\"id\":%s,\"ok\":true,\"result\":{\"count\":2}}\\n' \"$id\";;\n"
	"  *'\"op\":\"shutdown\"'*)\n"
	"    printf '{\"id\":%s,\"ok\":true,\"result\":{}}\\n' \"$id\"; exit 0;;\n"
	"  *) printf '{\"id\":%s,\"ok\":false,\"error\":{\"code\":\"bridge.bad_request\"}}\\n' "
	"\"$id\";;\n"
	"  esac\n"
	"done\n";

/* Writes <tmpdir>/<name> (mode 0755): the prologue then body. */
static void write_script(char *out, size_t size, const char *name, const char *body)
{
	char *text = NULL;
	struct ca_diag d;
	assert_int_equal(ca_path_join(out, size, tmpdir, name), 0);
	assert_true(asprintf(&text, "%s%s", prologue, body) > 0);
	if (ca_write_file_atomic(out, text, strlen(text), &d) != 0)
		fail_msg("%s", d.msg);
	free(text);
	assert_int_equal(chmod(out, 0755), 0);
	char root[PATH_MAX]; /* what bridge_start derives PYTHONPATH from */
	assert_int_equal(ca_realpath(tmpdir, root, sizeof root, &d), 0);
	assert_int_equal(setenv("FAKE_ROOT", root, 1), 0);
}

static void start(struct bridge *b, const char *python, const char *stderr_path)
{
	struct bridge_opts o = {.python = python, .device = "cpu", .stderr_path = stderr_path};
	struct ca_diag d;
	if (bridge_start(b, &o, &d) != 0)
		fail_msg("bridge_start: %s", d.msg);
	assert_true(b->child.pid > 0);
}

/* bridge_stop reaps the child: its pid is no longer our child (no zombie) nor alive. */
static void stop_and_check_reaped(struct bridge *b)
{
	pid_t pid = b->child.pid;
	bridge_stop(b);
	assert_false(b->ready);
	assert_true(b->child.pid <= 0);
	errno = 0;
	assert_int_equal(waitpid(pid, NULL, WNOHANG), -1);
	assert_int_equal(errno, ECHILD);
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(errno, ESRCH);
}

static void test_ready_and_calls(void **state)
{
	(void)state;
	char py[PATH_MAX], code[64];
	struct bridge b;
	struct ca_diag d;
	json_t *res = (json_t *)0x1;

	char *body = NULL;
	assert_true(asprintf(&body, "%s%s", ready_line, serve_loop) > 0);
	write_script(py, sizeof py, "fake_ok.sh", body);
	free(body);

	start(&b, py, logpath);
	assert_false(b.ready);
	if (bridge_wait_ready(&b, 10.0, &d) != 0)
		fail_msg("wait_ready: %s", d.msg);
	assert_true(b.ready);
	assert_string_equal(b.torch_version, "2.11.0");
	assert_string_equal(b.python_version, "3.12.3");
	assert_string_equal(b.device, "cuda");
	assert_string_equal(b.gpu_name, "NVIDIA H200");
	assert_string_equal(b.cuda_version, "13.0");
	assert_int_equal(b.l2_bytes, 62914560);
	assert_int_equal(bridge_wait_ready(&b, 0.1, &d), 0); /* already ready: no read */

	/* ok: the result, with the request's id (the stale id-999 line is skipped) */
	json_t *req = json_pack("{s:s, s:i}", "task_dir", "/tasks/relu", "seed", 7);
	if (bridge_call(&b, "echo", req, 10.0, &res, code, sizeof code, &d) != 0)
		fail_msg("echo: %s", d.msg);
	assert_non_null(res);
	assert_int_equal(json_integer_value(json_object_get(res, "answer")), 42);
	assert_int_equal(json_integer_value(json_object_get(res, "id_seen")), 1);
	assert_string_equal(code, "");
	json_decref(res);
	/* req is borrowed: not modified */
	assert_int_equal(json_object_size(req), 2);
	assert_null(json_object_get(req, "id"));

	/* ids increase; a NULL request is an empty object */
	assert_int_equal(bridge_call(&b, "echo", NULL, 10.0, &res, NULL, 0, &d), 0);
	assert_int_equal(json_integer_value(json_object_get(res, "id_seen")), 2);
	json_decref(res);

	/* an error answer: CA_ERR_INVALID with the bridge's code and message */
	res = (json_t *)0x1;
	assert_int_equal(bridge_call(&b, "describe", req, 10.0, &res, code, sizeof code, &d),
			 CA_ERR_INVALID);
	assert_null(res);
	assert_string_equal(code, "task.forward_raised");
	assert_string_equal(d.msg, "forward() raised ValueError at model.py:7");

	/* an error without code or message still yields both */
	assert_int_equal(bridge_call(&b, "other", req, 10.0, &res, code, sizeof code, &d),
			 CA_ERR_INVALID);
	assert_string_equal(code, "bridge.bad_request");
	assert_true(strlen(d.msg) > 0);
	/* a short code buffer is truncated, not overrun */
	char small[5];
	assert_int_equal(bridge_call(&b, "describe", req, 10.0, &res, small, sizeof small, &d),
			 CA_ERR_INVALID);
	assert_string_equal(small, "task");
	json_decref(req);

	/* descriptors on the channel (op slots): exactly as many as asked for, or an error */
	int fds[3] = {-1, -1, -1};
	char buf[16] = {0};
	assert_int_equal(bridge_recv_fds(&b, fds, 2, 0.2, &d), CA_ERR_TIMEOUT); /* none sent */
	if (bridge_call(&b, "slots", NULL, 10.0, &res, code, sizeof code, &d) != 0)
		fail_msg("slots: %s", d.msg);
	json_decref(res);
	if (bridge_recv_fds(&b, fds, 2, 10.0, &d) != 0)
		fail_msg("recv_fds: %s", d.msg);
	assert_int_equal(pread(fds[1], buf, sizeof buf - 1, 0), 10);
	assert_string_equal(buf, "slot bytes");
	assert_true(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	close(fds[0]);
	close(fds[1]);
	assert_int_equal(bridge_call(&b, "slots", NULL, 10.0, &res, code, sizeof code, &d), 0);
	json_decref(res);
	assert_int_equal(bridge_recv_fds(&b, fds, 3, 10.0, &d), CA_ERR_PARSE);
	assert_contains(d.msg, "expected 3 descriptors, received 2");

	stop_and_check_reaped(&b);
	/* stderr went to the log */
	char tail[512];
	ca_file_tail(logpath, 5, tail, sizeof tail);
	assert_contains(tail, "fake bridge starting");
}

static void test_bridge_exits(void **state)
{
	(void)state;
	char py[PATH_MAX];
	struct bridge b;
	struct ca_diag d;
	json_t *res = (json_t *)0x1;
	char *body = NULL;

	assert_true(asprintf(&body, "%s%s", ready_line, serve_loop) > 0);
	write_script(py, sizeof py, "fake_crash.sh", body);
	free(body);

	start(&b, py, logpath);
	assert_int_equal(bridge_wait_ready(&b, 10.0, &d), 0);
	assert_int_equal(bridge_call(&b, "crash", NULL, 10.0, &res, NULL, 0, &d), CA_ERR_CHILD);
	assert_null(res);
	assert_contains(d.msg, "torch bridge failed");
	assert_contains(d.msg, "RuntimeError: boom in the fake bridge");
	assert_null(strchr(d.msg, '\n')); /* the tail is on one line */
	/* later calls fail the same way, promptly */
	double t0 = ca_now();
	int rc = bridge_call(&b, "echo", NULL, 10.0, &res, NULL, 0, &d);
	assert_true(rc == CA_ERR_CHILD || rc == CA_ERR_IO);
	assert_true(ca_now() - t0 < 5.0);
	stop_and_check_reaped(&b);
}

static void test_dies_before_ready(void **state)
{
	(void)state;
	char py[PATH_MAX];
	struct bridge b;
	struct ca_diag d;

	write_script(py, sizeof py, "fake_noimport.sh",
		     "echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n");
	start(&b, py, logpath);
	assert_int_equal(bridge_wait_ready(&b, 10.0, &d), CA_ERR_CHILD);
	assert_false(b.ready);
	assert_contains(d.msg, "No module named 'torch'");
	stop_and_check_reaped(&b);

	/* an interpreter that does not exist: spawned, then reported with exec's message */
	ca_path_join(py, sizeof py, tmpdir, "no-such-python");
	start(&b, py, logpath);
	assert_int_equal(bridge_wait_ready(&b, 10.0, &d), CA_ERR_CHILD);
	assert_contains(d.msg, "no-such-python");
	stop_and_check_reaped(&b);

	/* a wrong first line */
	write_script(py, sizeof py, "fake_chatty.sh", "echo 'Hello from a sitecustomize'\n"
						      "sleep 5\n");
	start(&b, py, logpath);
	assert_int_equal(bridge_wait_ready(&b, 10.0, &d), CA_ERR_PARSE);
	assert_contains(d.msg, "Hello from a sitecustomize");
	double t0 = ca_now();
	stop_and_check_reaped(&b); /* killed after the grace period, sleep included */
	assert_true(ca_now() - t0 < 5.0);
}

static void test_silent_bridge_times_out(void **state)
{
	(void)state;
	char py[PATH_MAX];
	struct bridge b;
	struct ca_diag d;
	json_t *res = (json_t *)0x1;
	char *body = NULL;

	/* reads requests and never answers; exits at EOF */
	assert_true(asprintf(&body, "%s%s", ready_line,
			     "while IFS= read -r line; do :; done\n") > 0);
	write_script(py, sizeof py, "fake_silent.sh", body);
	free(body);

	start(&b, py, logpath);
	assert_int_equal(bridge_wait_ready(&b, 10.0, &d), 0);
	double t0 = ca_now();
	assert_int_equal(bridge_call(&b, "describe", NULL, 0.3, &res, NULL, 0, &d),
			 CA_ERR_TIMEOUT);
	double took = ca_now() - t0;
	assert_true(took >= 0.25 && took < 2.0);
	assert_null(res);
	assert_contains(d.msg, "describe");
	stop_and_check_reaped(&b);

	/* silent from the start: wait_ready times out too */
	write_script(py, sizeof py, "fake_mute.sh", "while IFS= read -r line; do :; done\n");
	start(&b, py, logpath);
	t0 = ca_now();
	assert_int_equal(bridge_wait_ready(&b, 0.3, &d), CA_ERR_TIMEOUT);
	assert_true(ca_now() - t0 < 2.0);
	assert_false(b.ready);
	stop_and_check_reaped(&b);
}

static void test_not_installed(void **state)
{
	(void)state;
	char root[PATH_MAX];
	struct bridge b;
	struct ca_diag d;
	struct bridge_opts o = {.python = "/bin/true", .device = "cpu"};

	if (fcntl(0, F_GETFD) == -1) /* make sure fd 0 is open, to see it survive */
		assert_int_equal(open("/dev/null", O_RDONLY), 0);

	/* a root without python/ */
	assert_int_equal(ca_path_join(root, sizeof root, tmpdir, "emptyroot"), 0);
	assert_int_equal(ca_mkdirs(root, 0700, &d), 0);
	assert_int_equal(setenv("CUDA_AGENT_ROOT", root, 1), 0);
	assert_int_equal(bridge_start(&b, &o, &d), CA_ERR_NOTFOUND);
	assert_contains(d.msg, "CUDA_AGENT_ROOT");
	assert_true(b.child.pid <= 0);
	bridge_stop(&b); /* harmless on a bridge that never started: closes none of our fds */
	assert_true(fcntl(0, F_GETFD) != -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ready_and_calls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bridge_exits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dies_before_ready, setup, teardown),
		cmocka_unit_test_setup_teardown(test_silent_bridge_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_installed, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
