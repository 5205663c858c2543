/* spawn: the candidate's process and its reference process (eval/run.h): run directories, the
 * plan, the sandboxed spawn, the shared CPU, calibration and load (step_start), and their end
 * (step_finish). */
#include "eval/run.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "protocol/wire.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/timeline.h"
#include "util/str.h"
#include "util/pylaunch.h"

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
		    ca_format(path, sizeof path, "%s/%s", base, ent->d_name) ||
		    lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || now - st.st_mtime < 86400)
			continue;
		ca_log_debug("removing stale run directory %s", path);
		ca_remove_tree(path, NULL);
	}
	closedir(dp);
}

int make_run_dirs(struct run *r)
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
	    ca_format(r->work, sizeof r->work, "%s/work", r->dir) || ca_mkdirs(r->work, 0755, &d)) {
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
	return ca_format(out, size, "%scuda-agent-worker", exe);
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

int spawn_candidate(struct run *r, const char *const *argv,
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
	if (ca_format(scratch_tmp, sizeof scratch_tmp, "%s/scratch-tmp", r->dir) ||
	    ca_format(scratch_shm, sizeof scratch_shm, "%s/scratch-shm", r->dir))
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
const struct python_runtime *session_runtime(struct run *r, struct ca_diag *d)
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

const struct python_runtime *session_torch_view(struct run *r, struct ca_diag *d)
{
	if (!session_runtime(r, d))
		return NULL;
	if (!r->s->py->view_ready && python_torch_view(session_python(r->s), r->s->py, d))
		return NULL;
	return r->s->py;
}

/* Binds and environment of `python -m cuda_agent_bridge.runner`: the runtime's
 * directories, then `more`, then with `view` the kernel-free torch libraries over their
 * originals (after the directories that hold them: a later mount covers an earlier one).
 * Returns the number of binds. */
int python_binds(const struct python_runtime *rt, const char *const *more, bool view,
		 struct sandbox_bind *binds, size_t cap, char *pp_env, size_t pp_size)
{
	size_t n = 0;
	for (int i = 0; i < rt->n_dirs && n < cap; i++)
		binds[n++] = (struct sandbox_bind){.src = rt->dirs[i]};
	for (size_t i = 0; more[i] && n < cap; i++)
		binds[n++] = (struct sandbox_bind){.src = more[i]};
	for (int i = 0; view && i < rt->n_masks && n < cap; i++)
		binds[n++] = (struct sandbox_bind){.src = rt->masks[i].src, .dst = rt->masks[i].dst};
	if (ca_pythonpath_env(pp_env, pp_size, rt->package_dir, PYTHONPATH_OURS, NULL, NULL))
		pp_env[0] = '\0'; /* cannot happen: pp_size holds a PATH_MAX path */
	return (int)n;
}

const char *const python_env_fixed[] = {"PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1",
					       "PYTHONHASHSEED=0"};

/* A copy of a built library in the run's lib/ directory, readable by the sandbox's uid (the
 * build cache under the home directory is not visible in the sandbox). */
static int copy_built(struct run *r, const char *src, const char *name, char *dst, size_t size,
		      struct ca_diag *d)
{
	char dir[PATH_MAX];
	char *data = NULL;
	size_t len = 0;
	int rc;
	if (ca_format(dir, sizeof dir, "%s/lib", r->dir) || ca_format(dst, size, "%s/%s", dir, name))
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
		return r->sandboxed || r->build_bg.started ? copy_built(r, r->build.library, "candidate.so", r->library,
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
	/* module_mode: the bridge's Model runs in the same one (run_module_mode) */
	json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s}", "format",
			      candidate_format_name(r->format), "task_dir", r->task.dir, "torch_device",
			      r->data.dev.kind == DEVICE_CPU ? "cpu" : "cuda", "rules",
			      torch_profile_name(r->rules), "init_seed",
			      (json_int_t)RUN_TORCH_INIT_SEED, "module_mode", run_module_mode(r));
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

/* The reference process (protocol/loop.h, LOOP_SEND_REF; eval/twin.h): the session's, kept from
 * the evaluations before when it is healthy, else the native worker spawned now from a plan
 * without library, spec or slots (just before the candidate's process, so that the two make
 * their CUDA contexts at once). No candidate code ever runs in it. Outside the sandbox: it is
 * trusted code, and the offset between its empty calls and the candidate's process's is
 * calibrated before any candidate code is loaded. A kept one is moved to the claimed CPU. */
static int twin_start(struct run *r, const char *worker, double limit, bool *fresh)
{
	struct eval_twin *t = &r->s->twin;
	char base[PATH_MAX];
	struct ca_diag d = {{0}};
	if (runs_base(base, sizeof base, &d) == 0 &&
	    eval_twin_take(t, worker, base, limit, fresh, &d) == 0 &&
	    (*fresh || eval_twin_pin(t, r->cpu.cpu) == 0)) {
		r->twin = t;
		return 0;
	}
	if (t->started) { /* a kept one that could not be moved: a fresh one starts here */
		eval_twin_end(t);
		if (eval_twin_take(t, worker, base, limit, fresh, &d) == 0) {
			r->twin = t;
			return 0;
		}
	}
	set_reason(r, "env.no_worker", "cannot start the reference process: %s", d.msg);
	return -1;
}

/* Claims the CPU (eval/cpu_claim.h); 0, or -1 with nothing claimed. */
static int claim_cpu(struct run *r, enum cpu_pin want)
{
	char base[PATH_MAX], dir[PATH_MAX];
	struct ca_diag d = {{0}};
	if (runs_base(base, sizeof base, &d) || ca_format(dir, sizeof dir, "%s/cpu-claims", base) ||
	    ca_mkdirs(base, 0700, &d) ||
	    cpu_claim_take(&r->cpu, dir, want == CPU_PIN_FORCE ? 2 : CPU_CLAIM_MIN_CPUS)) {
		cpu_claim_release(&r->cpu);
		return -1;
	}
	return 0;
}

void step_claim_cpu(struct run *r)
{
	enum cpu_pin want = cpu_claim_wanted();
	/* Before the device is open the GPU is known by its control node only; a claim made
	 * without need is given back at the spawn (pin_begin). */
	if (r->cpu.cpu >= 0 || want == CPU_PIN_OFF ||
	    (want == CPU_PIN_AUTO && access("/dev/nvidiactl", F_OK) != 0))
		return;
	if (claim_cpu(r, want) == 0)
		cpu_claim_leave(&r->cpu); /* this thread, and the build thread it starts, go elsewhere */
}

/* On a GPU the candidate's process and its reference process start on one CPU claimed for this
 * evaluation (eval/cpu_claim.h says why); the supervisor's thread leaves that CPU to them. */
static void pin_begin(struct run *r, bool twin)
{
	enum cpu_pin want = cpu_claim_wanted();
	if (want == CPU_PIN_OFF || (want == CPU_PIN_AUTO && !twin)) {
		cpu_claim_release(&r->cpu);
		return;
	}
	if ((r->cpu.cpu >= 0 || claim_cpu(r, want) == 0) && cpu_claim_pin_spawn(&r->cpu))
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

/* Waits for a fresh reference process's hello: after the candidate's process is spawned, so
 * that the two make their CUDA contexts at the same time. */
static int twin_hello(struct run *r)
{
	struct ca_diag d = {{0}};
	char tail[1024];
	if (eval_twin_hello(r->twin, &d) == 0)
		return 0;
	stderr_tail(r->twin->err_path, tail, sizeof tail);
	set_reason(r, "env.no_worker", "the reference process did not start: %s%s%s", d.msg,
		   tail[0] ? ": " : "", tail);
	eval_twin_end(r->twin);
	r->twin = NULL;
	return -1;
}

/* Gives the reference process back to the session (kept when healthy, ended otherwise). */
static void twin_give(struct run *r)
{
	if (r->twin)
		eval_twin_give(r->twin);
	r->twin = NULL;
}

/* The device as the supervisor's own context sees it (the result's env). */
void step_env_gpu(struct run *r)
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

/* The library of a build that still runs: waited for, then copied into the run directory. */
static int load_library(struct run *r)
{
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	if (step_build_wait(r)) {
		step_finish(r, true);
		return -1;
	}
	note_seconds(r, "build_wait", t0);
	if (copy_build_outputs(r, &d)) {
		set_reason(r, "internal", "cannot copy the built library into the run directory: %s",
			   d.msg);
		return -1;
	}
	return 0;
}

/* The runner's `loaded` answer says how ModelNew got its parameters (runner/load.py, pairing):
 * "paired" (the params slot at each setup) or "seeded" (its construction under
 * RUN_TORCH_INIT_SEED; kernelbench rules only). Recorded in the result as "params"; a degenerate
 * task then verified without perturbed parameters says so in task.degenerate. The answer is a
 * claim, but "seeded" buys nothing a state_dict that does not pair would not: the checks then
 * use the reference under the same public seed. 0, or -1 (reason set). */
static int note_params(struct run *r, const json_t *ans)
{
	const json_t *v = json_object_get(ans, "params");
	const char *mode = v ? json_string_value(v) : "paired";
	json_t *task = json_object_get(r->result, "task");
	json_t *deg = json_object_get(task, "degenerate");
	const char *kind = json_string_value(json_object_get(deg, "kind"));
	json_t *copy;
	char msg[512];

	if (!mode || (strcmp(mode, "paired") != 0 && strcmp(mode, "seeded") != 0) ||
	    (strcmp(mode, "seeded") == 0 && r->rules != TORCH_PROFILE_KERNELBENCH)) {
		set_reason(r, "hack.harness_tampering",
			   "the candidate's process answered `load` with params %.64s under the %s "
			   "rules (the runner answers \"paired\", or \"seeded\" under kernelbench)",
			   mode ? mode : "(not a string)", torch_profile_name(r->rules));
		return -1;
	}
	r->params_seeded = strcmp(mode, "seeded") == 0;
	json_object_set_new(r->result, "params", json_string(mode));
	if (!r->params_seeded || !json_is_object(deg) ||
	    !json_is_true(json_object_get(deg, "params_perturbed")))
		return 0;
	/* The describe answer is the session's (reference.c): the result gets its own copy. */
	copy = json_deep_copy(deg);
	if (!copy)
		return 0;
	snprintf(msg, sizeof msg,
		 "the task is degenerate (%s) and was verified WITHOUT perturbed parameters: "
		 "ModelNew's state_dict does not pair with Model's, so both models were built under "
		 "the same seed, as constructed (kernelbench rules); a kernel that does not compute "
		 "can pass verification",
		 kind ? kind : "degenerate");
	json_object_set_new(copy, "params_perturbed", json_false());
	json_object_set_new(copy, "message", json_string(msg));
	json_object_set_new(task, "degenerate", copy);
	ca_log_warn("task %s: %s", r->task.id, msg);
	return 0;
}

/* After the calibration: the library (waiting for a build that still runs), then `load`. */
static int load_candidate(struct run *r)
{
	struct loop_fail f = {0};
	json_t *ans = NULL;
	double t0;
	/* The processes started and calibrated while nvcc compiled; now the library. */
	if (r->build_bg.pending && load_library(r))
		return -1;
	t0 = ca_now();
	if (cand_proc_command(&r->proc, WIRE_CMD_LOAD, NULL, &ans, &f)) {
		reason_from_fail(r, &f);
		return -1;
	}
	note_seconds(r, "load", t0);
	return r->format != CANDIDATE_NATIVE ? note_params(r, ans) : 0;
}

/* Starts the candidate's process: per-run copies of what was built, the slots, the plan and the
 * spawn; then, before any candidate code is loaded, the calibration of the timed loop (trusted:
 * nothing of the candidate runs in the process yet); then the load. */
int step_start(struct run *r)
{
	char worker[PATH_MAX] = "", plan_path[PATH_MAX], lib_dir[PATH_MAX], pp_env[PATH_MAX + 16];
	struct sandbox_bind binds[SPAWN_MAX_BINDS];
	struct ca_diag d = {{0}};
	struct loop_fail f = {0};
	bool native = r->format == CANDIDATE_NATIVE;
	double t0 = ca_now(), t1;
	/* The watchdog counts the process's own running time only (it is stopped otherwise) */
	double limit = r->o->worker_timeout_s > 0
			       ? r->o->worker_timeout_s
			       : 60.0 + (r->timing_wanted ? 2.0 * r->o->protocol.timing.budget_s : 0);
	const struct python_runtime *rt = NULL;
	json_t *plan;
	int rc, nb = 0;

	if (r->build_bg.pending) {
		/* The library's place, known before it is built (copy_build_outputs puts it there) */
		if (ca_format(r->library, sizeof r->library, "%s/lib", r->dir) ||
		    ca_mkdirs(r->library, 0755, &d) ||
		    ca_format(r->library, sizeof r->library, "%s/lib/candidate.so", r->dir)) {
			set_reason(r, "internal", "cannot make the run's lib/ directory: %s", d.msg);
			return -1;
		}
	} else if (copy_build_outputs(r, &d)) {
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
	/* Under the cuda-agent rules on a GPU, the runner sees torch's CUDA libraries without
	 * torch's compute kernels (python/cuda_agent_bridge/torch_view.py): torch compute in
	 * forward() fails however it is reached. It needs the sandbox's mount namespace. */
	bool view = !native && r->rules == TORCH_PROFILE_CUDA_AGENT && r->sandboxed &&
		    (r->o->torch_view > 0 ||
		     (r->o->torch_view < 0 && r->data.dev.kind == DEVICE_CUDA));
	if (!native) {
		json_object_set_new(r->result, "torch_view", json_boolean(view));
	}
	if (view && !(rt = session_torch_view(r, &d))) {
		set_reason(r, "env.bridge", "cannot show the runner torch without its kernels: %s",
			   d.msg);
		return -1;
	}
	/* The native worker runs native candidates, and on a GPU every timed candidate's
	 * reference process (twin_start: only the timed loop's calibration and outside bound use
	 * it, so verification alone starts none) */
	bool twin = r->data.dev.kind == DEVICE_CUDA && r->timing_wanted, twin_fresh = false;
	if ((native || twin) && (find_worker(r, worker, sizeof worker) || !ca_is_file(worker))) {
		set_reason(r, "env.no_worker",
			   "the GPU worker %s%s is not built (build on a machine with nvcc: make)",
			   worker, native ? "" : " (the reference process)");
		return -1;
	}
	step_env_gpu(r);
	plan = make_plan(r);
	ca_format(plan_path, sizeof plan_path, "%s/plan.json", r->dir);
	ca_format(r->err_path, sizeof r->err_path, "%s/candidate.stderr", r->dir);
	ca_format(lib_dir, sizeof lib_dir, "%s/lib", r->dir);
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
	char preload_env[PATH_MAX + 16] = "";
	if (view && rt->preload[0])
		snprintf(preload_env, sizeof preload_env, "LD_PRELOAD=%s", rt->preload);
	/* With the view: lazy module loading (a unit without device code fails at its first
	 * launch, not when the context is made) and the refusal library that torch's renamed
	 * cuBLAS/cuDNN calls resolve to */
	const char *py_env[] = {pp_env,	      python_env_fixed[0], python_env_fixed[1],
				python_env_fixed[2], inductor_env,	   triton_env,
				view ? "CUDA_MODULE_LOADING=LAZY" : NULL, view ? "CA_TORCH_VIEW=1" : NULL,
				preload_env[0] ? preload_env : NULL, NULL};
	if (native) {
		binds[nb++] = (struct sandbox_bind){.src = worker};
		binds[nb++] = (struct sandbox_bind){.src = plan_path};
		if (r->sandboxed)
			binds[nb++] = (struct sandbox_bind){.src = lib_dir};
	} else {
		const char *more[] = {plan_path, lib_dir, r->task.dir, r->cand_path, NULL};
		nb = python_binds(rt, more, view, binds, SPAWN_MAX_BINDS, pp_env, sizeof pp_env);
	}
	double spawned = ca_now();
	pin_begin(r, twin);
	if (twin && twin_start(r, worker, limit, &twin_fresh)) {
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
	if (twin_fresh && twin_hello(r))
		return -1;
	if (cand_proc_hello(&r->proc, &f)) {
		reason_from_fail(r, &f);
		return -1;
	}
	ca_timeline_span("processes", spawned, ca_now()); /* spawned, their CUDA contexts made */
	/* A GPU shared with other evaluations (gpu_stage.h): the build and the processes' start
	 * ran beside theirs; from the calibration on, this evaluation has the GPU to itself. */
	if (getenv("CUDA_AGENT_GPU_LOCK") && r->build_bg.pending && load_library(r))
		return -1;
	(void)gpu_stage_enter(&r->gpu);
	t1 = ca_now();
	if (loop_calibrate(&r->loop, LOOP_CALIBRATION_RUNS, &f)) {
		reason_from_fail(r, &f);
		return -1;
	}
	note_seconds(r, "calibrate", t1);
	note_seconds(r, "start", t0);
	return load_candidate(r);
}

/* Ends the candidate's process: `quit` (ca_teardown) when it is healthy, then the sandbox's
 * verdicts (a seccomp kill, the memory limit, files left in its /tmp or /dev/shm). */
void step_finish(struct run *r, bool quit)
{
	struct ca_run_result fate;
	struct ca_diag d = {{0}};
	struct loop_fail f = {0};
	json_t *ans = NULL;
	bool clean = false;
	double t0 = ca_now();

	if (!r->proc_started) {
		twin_give(r);
		return;
	}
	r->proc_started = false; /* once, even when called again from reason_from_fail */
	memset(&fate, 0, sizeof fate);
	if (quit && !r->proc.dead && !r->proc.timed_out && !r->proc.flooded) {
		clean = cand_proc_command(&r->proc, WIRE_CMD_QUIT, NULL, &ans, &f) == 0;
		ca_timeline_span("finish.quit", t0, ca_now()); /* ca_teardown ran, `done` came */
		if (!clean && strcmp(f.code, "fault.crash") != 0)
			set_reason(r, f.code, "ending the candidate (ca_teardown): %s", f.message);
	}
	cand_proc_resume(&r->proc); /* a stopped process must run to exit */
	double t_exit = ca_now();
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
	ca_timeline_span("finish.exit", t_exit, ca_now()); /* the candidate's process reaped */
	twin_give(r);
	/* The candidate's process is gone (its CUDA context with it; the reference process is
	 * stopped, idle): the GPU is the next evaluation's, while this one looks at what the
	 * candidate left behind. */
	gpu_stage_leave(&r->gpu);
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
	note_seconds(r, "finish", t0);
}
