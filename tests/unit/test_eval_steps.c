/* Unit tests for the supervisor's evaluation steps (src/eval/run.h) that run without a GPU or the
 * torch bridge: the build step (in order and in a thread beside the later steps, and which
 * reason wins when both fail), the CPU claim taken before the build, the first-reason rule, and
 * the reward and environment steps on a result as the timing step leaves it.
 *
 * The bridge's steps (waiting for it, describe) run against a scripted bridge: a shell script in
 * place of Python that speaks docs/protocol.md's JSON lines with canned answers, as
 * test_bridge.c's do. The steps that need a candidate's process are tested elsewhere: the timed
 * loop, the calibration and the candidate's process against a scripted peer in test_loop.c and
 * test_worker.c (the worker's side), the verification and timing steps end to end on CPU torch
 * in tests/integration/protocol_cpu.sh. nvcc builds are skipped (and say so) where nvcc is
 * missing. */
#define TEST_NAME "eval_steps"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/proc.h"
#include "eval/run.h"
#include "protocol/wire.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/str.h"

static char data_dir[PATH_MAX]; /* tests/data/build */
static char task_dir[PATH_MAX]; /* tests/data/candidates/tiny_task */
static char tmp[PATH_MAX];
static bool have_nvcc;

static int setup(void **state)
{
	const char *b = getenv("CA_BUILD");
	const char *nvcc = getenv("CA_TEST_NVCC");
	char root[PATH_MAX], env[PATH_MAX + 16];
	(void)state;
	if (!b || !b[0] || ca_realpath(b, root, sizeof root, NULL)) {
		fprintf(stderr, "test_eval_steps: set CA_BUILD (make test-unit does)\n");
		return -1;
	}
	*strrchr(root, '/') = '\0'; /* the repository: build/include is the install's headers */
	setenv("CUDA_AGENT_ROOT", root, 1);
	if (ca_format(data_dir, sizeof data_dir, "%s/tests/data/build", root) ||
	    ca_format(task_dir, sizeof task_dir, "%s/tests/data/candidates/tiny_task", root))
		return -1;
	snprintf(tmp, sizeof tmp, "/tmp/ca-test-eval-steps-XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(env, sizeof env, "%s/cache", tmp);
	setenv("CUDA_AGENT_CACHE", env, 1);
	snprintf(env, sizeof env, "%s/runs", tmp);
	setenv("CUDA_AGENT_RUNS", env, 1);
	have_nvcc = nvcc && nvcc[0] && access(nvcc, X_OK) == 0;
	if (have_nvcc)
		setenv("NVCC", nvcc, 1);
	else
		fprintf(stderr, "test_eval_steps: nvcc not found (CA_TEST_NVCC): builds skipped\n");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	ca_remove_tree(tmp, NULL);
	return 0;
}

struct fixture {
	struct eval_opts o;
	struct eval_session s;
	struct run r;
	char cand[PATH_MAX];
};

static void fixture_init(struct fixture *f, const char *candidate)
{
	memset(f, 0, sizeof *f);
	eval_opts_defaults(&f->o);
	assert_int_equal(ca_format(f->cand, sizeof f->cand, "%s/%s", data_dir, candidate), 0);
	f->o.candidate_dir = f->cand;
	f->o.task_dir = "/nonexistent-task";
	f->o.mode = EVAL_FULL;
	f->o.arch = "sm_90";
	f->o.no_build_cache = true;
	f->r.o = &f->o;
	f->r.s = &f->s;
	f->r.result = new_result(&f->o);
	f->r.seconds = json_object();
	cpu_claim_init(&f->r.cpu);
	gpu_stage_init(&f->r.gpu); /* fd -1: leaving the stage must not close the test's stdin */
}

static void fixture_free(struct fixture *f)
{
	step_build_wait(&f->r);
	eval_session_close(&f->s);
	if (f->r.task_loaded)
		task_free(&f->r.task);
	if (f->r.spec_loaded)
		task_spec_free(&f->r.spec);
	json_decref(f->r.spec_json);
	cpu_claim_release(&f->r.cpu);
	json_decref(f->r.result);
	json_decref(f->r.seconds);
	json_decref(f->r.env_gpu);
}

static const char *result_str(const struct fixture *f, const char *key)
{
	return json_string_value(json_object_get(f->r.result, key));
}

/* The same build, in order and in the thread: the same verdict, the same hash, in the result
 * the same way. */
static void test_build_async_matches_sync(void **state)
{
	struct fixture a, b;
	(void)state;
	if (!have_nvcc)
		skip();
	fixture_init(&a, "axpy");
	fixture_init(&b, "axpy");
	assert_int_equal(step_build(&a.r, false), 0);
	assert_false(a.r.build_bg.pending);
	assert_int_equal(step_build(&b.r, true), 0);
	assert_true(b.r.build_bg.pending);
	assert_null(json_object_get(b.r.result, "build")); /* nothing in the result until the join */
	assert_int_equal(step_build_wait(&b.r), 0);
	assert_false(b.r.build_bg.pending);
	assert_true(b.r.build_bg.started); /* the library goes to the run's lib/ */
	assert_int_equal(step_build_wait(&b.r), 0); /* twice is fine */
	assert_true(json_is_true(json_object_get(a.r.result, "compiled")));
	assert_true(json_is_true(json_object_get(b.r.result, "compiled")));
	assert_string_equal(a.r.build.hash, b.r.build.hash);
	assert_int_equal(a.r.build.status, BUILD_OK);
	assert_int_equal(b.r.build.status, BUILD_OK);
	assert_non_null(json_object_get(b.r.seconds, "build"));
	assert_string_equal(reason_code(&b.r), "ok");
	fixture_free(&a);
	fixture_free(&b);
}

/* A build that fails while a later step (the bridge, the spawn) failed too: the build's reason
 * is the cause and replaces the later one, as when the steps ran one after another. */
static void test_build_failure_wins(void **state)
{
	struct fixture f;
	(void)state;
	if (!have_nvcc)
		skip();
	fixture_init(&f, "bad_syntax");
	assert_int_equal(step_build(&f.r, true), 0);
	set_reason(&f.r, "env.bridge", "the bridge died while nvcc ran");
	assert_string_equal(reason_code(&f.r), "env.bridge");
	assert_int_equal(step_build_wait(&f.r), -1);
	assert_string_equal(reason_code(&f.r), "build.error");
	assert_true(json_is_false(json_object_get(f.r.result, "compiled")));
	fixture_free(&f);

	/* A build that succeeds leaves the later step's reason alone. */
	fixture_init(&f, "axpy");
	assert_int_equal(step_build(&f.r, true), 0);
	set_reason(&f.r, "env.bridge", "the bridge died while nvcc ran");
	assert_int_equal(step_build_wait(&f.r), 0);
	assert_string_equal(reason_code(&f.r), "env.bridge");
	fixture_free(&f);
}

/* What the build step refuses before anything compiles, with no thread started. */
static void test_build_refusals(void **state)
{
	struct fixture f;
	char msg[512];
	(void)state;
	fixture_init(&f, "no-such-candidate");
	assert_int_equal(step_build(&f.r, true), -1);
	assert_false(f.r.build_bg.pending);
	assert_string_equal(reason_code(&f.r), "candidate.missing");
	snprintf(msg, sizeof msg, "%s",
		 json_string_value(json_object_get(json_object_get(f.r.result, "reason"), "message")));
	assert_non_null(strstr(msg, "does not exist"));
	fixture_free(&f);

	fixture_init(&f, "axpy/kernels"); /* a directory without kernels/ */
	assert_int_equal(step_build(&f.r, true), -1);
	assert_string_equal(reason_code(&f.r), "candidate.missing");
	assert_false(f.r.build_bg.pending);
	fixture_free(&f);

	fixture_init(&f, "axpy");
	f.o.rules = TORCH_PROFILE_KERNELBENCH; /* native candidates are judged under cuda-agent */
	assert_int_equal(step_build(&f.r, true), -1);
	assert_string_equal(reason_code(&f.r), "candidate.missing");
	assert_string_equal(result_str(&f, "rules"), "cuda-agent");
	fixture_free(&f);
}

/* The CPU of the two processes is claimed before the build starts, and this thread (with the
 * build thread and the compilers it starts) leaves it; a second evaluation takes another. */
static void test_claim_cpu_before_build(void **state)
{
	struct fixture a, b;
	cpu_set_t before, during;
	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof before, &before), 0);
	if (CPU_COUNT(&before) < 2)
		skip(); /* a claim leaves this thread at least one CPU */
	setenv("CUDA_AGENT_PIN_PROCESSES", "0", 1);
	fixture_init(&a, "axpy");
	step_claim_cpu(&a.r);
	assert_int_equal(a.r.cpu.cpu, -1);
	fixture_free(&a);

	setenv("CUDA_AGENT_PIN_PROCESSES", "1", 1);
	fixture_init(&a, "axpy");
	fixture_init(&b, "axpy");
	step_claim_cpu(&a.r);
	assert_true(a.r.cpu.cpu >= 0);
	assert_true(a.r.cpu.lock_fd >= 0);
	assert_int_equal(sched_getaffinity(0, sizeof during, &during), 0);
	assert_false(CPU_ISSET((size_t)a.r.cpu.cpu, &during));
	assert_int_equal(CPU_COUNT(&during), CPU_COUNT(&before) - 1);
	step_claim_cpu(&a.r); /* claimed once */
	assert_int_equal(sched_getaffinity(0, sizeof during, &during), 0);
	assert_int_equal(CPU_COUNT(&during), CPU_COUNT(&before) - 1);
	if (CPU_COUNT(&before) >= 3) { /* another evaluation, from this thread's remaining CPUs */
		step_claim_cpu(&b.r);
		assert_true(b.r.cpu.cpu >= 0);
		assert_int_not_equal(a.r.cpu.cpu, b.r.cpu.cpu);
		cpu_claim_release(&b.r.cpu);
	}
	cpu_claim_release(&a.r.cpu);
	assert_int_equal(sched_getaffinity(0, sizeof during, &during), 0);
	assert_true(CPU_EQUAL(&before, &during));
	fixture_free(&b);
	fixture_free(&a);
	unsetenv("CUDA_AGENT_PIN_PROCESSES");
}

