/* build_step: the build step (eval/run.h): nvcc for native candidates, torch_build for PyTorch
 * formats (a kernelbench file's load_inline calls recorded in the sandbox first), the result's
 * "build". */
#include "eval/run.h"

#include <string.h>
#include <unistd.h>

#include "protocol/wire.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

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
	return json_pack("{s:s, s:f, s:b, s:b, s:s, s:i, s:i, s:s, s:s, s:o, s:o}", "status",
			 build_status_code(b->status), "seconds", b->seconds, "cached", b->cached,
			 "sandboxed", b->sandboxed,
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

const char *session_python(const struct eval_session *s)
{
	return bridge_python(s->python);
}

static int step_record(struct run *r, const char *specs_path);

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
	if (ca_format(specs, size, "%s/torch/records/%s.json", cache, key) ||
	    ca_format(fresh, sizeof fresh, "%s/inline_specs.json", r->work)) {
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
	static const char sandbox_failed[] = "torch_build: env.sandbox: "; /* its report's message */
	const char *args[10];
	char self[PATH_MAX];
	const char *exe_name;
	ssize_t self_len;
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
	/* Every compiler and linker torch_build starts runs in this binary's sandbox-exec
	 * (docs/torch-build.md), unless the sandbox is off (--no-sandbox, CUDA_AGENT_SANDBOX=0). */
	self_len = readlink("/proc/self/exe", self, sizeof self - 1);
	self[self_len > 0 ? self_len : 0] = '\0';
	exe_name = strrchr(self, '/');
	if (!r->sandboxed) {
		args[6] = "--no-sandbox";
		args[7] = NULL;
	} else if (exe_name && strcmp(exe_name + 1, "cuda-agent") == 0) {
		args[6] = "--sandbox-exec";
		args[7] = self;
		args[8] = NULL;
	} else {
		args[6] = NULL; /* not cuda-agent (a test): torch_build finds it, or says env.sandbox */
	}
	ca_log_info("building %s (%s format)", r->cand_path, candidate_format_name(r->format));
	rc = torch_build_run_checked(session_python(r->s), args, 900.0, r->rules, &r->build,
				     &r->modules, &refusal, &d);
	if (rc && strncmp(d.msg, sandbox_failed, sizeof sandbox_failed - 1) == 0) {
		set_reason(r, "env.sandbox", "the build sandbox: %s",
			   d.msg + sizeof sandbox_failed - 1);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
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

static void *build_thread_main(void *arg)
{
	struct run *r = arg; /* only build_bg and build, until the join */
	r->build_bg.rc = build_candidate(&r->build_bg.opts, &r->build, &r->build_bg.diag);
	return NULL;
}

/* The native build's verdict into the result, once it ran (here or in the thread). */
static int native_built(struct run *r, int rc, const struct ca_diag *d)
{
	if (rc) {
		set_reason(r, "build.internal", "the build could not run: %s", d->msg);
		json_object_set_new(r->result, "compiled", json_false());
		return -1;
	}
	return finish_build(r);
}

int step_build_wait(struct run *r)
{
	struct run_build_thread *b = &r->build_bg;
	if (!b->pending)
		return 0;
	b->pending = false;
	pthread_join(b->thread, NULL);
	/* The build comes first: its failure is the cause, whatever a later step found. */
	if (b->rc || r->build.status != BUILD_OK)
		json_object_del(r->result, "reason");
	return native_built(r, b->rc, &b->diag);
}

int step_build(struct run *r, bool async)
{
	struct run_build_thread *b = &r->build_bg;
	char root[PATH_MAX];
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
	if (ca_path_join(b->kernels, sizeof b->kernels, r->o->candidate_dir, "kernels")) {
		set_reason(r, "candidate.missing", "candidate path too long");
		return -1;
	}
	if (!ca_is_dir(r->o->candidate_dir)) {
		set_reason(r, "candidate.missing", "candidate directory %s does not exist",
			   r->o->candidate_dir);
		return -1;
	}
	if (!ca_is_dir(b->kernels)) {
		set_reason(r, "candidate.missing",
			   "%s has no kernels/ directory (a native candidate keeps its CUDA sources "
			   "in kernels/)", r->o->candidate_dir);
		return -1;
	}
	rc = ca_install_root(root, sizeof root, &d);
	if (rc || ca_format(b->include, sizeof b->include, "%s/build/include", root)) {
		set_reason(r, "internal", "%s", d.msg);
		return -1;
	}
	b->opts = (struct build_opts){.kernels_dir = b->kernels, .arch = r->o->arch,
				      .include_dir = b->include, .no_cache = r->o->no_build_cache};
	ca_log_info("building %s", b->kernels);
	if (async && pthread_create(&b->thread, NULL, build_thread_main, r) == 0) {
		b->started = b->pending = true;
		return 0;
	}
	rc = build_candidate(&b->opts, &r->build, &d);
	return native_built(r, rc, &d);
}

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
	int nb = python_binds(rt, more, false, binds, SPAWN_MAX_BINDS, pp_env, sizeof pp_env);
	char inductor_env[PATH_MAX + 48];
	snprintf(inductor_env, sizeof inductor_env, "TORCHINDUCTOR_CACHE_DIR=%s/torch-cache",
		 r->work);
	const char *env[] = {pp_env, python_env_fixed[0], python_env_fixed[1], python_env_fixed[2],
			     inductor_env, NULL};
	const char *argv[] = {rt->exe, "-B", "-m", "cuda_agent_bridge.runner", "--record",
			      r->cand_path, specs_path, NULL};
	ca_format(err_path, sizeof err_path, "%s/record.stderr", r->dir);
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
