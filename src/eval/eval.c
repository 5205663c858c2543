/* eval: the supervisor's evaluation of one candidate against one task (eval.h). This file is
 * the list of steps and the result; the steps that touch data and calls are in data.c,
 * verify.c and timing.c (shared state: run.h). */
#include "eval/eval.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bridge/bridge.h"
#include "build/build.h"
#include "eval/reward.h"
#include "eval/run.h"
#include "eval/summary.h"
#include "eval/torch_candidate.h"
#include "protocol/reasons.h"
#include "protocol/wire.h"
#include "sandbox/sandbox.h"
#include "task/task.h"
#include "tensor/spec.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"

/* ---- small helpers ----------------------------------------------------------------------- */


static uint64_t secret_seed(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
		/* getrandom cannot fail for 8 bytes once the pool is ready; fall back anyway. */
		uint64_t pid = (uint64_t)(uint32_t)getpid();
		uint64_t now = (uint64_t)(ca_wall_now() * 1e9);
		v = pid * (uint64_t)0x9E3779B97F4A7C15ull ^ now;
	}
	return v & 0x7fffffffffffffffull;
}

/* The first reason set wins: it is the cause; later failures are consequences. */
void set_reason(struct run *r, const char *code, const char *fmt, ...)
{
	char msg[CA_DIAG_MAX];
	va_list ap;
	json_t *old = json_object_get(r->result, "reason");
	if (old && strcmp(json_string_value(json_object_get(old, "code")), "ok") != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_object_set_new(r->result, "reason", json_pack("{s:s, s:s}", "code", code, "message",
							   msg));
}

const char *reason_code(const struct run *r)
{
	json_t *reason = json_object_get(r->result, "reason");
	const char *c = json_string_value(json_object_get(reason, "code"));
	return c ? c : "";
}

void note_seconds(struct run *r, const char *what, double since)
{
	json_object_set_new(r->seconds, what, json_real(ca_now() - since));
}

static int pathf(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int pathf(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;
	va_start(ap, fmt);
	n = vsnprintf(out, size, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= size ? CA_ERR_LIMIT : 0;
}


/* ---- session --------------------------------------------------------------------------- */


/* ---- build ----------------------------------------------------------------------------- */


static json_t *build_json(const struct build_result *b)
{
	json_t *errors = json_array(), *resources = json_array();
	char buf[CA_BUILD_LOG_MAX];
	char *save = NULL;

	ca_strlcpy(buf, b->errors, sizeof buf);
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		json_array_append_new(errors, json_string(line));
	ca_strlcpy(buf, b->ptxas_info, sizeof buf);
	save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		json_array_append_new(resources, json_string(line));
	return json_pack("{s:s, s:f, s:b, s:s, s:i, s:i, s:s, s:s, s:o, s:o}", "status",
			 build_status_code(b->status), "seconds", b->seconds, "cached", b->cached,
			 "arch", b->arch, "units_compiled", b->objects_compiled, "units_cached",
			 b->objects_cached, "hash", b->hash, "library",
			 b->status == BUILD_OK ? b->library : "", "errors", errors, "resources",
			 resources);
}

/* The build's verdict into the result (shared by the native and the torch builds). */
static int finish_build(struct run *r)
{
	json_object_set_new(r->result, "build", build_json(&r->build));
	json_object_set_new(json_object_get(r->result, "candidate"), "hash",
			    json_string(r->build.hash));
	json_object_set_new(r->seconds, "build", json_real(r->build.seconds));
	if (r->build.status != BUILD_OK) {
		char first[512];
		char *nl;
		ca_strlcpy(first, r->build.errors, sizeof first);
		nl = strchr(first, '\n');
		if (nl)
			*nl = '\0';
		json_object_set_new(r->result, "compiled", json_false());
		set_reason(r, build_status_code(r->build.status), "%s",
			   first[0] ? first : "the build failed");
		return -1;
	}
	json_object_set_new(r->result, "compiled", json_true());
	ca_log_info("built in %.2f s (%s%s, %d unit%s compiled)", r->build.seconds, r->build.arch,
		    r->build.cached ? ", cached" : "", r->build.objects_compiled,
		    r->build.objects_compiled == 1 ? "" : "s");
	return 0;
}

static const char *session_python(const struct eval_session *s)
{
	return bridge_python(s->python);
}

static int step_record(struct run *r, const char *specs_path);
static int make_run_dirs(struct run *r);
static const struct python_runtime *session_runtime(struct run *r, struct ca_diag *d);

#define RECORD_MAX_BYTES (8u << 20)


/* The load_inline specs of a kernelbench file: recorded once per file content and Python (the
 * recording imports the file in the sandbox, seconds with torch), then kept under
 * <cache>/build/torch/records/. specs receives the path torch_build reads. */
static int record_cached(struct run *r, const char *cache, char *specs, size_t size)
{
	char key[CA_HASH_HEX_LEN + 1], fresh[PATH_MAX];
	struct ca_diag d = {{0}};
	struct ca_hasher h;
	char *data = NULL;
	size_t len = 0;
	const struct python_runtime *rt = session_runtime(r, &d);

	if (!rt) {
		set_reason(r, "env.bridge", "cannot use the Python runtime: %s", d.msg);
		return -1;
	}
	if (ca_read_file(r->cand_path, RECORD_MAX_BYTES, &data, &len, &d)) {
		set_reason(r, "candidate.missing", "%s", d.msg);
		return -1;
	}
	if (ca_hasher_init(&h)) {
		free(data);
		set_reason(r, "internal", "out of memory");
		return -1;
	}
	ca_hasher_update_str(&h, "record/1");
	ca_hasher_update_str(&h, rt->exe);
	ca_hasher_update(&h, data, len);
	ca_hasher_final_hex(&h, key);
	ca_hasher_free(&h);
	free(data);
	if (pathf(specs, size, "%s/torch/records/%s.json", cache, key) ||
	    pathf(fresh, sizeof fresh, "%s/inline_specs.json", r->work)) {
		set_reason(r, "internal", "cache path too long");
		return -1;
	}
	if (ca_is_file(specs)) {
		json_object_set_new(r->seconds, "record", json_real(0.0));
		return 0;
	}
	if (step_record(r, fresh))
		return -1;
	/* Keep it for next time (best effort); this run reads its own copy. */
	if (ca_read_file(fresh, RECORD_MAX_BYTES, &data, &len, &d) == 0) {
		char dir[PATH_MAX];
		ca_strlcpy(dir, specs, sizeof dir);
		*strrchr(dir, '/') = '\0';
		if (ca_mkdirs(dir, 0755, &d) || ca_write_file_atomic(specs, data, len, &d))
			ca_log_warn("cannot keep the recorded load_inline calls: %s", d.msg);
		free(data);
	}
	return ca_strlcpy(specs, fresh, size) ? -1 : 0;
}

/* PyTorch-format candidates: torch_build compiles (compilers only, content-addressed cache);
 * a kernelbench file's load_inline calls are first recorded in the sandbox (step_record). */
static int step_build_torch(struct run *r)
{
	char base[PATH_MAX], cache[PATH_MAX], arch[32], specs[PATH_MAX];
	struct torch_refusal refusal;
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	const char *args[8];
	int rc;

	memset(&refusal, 0, sizeof refusal);
	if (ca_cache_dir(base, sizeof base, &d) || ca_path_join(cache, sizeof cache, base, "build") ||
	    build_resolve_arch(r->o->arch, arch, sizeof arch, &d)) {
		set_reason(r, "build.internal", "the build could not run: %s", d.msg);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
	if (r->format == CANDIDATE_WORKDIR) {
		args[0] = "workdir"; /* torch_build checks model_new.py before it compiles */
		args[1] = r->cand_path;
	} else {
		/* The static check reads the file before any of it runs (the recording below
		 * imports it, in the sandbox): docs/torch-rules.md */
		rc = torch_static_check_run(session_python(r->s), r->cand_path, false, r->rules,
					    120.0, &refusal, &d);
		if (rc) {
			set_reason(r, "build.internal", "the static check could not run: %s", d.msg);
			json_object_set_new(r->result, "compiled", json_false());
			return -1;
		}
		if (refusal.code[0]) {
			set_reason(r, refusal.code, "%s", refusal.message);
			json_object_set_new(r->result, "compiled", json_false());
			return -1;
		}
		if (make_run_dirs(r) || record_cached(r, cache, specs, sizeof specs)) {
			json_object_set_new(r->result, "compiled", json_false());
			return -1;
		}
		args[0] = "inline";
		args[1] = specs;
	}
	args[2] = "--cache";
	args[3] = cache;
	args[4] = "--arch";
	args[5] = arch;
	args[6] = NULL;
	ca_log_info("building %s (%s format)", r->cand_path, candidate_format_name(r->format));
	rc = torch_build_run_checked(session_python(r->s), args, 900.0, r->rules, &r->build,
				     &r->modules, &refusal, &d);
	if (rc) {
		set_reason(r, "build.internal", "the build could not run: %s", d.msg);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
	if (refusal.code[0])
		set_reason(r, refusal.code, "%s", refusal.message); /* finish_build marks it failed */
	r->build.seconds = ca_now() - t0;
	return finish_build(r);
}

static int step_build(struct run *r)
{
	struct build_opts bo = {0};
	char root[PATH_MAX], include[PATH_MAX], kernels[PATH_MAX];
	struct ca_diag d = {{0}};
	enum candidate_format fmt = r->o->format;
	int rc;

	/* A path that is no candidate of any format gets the native checks' messages below. */
	rc = candidate_format_detect(r->o->candidate_dir, &fmt, r->cand_path, sizeof r->cand_path,
				     &d);
	if (rc && r->o->format != CANDIDATE_AUTO && r->o->format != CANDIDATE_NATIVE) {
		set_reason(r, "candidate.missing", "%s", d.msg);
		return -1;
	}
	if (rc) {
		fmt = CANDIDATE_NATIVE;
		ca_strlcpy(r->cand_path, r->o->candidate_dir, sizeof r->cand_path);
		memset(&d, 0, sizeof d);
	}
	r->format = fmt;
	json_object_set_new(json_object_get(r->result, "candidate"), "format",
			    json_string(candidate_format_name(r->format)));
	r->rules = r->o->rules_by_format && fmt == CANDIDATE_KERNELBENCH ? TORCH_PROFILE_KERNELBENCH
									 : r->o->rules;
	if (r->format == CANDIDATE_NATIVE && r->rules != TORCH_PROFILE_CUDA_AGENT) {
		set_reason(r, "candidate.missing",
			   "the %s rules judge PyTorch-format candidates (KernelBench files, "
			   "CUDA-Agent workdirs); %s is a native candidate, judged under cuda-agent",
			   torch_profile_name(r->rules), r->o->candidate_dir);
		return -1;
	}
	json_object_set_new(r->result, "rules", json_string(torch_profile_name(r->rules)));
	if (r->format != CANDIDATE_NATIVE)
		return step_build_torch(r);
	if (ca_path_join(kernels, sizeof kernels, r->o->candidate_dir, "kernels")) {
		set_reason(r, "candidate.missing", "candidate path too long");
		return -1;
	}
	if (!ca_is_dir(r->o->candidate_dir)) {
		set_reason(r, "candidate.missing", "candidate directory %s does not exist",
			   r->o->candidate_dir);
		return -1;
	}
	if (!ca_is_dir(kernels)) {
		set_reason(r, "candidate.missing",
			   "%s has no kernels/ directory (a native candidate keeps its CUDA sources "
			   "in kernels/)", r->o->candidate_dir);
		return -1;
	}
	rc = ca_install_root(root, sizeof root, &d);
	if (rc || pathf(include, sizeof include, "%s/build/include", root)) {
		set_reason(r, "internal", "%s", d.msg);
		return -1;
	}
	bo.kernels_dir = kernels;
	bo.arch = r->o->arch;
	bo.include_dir = include;
	bo.no_cache = r->o->no_build_cache;
	ca_log_info("building %s", kernels);
	rc = build_candidate(&bo, &r->build, &d);
	if (rc) {
		set_reason(r, "build.internal", "the build could not run: %s", d.msg);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
	return finish_build(r);
}


/* ---- the bridge, the task ---------------------------------------------------------------- */


int bridge_request(struct run *r, const char *op, const json_t *req, double timeout_s,
			  json_t **res)
{
	struct ca_diag d = {{0}};
	char code[64];
	int rc = bridge_call(&r->s->bridge, op, req, timeout_s, res, code, sizeof code, &d);
	if (rc == CA_ERR_INVALID && reason_class_of(code) == REASON_TASK) {
		set_reason(r, code, "%s", d.msg);
	} else if (rc) {
		set_reason(r, code[0] ? code : "env.bridge", "torch bridge (%s): %s", op, d.msg);
	}
	return rc;
}

static int step_bridge_ready(struct run *r)
{
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	int rc = eval_session_warm(r->s, &d);
	if (!rc)
		rc = bridge_wait_ready(&r->s->bridge, 180.0, &d);
	note_seconds(r, "bridge_wait", t0);
	if (rc) {
		set_reason(r, "env.bridge", "cannot start the torch bridge: %s", d.msg);
		return -1;
	}
	return 0;
}

static int step_describe(struct run *r)
{
	json_t *req = json_pack("{s:s, s:I}", "task_dir", r->task.dir, "seed",
				(json_int_t)r->trial_seeds[0]);
	json_t *res = NULL;
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	int rc = bridge_request(r, "describe", req, 600.0, &res);
	json_decref(req);
	note_seconds(r, "describe", t0);
	if (rc)
		return -1;
	rc = task_spec_from_json(&r->spec, res, &d);
	if (rc) {
		set_reason(r, "task.unsupported", "%s", d.msg);
		json_decref(res);
		return -1;
	}
	r->spec_loaded = true;
	r->spec_json = task_spec_to_json(&r->spec);
	json_object_set(r->result, "spec", r->spec_json);
	{ /* a degenerate task (the bridge's verdict, docs/evaluation.md): said, not refused */
		json_t *deg = json_object_get(res, "degenerate");
		json_t *task = json_object_get(r->result, "task");
		const char *msg = json_string_value(json_object_get(deg, "message"));
		if (json_is_object(deg) && json_is_object(task)) {
			json_object_set(task, "degenerate", deg);
			ca_log_warn("task %s: %s", r->task.id, msg ? msg : "degenerate");
		}
	}
	json_decref(res);
	return 0;
}


/* ---- the run directory ------------------------------------------------------------------ */


/* Run directories hold every reference and output tensor of an evaluation (gigabytes for large
 * tasks), written once and read once: they live in memory (/dev/shm) when it exists, else under
 * the cache. $CUDA_AGENT_RUNS overrides. */
static int runs_base(char *out, size_t size, struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_RUNS");
	char cache[PATH_MAX];
	if (env && env[0])
		return ca_strlcpy(out, env, size) ? ca_fail(d, CA_ERR_LIMIT, "path too long") : 0;
	if (ca_is_dir("/dev/shm") && access("/dev/shm", W_OK) == 0)
		return pathf(out, size, "/dev/shm/cuda-agent-%ld", (long)getuid())
			       ? ca_fail(d, CA_ERR_LIMIT, "path too long")
			       : 0;
	if (ca_cache_dir(cache, sizeof cache, d))
		return CA_ERR_IO;
	return pathf(out, size, "%s/runs", cache) ? ca_fail(d, CA_ERR_LIMIT, "path too long") : 0;
}

/* Run directories of evaluations that were killed before they could clean up (they live in
 * memory under /dev/shm): removed once they are a day old. Best effort. */
static void remove_stale_runs(const char *base)
{
	DIR *dp = opendir(base);
	struct dirent *ent;
	time_t now = time(NULL);
	if (!dp)
		return;
	while ((ent = readdir(dp)) != NULL) {
		char path[PATH_MAX];
		struct stat st;
		if (strncmp(ent->d_name, "run-", 4) != 0 ||
		    pathf(path, sizeof path, "%s/%s", base, ent->d_name) ||
		    lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || now - st.st_mtime < 86400)
			continue;
		ca_log_debug("removing stale run directory %s", path);
		ca_remove_tree(path, NULL);
	}
	closedir(dp);
}

static int make_run_dirs(struct run *r)
{
	char base[PATH_MAX];
	struct ca_diag d = {{0}};
	int rc;
	if (r->dir[0]) /* made already (a kernelbench build records its specs in work/) */
		return 0;
	rc = runs_base(base, sizeof base, &d);
	if (rc == 0)
		remove_stale_runs(base);
	if (rc || ca_make_temp_dir(base, "run-", r->dir, sizeof r->dir, &d) ||
	    pathf(r->work, sizeof r->work, "%s/work", r->dir) || ca_mkdirs(r->work, 0755, &d)) {
		set_reason(r, "internal", "cannot create the run directory: %s", d.msg);
		return -1;
	}
	return 0;
}

static int find_worker(const struct run *r, char *out, size_t size)
{
	const char *env = getenv("CUDA_AGENT_WORKER");
	char exe[PATH_MAX];
	ssize_t n;
	if (r->o->worker_path)
		return ca_strlcpy(out, r->o->worker_path, size) ? CA_ERR_LIMIT : 0;
	if (env && env[0])
		return ca_strlcpy(out, env, size) ? CA_ERR_LIMIT : 0;
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return CA_ERR_IO;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return CA_ERR_IO;
	slash[1] = '\0';
	return pathf(out, size, "%scuda-agent-worker", exe);
}/* ---- the candidate's process ------------------------------------------------------------ */

/* The candidate's process (the native worker, or the PyTorch-format runner) in the sandbox: it
 * sees the system read-only, work/ writable and the caller's binds (its program, the plan,
 * per-run copies of what was built, ...); never the cache or the home directory. Its data
 * arrive as descriptors (the slots, at 3, 4, ...). The run directory itself is made
 * traversable (0711, not listable) so that the sandbox's uid can reach the binds. Its /tmp and
 * /dev/shm are the run's scratch-tmp/ and scratch-shm/, so that step_finish() can see
 * afterwards whether the candidate wrote files there (sandbox_scratch_check). The JIT cache is
 * off: it would write under HOME=/tmp. Without the sandbox, the same program runs as a plain
 * child with the same extra environment. */
#define SPAWN_MAX_BINDS (PY_RUNTIME_MAX_DIRS + 8)
#define SPAWN_MAX_ENV   8


static int spawn_candidate(struct run *r, const char *const *argv,
			   const struct sandbox_bind *extra, size_t n_extra,
			   const char *const *env_extra, const char *err_path, double limit,
			   struct sandbox *sb, struct ca_child *child, struct ca_diag *d)
{
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	char env_visible[256] = "", scratch_tmp[PATH_MAX], scratch_shm[PATH_MAX];
	const char *env[SPAWN_MAX_ENV + 3] = {"CUDA_CACHE_DISABLE=1"};
	struct sandbox_bind binds[SPAWN_MAX_BINDS + 1] = {
		{.src = r->work, .writable = true},
	};
	struct sandbox_opts so = {0};
	size_t n_env = 1;

	if (n_extra > SPAWN_MAX_BINDS)
		return ca_fail(d, CA_ERR_LIMIT, "too many binds for the candidate's process");
	for (size_t i = 0; env_extra && env_extra[i] && n_env < SPAWN_MAX_ENV; i++)
		env[n_env++] = env_extra[i];
	if (!r->sandboxed) {
		struct ca_run_opts ro = {.env_add = env, .pass_fds = r->data.fds,
					 .n_pass_fds = (size_t)r->data.nfds};
		return ca_child_spawn(child, argv, &ro, err_path, d);
	}
	memcpy(binds + 1, extra, n_extra * sizeof *extra);
	if (chmod(r->dir, 0711) != 0)
		return ca_fail(d, CA_ERR_IO, "chmod %s: %s", r->dir, strerror(errno));
	if (pathf(scratch_tmp, sizeof scratch_tmp, "%s/scratch-tmp", r->dir) ||
	    pathf(scratch_shm, sizeof scratch_shm, "%s/scratch-shm", r->dir))
		return ca_fail(d, CA_ERR_LIMIT, "run directory path too long");
	if ((mkdir(scratch_tmp, 0700) != 0 && errno != EEXIST) ||
	    (mkdir(scratch_shm, 0700) != 0 && errno != EEXIST))
		return ca_fail(d, CA_ERR_IO, "cannot create the scratch directories in %s: %s",
			       r->dir, strerror(errno));
	if (visible && visible[0]) {
		snprintf(env_visible, sizeof env_visible, "CUDA_VISIBLE_DEVICES=%s", visible);
		env[n_env++] = env_visible;
	}
	so.env = env;
	so.pass_ld_library_path = true;
	so.pass_fds = r->data.fds; /* the slots, at 3, 4, ... */
	so.n_pass_fds = (size_t)r->data.nfds;
	so.binds = binds;
	so.n_binds = n_extra + 1;
	so.tmp_dir = scratch_tmp; /* sandbox_spawn hands them to the sandbox's uid */
	so.shm_dir = scratch_shm;
	so.cpu_seconds = (uint64_t)limit + 30;
	/* cgroup memory: the default 32 GiB, plus two of a call's sets in its own memory, for
	 * PyTorch-format candidates whose tensors are gigabytes (the slots are GPU memory) */
	{
		double set = (double)(r->data.lay_inputs.bytes + r->data.lay_outputs.bytes +
				      r->data.lay_params.bytes);
		double mem = (double)(32ull << 30) + 2.0 * set;
		if (mem > (double)(32ull << 30) + (double)(1u << 30))
			so.memory_max = (uint64_t)mem;
	}
	int rc = sandbox_spawn(sb, argv, &so, err_path, d);
	if (rc == 0)
		*child = sb->child;
	return rc;
}

/* The Python runtime the runner needs (probed once per session). */
static const struct python_runtime *session_runtime(struct run *r, struct ca_diag *d)
{
	if (!r->s->py) {
		struct python_runtime *rt = calloc(1, sizeof *rt);
		if (!rt) {
			ca_fail(d, CA_ERR_NOMEM, "out of memory");
			return NULL;
		}
		if (python_runtime_probe(session_python(r->s), rt, d)) {
			free(rt);
			return NULL;
		}
		r->s->py = rt;
	}
	return r->s->py;
}

/* Binds and environment of `python -m cuda_agent_bridge.runner`: the runtime's
 * directories, then `more`. Returns the number of binds, or -1 (message in d). */
static int python_binds(const struct python_runtime *rt, const char *const *more,
			struct sandbox_bind *binds, size_t cap, char *pp_env, size_t pp_size)
{
	size_t n = 0;
	for (int i = 0; i < rt->n_dirs && n < cap; i++)
		binds[n++] = (struct sandbox_bind){.src = rt->dirs[i]};
	for (size_t i = 0; more[i] && n < cap; i++)
		binds[n++] = (struct sandbox_bind){.src = more[i]};
	snprintf(pp_env, pp_size, "PYTHONPATH=%s", rt->package_dir);
	return (int)n;
}

static const char *const python_env_fixed[] = {"PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1",
					       "PYTHONHASHSEED=0"};

/* The first half of a kernelbench build: the candidate file imported in the sandbox with
 * load_inline recording its calls into specs_path (runner --record). */
static int step_record(struct run *r, const char *specs_path)
{
	char err_path[PATH_MAX], pp_env[PATH_MAX + 16];
	struct sandbox_bind binds[SPAWN_MAX_BINDS];
	struct ca_diag d = {{0}};
	struct sandbox sb;
	struct ca_child child;
	struct ca_run_result fate;
	bool done = false;
	double t0 = ca_now(), limit = 180.0;
	int rc = 0;
	const struct python_runtime *rt = session_runtime(r, &d);

	if (!rt) {
		set_reason(r, "env.bridge", "cannot use the Python runtime: %s", d.msg);
		return -1;
	}
	const char *more[] = {r->cand_path, NULL};
	int nb = python_binds(rt, more, binds, SPAWN_MAX_BINDS, pp_env, sizeof pp_env);
	char inductor_env[PATH_MAX + 48];
	snprintf(inductor_env, sizeof inductor_env, "TORCHINDUCTOR_CACHE_DIR=%s/torch-cache",
		 r->work);
	const char *env[] = {pp_env, python_env_fixed[0], python_env_fixed[1], python_env_fixed[2],
			     inductor_env, NULL};
	const char *argv[] = {rt->exe, "-B", "-m", "cuda_agent_bridge.runner", "--record",
			      r->cand_path, specs_path, NULL};
	pathf(err_path, sizeof err_path, "%s/record.stderr", r->dir);
	if (spawn_candidate(r, argv, binds, (size_t)nb, env, err_path, limit, &sb, &child, &d)) {
		set_reason(r, "env.sandbox", "cannot start the build step's import: %s", d.msg);
		return -1;
	}
	while (!done) {
		char *line = NULL;
		double left = t0 + limit - ca_now();
		if (left <= 0) {
			rc = CA_ERR_TIMEOUT;
			break;
		}
		if ((rc = ca_child_read_line(&child, WIRE_MAX_EVENT, left, &line, &d)))
			break;
		json_t *ev = json_loads(line, 0, NULL);
		const char *name = json_string_value(json_object_get(ev, "event"));
		if (name && strcmp(name, "error") == 0) {
			const char *msg = json_string_value(json_object_get(ev, "message"));
			const char *code = json_string_value(json_object_get(ev, "code"));
			set_reason(r, code ? code : "candidate.load_failed", "%s",
				   msg ? msg : "importing the candidate failed");
			rc = CA_ERR_REJECTED;
			done = true;
		} else if (name && strcmp(name, "done") == 0) {
			done = true;
		}
		json_decref(ev);
		free(line);
	}
	if (r->sandboxed) {
		sb.child = child;
		sandbox_finish(&sb, 5.0, &fate);
		if (sandbox_killed_by_seccomp(&sb, &fate)) {
			set_reason(r, "sandbox.violation",
				   "importing %s made a system call the sandbox forbids (seccomp "
				   "killed it): process creation, exec, network sockets, ... are not "
				   "allowed in candidate code", r->cand_path);
			return -1;
		}
	} else {
		ca_child_finish(&child, 5.0, &fate);
	}
	note_seconds(r, "record", t0);
	if (rc == CA_ERR_REJECTED)
		return -1;
	if (rc == CA_ERR_TIMEOUT || !done) {
		char tail[1024], how[128];
		ca_file_tail(err_path, 3, tail, sizeof tail);
		ca_run_describe(&fate, how, sizeof how);
		set_reason(r, rc == CA_ERR_TIMEOUT ? "timeout" : "candidate.load_failed",
			   "importing %s for the build %s (%s)%s%s", r->cand_path,
			   rc == CA_ERR_TIMEOUT ? "took too long" : "failed", how,
			   tail[0] ? ": " : "", tail);
		return -1;
	}
	return 0;
}

/* A copy of a built library in the run's lib/ directory, readable by the sandbox's uid (the
 * build cache under the home directory is not visible in the sandbox). */
static int copy_built(struct run *r, const char *src, const char *name, char *dst, size_t size,
		      struct ca_diag *d)
{
	char dir[PATH_MAX];
	char *data = NULL;
	size_t len = 0;
	int rc;
	if (pathf(dir, sizeof dir, "%s/lib", r->dir) || pathf(dst, size, "%s/%s", dir, name))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	if ((rc = ca_mkdirs(dir, 0755, d)) != 0)
		return rc;
	rc = ca_read_file(src, 1u << 30, &data, &len, d);
	if (!rc)
		rc = ca_write_file_atomic(dst, data, len, d);
	free(data);
	if (!rc && chmod(dst, 0755) != 0)
		rc = ca_fail(d, CA_ERR_IO, "chmod %s: %s", dst, strerror(errno));
	return rc;
}

/* Per-run copies of what the build made: the native library, the workdir's cuda_extension, or
 * each kernelbench module (r->inline_modules: spec key -> copy). */
static int copy_build_outputs(struct run *r, struct ca_diag *d)
{
	size_t i;
	json_t *m;
	ca_strlcpy(r->library, r->build.library, sizeof r->library);
	if (r->format == CANDIDATE_NATIVE)
		return r->sandboxed ? copy_built(r, r->build.library, "candidate.so", r->library,
						 sizeof r->library, d)
				    : 0;
	if (r->format == CANDIDATE_WORKDIR)
		return copy_built(r, r->build.library, "cuda_extension.so", r->library,
				  sizeof r->library, d);
	r->inline_modules = json_object();
	json_array_foreach(r->modules, i, m) {
		char name[64], dst[PATH_MAX];
		const char *key = json_string_value(json_object_get(m, "key"));
		const char *lib = json_string_value(json_object_get(m, "library"));
		int rc;
		if (!key || !lib)
			return ca_fail(d, CA_ERR_CHILD, "torch_build: module %zu without key/library", i);
		snprintf(name, sizeof name, "inline_%zu.so", i);
		if ((rc = copy_built(r, lib, name, dst, sizeof dst, d)))
			return rc;
		json_object_set_new(r->inline_modules, key, json_string(dst));
	}
	return 0;
}

/* The plan's "candidate" object for the PyTorch-format runner (python/cuda_agent_bridge/runner). */
static json_t *torch_candidate_json(const struct run *r)
{
	json_t *c = json_pack("{s:s, s:s, s:s, s:s}", "format", candidate_format_name(r->format),
			      "task_dir", r->task.dir, "torch_device",
			      r->data.dev.kind == DEVICE_CPU ? "cpu" : "cuda", "rules",
			      torch_profile_name(r->rules));
	json_object_set_new(c, r->format == CANDIDATE_WORKDIR ? "dir" : "path",
			    json_string(r->cand_path));
	if (r->format == CANDIDATE_WORKDIR)
		json_object_set_new(c, "extension", json_string(r->library));
	else
		json_object_set(c, "inline_modules", r->inline_modules);
	return c;
}/* The plan of docs/protocol.md ("The candidate's process"): nothing secret in it. */
static json_t *make_plan(struct run *r)
{
	const struct run_data *D = &r->data;
	json_t *inputs = json_array();
	json_t *plan;

	for (int i = 0; i < D->ninputs; i++)
		json_array_append_new(inputs, json_pack("{s:i, s:I}", "fd", 4 + i, "bytes",
							(json_int_t)D->lay_inputs.bytes));
	plan = json_pack("{s:i, s:i, s:O, s:s, s:{s:s, s:{s:i, s:I}, s:o, s:{s:i, s:I}}}",
			 "version", WIRE_PLAN_VERSION, "device", 0, "spec", r->spec_json,
			 "library", r->library, "slots", "kind",
			 D->dev.kind == DEVICE_CUDA ? "cuda" : "cpu", "params", "fd", 3, "bytes",
			 (json_int_t)D->lay_params.bytes, "inputs", inputs, "outputs", "fd",
			 3 + D->nfds - 1, "bytes", (json_int_t)D->lay_outputs.bytes);
	if (r->format != CANDIDATE_NATIVE)
		json_object_set_new(plan, "candidate", torch_candidate_json(r));
	return plan;
}

static void step_finish(struct run *r, bool quit);

void reason_from_fail(struct run *r, const struct loop_fail *f)
{
	/* A process that died, hung or flooded: how it ended may name a more specific cause (a
	 * seccomp kill, the memory limit), which must be set first. */
	if (r->proc_started && (r->proc.dead || r->proc.timed_out || r->proc.flooded ||
				strcmp(f->code, "fault.crash") == 0))
		step_finish(r, false);
	set_reason(r, f->code[0] ? f->code : "internal", "%s",
		   f->message[0] ? f->message : "the evaluation failed");
}

/* The last lines of a process's stderr file, on one line (empty when there are none). */
static void stderr_tail(const char *path, char *out, size_t size)
{
	ca_file_tail(path, 3, out, size);
	for (char *p = out; *p; p++)
		if (*p == '\n')
			*p = ' ';
}

/* The reference process (protocol/loop.h, LOOP_SEND_REF): the native worker from the same
 * plan and slots, spawned just before the candidate's process and never sent `load`, so no
 * candidate code ever runs in it. Outside the sandbox: it is trusted code, and the offset
 * between its empty calls and the candidate's process's is calibrated before any candidate code
 * is loaded. */
static int twin_start(struct run *r, const char *worker, double limit)
{
	struct ca_run_opts ro = {.pass_fds = r->data.fds, .n_pass_fds = (size_t)r->data.nfds};
	const char *env[] = {"CUDA_CACHE_DISABLE=1", NULL};
	char plan_path[PATH_MAX];
	const char *argv[] = {worker, plan_path, NULL};
	struct ca_diag d = {{0}};
	json_t *plan = make_plan(r);
	int bad;

	/* Its own plan: the same slots, no candidate (a PyTorch-format candidate's spec and
	 * `candidate` entry are the runner's), a library it is never told to load. */
	json_object_del(plan, "candidate");
	json_object_set_new(plan, "library", json_string("/nonexistent/reference-never-loads.so"));
	json_object_set_new(plan, "spec",
			    json_pack("{s:[], s:[], s:[{s:s, s:s, s:[i]}]}", "args", "params",
				      "outputs", "name", "out", "dtype", "float32", "shape", 1));
	pathf(plan_path, sizeof plan_path, "%s/reference-plan.json", r->dir);
	bad = json_dump_file(plan, plan_path, JSON_COMPACT) != 0;
	json_decref(plan);
	if (bad) {
		set_reason(r, "internal", "cannot write %s", plan_path);
		return -1;
	}
	ro.env_add = env;
	pathf(r->twin_err_path, sizeof r->twin_err_path, "%s/reference.stderr", r->dir);
	if (ca_child_spawn(&r->twin_child, argv, &ro, r->twin_err_path, &d)) {
		set_reason(r, "env.no_worker", "cannot start the reference process: %s", d.msg);
		return -1;
	}
	r->twin_started = true;
	cand_proc_init(&r->twin, &r->twin_child, true, limit, r->twin_err_path);
	return 0;
}

/* On a GPU the candidate's process and its reference process start on one CPU claimed for this
 * evaluation (eval/cpu_claim.h says why); the supervisor's thread leaves that CPU to them. */
static void pin_begin(struct run *r, bool twin)
{
	char base[PATH_MAX], dir[PATH_MAX];
	struct ca_diag d = {{0}};
	if (!twin || !cpu_claim_wanted() || runs_base(base, sizeof base, &d) ||
	    pathf(dir, sizeof dir, "%s/cpu-claims", base) || ca_mkdirs(base, 0700, &d) ||
	    cpu_claim_take(&r->cpu, dir) || cpu_claim_pin_spawn(&r->cpu))
		cpu_claim_release(&r->cpu);
}

/* After the spawns: the supervisor's thread runs on every other CPU it had. */
static void pin_spawned(struct run *r)
{
	if (r->cpu.cpu < 0)
		return;
	cpu_claim_leave(&r->cpu);
	ca_log_info("the candidate's and the reference process run on CPU %d%s", r->cpu.cpu,
		    r->cpu.lock_fd < 0 ? " (shared with other evaluations)" : "");
}

/* Waits for the reference process's hello: after the candidate's process is spawned, so that
 * the two make their CUDA contexts at the same time. */
static int twin_hello(struct run *r)
{
	struct loop_fail f = {0};
	if (cand_proc_hello(&r->twin, &f)) {
		char tail[1024];
		stderr_tail(r->twin_err_path, tail, sizeof tail);
		set_reason(r, "env.no_worker", "the reference process did not start: %s%s%s",
			   f.message, tail[0] ? ": " : "", tail);
		return -1;
	}
	return 0;
}

/* Sends the reference process `quit` without waiting, so that it ends while the candidate's
 * process does (each takes about 0.1 s to tear its CUDA context down). */
static void twin_quit(struct run *r)
{
	struct loop_fail f = {0};
	if (r->twin_started && !r->twin_quitting && !r->twin.dead && !r->twin.timed_out)
		r->twin_quitting = cand_proc_send(&r->twin, WIRE_CMD_QUIT, NULL, &f) == 0;
}

static void twin_finish(struct run *r)
{
	struct loop_fail f = {0};
	struct ca_run_result fate;
	json_t *ans = NULL;
	bool clean = false;
	if (!r->twin_started)
		return;
	r->twin_started = false;
	if (r->twin_quitting)
		clean = cand_proc_wait(&r->twin, &ans, &f) == 0;
	else if (!r->twin.dead && !r->twin.timed_out)
		clean = cand_proc_command(&r->twin, WIRE_CMD_QUIT, NULL, &ans, &f) == 0;
	r->twin_quitting = false;
	cand_proc_resume(&r->twin);
	memset(&fate, 0, sizeof fate);
	ca_child_finish(&r->twin_child, clean ? 10.0 : 0.5, &fate);
	cand_proc_free(&r->twin);
}

/* Starts the candidate's process: per-run copies of what was built, the slots, the plan and the
 * spawn; then, before any candidate code is loaded, the calibration of the timed loop (trusted:
 * nothing of the candidate runs in the process yet); then the load. */
static int step_start(struct run *r)
{
	char worker[PATH_MAX] = "", plan_path[PATH_MAX], lib_dir[PATH_MAX], pp_env[PATH_MAX + 16];
	struct sandbox_bind binds[SPAWN_MAX_BINDS];
	struct ca_diag d = {{0}};
	struct loop_fail f = {0};
	bool native = r->format == CANDIDATE_NATIVE;
	double t0 = ca_now();
	/* The watchdog counts the process's own running time only (it is stopped otherwise) */
	double limit = r->o->worker_timeout_s > 0
			       ? r->o->worker_timeout_s
			       : 60.0 + (r->timing_wanted ? 2.0 * r->o->protocol.timing.budget_s : 0);
	const struct python_runtime *rt = NULL;
	json_t *plan, *ans = NULL;
	int rc, nb = 0;

	if (copy_build_outputs(r, &d)) {
		set_reason(r, "internal", "cannot copy the built library into the run directory: %s",
			   d.msg);
		return -1;
	}
	if (!native && !(rt = session_runtime(r, &d))) {
		set_reason(r, "env.bridge", "cannot use the Python runtime: %s", d.msg);
		return -1;
	}
	if (data_open(r))
		return -1;
	/* The native worker runs native candidates, and on a GPU every candidate's reference
	 * process (twin_start) */
	bool twin = r->data.dev.kind == DEVICE_CUDA;
	if ((native || twin) && (find_worker(r, worker, sizeof worker) || !ca_is_file(worker))) {
		set_reason(r, "env.no_worker",
			   "the GPU worker %s%s is not built (build on a machine with nvcc: make)",
			   worker, native ? "" : " (the reference process)");
		return -1;
	}
	{
		json_t *g = json_pack("{s:s, s:s, s:i, s:I, s:I}", "gpu", r->data.dev.name,
				      "pci_bus_id", r->data.dev.pci_bus_id, "sm_count",
				      r->data.dev.sm_count, "l2_bytes",
				      (json_int_t)r->data.dev.l2_bytes, "memory_bytes",
				      (json_int_t)r->data.dev.total_mem);
		char cc[16], drv[16];
		snprintf(cc, sizeof cc, "%d.%d", r->data.dev.cc_major, r->data.dev.cc_minor);
		snprintf(drv, sizeof drv, "%d.%d", r->data.dev.driver_version / 1000,
			 r->data.dev.driver_version % 1000 / 10);
		json_object_set_new(g, "compute_capability", json_string(cc));
		json_object_set_new(g, "cuda_driver", json_string(drv));
		json_object_set_new(g, "driver", r->data.dev.nvml.driver[0]
							 ? json_string(r->data.dev.nvml.driver)
							 : json_null());
		json_object_set_new(g, "sm_clock_mhz",
				    device_sm_clock(&r->data.dev) >= 0
					    ? json_integer(device_sm_clock(&r->data.dev))
					    : json_null());
		json_decref(r->env_gpu);
		r->env_gpu = g;
	}
	plan = make_plan(r);
	pathf(plan_path, sizeof plan_path, "%s/plan.json", r->dir);
	pathf(r->err_path, sizeof r->err_path, "%s/candidate.stderr", r->dir);
	pathf(lib_dir, sizeof lib_dir, "%s/lib", r->dir);
	if (json_dump_file(plan, plan_path, JSON_COMPACT) != 0) {
		set_reason(r, "internal", "cannot write %s", plan_path);
		json_decref(plan);
		return -1;
	}
	json_decref(plan);
	const char *native_argv[] = {worker, plan_path, NULL};
	const char *py_argv[] = {rt ? rt->exe : "", "-B", "-m", "cuda_agent_bridge.runner",
				 plan_path, NULL};
	char inductor_env[PATH_MAX + 48], triton_env[PATH_MAX + 48];
	/* torch makes its compiler caches (/tmp/torchinductor_<user>) on import: in work/, not in
	 * the scratch /tmp where any file is the candidate's. */
	snprintf(inductor_env, sizeof inductor_env, "TORCHINDUCTOR_CACHE_DIR=%s/torch-cache",
		 r->work);
	snprintf(triton_env, sizeof triton_env, "TRITON_CACHE_DIR=%s/triton-cache", r->work);
	const char *py_env[] = {pp_env,	      python_env_fixed[0], python_env_fixed[1],
				python_env_fixed[2], inductor_env,	   triton_env,
				NULL};
	if (native) {
		binds[nb++] = (struct sandbox_bind){.src = worker};
		binds[nb++] = (struct sandbox_bind){.src = plan_path};
		if (r->sandboxed)
			binds[nb++] = (struct sandbox_bind){.src = lib_dir};
	} else {
		const char *more[] = {plan_path, lib_dir, r->task.dir, r->cand_path, NULL};
		nb = python_binds(rt, more, binds, SPAWN_MAX_BINDS, pp_env, sizeof pp_env);
	}
	pin_begin(r, twin);
	if (twin && twin_start(r, worker, limit)) {
		cpu_claim_release(&r->cpu);
		return -1;
	}
	rc = spawn_candidate(r, native ? native_argv : py_argv, binds, (size_t)nb,
			     native ? NULL : py_env, r->err_path, limit, &r->sb, &r->child, &d);
	pin_spawned(r);
	data_release_fds(r); /* the process holds its own copies now */
	if (rc) {
		set_reason(r, r->sandboxed ? "env.sandbox" : "env.no_worker",
			   "cannot start the %s%s: %s", native ? "GPU worker" : "PyTorch runner",
			   r->sandboxed ? " in the sandbox" : "", d.msg);
		return -1;
	}
	r->proc_started = true;
	if (r->sandboxed)
		r->isolation = sandbox_report_json(&r->sb.report);
	cand_proc_init(&r->proc, &r->child, true, limit, r->err_path);
	cand_loop_init(r);
	if (twin && twin_hello(r))
		return -1;
	if (cand_proc_hello(&r->proc, &f) || loop_calibrate(&r->loop, LOOP_CALIBRATION_RUNS, &f) ||
	    cand_proc_command(&r->proc, WIRE_CMD_LOAD, NULL, &ans, &f)) {
		reason_from_fail(r, &f);
		return -1;
	}
	note_seconds(r, "start", t0);
	return 0;
}

/* Ends the candidate's process: `quit` (ca_teardown) when it is healthy, then the sandbox's
 * verdicts (a seccomp kill, the memory limit, files left in its /tmp or /dev/shm). */
static void step_finish(struct run *r, bool quit)
{
	struct ca_run_result fate;
	struct ca_diag d = {{0}};
	struct loop_fail f = {0};
	json_t *ans = NULL;
	bool clean = false;
	double t0 = ca_now();

	twin_quit(r);
	if (!r->proc_started) {
		twin_finish(r);
		return;
	}
	r->proc_started = false; /* once, even when called again from reason_from_fail */
	memset(&fate, 0, sizeof fate);
	if (quit && !r->proc.dead && !r->proc.timed_out && !r->proc.flooded) {
		clean = cand_proc_command(&r->proc, WIRE_CMD_QUIT, NULL, &ans, &f) == 0;
		if (!clean && strcmp(f.code, "fault.crash") != 0)
			set_reason(r, f.code, "ending the candidate (ca_teardown): %s", f.message);
	}
	cand_proc_resume(&r->proc); /* a stopped process must run to exit */
	if (r->sandboxed) {
		r->sb.child = r->child;
		sandbox_finish(&r->sb, clean ? 10.0 : 0.5, &fate);
		if (r->sb.oom_killed)
			set_reason(r, "fault.host_oom",
				   "the candidate's process exceeded the sandbox's memory limit and was "
				   "killed");
		if (sandbox_killed_by_seccomp(&r->sb, &fate))
			set_reason(r, "sandbox.violation",
				   "the candidate made a system call the sandbox forbids (seccomp "
				   "killed the worker with SIGSYS): process creation (fork, clone "
				   "without CLONE_THREAD), exec, sockets other than AF_UNIX, mount, "
				   "ptrace, io_uring, namespaces, memory both writable and executable, "
				   "... are not allowed");
	} else {
		ca_child_finish(&r->child, clean ? 10.0 : 0.5, &fate);
	}
	if (r->proc.timed_out)
		set_reason(r, "timeout",
			   "the candidate did not finish within the %.0f s watchdog limit and was "
			   "killed",
			   r->proc.limit_s);
	/* A process that named its fatal error (the reason) exits 1: that is no crash. */
	if (!clean && !r->proc.fatal &&
	    (r->proc.dead || (quit && !r->proc.timed_out && !r->proc.flooded))) {
		char tail[1024], how[128];
		stderr_tail(r->err_path, tail, sizeof tail);
		ca_run_describe(&fate, how, sizeof how);
		set_reason(r, "fault.crash", "the candidate's process died (%s)%s%s", how,
			   tail[0] ? ": " : "", tail);
	}
	/* Files in the sandbox's /tmp or /dev/shm: after everything above, which names a more
	 * specific cause; set before the result is made, it fails a run that was correct. */
	if (r->sandboxed) {
		char list[1024];
		size_t found = 0;
		if (sandbox_scratch_check(&r->sb, &found, list, sizeof list, &d) != 0)
			set_reason(r, "internal", "cannot check the worker's /tmp and /dev/shm: %s",
				   d.msg);
		else if (found)
			set_reason(r, "sandbox.violation",
				   "the candidate created files outside its outputs: %s (candidates "
				   "may not write files)",
				   list);
	}
	cand_proc_free(&r->proc);
	twin_finish(r);
	note_seconds(r, "finish", t0);
}

/* ---- baselines and the timing result ----------------------------------------------------------- */


static int open_cache(struct run *r)
{
	struct ca_diag d = {{0}};
	if (r->s->cache_open)
		return 0;
	if (baseline_cache_open(&r->s->cache, r->o->baseline_db, &d)) {
		ca_log_warn("baseline cache unavailable (%s); baselines will be measured", d.msg);
		return -1;
	}
	r->s->cache_open = true;
	return 0;
}

static struct baseline_key baseline_key_of(const struct run *r)
{
	return (struct baseline_key){r->task.hash, r->s->bridge.gpu_name,
				     r->s->bridge.torch_version, CA_PROTOCOL_VERSION};
}

/* The cached baselines (the caller owns them), or NULL when they must be measured. */
static json_t *cached_baselines(struct run *r)
{
	struct baseline_key key = baseline_key_of(r);
	struct ca_diag d = {{0}};
	json_t *baselines = NULL;
	if (open_cache(r) != 0 || r->o->refresh_baselines ||
	    baseline_cache_get(&r->s->cache, &key, &baselines, &d) != 0)
		return NULL;
	return baselines;
}

/* Looks the baselines up (kept in r for step_baselines). When this evaluation will measure
 * them, the bridge starts importing torch.compile's machinery now (op preload), so that the
 * import overlaps reference data and the worker. Not otherwise: the import competes for the
 * bridge's GIL for seconds (docs/protocol.md). */
static void step_preload(struct run *r)
{
	json_t *req, *res = NULL;
	struct ca_diag d = {{0}};
	char code[64];
	if (!r->timing_wanted)
		return;
	r->cached_baselines = cached_baselines(r);
	if (r->cached_baselines)
		return;
	req = json_object();
	if (bridge_call(&r->s->bridge, "preload", req, 30.0, &res, code, sizeof code, &d))
		ca_log_warn("torch bridge (preload): %s", d.msg);
	json_decref(req);
	json_decref(res);
}

static double median_of(const json_t *t)
{
	const json_t *v = json_object_get(t, "median_ms");
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

/* The timing object: the candidate's loop (also when it failed: what was measured up to the
 * failure), then, for a correct candidate, the baselines. */
static void step_timing_result(struct run *r)
{
	json_t *timing = json_object(), *baselines = NULL, *cand;
	bool cached = false;

	json_object_set_new(r->result, "timing", timing);
	cand = timing_summary(&r->timing, &r->loop.cal, r->data.flush_bytes);
	json_object_set_new(timing, "candidate", cand);
	json_object_set_new(timing, "method",
			    json_string("per call: the candidate's CUDA-event time, kept where it "
					"agrees with the supervisor's own clock around the call (its "
					"process stopped between calls, its GPU work drained by a probe "
					"from the supervisor's context); median over calls"));
	json_object_set_new(timing, "l2_flush_bytes", json_integer((json_int_t)r->data.flush_bytes));
	json_object_set_new(timing, "checks",
			    json_pack("{s:i, s:i, s:b, s:i, s:O}", "special", r->timing.special_checks,
				      "spot", r->timing.spot_checks, "final", r->timing.final_done,
				      "failed", r->timing.checks_failed, "calls",
				      r->timing.checks ? r->timing.checks : json_null()));
	if (strcmp(reason_code(r), "ok") != 0)
		return;
	if (step_baselines(r, &baselines, &cached) != 0)
		return;
	json_t *eager = json_object_get(baselines, "eager");
	json_t *compiled = json_object_get(baselines, "compile");
	json_object_set(timing, "eager", eager);
	json_object_set_new(timing, "compile", compiled && !json_object_get(compiled, "code")
						       ? json_incref(compiled)
						       : json_pack("{s:O?}", "error",
								   json_object_get(compiled,
										   "error")));
	json_object_set_new(timing, "baselines_cached", json_boolean(cached));
	json_decref(baselines);
	if (r->proc_started && !r->proc.dead && strcmp(reason_code(r), "ok") == 0)
		(void)step_decide(r, timing); /* a failure sets the reason */
}


/* A baseline's time for the reward: its median, or, where it was re-timed interleaved with the
 * candidate at a threshold, the candidate's median times the rounds' median speed-up (so the
 * speed-up the reward sees is the interleaved one). */
static double decided_baseline(const json_t *timing, const char *mode, double t_candidate)
{
	const json_t *inter = json_object_get(
		json_object_get(json_object_get(timing, "decision"), mode), "interleaved");
	const json_t *s = json_object_get(inter, "speedup");
	if (json_is_number(s) && json_number_value(s) > 0 && t_candidate > 0)
		return t_candidate * json_number_value(s);
	return median_of(json_object_get(timing, mode));
}

static void step_reward(struct run *r)
{
	json_t *timing = json_object_get(r->result, "timing");
	struct reward_input in = {0};
	struct reward_output out;
	if (!reason_judged(reason_code(r))) {
		json_object_set_new(r->result, "reward", json_null());
		json_object_set_new(r->result, "reward_continuous", json_null());
		json_object_set_new(r->result, "reward_explanation",
				    json_sprintf("no reward: the evaluation could not judge the "
						 "candidate (%s is the environment's or the task's "
						 "failure, not the candidate's)",
						 reason_code(r)));
		return;
	}
	in.compiled = json_is_true(json_object_get(r->result, "compiled"));
	in.correct = json_is_true(json_object_get(r->result, "correct"));
	in.t_candidate_ms = median_of(json_object_get(timing, "candidate"));
	in.t_eager_ms = decided_baseline(timing, "eager", in.t_candidate_ms);
	in.t_compile_ms = decided_baseline(timing, "compile", in.t_candidate_ms);
	reward_compute(&in, &out);
	if (out.reward == 0) {
		json_object_set_new(r->result, "reward", json_null());
		json_object_set_new(r->result, "reward_continuous", json_null());
	} else {
		json_object_set_new(r->result, "reward", json_integer(out.reward));
		json_object_set_new(r->result, "reward_continuous", json_real(out.continuous));
	}
	if (timing && in.t_candidate_ms > 0) {
		json_object_set_new(timing, "speedup_eager",
				    out.speedup_eager > 0 ? json_real(out.speedup_eager) : json_null());
		json_object_set_new(timing, "speedup_compile",
				    out.speedup_compile > 0 ? json_real(out.speedup_compile)
							    : json_null());
	}
	json_object_set_new(r->result, "reward_explanation", json_string(reward_explain(&out)));
}

static void step_env(struct run *r)
{
	json_t *env = r->env_gpu ? json_deep_copy(r->env_gpu) : json_object();
	char host[256] = "";
	gethostname(host, sizeof host - 1);
	json_object_set_new(env, "host", json_string(host));
	if (r->cpu.cpu >= 0)
		json_object_set_new(env, "pinned_cpu", json_integer(r->cpu.cpu));
	if (r->s->bridge_started && r->s->bridge.ready) {
		json_object_set_new(env, "torch", json_string(r->s->bridge.torch_version));
		json_object_set_new(env, "python", json_string(r->s->bridge.python_version));
		json_object_set_new(env, "bridge_device", json_string(r->s->bridge.device));
	}
	if (r->timed) {
		json_object_set_new(env, "sm_clock_mhz_before",
				    r->timing.sm_clock_before >= 0
					    ? json_integer(r->timing.sm_clock_before)
					    : json_null());
		json_object_set_new(env, "sm_clock_mhz_after",
				    r->timing.sm_clock_after >= 0 ? json_integer(r->timing.sm_clock_after)
								  : json_null());
	}
	json_object_set_new(r->result, "env", env);
}

static void step_profile_result(struct run *r)
{
	json_t *prof = json_object();
	const json_t *cand = json_object_get(json_object_get(r->result, "timing"), "candidate");
	double t_ms = median_of(cand);
	double bytes = 0;

	if (r->profile_event) {
		json_object_set(prof, "kernels", json_object_get(r->profile_event, "kernels"));
		json_object_set(prof, "total_ns", json_object_get(r->profile_event, "total_ns"));
	}
	if (!r->profile_event || json_object_get(r->profile_event, "code")) {
		const char *msg = json_string_value(json_object_get(r->profile_event, "message"));
		json_object_set_new(prof, "error",
				    json_string(msg ? msg : "no CUPTI profile was produced"));
	}
	json_object_set_new(prof, "resources",
			    json_deep_copy(json_object_get(json_object_get(r->result, "build"),
							   "resources")));
	for (int i = 0; i < r->spec.num_args; i++)
		bytes += (double)tensor_spec_nbytes(&r->spec.args[i]);
	for (int i = 0; i < r->spec.num_params; i++)
		bytes += (double)tensor_spec_nbytes(&r->spec.params[i]);
	for (int i = 0; i < r->spec.num_outputs; i++)
		bytes += (double)tensor_spec_nbytes(&r->spec.outputs[i]);
	json_object_set_new(prof, "min_bytes", json_real(bytes));
	if (t_ms > 0) {
		double achieved = bytes / (t_ms * 1e-3) / 1e9;
		const json_t *peak = json_object_get(r->profile_event, "peak_copy_gbps");
		json_object_set_new(prof, "achieved_gbps", json_real(achieved));
		if (json_is_number(peak) && json_number_value(peak) > 0) {
			json_object_set(prof, "peak_copy_gbps", (json_t *)peak);
			json_object_set_new(prof, "fraction_of_peak",
					    json_real(achieved / json_number_value(peak)));
		}
	}
	json_object_set_new(r->result, "profile", prof);
}

static json_t *new_result(const struct eval_opts *o)
{
	static const char *const modes[] = {"compile", "verify", "profile", "eval"};
	return json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s}, s:s, s:n, s:n, s:n, s:n, "
			 "s:{s:s, s:s}}",
			 "schema", CA_RESULT_SCHEMA, "mode", modes[o->mode], "task", "dir",
			 o->task_dir ? o->task_dir : "", "candidate", "format", "native", "dir",
			 o->candidate_dir ? o->candidate_dir : "", "rules",
			 torch_profile_name(o->rules), "reward", "reward_continuous", "compiled",
			 "correct", "reason", "code", "ok", "message", "");
}

static void run_free(struct run *r)
{
	step_finish(r, false);
	cpu_claim_release(&r->cpu);
	data_close(r);
	if (r->dir[0] && !r->o->keep_run_dir)
		ca_remove_tree(r->dir, NULL);
	if (r->task_loaded)
		task_free(&r->task);
	if (r->spec_loaded)
		task_spec_free(&r->spec);
	loop_result_free(&r->timing);
	json_decref(r->spec_json);
	json_decref(r->env_gpu);
	json_decref(r->profile_event);
	json_decref(r->cached_baselines);
	json_decref(r->trials);
	json_decref(r->audit);
	json_decref(r->isolation);
	json_decref(r->modules);
	json_decref(r->inline_modules);
}

/* Whether the protocol may run with the bridge on the CPU (tests without a GPU; PyTorch formats
 * only: timings there mean nothing). */
static bool cpu_protocol(void)
{
	const char *v = getenv("CUDA_AGENT_PROTOCOL_CPU");
	return v && strcmp(v, "1") == 0;
}

int eval_run(struct eval_session *s, const struct eval_opts *o, json_t **result,
	     struct ca_diag *d)
{
	struct run *rp = calloc(1, sizeof *rp);
	struct ca_diag td = {{0}};
	int rc;

	*result = NULL;
	if (!rp)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	struct run *r = rp;
	if (!o->task_dir || !o->candidate_dir) {
		free(rp);
		return ca_fail(d, CA_ERR_INVALID, "a task directory and a candidate are required");
	}
	rc = eval_protocol_validate(&o->protocol, d);
	if (rc) {
		free(rp);
		return rc;
	}
	if (o->protocol.rotation_sets > RUN_MAX_INPUTS || o->protocol.trials > RUN_MAX_TRIALS ||
	    o->protocol.timing.checks > RUN_MAX_CHECKS) {
		free(rp);
		return ca_fail(d, CA_ERR_LIMIT, "at most %d rotation sets, %d trials, %d checks",
			       RUN_MAX_INPUTS, RUN_MAX_TRIALS, RUN_MAX_CHECKS);
	}
	r->s = s;
	r->o = o;
	r->t_start = ca_now();
	r->result = new_result(o);
	r->seconds = json_object();
	r->trials = json_array();
	json_object_set(r->result, "seconds", r->seconds);
	r->timing_wanted = o->mode == EVAL_FULL || o->mode == EVAL_PROFILE;
	r->sandboxed = o->sandbox;
	r->profile_wanted = o->mode == EVAL_PROFILE;
	for (int k = 0; k < o->protocol.trials; k++)
		r->trial_seeds[k] = secret_seed();
	r->timing_model_seed = secret_seed();
	cpu_claim_init(&r->cpu);
	for (int i = 0; i < o->protocol.rotation_sets; i++)
		r->rotation_seeds[i] = secret_seed();
	for (int i = 0; i < o->protocol.timing.checks; i++)
		r->check_seeds[i] = secret_seed();
	r->final_seed = secret_seed();
	r->loop_seed = secret_seed();
	r->audit_seed = secret_seed();

	if (task_load(&r->task, o->task_dir, &td)) {
		set_reason(r, "task.invalid", "%s", td.msg);
		goto out;
	}
	r->task_loaded = true;
	json_object_set_new(r->result, "task",
			    json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:f, s:f}", "id", r->task.id,
				      "source", r->task.source, "level",
				      r->task.level >= 0 ? json_integer(r->task.level) : json_null(),
				      "dir", r->task.dir, "hash", r->task.hash, "precision",
				      task_precision_name(r->task.precision), "atol", r->task.atol,
				      "rtol", r->task.rtol));
	/* Import torch (seconds) while nvcc compiles. */
	if (o->mode != EVAL_COMPILE && eval_session_warm(s, &td))
		ca_log_warn("torch bridge: %s", td.msg);
	if (step_build(r))
		goto out;
	if (o->mode == EVAL_COMPILE) {
		json_object_set_new(r->result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      r->format == CANDIDATE_NATIVE
						      ? "compiled; the library passed the symbol and "
							"source checks"
					      : r->rules == TORCH_PROFILE_KERNELBENCH
						      ? "compiled into a PyTorch extension (kernelbench "
							"rules: torch compute is allowed when it runs)"
						      : "compiled into a PyTorch extension (torch "
							"compute is refused when it runs)"));
		goto out;
	}
	if (step_bridge_ready(r) || step_describe(r))
		goto out;
	if (strcmp(s->bridge.device, "cuda") != 0 &&
	    !(cpu_protocol() && r->format != CANDIDATE_NATIVE)) {
		set_reason(r, "env.no_gpu",
			   "no CUDA GPU here: the candidate compiled and passed the library checks "
			   "and the task is valid; verification and timing need a GPU");
		goto out;
	}
	step_preload(r);
	if (make_run_dirs(r) || step_start(r))
		goto out;
	ca_log_info("running %d verification trials%s", o->protocol.trials,
		    r->timing_wanted ? ", then timing" : "");
	if (step_verify(r) == 0 && r->timing_wanted && step_time_candidate(r) == 0 &&
	    r->profile_wanted)
		step_profile(r);
	/* The baselines, and a re-timing at a threshold, while the candidate's process is still
	 * there (stopped: its watchdog counts only the time it runs). */
	if (r->timed)
		step_timing_result(r);
	step_finish(r, true);
	if (r->profile_wanted && r->verify_ok)
		step_profile_result(r);
	data_close(r);
	if (strcmp(reason_code(r), "ok") == 0) {
		json_object_set_new(r->result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      o->mode == EVAL_VERIFY
						      ? "correct on every verification trial"
						      : "correct; timed against eager and "
							"torch.compile"));
	}
out:
	json_object_set(r->result, "trials", r->trials);
	if (r->audit)
		json_object_set(r->result, "audit", r->audit);
	/* correct: true or false once the candidate ran; null when it was never judged */
	if (json_array_size(r->trials) > 0 || strcmp(reason_code(r), "ok") != 0) {
		bool judged = reason_judged(reason_code(r)) &&
			      json_is_true(json_object_get(r->result, "compiled"));
		json_object_set_new(r->result, "correct",
				    !judged ? json_null()
					    : json_boolean(strcmp(reason_code(r), "ok") == 0));
	}
	if (o->mode == EVAL_COMPILE)
		json_object_set_new(r->result, "correct", json_null());
	if (o->mode != EVAL_COMPILE)
		step_reward(r);
	step_env(r);
	if (r->isolation) {
		json_object_set_new(r->isolation, "separate_process", json_true());
		json_object_set_new(r->isolation, "reference_outputs_hidden", json_true());
		json_object_set(r->result, "isolation", r->isolation);
	} else {
		json_object_set_new(
			r->result, "isolation",
			json_pack("{s:b, s:b, s:b, s:b, s:b, s:s}", "sandbox", 0, "separate_process",
				  1, "reference_outputs_hidden", 1, "namespaces", 0, "seccomp", 0,
				  "note", "the sandbox was turned off (--no-sandbox or "
				  "CUDA_AGENT_SANDBOX=0): the candidate runs in its own process, stopped "
				  "between calls, with its data in GPU memory the bridge owns, but "
				  "nothing limits its system calls or what files it can read"));
	}
	json_object_set_new(r->seconds, "total", json_real(ca_now() - r->t_start));
	if (r->dir[0] && o->keep_run_dir)
		json_object_set_new(r->result, "run_dir", json_string(r->dir));
	json_object_set_new(r->result, "summary", json_string(""));
	{
		char *text = eval_summary_text(r->result);
		if (text)
			json_object_set_new(r->result, "summary", json_string(text));
		free(text);
	}
	*result = r->result;
	json_decref(r->seconds);
	run_free(r);
	free(rp);
	return 0;
}


int eval_exit_code(const json_t *result)
{
	return reason_exit_code(
		json_string_value(json_object_get(json_object_get(result, "reason"), "code")));
}