/* The first reason is the cause; later ones are its consequences. */
static void test_first_reason_kept(void **state)
{
	struct fixture f;
	(void)state;
	fixture_init(&f, "axpy");
	assert_string_equal(reason_code(&f.r), "ok");
	set_reason(&f.r, "verify.mismatch", "trial %d", 2);
	set_reason(&f.r, "fault.crash", "later");
	assert_string_equal(reason_code(&f.r), "verify.mismatch");
	fixture_free(&f);
}

static json_t *timing_of(double cand, double eager, double compile)
{
	return json_pack("{s:{s:f}, s:{s:f}, s:{s:f}}", "candidate", "median_ms", cand, "eager",
			 "median_ms", eager, "compile", "median_ms", compile);
}

/* The reward step on results as the earlier steps leave them. */
static void test_reward_and_env(void **state)
{
	struct fixture f;
	(void)state;
	fixture_init(&f, "axpy");
	json_object_set_new(f.r.result, "compiled", json_true());
	json_object_set_new(f.r.result, "correct", json_true());
	json_object_set_new(f.r.result, "timing", timing_of(0.5, 1.0, 2.0));
	step_reward(&f.r);
	assert_int_equal(json_integer_value(json_object_get(f.r.result, "reward")), 3);
	assert_true(json_real_value(json_object_get(json_object_get(f.r.result, "timing"),
						    "speedup_eager")) > 1.99);
	fixture_free(&f);

	fixture_init(&f, "axpy"); /* slower than both baselines, correct */
	json_object_set_new(f.r.result, "compiled", json_true());
	json_object_set_new(f.r.result, "correct", json_true());
	json_object_set_new(f.r.result, "timing", timing_of(3.0, 1.0, 2.0));
	step_reward(&f.r);
	assert_int_equal(json_integer_value(json_object_get(f.r.result, "reward")), 1);
	fixture_free(&f);

	fixture_init(&f, "axpy"); /* a wrong candidate */
	set_reason(&f.r, "verify.mismatch", "trial 0");
	json_object_set_new(f.r.result, "compiled", json_true());
	json_object_set_new(f.r.result, "correct", json_false());
	step_reward(&f.r);
	assert_int_equal(json_integer_value(json_object_get(f.r.result, "reward")), -1);
	fixture_free(&f);

	fixture_init(&f, "axpy"); /* the environment's failure: no reward at all */
	set_reason(&f.r, "env.no_gpu", "no GPU");
	step_reward(&f.r);
	assert_true(json_is_null(json_object_get(f.r.result, "reward")));
	assert_non_null(strstr(result_str(&f, "reward_explanation"), "env.no_gpu"));
	f.r.cpu.cpu = 7; /* as a claim leaves it */
	step_env(&f.r);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(f.r.result, "env"),
							    "pinned_cpu")),
			 7);
	f.r.cpu.cpu = -1;
	fixture_free(&f);
}

