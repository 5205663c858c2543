#include "eval/eval.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "bridge/bridge.h"
#include "build/build.h"
#include "eval/compare.h"
#include "eval/reward.h"
#include "eval/summary.h"
#include "eval/torch_candidate.h"
#include "sandbox/sandbox.h"
#include "task/task.h"
#include "tensor/safetensors.h"
#include "tensor/spec.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"

#define MAX_TRIALS 100
#define MAX_ROTATION 16
#define MAX_CHECKS 64
#define WORKER_MAX_LINE (8u << 20)
/* The worker's stdout and stderr (the candidate's printf included) beyond this stop the run */
#define WORKER_MAX_OUTPUT (16ull << 20)
#define SLOT_ALIGN 256 /* python/cuda_agent_bridge/slots.py ALIGN */

/* Everything one evaluation owns; released by run_free(). */
struct run {
	struct eval_session *s;
	const struct eval_opts *o;
	json_t *result;
	struct task task;
	bool task_loaded;
	struct build_result build;
	struct task_spec spec;
	bool spec_loaded;
	json_t *spec_json;
	char dir[PATH_MAX];  /* run directory */
	char pub[PATH_MAX];  /* inputs and params: the worker reads these */
	char priv[PATH_MAX]; /* reference outputs: the worker is never told of them */
	char work[PATH_MAX]; /* the worker's outputs */
	uint64_t trial_seeds[MAX_TRIALS];
	uint64_t timing_model_seed, rotation_seeds[MAX_ROTATION], check_seeds[MAX_CHECKS],
		final_seed, plan_seed;
	bool timing_wanted, profile_wanted;
	/* From the worker. */
	json_t *device_event, *timing_event, *profile_event;
	json_t *trials;        /* array, one object per trial */
	char library[PATH_MAX]; /* the library the worker loads (a per-run copy when sandboxed) */
	enum candidate_format format;
	char cand_path[PATH_MAX]; /* what the format works on (kernelbench: the .py file) */
	json_t *modules;          /* torch formats: torch_build's modules ({name, key, library}) */
	json_t *inline_modules;   /* kernelbench: spec key -> the run's copy of the module */
	bool sandboxed;
	json_t *isolation;     /* the sandbox's report, when one was used */
	bool verify_ok;
	double gate_s; /* spent by the supervisor while the worker waited at the gate */
	double data_bytes; /* of every set the worker reads and writes (step_check_space) */
	double output_file_bytes; /* of the outputs of one call: the files the worker writes */
	double set_bytes;         /* inputs, params and outputs of one call */
	/* Device data (eval.h): the runner's output slots, made by the bridge */
	bool device_data;
	bool slots_open;                /* the bridge holds slots for this run */
	int slot_fds[CA_MAX_PASS_FDS];  /* our copies until the runner has its own */
	int n_slots;
	size_t slot_bytes;
	char slot_kind[8];
	json_t *cached_baselines; /* looked up by step_preload, taken by step_baselines */
	double t_start;
	json_t *seconds;
};

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