/* ---- the bridge's steps, against a scripted bridge --------------------------------------------- */

/* The scripted bridge: `ready`, then one canned answer per describe (by $FAKE_DESCRIBE: ok,
 * degenerate, bad_spec, forward_raised); `die` exits before it is ready. */
static const char fake_bridge[] =
	"#!/bin/sh\n"
	"[ \"$FAKE_DESCRIBE\" = die ] && { echo 'ImportError: no torch here' >&2; exit 1; }\n"
	"printf '%s\\n' '{\"event\": \"ready\", \"torch\": \"2.11.0\", \"python\": \"3.12.3\", "
	"\"device\": \"cpu\"}'\n"
	"spec='\"args\": [{\"dtype\": \"float32\", \"shape\": [4]}], \"params\": [], "
	"\"outputs\": [{\"dtype\": \"float32\", \"shape\": [4]}], \"module_mode\": \"eval\"'\n"
	"while IFS= read -r line; do\n"
	"  id=$(printf '%s\\n' \"$line\" | sed -n 's/.*\"id\":\\([0-9][0-9]*\\).*/\\1/p')\n"
	"  case \"$FAKE_DESCRIBE:$line\" in\n"
	"  *'\"op\":\"shutdown\"'*) printf '{\"id\":%s,\"ok\":true,\"result\":{}}\\n' \"$id\"; "
	"exit 0;;\n"
	"  ok:*) printf '{\"id\":%s,\"ok\":true,\"result\":{%s}}\\n' \"$id\" \"$spec\";;\n"
	"  degenerate:*) printf '{\"id\":%s,\"ok\":true,\"result\":{%s, \"degenerate\": "
	"{\"kind\": \"zeros\", \"message\": \"zeros pass\"}}}\\n' \"$id\" \"$spec\";;\n"
	"  bad_spec:*) printf '{\"id\":%s,\"ok\":true,\"result\":{\"outputs\": [], "
	"\"module_mode\": \"eval\"}}\\n' \"$id\";;\n"
	"  no_mode:*) printf '{\"id\":%s,\"ok\":true,\"result\":{\"args\": [], \"params\": [], "
	"\"outputs\": [{\"dtype\": \"float32\", \"shape\": [4]}]}}\\n' \"$id\";;\n"
	"  forward_raised:*) printf '{\"id\":%s,\"ok\":false,\"error\":{\"code\": "
	"\"task.forward_raised\", \"message\": \"forward() raised at model.py:7\"}}\\n' \"$id\";;\n"
	"  esac\n"
	"done\n";

static void bridge_fixture(struct fixture *f, char *script, size_t size, const char *mode)
{
	struct ca_diag d = {{0}};
	fixture_init(f, "axpy");
	assert_int_equal(ca_format(script, size, "%s/fake-python", tmp), 0);
	if (!ca_is_file(script)) {
		assert_int_equal(ca_write_file_atomic(script, fake_bridge, strlen(fake_bridge), &d), 0);
		assert_int_equal(chmod(script, 0755), 0);
	}
	setenv("FAKE_DESCRIBE", mode, 1);
	eval_session_init(&f->s, script, "cpu");
	assert_int_equal(task_load(&f->r.task, task_dir, &d), 0);
	f->r.task_loaded = true;
}

static void test_bridge_and_describe(void **state)
{
	struct fixture f;
	char script[PATH_MAX];
	json_t *task;
	(void)state;

	bridge_fixture(&f, script, sizeof script, "ok");
	assert_int_equal(step_bridge_ready(&f.r), 0);
	assert_true(f.s.bridge.ready);
	assert_string_equal(f.s.bridge.device, "cpu");
	assert_int_equal(step_describe(&f.r), 0);
	assert_true(f.r.spec_loaded);
	assert_int_equal(f.r.spec.num_args, 1);
	assert_non_null(json_object_get(f.r.result, "spec"));
	assert_non_null(json_object_get(f.r.seconds, "describe"));
	assert_string_equal(reason_code(&f.r), "ok");
	fixture_free(&f);

	/* A degenerate task is said in the result, not refused. */
	bridge_fixture(&f, script, sizeof script, "degenerate");
	json_object_set_new(f.r.result, "task", json_object());
	assert_int_equal(step_bridge_ready(&f.r), 0);
	assert_int_equal(step_describe(&f.r), 0);
	task = json_object_get(f.r.result, "task");
	assert_string_equal(json_string_value(json_object_get(json_object_get(task, "degenerate"),
								  "kind")),
			    "zeros");
	assert_string_equal(reason_code(&f.r), "ok");
	fixture_free(&f);

	/* A spec the supervisor cannot use, and a task whose forward raises: the task's reasons. */
	bridge_fixture(&f, script, sizeof script, "bad_spec");
	assert_int_equal(step_bridge_ready(&f.r), 0);
	assert_int_equal(step_describe(&f.r), -1);
	assert_string_equal(reason_code(&f.r), "task.unsupported");
	assert_false(f.r.spec_loaded);
	fixture_free(&f);

	/* A bridge that does not say it described the task in the evaluation's module mode (an
	 * older bridge): the environment's failure, never a check against the other mode. */
	bridge_fixture(&f, script, sizeof script, "no_mode");
	assert_int_equal(step_bridge_ready(&f.r), 0);
	assert_int_equal(step_describe(&f.r), -1);
	assert_string_equal(reason_code(&f.r), "env.bridge");
	fixture_free(&f);

	bridge_fixture(&f, script, sizeof script, "forward_raised");
	assert_int_equal(step_bridge_ready(&f.r), 0);
	assert_int_equal(step_describe(&f.r), -1);
	assert_string_equal(reason_code(&f.r), "task.forward_raised");
	fixture_free(&f);

	/* A bridge that cannot start is the environment's failure. */
	bridge_fixture(&f, script, sizeof script, "die");
	assert_int_equal(step_bridge_ready(&f.r), -1);
	assert_string_equal(reason_code(&f.r), "env.bridge");
	fixture_free(&f);
	unsetenv("FAKE_DESCRIBE");
}