static void set_reason(struct run *r, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The first reason set wins: it is the cause; later failures are consequences. */
static void set_reason(struct run *r, const char *code, const char *fmt, ...)
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

static const char *reason_code(const struct run *r)
{
	json_t *reason = json_object_get(r->result, "reason");
	const char *c = json_string_value(json_object_get(reason, "code"));
	return c ? c : "";
}

static void note_seconds(struct run *r, const char *what, double since)
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

static json_t *path_json(const char *dir, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static json_t *path_json(const char *dir, const char *fmt, ...)
{
	char name[64], full[PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	if (ca_path_join(full, sizeof full, dir, name))
		return json_null();
	return json_string(full);
}

/* ---- session --------------------------------------------------------------------------- */

void eval_opts_defaults(struct eval_opts *o)
{
	const char *env = getenv("CUDA_AGENT_SANDBOX");
	memset(o, 0, sizeof *o);
	o->mode = EVAL_FULL;
	eval_protocol_defaults(&o->protocol);
	/* The sandbox is on unless CUDA_AGENT_SANDBOX=0 (or --no-sandbox) turns it off. */
	o->sandbox = !(env && strcmp(env, "0") == 0);
}

void eval_session_init(struct eval_session *s, const char *python, const char *device)
{
	memset(s, 0, sizeof *s);
	ca_strlcpy(s->python, python ? python : "", sizeof s->python);
	ca_strlcpy(s->device, device ? device : "auto", sizeof s->device);
	s->bridge_opts.python = s->python[0] ? s->python : NULL;
	s->bridge_opts.device = s->device;
}

int eval_session_warm(struct eval_session *s, struct ca_diag *d)
{
	char cache[PATH_MAX], log[PATH_MAX];
	int rc;
	if (s->bridge_started)
		return 0;
	rc = ca_cache_dir(cache, sizeof cache, d);
	if (rc)
		return rc;
	if (pathf(log, sizeof log, "%s/bridge.log", cache))
		return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	s->bridge_opts.stderr_path = ca_log_get_level() >= CA_LOG_DEBUG ? NULL : log;
	rc = bridge_start(&s->bridge, &s->bridge_opts, d);
	if (rc)
		return rc;
	s->bridge_started = true;
	return 0;
}

void eval_session_close(struct eval_session *s)
{
	if (s->bridge_started)
		bridge_stop(&s->bridge);
	s->bridge_started = false;
	if (s->cache_open)
		baseline_cache_close(&s->cache);
	s->cache_open = false;
	free(s->py);
	s->py = NULL;
}

/* ---- steps ----------------------------------------------------------------------------- */

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
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	const char *args[8];
	int rc;

	if (ca_cache_dir(base, sizeof base, &d) || ca_path_join(cache, sizeof cache, base, "build") ||
	    build_resolve_arch(r->o->arch, arch, sizeof arch, &d)) {
		set_reason(r, "build.internal", "the build could not run: %s", d.msg);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
	if (r->format == CANDIDATE_WORKDIR) {
		args[0] = "workdir";
		args[1] = r->cand_path;
	} else {
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
	rc = torch_build_run(session_python(r->s), args, 900.0, &r->build, &r->modules, &d);
	if (rc) {
		set_reason(r, "build.internal", "the build could not run: %s", d.msg);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
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

static int bridge_request(struct run *r, const char *op, const json_t *req, double timeout_s,
			  json_t **res)
{
	struct ca_diag d = {{0}};
	char code[64];
	int rc = bridge_call(&r->s->bridge, op, req, timeout_s, res, code, sizeof code, &d);
	if (rc == CA_ERR_INVALID && strncmp(code, "task.", 5) == 0) {
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
	json_decref(res);
	return 0;
}

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
	    pathf(r->pub, sizeof r->pub, "%s/public", r->dir) ||
	    pathf(r->priv, sizeof r->priv, "%s/private", r->dir) ||
	    pathf(r->work, sizeof r->work, "%s/work", r->dir) || ca_mkdirs(r->pub, 0755, &d) ||
	    ca_mkdirs(r->priv, 0700, &d) || ca_mkdirs(r->work, 0755, &d)) {
		set_reason(r, "internal", "cannot create the run directory: %s", d.msg);
		return -1;
	}
	return 0;
}

static json_t *set_entry(uint64_t seed, json_t *inputs, json_t *outputs)
{
	return json_pack("{s:I, s:o, s:o}", "seed", (json_int_t)seed, "inputs_path", inputs,
			 "outputs_path", outputs ? outputs : json_null());
}

static int reference_call(struct run *r, uint64_t model_seed, json_t *params_path, json_t *sets)
{
	json_t *req = json_pack("{s:s, s:I, s:o, s:o}", "task_dir", r->task.dir, "model_seed",
				(json_int_t)model_seed, "params_path", params_path, "sets", sets);
	json_t *res = NULL;
	int rc = bridge_request(r, "reference", req, 600.0, &res);
	json_decref(req);
	json_decref(res);
	return rc;
}

/* Reference data: per trial its own model seed and input seed; for timing one model seed,
 * rotation sets (no outputs needed), checked sets and a final set (outputs kept private). */
static double spec_bytes(const struct tensor_spec *t, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += (double)tensor_spec_nbytes(&t[i]);
	return sum;
}

/* Sizes of an evaluation's data in bytes, once the spec is known; also recorded in r
 * (data_bytes, set_bytes, output_file_bytes) for the watchdog and the sandbox limits.
 * out_copies is how many copies of one call's outputs each set holds (files: the reference's
 * and the worker's; device data: the slot the runner writes and the bridge compares). */
struct data_sizes {
	double trials; /* the verification trials' sets together */
	double timing; /* params, rotation sets, checked and final sets (0 without timing) */
};

static struct data_sizes data_sizes_of(struct run *r, int out_copies)
{
	const struct eval_protocol *p = &r->o->protocol;
	double in = spec_bytes(r->spec.args, r->spec.num_args);
	double par = spec_bytes(r->spec.params, r->spec.num_params);
	double out = spec_bytes(r->spec.outputs, r->spec.num_outputs);
	struct data_sizes z = {p->trials * (par + in + out_copies * out), 0.0};
	if (r->timing_wanted || r->profile_wanted)
		z.timing = par + p->rotation_sets * in + (p->timing.checks + 1) * (in + out_copies * out);
	r->data_bytes = z.trials + z.timing;
	r->set_bytes = in + par + out;
	r->output_file_bytes = out_copies > 1 ? out : 0;
	return z;
}

/* The sets of an evaluation live in the run directory (inputs and params public, reference
 * outputs private, the worker's outputs): the verification trials' first, then the timing
 * data in their place. When the larger of the two does not fit in the run directory's file
 * system, say so before writing gigabytes. */
static int step_check_space(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	struct data_sizes z = data_sizes_of(r, 2);
	double in = spec_bytes(r->spec.args, r->spec.num_args);
	double out = r->output_file_bytes;
	struct statvfs vfs;
	/* The trials' files are removed before the timing data is written (remove_trial_files) */
	double need = r->o->keep_run_dir ? z.trials + z.timing : fmax(z.trials, z.timing);

	if (statvfs(r->dir, &vfs) != 0)
		return 0; /* nothing to judge by: the writes will say what fails */
	double avail = (double)vfs.f_bavail * (double)vfs.f_frsize;
	if (need > 0.95 * avail) {
		set_reason(r, "env.run_space",
			   "this evaluation needs %.1f GB of tensors at once (%d trials, %d timing sets, "
			   "%d checked calls; %.2f GB of inputs and %.2f GB of outputs per set) but "
			   "%s has %.1f GB free: point CUDA_AGENT_RUNS at a larger file system or "
			   "use fewer --trials",
			   need / 1e9, p->trials, r->timing_wanted ? p->rotation_sets : 0,
			   r->timing_wanted ? p->timing.checks + 1 : 0, in / 1e9, out / 1e9, r->dir,
			   avail / 1e9);
		return -1;
	}
	return 0;
}

/* Verification data: per trial its own model seed and input seed (outputs kept private). */
static int step_reference(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	double t0 = ca_now();
	if (r->device_data) /* made by the bridge when it checks each set (step_open_slots) */
		return 0;
	if (step_check_space(r))
		return -1;
	for (int k = 0; k < p->trials; k++) {
		json_t *sets = json_pack("[o]", set_entry(r->trial_seeds[k],
							  path_json(r->pub, "inputs_%d.safetensors", k),
							  path_json(r->priv, "ref_%d.safetensors", k)));
		if (reference_call(r, r->trial_seeds[k],
				   path_json(r->pub, "params_%d.safetensors", k), sets))
			return -1;
	}
	note_seconds(r, "reference", t0);
	return 0;
}

/* The verification trials' files, once compared: the timing data takes their place (a task
 * with 6 GB tensors could not hold both at once). Kept with --keep. */
static void remove_trial_files(struct run *r)
{
	static const char *const names[] = {"params", "inputs", "ref", "out"};
	if (r->o->keep_run_dir)
		return;
	for (int k = 0; k < r->o->protocol.trials; k++)
		for (int f = 0; f < 4; f++) {
			char path[PATH_MAX];
			const char *dir = f < 2 ? r->pub : f == 2 ? r->priv : r->work;
			if (pathf(path, sizeof path, "%s/%s_%d.safetensors", dir, names[f], k) == 0)
				unlink(path);
		}
}

/* Checked call i's set: the first is fresh; the others are near-duplicates of rotation sets (a
 * few elements moved far: the bridge's near_duplicate), which a cache keyed by sampled input
 * values would answer wrongly. The rotation seed it derives from, or NULL for a fresh set. */
static const uint64_t *check_near_seed(const struct run *r, int i)
{
	return i > 0 ? &r->rotation_seeds[i % r->o->protocol.rotation_sets] : NULL;
}

/* Timing data, made while the worker waits at the gate after a correct verification: one
 * model seed, rotation sets (no outputs needed), checked sets and a final set (outputs kept
 * private). */
static int step_reference_timing(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	double t0 = ca_now();
	if (r->device_data) /* the runner makes its timing sets from the plan's seeds */
		return 0;
	remove_trial_files(r);
	{
		json_t *sets = json_array();
		for (int i = 0; i < p->rotation_sets; i++)
			json_array_append_new(sets, set_entry(r->rotation_seeds[i],
							      path_json(r->pub, "rot_%d.safetensors", i),
							      NULL));
		for (int i = 0; i < p->timing.checks; i++) {
			json_t *entry = set_entry(r->check_seeds[i],
						  path_json(r->pub, "check_%d.safetensors", i),
						  path_json(r->priv, "check_ref_%d.safetensors", i));
			const uint64_t *near = check_near_seed(r, i);
			if (near)
				json_object_set_new(entry, "near_seed",
						    json_integer((json_int_t)*near));
			json_array_append_new(sets, entry);
		}
		json_array_append_new(sets, set_entry(r->final_seed,
						      path_json(r->pub, "final.safetensors"),
						      path_json(r->priv, "final_ref.safetensors")));
		if (reference_call(r, r->timing_model_seed,
				   path_json(r->pub, "params_t.safetensors"), sets))
			return -1;
	}
	note_seconds(r, "reference_timing", t0);
	return 0;
}

/* ---- device data (eval.h, docs/protocol.md) ---------------------------------------------- */

/* Device data or files: decided once the spec is known. */
static int step_data_mode(struct run *r)
{
	double in = spec_bytes(r->spec.args, r->spec.num_args);
	double out = spec_bytes(r->spec.outputs, r->spec.num_outputs);
	bool torch = r->format != CANDIDATE_NATIVE;
	if (r->o->data == EVAL_DATA_DEVICE && !torch) {
		set_reason(r, "env.unsupported",
			   "--data device is for PyTorch-format candidates; the native worker reads "
			   "its sets from files (use --data files or auto)");
		return -1;
	}
	r->device_data = torch && (r->o->data == EVAL_DATA_DEVICE ||
				   (r->o->data == EVAL_DATA_AUTO && in + out >= EVAL_DEVICE_DATA_BYTES));
	if (r->device_data) /* nothing goes to files; the watchdog still allows for every set */
		(void)data_sizes_of(r, 1);
	json_object_set_new(r->result, "data", json_string(r->device_data ? "device" : "files"));
	return 0;
}

/* The runner's output slots: one per verification trial (checked at the gate), reused by the
 * checked and final calls of timing. The bridge sends their descriptors with its answer. */
static int step_open_slots(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	struct ca_diag d = {{0}};
	size_t bytes = 0;
	int count = p->trials;
	json_t *req, *res = NULL;

	for (int i = 0; i < r->spec.num_outputs; i++) {
		size_t n = tensor_spec_nbytes(&r->spec.outputs[i]);
		bytes += (n + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	}
	if (bytes == 0)
		bytes = SLOT_ALIGN;
	if (r->timing_wanted && p->timing.checks + 1 > count)
		count = p->timing.checks + 1;
	if (count > CA_MAX_PASS_FDS) {
		set_reason(r, "env.unsupported",
			   "device data holds at most %d sets at once; this evaluation needs %d "
			   "(use fewer --trials, or --data files)", CA_MAX_PASS_FDS, count);
		return -1;
	}
	req = json_pack("{s:i, s:I}", "count", count, "bytes", (json_int_t)bytes);
	int rc = bridge_request(r, "slots", req, 120.0, &res);
	json_decref(req);
	if (rc)
		return -1;
	r->slots_open = true;
	ca_strlcpy(r->slot_kind, json_string_value(json_object_get(res, "kind")) ?
			json_string_value(json_object_get(res, "kind")) : "", sizeof r->slot_kind);
	json_decref(res);
	if (bridge_recv_fds(&r->s->bridge, r->slot_fds, (size_t)count, 30.0, &d)) {
		set_reason(r, "env.bridge", "torch bridge (slots): %s", d.msg);
		return -1;
	}
	r->n_slots = count;
	r->slot_bytes = bytes;
	return 0;
}

/* Our copies of the slot descriptors (the runner has its own once started). */
static void close_slot_fds(struct run *r)
{
	for (int i = 0; i < r->n_slots; i++)
		if (r->slot_fds[i] >= 0)
			close(r->slot_fds[i]);
	r->n_slots = 0;
}

static void release_slots(struct run *r)
{
	close_slot_fds(r);
	if (r->slots_open) {
		json_t *req = json_object(), *res = NULL;
		struct ca_diag d = {{0}};
		char code[64];
		if (bridge_call(&r->s->bridge, "slots_close", req, 60.0, &res, code, sizeof code, &d))
			ca_log_warn("torch bridge: cannot release the output slots: %s", d.msg);
		json_decref(req);
		json_decref(res);
		r->slots_open = false;
	}
}

static json_t *seed_set(uint64_t seed, int slot)
{
	json_t *o = json_pack("{s:I}", "seed", (json_int_t)seed);
	if (slot >= 0)
		json_object_set_new(o, "slot", json_integer(slot));
	return o;
}

static json_t *make_device_plan(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	json_t *verify = json_array();
	json_t *plan;

	for (int k = 0; k < p->trials; k++)
		json_array_append_new(verify, json_pack("{s:I, s:I, s:i}", "model_seed",
							(json_int_t)r->trial_seeds[k], "seed",
							(json_int_t)r->trial_seeds[k], "slot", k));
	plan = json_pack("{s:s, s:i, s:O, s:o, s:b, s:{s:s, s:s, s:i, s:I, s:i}}", "library",
			 r->library, "device", 0, "spec", r->spec_json, "verify", verify,
			 "gate_after_verify", 1, "data", "mode", "device", "kind", r->slot_kind,
			 "slots", r->n_slots, "slot_bytes", (json_int_t)r->slot_bytes, "first_fd",
			 3);
	if (r->timing_wanted) {
		json_t *rot = json_array(), *checks = json_array();
		for (int i = 0; i < p->rotation_sets; i++)
			json_array_append_new(rot, seed_set(r->rotation_seeds[i], -1));
		for (int i = 0; i < p->timing.checks; i++) {
			json_t *c = seed_set(r->check_seeds[i], i);
			const uint64_t *near = check_near_seed(r, i);
			if (near)
				json_object_set_new(c, "near_seed", json_integer((json_int_t)*near));
			json_array_append_new(checks, c);
		}
		json_object_set_new(plan, "timing",
				    json_pack("{s:I, s:o, s:o, s:o, s:I, s:o}", "model_seed",
					      (json_int_t)r->timing_model_seed, "rotation", rot,
					      "checks", checks, "final",
					      seed_set(r->final_seed, p->timing.checks), "seed",
					      (json_int_t)r->plan_seed, "protocol",
					      eval_protocol_timing_json(p)));
	}
	if (r->profile_wanted) /* PyTorch-format runners answer profile as unsupported */
		json_object_set_new(plan, "profile", json_pack("{s:i}", "calls", 1));
	return plan;
}

static json_t *make_plan(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	json_t *verify = json_array();
	json_t *plan;

	if (r->device_data) {
		json_decref(verify);
		return make_device_plan(r);
	}

	for (int k = 0; k < p->trials; k++)
		json_array_append_new(verify,
				      json_pack("{s:o, s:o, s:o}", "params",
						path_json(r->pub, "params_%d.safetensors", k), "inputs",
						path_json(r->pub, "inputs_%d.safetensors", k),
						"outputs", path_json(r->work, "out_%d.safetensors", k)));
	plan = json_pack("{s:s, s:i, s:O, s:o, s:b}", "library", r->library, "device", 0,
			 "spec", r->spec_json, "verify", verify, "gate_after_verify", 1);
	if (r->timing_wanted) {
		json_t *rot = json_array(), *checks = json_array();
		for (int i = 0; i < p->rotation_sets; i++)
			json_array_append_new(rot, path_json(r->pub, "rot_%d.safetensors", i));
		for (int i = 0; i < p->timing.checks; i++)
			json_array_append_new(
				checks, json_pack("{s:o, s:o}", "inputs",
						  path_json(r->pub, "check_%d.safetensors", i),
						  "outputs",
						  path_json(r->work, "check_out_%d.safetensors", i)));
		json_object_set_new(
			plan, "timing",
			json_pack("{s:o, s:o, s:o, s:{s:o, s:o}, s:I, s:o}", "params",
				  path_json(r->pub, "params_t.safetensors"), "rotation", rot,
				  "checks", checks, "final", "inputs",
				  path_json(r->pub, "final.safetensors"), "outputs",
				  path_json(r->work, "final_out.safetensors"), "seed",
				  (json_int_t)r->plan_seed, "protocol",
				  eval_protocol_timing_json(p)));
	}
	if (r->profile_wanted)
		json_object_set_new(plan, "profile",
				    json_pack("{s:o, s:o, s:i}", "params",
					      path_json(r->pub, "params_t.safetensors"), "inputs",
					      path_json(r->pub, "rot_0.safetensors"), "calls",
					      r->o->profile_calls > 0 ? r->o->profile_calls : 5));
	return plan;
}

/* Compares the worker's outputs file with the reference file; fills a trial-style object.
 * Returns 1 if all outputs match, 0 if not, -1 if a file could not be read. */
/* The figures of a call's outputs, summed into its trial-style entry. */
struct compare_tally {
	double max_abs, max_rel;
	size_t mismatches;
	int verdict; /* 1 all match, 0 not */
	bool described;
};

static void tally_output(struct run *r, int i, const struct compare_result *cr, json_t *entry,
			 struct compare_tally *t)
{
	char label[CA_SPEC_NAME_MAX + 32], msg[1024];
	t->max_abs = fmax(t->max_abs, cr->max_abs_err);
	t->max_rel = fmax(t->max_rel, cr->max_rel_err);
	t->mismatches += cr->shape_ok ? cr->mismatches : cr->numel;
	if (cr->match)
		return;
	t->verdict = 0;
	if (t->described)
		return;
	t->described = true;
	snprintf(label, sizeof label, "output %d (%s)", i, r->spec.outputs[i].name);
	compare_describe(cr, label, msg, sizeof msg);
	json_object_set_new(entry, "message", json_string(msg));
	if (cr->has_first) {
		json_t *idx = json_array();
		for (int k = 0; k < cr->ndim && k < 8; k++)
			json_array_append_new(idx, json_integer(cr->first_coords[k]));
		json_object_set_new(entry, "first_mismatch",
				    json_pack("{s:i, s:s, s:o, s:f, s:f}", "output", i, "name",
					      r->spec.outputs[i].name, "index", idx, "got",
					      isfinite(cr->first_out) ? cr->first_out : 0.0,
					      "expected",
					      isfinite(cr->first_ref) ? cr->first_ref : 0.0));
		if (!isfinite(cr->first_out))
			json_object_set_new(json_object_get(entry, "first_mismatch"), "got",
					    json_string(isnan(cr->first_out) ? "nan" : "inf"));
	}
}

static void tally_finish(json_t *entry, const struct compare_tally *t)
{
	json_object_set_new(entry, "max_abs_err", json_real(t->max_abs));
	json_object_set_new(entry, "max_rel_err", json_real(t->max_rel));
	json_object_set_new(entry, "mismatches", json_integer((json_int_t)t->mismatches));
}

static int compare_files(struct run *r, const char *out_path, const char *ref_path,
			 json_t *entry)
{
	struct safetensors out = {0}, ref = {0};
	struct ca_diag d = {{0}};
	struct compare_tally t = {.verdict = 1};

	if (safetensors_open(&ref, ref_path, &d)) {
		json_object_set_new(entry, "message", json_string(d.msg));
		t.verdict = -1;
		goto out;
	}
	if (safetensors_open(&out, out_path, &d)) {
		json_object_set_new(entry, "message", json_string(d.msg));
		t.verdict = -1;
		goto out;
	}
	for (int i = 0; i < r->spec.num_outputs; i++) {
		const struct st_tensor *o = safetensors_find_indexed(&out, "outputs", i);
		const struct st_tensor *e = safetensors_find_indexed(&ref, "outputs", i);
		struct compare_result cr;
		if (!o || !e) {
			json_object_set_new(entry, "message",
					    json_sprintf("outputs.%d is missing from %s", i,
							 !o ? "the worker's file" : "the reference"));
			t.verdict = -1;
			goto out;
		}
		compare_tensors(o, e, r->task.atol, r->task.rtol, &cr);
		tally_output(r, i, &cr, entry, &t);
	}
	tally_finish(entry, &t);
out:
	safetensors_close(&out);
	safetensors_close(&ref);
	return t.verdict;
}

/* A value of the bridge's check answer: a number, or "nan", "inf", "-inf". */
static double check_number(const json_t *v)
{
	const char *s = json_string_value(v);
	if (json_is_number(v))
		return json_number_value(v);
	if (s && strcmp(s, "inf") == 0)
		return INFINITY;
	if (s && strcmp(s, "-inf") == 0)
		return -INFINITY;
	return NAN;
}

/* One output's figures from the bridge's check answer (python/cuda_agent_bridge/server.py
 * compare_stats: compare.h's rule, computed on the device). */
static int check_result(const json_t *o, const struct tensor_spec *spec,
			struct compare_result *cr)
{
	const json_t *first = json_object_get(o, "first_index");
	json_int_t numel = json_integer_value(json_object_get(o, "numel"));
	json_int_t bad = json_integer_value(json_object_get(o, "mismatches"));
	json_int_t unwritten = json_integer_value(json_object_get(o, "nan_unwritten"));
	memset(cr, 0, sizeof *cr);
	if (!json_is_integer(json_object_get(o, "numel")) || numel < 0 || bad < 0 ||
	    unwritten < 0 || bad > numel || (!json_is_null(first) && !json_is_integer(first)))
		return -1;
	cr->shape_ok = true;
	cr->numel = (size_t)numel;
	cr->mismatches = (size_t)bad;
	cr->nan_unwritten = (size_t)unwritten;
	cr->max_abs_err = check_number(json_object_get(o, "max_abs_err"));
	cr->max_rel_err = check_number(json_object_get(o, "max_rel_err"));
	cr->match = bad == 0;
	cr->ndim = spec->ndim;
	if (json_is_integer(first) && json_integer_value(first) >= 0 &&
	    json_integer_value(first) < numel)
		compare_locate(cr, (size_t)json_integer_value(first), spec->shape, spec->ndim,
			       check_number(json_object_get(o, "first_out")),
			       check_number(json_object_get(o, "first_ref")));
	else if (bad > 0)
		return -1;
	return 0;
}

/* Device data: the bridge makes the set's reference outputs and compares them with what the
 * runner left in slot `slot`; fills a trial-style entry like compare_files. */
static int compare_slot(struct run *r, uint64_t model_seed, uint64_t seed, const uint64_t *near,
			int slot, json_t *entry)
{
	json_t *req = json_pack("{s:s, s:I, s:I, s:i, s:f, s:f}", "task_dir", r->task.dir,
				"model_seed", (json_int_t)model_seed, "seed", (json_int_t)seed,
				"slot", slot, "atol", r->task.atol, "rtol", r->task.rtol);
	json_t *res = NULL, *outs;
	struct compare_tally t = {.verdict = 1};
	struct ca_diag d = {{0}};
	char code[64];

	if (near)
		json_object_set_new(req, "near_seed", json_integer((json_int_t)*near));
	int rc = bridge_call(&r->s->bridge, "check", req, 120.0 + 4.0 * r->set_bytes / 1e9, &res,
			     code, sizeof code, &d);
	json_decref(req);
	if (rc) {
		json_object_set_new(entry, "message",
				    json_sprintf("the torch bridge could not check the outputs: %s",
						 d.msg));
		return -1;
	}
	outs = json_object_get(res, "outputs");
	if (json_array_size(outs) != (size_t)r->spec.num_outputs) {
		json_object_set_new(entry, "message",
				    json_sprintf("the torch bridge checked %zu outputs; the spec has %d",
						 json_array_size(outs), r->spec.num_outputs));
		t.verdict = -1;
		goto out;
	}
	for (int i = 0; i < r->spec.num_outputs; i++) {
		struct compare_result cr;
		if (check_result(json_array_get(outs, (size_t)i), &r->spec.outputs[i], &cr)) {
			json_object_set_new(entry, "message",
					    json_sprintf("the torch bridge's check of output %d is "
							 "malformed", i));
			t.verdict = -1;
			goto out;
		}
		tally_output(r, i, &cr, entry, &t);
	}
	tally_finish(entry, &t);
out:
	json_decref(res);
	return t.verdict;
}

/* Called when the worker has finished the verification trials: compares every trial. */
static void verify_outputs(struct run *r)
{
	size_t k;
	json_t *trial;
	r->verify_ok = json_array_size(r->trials) == (size_t)r->o->protocol.trials;
	json_array_foreach(r->trials, k, trial) {
		char out_path[PATH_MAX], ref_path[PATH_MAX];
		if (!json_is_true(json_object_get(trial, "ok"))) {
			r->verify_ok = false;
			continue;
		}
		pathf(out_path, sizeof out_path, "%s/out_%zu.safetensors", r->work, k);
		pathf(ref_path, sizeof ref_path, "%s/ref_%zu.safetensors", r->priv, k);
		int v = r->device_data ? compare_slot(r, r->trial_seeds[k], r->trial_seeds[k], NULL,
						      (int)k, trial)
				       : compare_files(r, out_path, ref_path, trial);
		if (v != 1) {
			json_object_set_new(trial, "ok", json_false());
			json_object_set_new(trial, "code", json_string(v == 0 ? "verify.mismatch"
									     : "internal"));
			r->verify_ok = false;
		}
	}
	if (!r->verify_ok && json_array_size(r->trials) > 0) {
		json_array_foreach(r->trials, k, trial) {
			if (json_is_true(json_object_get(trial, "ok")))
				continue;
			const char *code = json_string_value(json_object_get(trial, "code"));
			const char *msg = json_string_value(json_object_get(trial, "message"));
			set_reason(r, code ? code : "verify.mismatch", "trial %zu: %s", k + 1,
				   msg ? msg : "failed");
			break;
		}
	}
}

static void handle_event(struct run *r, json_t *ev, struct ca_child *child, bool *done)
{
	const char *name = json_string_value(json_object_get(ev, "event"));
	if (!name)
		return;
	if (strcmp(name, "device") == 0) {
		json_decref(r->device_event);
		r->device_event = json_incref(ev);
	} else if (strcmp(name, "verify") == 0) {
		json_t *t = json_deep_copy(ev);
		json_object_del(t, "event");
		json_array_append_new(r->trials, t);
	} else if (strcmp(name, "verified") == 0) {
		verify_outputs(r);
		bool go_on = r->verify_ok && (r->timing_wanted || r->profile_wanted);
		if (go_on) { /* the worker waits at the gate meanwhile; its watchdog too */
			double g0 = ca_now();
			go_on = step_reference_timing(r) == 0;
			r->gate_s += ca_now() - g0;
		}
		(void)ca_child_write(child, go_on ? "continue\n" : "stop\n", go_on ? 9 : 5, NULL);
		if (go_on)
			ca_log_info("verified %d/%d trials; timing", r->o->protocol.trials,
				    r->o->protocol.trials);
	} else if (strcmp(name, "audit") == 0) {
		/* What the audited calls ran (worker/audit.h); a verdict arrives as a call's code */
		json_t *list = json_object_get(r->result, "audit");
		if (!list) {
			list = json_array();
			json_object_set_new(r->result, "audit", list);
		}
		if (json_array_size(list) < 4) {
			json_t *a = json_deep_copy(ev);
			json_object_del(a, "event");
			json_array_append_new(list, a);
		}
	} else if (strcmp(name, "timing") == 0) {
		json_decref(r->timing_event);
		r->timing_event = json_incref(ev);
	} else if (strcmp(name, "profile") == 0) {
		json_decref(r->profile_event);
		r->profile_event = json_incref(ev);
	} else if (strcmp(name, "error") == 0) {
		const char *code = json_string_value(json_object_get(ev, "code"));
		const char *msg = json_string_value(json_object_get(ev, "message"));
		set_reason(r, code ? code : "worker.error", "%s", msg ? msg : "the worker failed");
	} else if (strcmp(name, "done") == 0) {
		*done = true;
	}
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
}

/* The candidate's process (the native worker, or the PyTorch-format runner) in the sandbox: it
 * sees the system read-only, the run's public/ (inputs, params) read-only, work/ writable and
 * the caller's binds (its program, the plan, per-run copies of what was built, ...); never the
 * run's private/ (reference outputs), the cache or the home directory. The run directory itself
 * is made traversable (0711, not listable) so that the sandbox's uid can reach the binds. Its
 * /tmp and /dev/shm are the run's scratch-tmp/ and scratch-shm/, so that step_worker() can see
 * afterwards whether the candidate wrote files there (sandbox_scratch_check). The JIT cache is
 * off: it would write under HOME=/tmp, and nothing of it could outlive the run anyway. Without
 * the sandbox, the same program runs as a plain child with the same extra environment. */
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
	struct sandbox_bind binds[SPAWN_MAX_BINDS + 2] = {
		{.src = r->pub},
		{.src = r->work, .writable = true},
	};
	struct sandbox_opts so = {0};
	size_t n_env = 1;

	if (n_extra > SPAWN_MAX_BINDS)
		return ca_fail(d, CA_ERR_LIMIT, "too many binds for the candidate's process");
	for (size_t i = 0; env_extra && env_extra[i] && n_env < SPAWN_MAX_ENV; i++)
		env[n_env++] = env_extra[i];
	if (!r->sandboxed) {
		struct ca_run_opts ro = {.env_add = env, .pass_fds = r->slot_fds,
					 .n_pass_fds = (size_t)r->n_slots};
		return ca_child_spawn(child, argv, &ro, err_path, d);
	}
	memcpy(binds + 2, extra, n_extra * sizeof *extra);
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
	so.pass_fds = r->slot_fds; /* device data: the output slots, at 3, 4, ... */
	so.n_pass_fds = (size_t)r->n_slots;
	so.binds = binds;
	so.n_binds = n_extra + 2;
	so.tmp_dir = scratch_tmp; /* sandbox_spawn hands them to the sandbox's uid */
	so.shm_dir = scratch_shm;
	so.cpu_seconds = (uint64_t)limit + 30;
	/* cgroup memory: the default 32 GiB, plus the output files the worker leaves in the run
	 * directory (tmpfs pages it writes are charged to its cgroup) and two sets in its own
	 * memory, for tasks whose tensors are gigabytes */
	{
		int calls = r->o->protocol.trials > r->o->protocol.timing.checks + 1
				    ? r->o->protocol.trials
				    : r->o->protocol.timing.checks + 1;
		double files = r->output_file_bytes * calls; /* the trials' go before timing */
		double mem = (double)(32ull << 30) + files + 2.0 * r->set_bytes;
		if (mem > (double)(32ull << 30) + (double)(1u << 30))
			so.memory_max = (uint64_t)mem;
	}
	/* RLIMIT_FSIZE: the default 2 GiB, or room for one call's outputs file when larger */
	if (r->output_file_bytes * 1.1 + (64 << 20) > (double)(2ull << 30))
		so.fsize_bytes = (uint64_t)(r->output_file_bytes * 1.1) + (64u << 20);
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

/* Binds and environment of `python -m cuda_agent_bridge.candidate`: the runtime's
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
 * load_inline recording its calls into specs_path (candidate.py --record). */
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
	const char *argv[] = {rt->exe, "-B", "-m", "cuda_agent_bridge.candidate", "--record",
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
		if ((rc = ca_child_read_line(&child, WORKER_MAX_LINE, left, &line, &d)))
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

/* The plan's "candidate" object for the PyTorch-format runner (candidate.py). */
static json_t *torch_candidate_json(const struct run *r)
{
	json_t *c = json_pack("{s:s, s:s, s:s}", "format", candidate_format_name(r->format),
			      "task_dir", r->task.dir, "torch_device", "cuda");
	json_object_set_new(c, r->format == CANDIDATE_WORKDIR ? "dir" : "path",
			    json_string(r->cand_path));
	if (r->format == CANDIDATE_WORKDIR)
		json_object_set_new(c, "extension", json_string(r->library));
	else
		json_object_set(c, "inline_modules", r->inline_modules);
	return c;
}

static int step_worker(struct run *r)
{
	char worker[PATH_MAX], plan_path[PATH_MAX], err_path[PATH_MAX], lib_dir[PATH_MAX],
		pp_env[PATH_MAX + 16];
	struct sandbox_bind binds[SPAWN_MAX_BINDS];
	json_t *plan = NULL;
	struct ca_child child;
	struct sandbox sb;
	struct ca_run_result fate;
	struct ca_diag d = {{0}};
	bool done = false, output_flood = false, native = r->format == CANDIDATE_NATIVE;
	double t0 = ca_now();
	/* Default watchdog: 60 s, twice the timing budget, and 2 s per GB of tensors to move */
	double limit = r->o->worker_timeout_s > 0
			       ? r->o->worker_timeout_s
			       : 60.0 + (r->timing_wanted ? 2.0 * r->o->protocol.timing.budget_s : 0) +
					 2.0 * r->data_bytes / 1e9;
	const struct python_runtime *rt = NULL;
	int rc = 0, nb = 0;

	if (copy_build_outputs(r, &d)) {
		set_reason(r, "internal", "cannot copy the built library into the run directory: %s",
			   d.msg);
		return -1;
	}
	if (native && (find_worker(r, worker, sizeof worker) || !ca_is_file(worker))) {
		set_reason(r, "env.no_worker",
			   "the GPU worker %s is not built (build on a machine with nvcc: make)",
			   worker);
		return -1;
	}
	if (!native && !(rt = session_runtime(r, &d))) {
		set_reason(r, "env.bridge", "cannot use the Python runtime: %s", d.msg);
		return -1;
	}
	if (r->device_data && step_open_slots(r))
		return -1;
	plan = make_plan(r);
	if (!native)
		json_object_set_new(plan, "candidate", torch_candidate_json(r));
	pathf(plan_path, sizeof plan_path, "%s/plan.json", r->dir);
	pathf(err_path, sizeof err_path, "%s/worker.stderr", r->dir);
	pathf(lib_dir, sizeof lib_dir, "%s/lib", r->dir);
	if (json_dump_file(plan, plan_path, JSON_COMPACT) != 0) {
		set_reason(r, "internal", "cannot write %s", plan_path);
		json_decref(plan);
		return -1;
	}
	json_decref(plan);
	const char *native_argv[] = {worker, plan_path, NULL};
	const char *py_argv[] = {rt ? rt->exe : "", "-B", "-m", "cuda_agent_bridge.candidate",
				 plan_path, NULL};
	char inductor_env[PATH_MAX + 48], triton_env[PATH_MAX + 48];
	/* torch makes its compiler caches (/tmp/torchinductor_<user>) on import: in work/, with
	 * the outputs, not in the scratch /tmp where any file is the candidate's. */
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
	rc = spawn_candidate(r, native ? native_argv : py_argv, binds, (size_t)nb,
			     native ? NULL : py_env, err_path, limit, &sb, &child, &d);
	close_slot_fds(r); /* the runner holds its own copies now */
	if (rc) {
		set_reason(r, r->sandboxed ? "env.sandbox" : "env.no_worker",
			   "cannot start the %s%s: %s", native ? "GPU worker" : "PyTorch runner",
			   r->sandboxed ? " in the sandbox" : "", d.msg);
		return -1;
	}
	if (r->sandboxed)
		r->isolation = sandbox_report_json(&sb.report);
	while (!done) {
		char *line = NULL;
		struct stat est;
		double left = t0 + limit + r->gate_s - ca_now();
		if (left <= 0) {
			rc = CA_ERR_TIMEOUT;
			break;
		}
		/* Short waits, so that a worker flooding its output is stopped early. */
		rc = ca_child_read_line(&child, WORKER_MAX_LINE, left < 0.2 ? left : 0.2, &line, &d);
		if (stat(err_path, &est) == 0 && (uint64_t)est.st_size > WORKER_MAX_OUTPUT) {
			free(line);
			output_flood = true;
			rc = CA_ERR_LIMIT;
			break;
		}
		if (rc == CA_ERR_TIMEOUT)
			continue;
		if (rc)
			break;
		json_t *ev = json_loads(line, 0, NULL);
		if (ev && json_is_object(ev))
			handle_event(r, ev, &child, &done);
		else
			ca_log_debug("worker said: %.200s", line);
		json_decref(ev);
		free(line);
	}
	if (r->sandboxed) {
		sb.child = child;
		sandbox_finish(&sb, done ? 10.0 : 0.5, &fate);
		if (sb.oom_killed)
			set_reason(r, "fault.host_oom",
				   "the worker exceeded the sandbox's memory limit and was killed");
		if (sandbox_killed_by_seccomp(&sb, &fate))
			set_reason(r, "sandbox.violation",
				   "the candidate made a system call the sandbox forbids (seccomp "
				   "killed the worker with SIGSYS): process creation (fork, clone "
				   "without CLONE_THREAD), exec, sockets other than AF_UNIX, mount, "
				   "ptrace, io_uring, namespaces, ... are not allowed");
	} else {
		ca_child_finish(&child, done ? 10.0 : 0.5, &fate);
	}
	note_seconds(r, "worker", t0);
	if (rc == CA_ERR_TIMEOUT) {
		set_reason(r, "timeout",
			   "the candidate did not finish within the %.0f s watchdog limit and was "
			   "killed", limit);
		return -1;
	}
	if (output_flood) {
		set_reason(r, "fault.output_limit",
			   "the candidate wrote more than %llu MiB to stdout/stderr and was stopped "
			   "(print less: a few lines of debugging output are fine)",
			   (unsigned long long)(WORKER_MAX_OUTPUT >> 20));
		return -1;
	}
	if (!done) {
		char tail[1024], how[128];
		ca_file_tail(err_path, 3, tail, sizeof tail);
		for (char *p = tail; *p; p++)
			if (*p == '\n')
				*p = ' ';
		ca_run_describe(&fate, how, sizeof how);
		/* A fatal event already named the cause; otherwise the process died under us. */
		set_reason(r, "fault.crash", "the worker process died (%s) while running the "
			   "candidate%s%s", how, tail[0] ? ": " : "", tail);
		if (json_array_size(r->trials) < (size_t)r->o->protocol.trials)
			r->verify_ok = false;
		return -1;
	}
	/* Files in the sandbox's /tmp or /dev/shm: only after everything above, which names a more
	 * specific cause; a reason set earlier (a wrong output, ...) stays too. Set here, before
	 * the result is made, it fails a run that was correct and timed: correct false, reward -1. */
	if (r->sandboxed) {
		char list[1024];
		size_t found = 0;
		if (sandbox_scratch_check(&sb, &found, list, sizeof list, &d) != 0) {
			set_reason(r, "internal", "cannot check the worker's /tmp and /dev/shm: %s",
				   d.msg);
			return -1;
		}
		if (found) {
			set_reason(r, "sandbox.violation",
				   "the candidate created files outside its outputs: %s (candidates "
				   "may not write files)",
				   list);
			return -1;
		}
	}
	return 0;
}

static json_t *timing_summary(const json_t *t)
{
	static const char *const keys[] = {"median_ms", "event_median_ms", "host_median_ms",
					   "overhead_ms", "event_overhead_ms", "rse", "samples",
					   "warmup_calls", "stop_reason",
					   "budget_exhausted", "compile_seconds", "samples_ms",
					   NULL};
	json_t *o = json_object();
	for (const char *const *k = keys; *k; k++) {
		json_t *v = json_object_get(t, *k);
		if (v)
			json_object_set(o, *k, v);
	}
	return o;
}

/* Checked calls inside the timed loop and the final call: same comparison as the trials. */
static void step_check_timing(struct run *r)
{
	const struct eval_protocol *p = &r->o->protocol;
	int done = (int)json_integer_value(json_object_get(r->timing_event, "checks_done"));
	json_t *checks = json_array();
	bool all_ok = done == p->timing.checks;

	for (int i = 0; i <= p->timing.checks; i++) {
		char out_path[PATH_MAX], ref_path[PATH_MAX];
		json_t *entry = json_object();
		bool final = i == p->timing.checks;
		if (final) {
			pathf(out_path, sizeof out_path, "%s/final_out.safetensors", r->work);
			pathf(ref_path, sizeof ref_path, "%s/final_ref.safetensors", r->priv);
		} else {
			pathf(out_path, sizeof out_path, "%s/check_out_%d.safetensors", r->work, i);
			pathf(ref_path, sizeof ref_path, "%s/check_ref_%d.safetensors", r->priv, i);
		}
		int v = !r->device_data ? compare_files(r, out_path, ref_path, entry)
			: final	       ? compare_slot(r, r->timing_model_seed, r->final_seed, NULL,
						      i, entry)
				       : compare_slot(r, r->timing_model_seed, r->check_seeds[i],
						      check_near_seed(r, i), i, entry);
		json_object_set_new(entry, "call", json_string(final ? "final" : "in-loop"));
		json_object_set_new(entry, "ok", json_boolean(v == 1));
		if (v != 1 && all_ok) {
			const char *msg = json_string_value(json_object_get(entry, "message"));
			set_reason(r, final ? "hack.final_mismatch" : "hack.inconsistent_output",
				   "a %s checked call returned wrong outputs although verification "
				   "passed (%s): outputs must be computed on every call, never cached, "
				   "skipped or served stale",
				   final ? "final" : "timed-loop", msg ? msg : "unreadable outputs");
		}
		all_ok = all_ok && v == 1;
		json_array_append_new(checks, entry);
	}
	if (done != p->timing.checks)
		set_reason(r, "internal", "the worker made %d of %d checked calls", done, p->timing.checks);
	json_object_set_new(json_object_get(r->result, "timing"), "checks",
			    json_pack("{s:i, s:b, s:o}", "done", done + 1, "passed", all_ok,
				      "calls", checks));
	if (!all_ok)
		json_object_set_new(r->result, "correct", json_false());
}

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

static int step_baselines(struct run *r, json_t **baselines, bool *cached)
{
	const struct eval_protocol *p = &r->o->protocol;
	struct baseline_key key = baseline_key_of(r);
	struct ca_diag d = {{0}};
	double t0 = ca_now();
	json_t *seeds, *req;
	int have_cache = open_cache(r) == 0;

	*cached = false;
	*baselines = r->cached_baselines ? r->cached_baselines : cached_baselines(r);
	r->cached_baselines = NULL;
	if (*baselines) {
		*cached = true;
		return 0;
	}
	ca_log_info("measuring eager and torch.compile baselines (once per task and GPU)");
	seeds = json_array();
	for (int i = 0; i < p->rotation_sets; i++)
		json_array_append_new(seeds, json_integer((json_int_t)r->rotation_seeds[i]));
	req = json_pack("{s:s, s:I, s:o, s:[s, s], s:o}", "task_dir", r->task.dir, "model_seed",
			(json_int_t)r->timing_model_seed, "seeds", seeds, "modes", "eager",
			"compile", "protocol", eval_protocol_timing_json(p));
	int rc = bridge_request(r, "time", req, 1800.0, baselines);
	json_decref(req);
	note_seconds(r, "baselines", t0);
	if (rc)
		return -1;
	if (have_cache && baseline_cache_put(&r->s->cache, &key, *baselines, &d))
		ca_log_warn("cannot store baselines: %s", d.msg);
	return 0;
}

static double median_of(const json_t *t)
{
	const json_t *v = json_object_get(t, "median_ms");
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

static void step_timing_result(struct run *r)
{
	json_t *timing = json_object(), *baselines = NULL;
	bool cached = false;

	json_object_set_new(r->result, "timing", timing);
	if (!json_is_true(json_object_get(r->timing_event, "ok"))) {
		const char *code = json_string_value(json_object_get(r->timing_event, "code"));
		const char *msg = json_string_value(json_object_get(r->timing_event, "message"));
		set_reason(r, code ? code : "timing.failed", "while timing: %s",
			   msg ? msg : "the timed calls failed");
		json_object_set_new(r->result, "correct", json_false());
		return;
	}
	json_object_set_new(timing, "candidate", timing_summary(r->timing_event));
	json_object_set_new(timing, "method",
			    json_string("per call max(CUDA events on the harness stream, host wall "
					"time around call + device synchronize - calibrated "
					"overhead); median over calls"));
	json_object_set(timing, "l2_flush_bytes",
			json_object_get(r->timing_event, "l2_flush_bytes"));
	step_check_timing(r);
	if (strcmp(reason_code(r), "ok") != 0)
		return;
	if (step_baselines(r, &baselines, &cached) != 0)
		return;
	json_t *eager = json_object_get(baselines, "eager");
	json_t *compiled = json_object_get(baselines, "compile");
	json_object_set_new(timing, "eager", timing_summary(eager));
	json_object_set_new(timing, "compile", compiled && !json_object_get(compiled, "error")
						       ? timing_summary(compiled)
						       : json_pack("{s:O?}", "error",
								   json_object_get(compiled,
										   "error")));
	json_object_set_new(timing, "baselines_cached", json_boolean(cached));
	json_decref(baselines);
}

/* A reason that is the environment's or the task's, not the candidate's: no GPU, the bridge or
 * the sandbox failing, a broken task, our own bug. Such a run says nothing about the candidate,
 * so it gets no reward (null) rather than -1: an RL trainer must not learn from it. */
static bool judged_candidate(const char *code)
{
	return strncmp(code, "env.", 4) != 0 && strncmp(code, "task.", 5) != 0 &&
	       strcmp(code, "internal") != 0 && strcmp(code, "build.internal") != 0;
}

static void step_reward(struct run *r)
{
	json_t *timing = json_object_get(r->result, "timing");
	struct reward_input in = {0};
	struct reward_output out;
	if (!judged_candidate(reason_code(r))) {
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
	in.t_eager_ms = median_of(json_object_get(timing, "eager"));
	in.t_compile_ms = median_of(json_object_get(timing, "compile"));
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
	json_t *env = json_object();
	char host[256] = "";
	const json_t *dev = r->device_event;
	gethostname(host, sizeof host - 1);
	json_object_set_new(env, "host", json_string(host));
	if (r->s->bridge_started && r->s->bridge.ready) {
		json_object_set_new(env, "torch", json_string(r->s->bridge.torch_version));
		json_object_set_new(env, "python", json_string(r->s->bridge.python_version));
		json_object_set_new(env, "bridge_device", json_string(r->s->bridge.device));
	}
	if (dev) {
		static const char *const keys[] = {"name", "driver", "cuda_runtime", "sm_count",
						   "l2_bytes", "sm_clock_mhz", NULL};
		for (const char *const *k = keys; *k; k++)
			if (json_object_get(dev, *k))
				json_object_set(env, strcmp(*k, "name") == 0 ? "gpu" : *k,
						json_object_get(dev, *k));
	}
	if (r->timing_event) {
		json_object_set(env, "sm_clock_mhz_before",
				json_object_get(r->timing_event, "sm_clock_mhz_before"));
		json_object_set(env, "sm_clock_mhz_after",
				json_object_get(r->timing_event, "sm_clock_mhz_after"));
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
	return json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s}, s:n, s:n, s:n, s:n, s:{s:s, s:s}}",
			 "schema", CA_RESULT_SCHEMA, "mode", modes[o->mode], "task", "dir",
			 o->task_dir ? o->task_dir : "", "candidate", "format", "native", "dir",
			 o->candidate_dir ? o->candidate_dir : "", "reward", "reward_continuous",
			 "compiled", "correct", "reason", "code", "ok", "message", "");
}

static void run_free(struct run *r)
{
	release_slots(r);
	if (r->dir[0] && !r->o->keep_run_dir)
		ca_remove_tree(r->dir, NULL);
	if (r->task_loaded)
		task_free(&r->task);
	if (r->spec_loaded)
		task_spec_free(&r->spec);
	json_decref(r->spec_json);
	json_decref(r->device_event);
	json_decref(r->timing_event);
	json_decref(r->profile_event);
	json_decref(r->cached_baselines);
	json_decref(r->trials);
	json_decref(r->isolation);
	json_decref(r->modules);
	json_decref(r->inline_modules);
}

int eval_run(struct eval_session *s, const struct eval_opts *o, json_t **result,
	     struct ca_diag *d)
{
	struct run r;
	struct ca_diag td = {{0}};
	int rc;

	*result = NULL;
	if (!o->task_dir || !o->candidate_dir)
		return ca_fail(d, CA_ERR_INVALID, "a task directory and a candidate are required");
	rc = eval_protocol_validate(&o->protocol, d);
	if (rc)
		return rc;
	memset(&r, 0, sizeof r);
	r.s = s;
	r.o = o;
	r.t_start = ca_now();
	r.result = new_result(o);
	r.seconds = json_object();
	r.trials = json_array();
	json_object_set(r.result, "seconds", r.seconds);
	r.timing_wanted = o->mode == EVAL_FULL || o->mode == EVAL_PROFILE;
	r.sandboxed = o->sandbox;
	r.profile_wanted = o->mode == EVAL_PROFILE;
	for (int k = 0; k < o->protocol.trials; k++)
		r.trial_seeds[k] = secret_seed();
	r.timing_model_seed = secret_seed();
	for (int i = 0; i < o->protocol.rotation_sets; i++)
		r.rotation_seeds[i] = secret_seed();
	for (int i = 0; i < o->protocol.timing.checks; i++)
		r.check_seeds[i] = secret_seed();
	r.final_seed = secret_seed();
	r.plan_seed = secret_seed();

	if (task_load(&r.task, o->task_dir, &td)) {
		set_reason(&r, "task.invalid", "%s", td.msg);
		goto out;
	}
	r.task_loaded = true;
	json_object_set_new(r.result, "task",
			    json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:f, s:f}", "id", r.task.id,
				      "source", r.task.source, "level",
				      r.task.level >= 0 ? json_integer(r.task.level) : json_null(),
				      "dir", r.task.dir, "hash", r.task.hash, "precision",
				      task_precision_name(r.task.precision), "atol", r.task.atol,
				      "rtol", r.task.rtol));
	/* Import torch (seconds) while nvcc compiles. */
	if (o->mode != EVAL_COMPILE && eval_session_warm(s, &td))
		ca_log_warn("torch bridge: %s", td.msg);
	if (step_build(&r))
		goto out;
	if (o->mode == EVAL_COMPILE) {
		json_object_set_new(r.result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      r.format == CANDIDATE_NATIVE
						      ? "compiled; the library passed the symbol and "
							"source checks"
						      : "compiled into a PyTorch extension (torch "
							"compute is refused when it runs)"));
		goto out;
	}
	if (step_bridge_ready(&r))
		goto out;
	if (step_describe(&r))
		goto out;
	if (strcmp(s->bridge.device, "cuda") != 0) {
		set_reason(&r, "env.no_gpu",
			   "no CUDA GPU here: the candidate compiled and passed the library checks "
			   "and the task is valid; verification and timing need a GPU");
		goto out;
	}
	step_preload(&r);
	if (step_data_mode(&r) || make_run_dirs(&r) || step_reference(&r))
		goto out;
	ca_log_info("running %d verification trials%s", o->protocol.trials,
		    r.timing_wanted ? ", then timing" : "");
	step_worker(&r);
	json_object_set(r.result, "trials", r.trials);
	if (json_array_size(r.trials) > 0 || strcmp(reason_code(&r), "ok") != 0)
		json_object_set_new(r.result, "correct", json_boolean(r.verify_ok &&
								      strcmp(reason_code(&r), "ok") == 0));
	if (r.verify_ok && r.timing_event)
		step_timing_result(&r);
	if (r.profile_wanted && r.verify_ok)
		step_profile_result(&r);
	release_slots(&r);
	if (strcmp(reason_code(&r), "ok") == 0) {
		json_object_set_new(r.result, "reason",
				    json_pack("{s:s, s:s}", "code", "ok", "message",
					      o->mode == EVAL_VERIFY
						      ? "correct on every verification trial"
						      : "correct; timed against eager and "
							"torch.compile"));
	}
out:
	if (strcmp(reason_code(&r), "ok") != 0 &&
	    (strncmp(reason_code(&r), "build.", 6) == 0 ||
	     json_is_false(json_object_get(r.result, "correct"))))
		json_object_set_new(r.result, "correct",
				    json_is_true(json_object_get(r.result, "compiled"))
					    ? json_false()
					    : json_null());
	if (o->mode != EVAL_COMPILE)
		step_reward(&r);
	step_env(&r);
	if (r.isolation) {
		json_object_set_new(r.isolation, "separate_process", json_true());
		json_object_set_new(r.isolation, "reference_outputs_hidden", json_true());
		json_object_set(r.result, "isolation", r.isolation);
	} else {
		json_object_set_new(
			r.result, "isolation",
			json_pack("{s:b, s:b, s:b, s:b, s:b, s:s}", "sandbox", 0, "separate_process",
				  1, "reference_outputs_hidden", 0, "namespaces", 0, "seccomp", 0,
				  "note", "the sandbox was turned off (--no-sandbox or "
				  "CUDA_AGENT_SANDBOX=0): the candidate runs in its own worker "
				  "process, which is not told where the reference outputs are but "
				  "could read them, and nothing limits its system calls"));
	}
	json_object_set_new(r.seconds, "total", json_real(ca_now() - r.t_start));
	if (r.dir[0] && o->keep_run_dir)
		json_object_set_new(r.result, "run_dir", json_string(r.dir));
	json_object_set_new(r.result, "summary", json_string(""));
	{
		char *text = eval_summary_text(r.result);
		if (text)
			json_object_set_new(r.result, "summary", json_string(text));
		free(text);
	}
	*result = r.result;
	json_decref(r.seconds);
	run_free(&r);
	return 0;
}

int eval_exit_code(const json_t *result)
{
	const char *code = json_string_value(json_object_get(json_object_get(result, "reason"),
							     "code"));
	if (!code || strcmp(code, "ok") == 0)
		return 0;
	if (strncmp(code, "task.", 5) == 0)
		return 3;
	if (strncmp(code, "env.", 4) == 0 || strcmp(code, "internal") == 0 ||
	    strcmp(code, "build.internal") == 0)
		return 4;
	return 1;
}