/* gpu_stage: two evaluations sharing a GPU take turns; without the variable nothing locks. */
struct stage_peer {
	double entered;
};

static void *stage_peer_main(void *arg)
{
	struct stage_peer *p = arg;
	struct gpu_stage g;
	gpu_stage_init(&g);
	assert_int_equal(gpu_stage_enter(&g), 0);
	p->entered = ca_now();
	gpu_stage_leave(&g);
	return NULL;
}

/* The session keeps the supervisor's device between evaluations (eval/session.h): the second
 * take gets the same device back, not a new one; a take of another kind closes the kept one. The
 * CPU backend stands in for CUDA, whose context is what the keeping saves. */
static void test_session_keeps_device(void **state)
{
	struct eval_session s;
	struct device a, b, c;
	struct ca_diag d = {{0}};
	(void)state;

	eval_session_init(&s, NULL, "cpu");
	assert_int_equal(eval_session_device_take(&s, DEVICE_CPU, &a, &d), 0);
	assert_int_equal(a.kind, DEVICE_CPU);
	assert_false(s.dev_kept);
	a.cpu_sum = 0x5eed; /* marks this device */
	eval_session_device_give(&s, &a);
	assert_true(s.dev_kept);
	assert_int_equal(a.kind, DEVICE_NONE); /* moved, not copied */
	assert_int_equal(eval_session_device_take(&s, DEVICE_CPU, &b, &d), 0);
	assert_int_equal(b.kind, DEVICE_CPU);
	assert_int_equal(b.cpu_sum, 0x5eed); /* the kept one */
	assert_false(s.dev_kept);
	eval_session_device_give(&s, &b);
	assert_true(s.dev_kept);
	/* another kind: the kept CPU device is closed whether or not a GPU is here */
	int rc = eval_session_device_take(&s, DEVICE_CUDA, &c, &d);
	assert_false(s.dev_kept);
	if (rc == 0) {
		assert_int_equal(c.kind, DEVICE_CUDA);
		eval_session_device_give(&s, &c);
	}
	eval_session_close(&s);
	assert_false(s.dev_kept);
	assert_int_equal(s.dev.kind, DEVICE_NONE);
}

static void test_gpu_stage_turns(void **state)
{
	(void)state;
	char dir[] = "/tmp/ca-test-stage-XXXXXX", lock[64];
	struct gpu_stage a, b;
	struct stage_peer peer = {0};
	pthread_t t;
	double left;
	assert_non_null(mkdtemp(dir));
	snprintf(lock, sizeof lock, "%s/gpu-0.lock", dir);
	unsetenv("CUDA_AGENT_GPU_LOCK");
	gpu_stage_init(&a);
	gpu_stage_init(&b);
	assert_int_equal(gpu_stage_enter(&a), 0);
	assert_int_equal(a.fd, -1); /* no variable: no lock */
	assert_int_equal(gpu_stage_enter(&b), 0);
	setenv("CUDA_AGENT_GPU_LOCK", lock, 1);
	assert_int_equal(gpu_stage_enter(&a), 0);
	assert_true(a.fd >= 0);
	assert_int_equal(gpu_stage_enter(&a), 0); /* held already: nothing more */
	assert_int_equal(pthread_create(&t, NULL, stage_peer_main, &peer), 0);
	usleep(200000);
	assert_true(peer.entered == 0); /* the peer waits for its turn */
	left = ca_now();
	gpu_stage_leave(&a);
	gpu_stage_leave(&a); /* twice is harmless */
	assert_true(a.held_s >= 0.19 && a.held_s <= left - a.since + 0.01); /* counted once */
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(peer.entered >= left);
	unsetenv("CUDA_AGENT_GPU_LOCK");
	setenv("CUDA_AGENT_GPU_LOCK", "/nonexistent-dir/x.lock", 1);
	assert_int_equal(gpu_stage_enter(&b), -1); /* unusable: goes on unlocked */
	assert_int_equal(b.fd, -1);
	unsetenv("CUDA_AGENT_GPU_LOCK");
	ca_remove_tree(dir, NULL);
}

/* The kernel-free view's answer, checked: masks from the view's own directory shown over files,
 * nothing else; python_binds puts them after the directories only when asked. The "python" is a
 * script printing $FAKE_VIEW (or failing when it is "fail"). */
static void put_file(const char *path, const char *text, unsigned mode)
{
	assert_int_equal(ca_write_file_atomic(path, text, strlen(text), NULL), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static void test_torch_view_masks(void **state)
{
	char py[PATH_MAX], root[PATH_MAX], cache[PATH_MAX], mask[PATH_MAX], orig[PATH_MAX];
	char json[6 * PATH_MAX], pp_env[PATH_MAX + 16];
	struct python_runtime *rt = calloc(1, sizeof *rt);
	struct ca_diag d = {{0}};
	struct sandbox_bind binds[SPAWN_MAX_BINDS];
	const char *more[] = {"/more", NULL};
	(void)state;
	assert_non_null(rt);
	assert_int_equal(ca_format(py, sizeof py, "%s/fake-view-python", tmp), 0);
	put_file(py, "#!/bin/sh\n[ \"$FAKE_VIEW\" = fail ] && { echo broken >&2; exit 3; }\n"
		     "printf '%s\\n' \"$FAKE_VIEW\"\n", 0755);
	assert_int_equal(ca_format(cache, sizeof cache, "%s/cache/torch-view", tmp), 0);
	assert_int_equal(ca_mkdirs(cache, 0755, NULL), 0);
	assert_non_null(realpath(cache, root));
	assert_int_equal(ca_format(mask, sizeof mask, "%s/000-libtorch_cuda.so", root), 0);
	assert_int_equal(ca_format(orig, sizeof orig, "%s/libtorch_cuda.so", tmp), 0);
	put_file(mask, "view", 0644);
	put_file(orig, "original", 0644);
	ca_strlcpy(rt->package_dir, tmp, sizeof rt->package_dir);
	ca_strlcpy(rt->dirs[0], "/site", sizeof rt->dirs[0]);
	rt->n_dirs = 1;

	snprintf(json, sizeof json, "{\"masks\": [[\"%s\", \"%s\"]], \"seconds\": 0.1}", mask,
		 orig);
	setenv("FAKE_VIEW", json, 1);
	assert_int_equal(python_torch_view(py, rt, &d), 0);
	assert_true(rt->view_ready);
	assert_int_equal(rt->n_masks, 1);
	assert_string_equal(rt->masks[0].src, mask);
	assert_string_equal(rt->masks[0].dst, orig);
	int nb = python_binds(rt, more, true, binds, SPAWN_MAX_BINDS, pp_env, sizeof pp_env);
	assert_int_equal(nb, 3);
	assert_string_equal(binds[0].src, "/site");
	assert_string_equal(binds[1].src, "/more");
	assert_string_equal(binds[2].src, mask);
	assert_string_equal(binds[2].dst, orig);
	assert_int_equal(python_binds(rt, more, false, binds, SPAWN_MAX_BINDS, pp_env,
				      sizeof pp_env), 2);
	assert_string_equal(rt->preload, "");

	/* the refusal library: preloaded only when it is also shown (a mask onto itself) */
	snprintf(json, sizeof json, "{\"masks\": [[\"%s\", \"%s\"], [\"%s\", \"%s\"]], "
		 "\"preload\": \"%s\"}", mask, orig, mask, mask, mask);
	setenv("FAKE_VIEW", json, 1);
	assert_int_equal(python_torch_view(py, rt, &d), 0);
	assert_string_equal(rt->preload, mask);
	snprintf(json, sizeof json, "{\"masks\": [[\"%s\", \"%s\"]], \"preload\": \"%s\"}",
		 mask, orig, mask);
	setenv("FAKE_VIEW", json, 1);
	assert_int_not_equal(python_torch_view(py, rt, &d), 0);
	assert_string_equal(rt->preload, "");

	/* refused: a source outside the view's directory, a way out of it, a missing
	 * destination, a bad shape, a failed build */
	char bad[5][3 * PATH_MAX];
	snprintf(bad[0], sizeof bad[0], "[[\"%s\", \"%s\"]]", orig, orig);
	snprintf(bad[1], sizeof bad[1], "[[\"%s/../torch-view/000-libtorch_cuda.so\", \"%s\"]]",
		 root, orig);
	snprintf(bad[2], sizeof bad[2], "[[\"%s\", \"/nonexistent/lib.so\"]]", mask);
	snprintf(bad[3], sizeof bad[3], "[\"%s\"]", mask);
	snprintf(bad[4], sizeof bad[4], "{}");
	for (size_t i = 0; i < 5; i++) {
		snprintf(json, sizeof json, "{\"masks\": %s}", bad[i]);
		setenv("FAKE_VIEW", json, 1);
		memset(&d, 0, sizeof d);
		assert_int_not_equal(python_torch_view(py, rt, &d), 0);
		assert_int_equal(rt->n_masks, 0);
		assert_true(strlen(d.msg) > 0);
	}
	setenv("FAKE_VIEW", "fail", 1);
	memset(&d, 0, sizeof d);
	assert_int_not_equal(python_torch_view(py, rt, &d), 0);
	assert_non_null(strstr(d.msg, "broken"));
	unsetenv("FAKE_VIEW");
	free(rt);
}

/* The watchdog bounds each command, and the whole run at PROC_TOTAL_FACTOR times that (issue
 * 46): a process whose calls take 0.2 s answers six of them under a 0.5 s limit (1.2 s in all),
 * is timed out on a call of 0.8 s, and a run past its total is timed out saying so. */
static void run_calls(const char *script, double limit_s, double total_s, int calls,
		      bool slow_last, struct cand_proc *p, struct loop_fail *f, int *rc_last)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	struct ca_run_opts ro = {0};
	struct ca_child *child = calloc(1, sizeof *child);
	struct ca_diag d = {{0}};
	json_t *ans = NULL;
	assert_non_null(child);
	assert_int_equal(ca_child_spawn(child, argv, &ro, NULL, &d), 0);
	cand_proc_init(p, child, false, limit_s, NULL);
	if (total_s > 0)
		p->total_limit_s = total_s;
	*rc_last = 0;
	for (int i = 0; i < calls && *rc_last == 0; i++) {
		json_t *fields = slow_last && i == calls - 1 ? json_pack("{s:s}", "x", "slow") : NULL;
		*rc_last = cand_proc_command(p, WIRE_CMD_CALL, fields, &ans, f);
	}
	ca_child_close(child, 0.0);
	free(child);
}

static void test_watchdog_per_command(void **state)
{
	static const char script[] =
		"while read l; do case \"$l\" in *slow*) sleep 0.8;; *) sleep 0.2;; esac; "
		"echo '{\"event\":\"called\",\"ev_ms\":1}'; done";
	struct cand_proc p;
	struct loop_fail f = {0};
	int rc;
	(void)state;
	run_calls(script, 0.5, 0, 6, false, &p, &f, &rc);
	if (rc)
		fprintf(stderr, "watchdog: %s: %s\n", f.code, f.message);
	assert_int_equal(rc, 0);
	assert_true(p.ran_s > 1.0 && p.max_call_s > 0.15 && p.max_call_s < 0.5);
	cand_proc_free(&p);
	run_calls(script, 0.5, 0, 3, true, &p, &f, &rc);
	assert_int_not_equal(rc, 0);
	assert_string_equal(f.code, "timeout");
	assert_non_null(strstr(f.message, "watchdog limit"));
	cand_proc_free(&p);
	run_calls(script, 0.5, 0.7, 6, false, &p, &f, &rc);
	assert_int_not_equal(rc, 0);
	assert_string_equal(f.code, "timeout");
	assert_non_null(strstr(f.message, "in all"));
	cand_proc_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_async_matches_sync),
		cmocka_unit_test(test_build_failure_wins),
		cmocka_unit_test(test_build_refusals),
		cmocka_unit_test(test_claim_cpu_before_build),
		cmocka_unit_test(test_first_reason_kept),
		cmocka_unit_test(test_reward_and_env),
		cmocka_unit_test(test_bridge_and_describe),
		cmocka_unit_test(test_gpu_stage_turns),
		cmocka_unit_test(test_session_keeps_device),
		cmocka_unit_test(test_torch_view_masks),
		cmocka_unit_test(test_watchdog_per_command),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
