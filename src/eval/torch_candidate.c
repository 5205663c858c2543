#include "eval/torch_candidate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"
#include "util/pylaunch.h"

#define PROBE_MAX_OUTPUT (64u << 10)
#define REPORT_MAX_OUTPUT (4u << 20)
#define CHECK_MAX_OUTPUT (1u << 20)
#define MAX_BRIDGE_ARGS 24

static const char *const format_names[] = {"auto", "native", "workdir", "kernelbench"};

const char *candidate_format_name(enum candidate_format f)
{
	return (unsigned)f < sizeof format_names / sizeof format_names[0] ? format_names[f] : "?";
}

int candidate_format_parse(const char *s, enum candidate_format *out, struct ca_diag *d)
{
	for (size_t i = 0; i < sizeof format_names / sizeof format_names[0]; i++)
		if (strcmp(s, format_names[i]) == 0) {
			*out = (enum candidate_format)i;
			return 0;
		}
	return ca_fail(d, CA_ERR_INVALID,
		       "unknown candidate format '%s' (auto, native, workdir or kernelbench)", s);
}

static bool dir_has(const char *dir, const char *name, bool want_dir)
{
	char path[PATH_MAX];
	if (ca_path_join(path, sizeof path, dir, name))
		return false;
	return want_dir ? ca_is_dir(path) : ca_is_file(path);
}

int candidate_format_detect(const char *path, enum candidate_format *fmt, char *resolved,
			    size_t resolved_size, struct ca_diag *d)
{
	enum candidate_format found;
	bool is_dir = ca_is_dir(path);

	char real[PATH_MAX];

	if (!is_dir && !ca_is_file(path))
		return ca_fail(d, CA_ERR_NOTFOUND, "candidate %s does not exist", path);
	/* Absolute and without symlinks: the sandbox binds it at this path. */
	if (!realpath(path, real) || ca_strlcpy(resolved, real, resolved_size))
		return ca_fail(d, CA_ERR_NOTFOUND, "candidate %s: cannot resolve the path", path);
	if (!is_dir)
		found = CANDIDATE_KERNELBENCH;
	else if (dir_has(path, "binding.cpp", false))
		found = CANDIDATE_WORKDIR;
	else if (dir_has(path, "kernels", true) && *fmt != CANDIDATE_KERNELBENCH)
		found = CANDIDATE_NATIVE;
	else if (dir_has(path, "model_new.py", false))
		found = CANDIDATE_KERNELBENCH;
	else
		return ca_fail(d, CA_ERR_NOTFOUND,
			       "%s is not a candidate: expected kernels/ (native), binding.cpp with "
			       "model_new.py and kernels/ (CUDA-Agent workdir), or a .py file "
			       "defining ModelNew (KernelBench)", path);
	if (*fmt != CANDIDATE_AUTO && *fmt != found &&
	    !(*fmt == CANDIDATE_NATIVE && is_dir && dir_has(path, "kernels", true)))
		return ca_fail(d, CA_ERR_NOTFOUND, "%s does not look like a %s candidate (it looks "
			       "like a %s one)", path, candidate_format_name(*fmt),
			       candidate_format_name(found));
	if (*fmt == CANDIDATE_AUTO)
		*fmt = found;
	if (*fmt == CANDIDATE_KERNELBENCH && is_dir &&
	    ca_path_join(resolved, resolved_size, real, "model_new.py"))
		return ca_fail(d, CA_ERR_LIMIT, "candidate path too long");
	return 0;
}

/* Directories the sandbox shows anyway (sandbox.h: the fresh root's read-only system binds). */
static bool system_visible(const char *p)
{
	static const char *const roots[] = {"/usr", "/etc", "/opt", "/bin", "/sbin", "/lib",
					    "/lib32", "/lib64", "/libx32"};
	for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
		size_t n = strlen(roots[i]);
		if (strncmp(p, roots[i], n) == 0 && (p[n] == '\0' || p[n] == '/'))
			return true;
	}
	return false;
}

static bool inside(const char *p, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/' || dir[n - 1] == '/');
}

/* Adds dir unless the sandbox shows it already or a listed directory holds it; drops listed
 * directories that dir holds. */
static int add_dir(struct python_runtime *rt, const char *dir, struct ca_diag *d)
{
	char real[PATH_MAX];
	if (!realpath(dir, real) || !ca_is_dir(real) || system_visible(real) ||
	    strcmp(real, "/") == 0)
		return 0;
	for (int i = 0; i < rt->n_dirs; i++)
		if (inside(real, rt->dirs[i]))
			return 0;
	for (int i = 0; i < rt->n_dirs;) {
		if (inside(rt->dirs[i], real)) {
			memmove(rt->dirs[i], rt->dirs[rt->n_dirs - 1], sizeof rt->dirs[i]);
			rt->n_dirs--;
		} else {
			i++;
		}
	}
	if (rt->n_dirs == PY_RUNTIME_MAX_DIRS)
		return ca_fail(d, CA_ERR_LIMIT, "python: more than %d directories to show in the "
			       "sandbox", PY_RUNTIME_MAX_DIRS);
	ca_strlcpy(rt->dirs[rt->n_dirs++], real, sizeof rt->dirs[0]);
	return 0;
}

static int add_dir_value(struct python_runtime *rt, const json_t *v, struct ca_diag *d)
{
	const char *s = json_string_value(v);
	return s && s[0] == '/' ? add_dir(rt, s, d) : 0;
}

/* Runs `argv` (a Python program of ours, PYTHONPATH `pp_env`) and parses its stdout as one JSON
 * value into *out; a failure to start, a nonzero exit or a signal says `what` failed. */
static int run_json(const char *const *argv, const char *pp_env, double timeout_s,
		    const char *what, json_t **out, struct ca_diag *d)
{
	const char *env_add[] = {pp_env, "PYTHONDONTWRITEBYTECODE=1", NULL};
	struct ca_run_opts ro = {.env_add = env_add, .timeout_s = timeout_s,
				 .stdout_cap = PROBE_MAX_OUTPUT};
	struct ca_run_result res = {0};
	int rc;
	*out = NULL;
	if ((rc = ca_run(argv, &ro, &res, d)))
		return ca_fail_prefix(d, rc, "cannot run %s", argv[0]);
	if (res.timed_out || res.term_signal || res.exit_code != 0) {
		char how[128];
		ca_run_describe(&res, how, sizeof how);
		rc = ca_fail(d, CA_ERR_CHILD, "%s failed (%s): %.300s", what, how,
			     res.err ? res.err : "");
	} else {
		*out = json_loads(res.out, 0, NULL);
	}
	ca_run_result_free(&res);
	return rc;
}

int python_runtime_probe(const char *python, struct python_runtime *rt, struct ca_diag *d)
{
	static const char script[] =
		"import json, os, sys\n"
		"print(json.dumps({'exe': sys.executable, 'prefix': sys.prefix,\n"
		"                  'base_prefix': sys.base_prefix,\n"
		"                  'path': [p for p in sys.path if p and os.path.isdir(p)]}))\n";
	char pp_env[PATH_MAX + 16];
	const char *argv[] = {python, "-c", script, NULL};
	json_t *obj = NULL, *path;
	size_t i;
	int rc;

	memset(rt, 0, sizeof *rt);
	if ((rc = ca_python_dir(rt->package_dir, sizeof rt->package_dir, NULL, d)))
		return rc;
	if ((rc = ca_pythonpath_env(pp_env, sizeof pp_env, rt->package_dir, PYTHONPATH_OURS, NULL,
				    d)))
		return rc;
	if ((rc = run_json(argv, pp_env, 60.0, python, &obj, d)))
		return rc;
	if (!json_is_object(obj) || !json_is_string(json_object_get(obj, "exe")) ||
	    json_string_value(json_object_get(obj, "exe"))[0] != '/') {
		rc = ca_fail(d, CA_ERR_CHILD, "%s: unexpected answer to the runtime probe", python);
		goto out;
	}
	ca_strlcpy(rt->exe, json_string_value(json_object_get(obj, "exe")), sizeof rt->exe);
	if ((rc = add_dir(rt, rt->package_dir, d)) ||
	    (rc = add_dir_value(rt, json_object_get(obj, "prefix"), d)) ||
	    (rc = add_dir_value(rt, json_object_get(obj, "base_prefix"), d)))
		goto out;
	json_array_foreach(json_object_get(obj, "path"), i, path)
		if ((rc = add_dir_value(rt, path, d)))
			goto out;
out:
	json_decref(obj);
	return rc;
}

/* One mask of the view's answer, checked: its source inside `root`, its destination a file. */
static int add_mask(struct python_runtime *rt, const json_t *pair, const char *root,
		    struct ca_diag *d)
{
	const char *src = json_string_value(json_array_get(pair, 0));
	const char *dst = json_string_value(json_array_get(pair, 1));
	size_t n = strlen(root);
	if (!json_is_array(pair) || json_array_size(pair) != 2 || !src || !dst ||
	    strncmp(src, root, n) != 0 || src[n] != '/' || strstr(src, "/..") || dst[0] != '/' ||
	    !ca_is_file(src) || !ca_is_file(dst))
		return ca_fail(d, CA_ERR_CHILD, "torch_view: a mask that is not a file of %s shown "
			       "over a file", root);
	if (rt->n_masks == PY_VIEW_MAX_MASKS)
		return ca_fail(d, CA_ERR_LIMIT, "torch_view: more than %d masks", PY_VIEW_MAX_MASKS);
	struct python_mask *m = &rt->masks[rt->n_masks];
	if (ca_strlcpy(m->src, src, sizeof m->src) || ca_strlcpy(m->dst, dst, sizeof m->dst))
		return ca_fail(d, CA_ERR_LIMIT, "torch_view: path too long");
	rt->n_masks++;
	return 0;
}

int python_torch_view(const char *python, struct python_runtime *rt, struct ca_diag *d)
{
	char cache[PATH_MAX], root[PATH_MAX], pp_env[PATH_MAX + 16];
	const char *argv[] = {python, "-m", "cuda_agent_bridge.torch_view", "--cache", root, NULL};
	json_t *obj = NULL, *pair;
	size_t i;
	int rc;

	rt->n_masks = 0;
	if ((rc = ca_cache_dir(cache, sizeof cache, d)) ||
	    (rc = ca_format(root, sizeof root, "%s/torch-view", cache)) ||
	    (rc = ca_mkdirs(root, 0755, d)) || !realpath(root, cache) ||
	    (rc = ca_format(root, sizeof root, "%s", cache)) ||
	    (rc = ca_pythonpath_env(pp_env, sizeof pp_env, rt->package_dir, PYTHONPATH_OURS, NULL,
				    d)))
		return rc ? rc : ca_fail(d, CA_ERR_IO, "torch_view: cannot resolve %s", root);
	/* first build: copies of about 2 GB of libraries (seconds; minutes on a slow disk) */
	if ((rc = run_json(argv, pp_env, 600.0, "building the view of torch without its kernels",
			   &obj, d)))
		goto out;
	if (!json_is_array(json_object_get(obj, "masks"))) {
		rc = ca_fail(d, CA_ERR_CHILD, "torch_view: unexpected answer");
		goto out;
	}
	json_array_foreach(json_object_get(obj, "masks"), i, pair)
		if ((rc = add_mask(rt, pair, root, d)))
			goto out;
	const char *preload = json_string_value(json_object_get(obj, "preload"));
	rt->preload[0] = '\0';
	if (preload && preload[0]) {
		bool shown = false;
		for (int k = 0; k < rt->n_masks; k++)
			shown |= strcmp(rt->masks[k].src, preload) == 0 &&
				 strcmp(rt->masks[k].dst, preload) == 0;
		if (!shown || ca_strlcpy(rt->preload, preload, sizeof rt->preload)) {
			rc = ca_fail(d, CA_ERR_CHILD, "torch_view: a preload that is not a mask");
			goto out;
		}
	}
	rt->view_ready = true;
	ca_log_debug("torch view: %d masks (%.3f s)", rt->n_masks,
		     json_number_value(json_object_get(obj, "seconds")));
out:
	if (rc) {
		rt->n_masks = 0;
		rt->preload[0] = '\0';
	}
	json_decref(obj);
	return rc;
}

static int status_from(const char *s, enum build_status *out)
{
	static const struct {
		const char *name;
		enum build_status status;
	} map[] = {{"ok", BUILD_OK},
		   {"build.error", BUILD_COMPILE_ERROR},
		   {"build.no_sources", BUILD_NO_SOURCES},
		   {"build.timeout", BUILD_TIMEOUT},
		   {"refused", BUILD_RULE_VIOLATION}};
	for (size_t i = 0; s && i < sizeof map / sizeof map[0]; i++)
		if (strcmp(s, map[i].name) == 0) {
			*out = map[i].status;
			return 0;
		}
	return -1;
}

/* The last line of text that parses as a JSON object. */
static json_t *last_json_line(char *text)
{
	json_t *found = NULL;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		json_t *obj = json_loads(line, 0, NULL);
		if (json_is_object(obj)) {
			json_decref(found);
			found = obj;
		} else {
			json_decref(obj);
		}
	}
	return found;
}

/* The reason codes a static check may give (anything else from the Python side is a bug). */
static bool refusal_code_known(const char *code)
{
	return code && (strcmp(code, "hack.harness_tampering") == 0 ||
			strcmp(code, "hack.torch_compute") == 0 || strcmp(code, "hack.fallback") == 0 ||
			strcmp(code, "candidate.load_failed") == 0);
}

static void refusal_set(struct torch_refusal *r, const char *code, const char *message)
{
	ca_strlcpy(r->code, code, sizeof r->code);
	ca_printable(r->message, message && message[0] ? message : "refused by the static check",
		     sizeof r->message);
}

/* Runs `python -m <module> <args...>` with the package on PYTHONPATH; run receives the result. */
static int run_module(const char *python, const char *module, const char *const *args,
		      double timeout_s, size_t stdout_cap, struct ca_run_result *run,
		      struct ca_diag *d)
{
	char pp_env[PYLAUNCH_ENV_MAX];
	const char *env_add[] = {pp_env, "PYTHONDONTWRITEBYTECODE=1", NULL};
	const char *argv[MAX_BRIDGE_ARGS];
	struct ca_run_opts ro = {.env_add = env_add, .timeout_s = timeout_s,
				 .stdout_cap = stdout_cap};
	size_t n = 0;
	int rc;

	if ((rc = ca_pythonpath_env(pp_env, sizeof pp_env, NULL, PYTHONPATH_OURS, NULL, d)))
		return rc;
	argv[n++] = python;
	argv[n++] = "-m";
	argv[n++] = module;
	for (size_t i = 0; args[i]; i++) {
		if (n + 2 > sizeof argv / sizeof argv[0])
			return ca_fail(d, CA_ERR_LIMIT, "%s: too many arguments", module);
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	if ((rc = ca_run(argv, &ro, run, d)))
		return ca_fail_prefix(d, rc, "cannot run %s with %s", module, python);
	return 0;
}

/* The errors lines of a report (at most what fits) into res->errors, after what is there. */
static void append_lines(char *buf, size_t size, const json_t *lines)
{
	size_t i;
	json_t *v;
	json_array_foreach(lines, i, v) {
		const char *line = json_string_value(v);
		size_t used = strlen(buf);
		if (line && used + strlen(line) + 2 < size)
			snprintf(buf + used, size - used, "%s\n", line);
	}
}

/* The symbol check of every built module; a refusal turns res into BUILD_SYMBOL_VIOLATION. */
static int check_modules(const json_t *mods, const char *torch_lib, enum torch_profile profile,
			 struct build_result *res, struct torch_refusal *refusal, struct ca_diag *d)
{
	char report[CA_BUILD_LOG_MAX], display[256];
	size_t i, j;
	json_t *m;
	int rc = 0;

	json_array_foreach(mods, i, m) {
		const char *lib = json_string_value(json_object_get(m, "library"));
		const char *name = json_string_value(json_object_get(m, "name"));
		struct torch_refusal one = {"", ""};
		bool seen = false;
		if (!lib)
			return ca_fail(d, CA_ERR_CHILD, "torch_build reported a module without a "
				       "library");
		for (j = 0; j < i && !seen; j++) {
			const char *other = json_string_value(json_object_get(json_array_get(mods, j),
									      "library"));
			seen = other && strcmp(lib, other) == 0;
		}
		if (seen)
			continue;
		snprintf(display, sizeof display, "%.200s.so", name ? name : "extension");
		rc = torch_rules_check_library(lib, display, torch_lib, profile, &one, report,
					       sizeof report, d);
		if (rc == CA_ERR_REJECTED) {
			if (res->status == BUILD_OK)
				res->errors[0] = '\0';
			res->status = BUILD_SYMBOL_VIOLATION;
			size_t used = strlen(res->errors);
			snprintf(res->errors + used, sizeof res->errors - used, "%s", report);
			if (!refusal->code[0] || (strcmp(one.code, "hack.harness_tampering") == 0 &&
						  strcmp(refusal->code, "hack.harness_tampering") != 0))
				*refusal = one;
			rc = 0;
		} else if (rc) {
			return ca_fail_prefix(d, rc, "checking %s", display);
		}
	}
	return 0;
}

int torch_build_run_checked(const char *python, const char *const *args, double timeout_s,
			    enum torch_profile profile, struct build_result *res, json_t **modules,
			    struct torch_refusal *refusal, struct ca_diag *d)
{
	const char *argv[MAX_BRIDGE_ARGS];
	struct ca_run_result run = {0};
	json_t *rep = NULL, *v;
	size_t n = 0, i;
	int rc;

	*modules = NULL;
	refusal->code[0] = refusal->message[0] = '\0';
	for (i = 0; args[i]; i++) {
		if (n + 3 >= sizeof argv / sizeof argv[0])
			return ca_fail(d, CA_ERR_LIMIT, "torch_build: too many arguments");
		argv[n++] = args[i];
	}
	argv[n++] = "--profile";
	argv[n++] = torch_profile_name(profile);
	argv[n] = NULL;
	if ((rc = run_module(python, "cuda_agent_bridge.torch_build", argv, timeout_s,
			     REPORT_MAX_OUTPUT, &run, d)))
		return rc;
	if (run.timed_out) {
		res->status = BUILD_TIMEOUT;
		snprintf(res->errors, sizeof res->errors, "the build took more than %.0f s",
			 timeout_s);
		res->seconds = run.seconds;
		goto out;
	}
	rep = run.out ? last_json_line(run.out) : NULL;
	if (!rep) {
		char how[128];
		ca_run_describe(&run, how, sizeof how);
		rc = ca_fail(d, CA_ERR_CHILD, "torch_build gave no report (%s): %.300s", how,
			     run.err ? run.err : "");
		goto out;
	}
	if (status_from(json_string_value(json_object_get(rep, "status")), &res->status)) {
		const char *msg = json_string_value(json_object_get(rep, "message"));
		rc = ca_fail(d, CA_ERR_CHILD, "torch_build: %s",
			     msg && msg[0] ? msg : "the build could not run");
		goto out;
	}
	if (res->status == BUILD_RULE_VIOLATION) { /* "refused": the workdir's static check */
		const char *code = json_string_value(json_object_get(rep, "code"));
		if (!refusal_code_known(code)) {
			rc = ca_fail(d, CA_ERR_CHILD, "torch_build refused the candidate with an "
				     "unknown code '%.40s'", code ? code : "");
			goto out;
		}
		refusal_set(refusal, code, json_string_value(json_object_get(rep, "message")));
	}
	json_array_foreach(json_object_get(rep, "notes"), i, v)
		if (json_is_string(v))
			ca_log_warn("%s", json_string_value(v));
	res->seconds = json_number_value(json_object_get(rep, "seconds"));
	res->cached = json_is_true(json_object_get(rep, "cached"));
	res->sandboxed = json_is_true(json_object_get(rep, "sandboxed"));
	res->objects_compiled = (int)json_integer_value(json_object_get(rep, "units_compiled"));
	res->objects_cached = (int)json_integer_value(json_object_get(rep, "units_cached"));
	if (json_is_string(json_object_get(rep, "hash")))
		ca_strlcpy(res->hash, json_string_value(json_object_get(rep, "hash")),
			   sizeof res->hash);
	if (json_is_string(json_object_get(rep, "arch")))
		ca_strlcpy(res->arch, json_string_value(json_object_get(rep, "arch")),
			   sizeof res->arch);
	res->errors[0] = '\0';
	append_lines(res->errors, sizeof res->errors, json_object_get(rep, "errors"));
	if (!res->errors[0] && res->status != BUILD_OK) {
		const char *msg = json_string_value(json_object_get(rep, "message"));
		snprintf(res->errors, sizeof res->errors, "%s", msg ? msg : "the build failed");
	}
	if (res->status == BUILD_OK) {
		json_t *mods = json_object_get(rep, "modules");
		const char *lib = json_string_value(json_object_get(json_array_get(mods, 0),
								    "library"));
		const char *torch_lib = json_string_value(json_object_get(rep, "torch_lib"));
		if (!json_is_array(mods) || json_array_size(mods) == 0 || !lib) {
			rc = ca_fail(d, CA_ERR_CHILD, "torch_build reported no module");
			goto out;
		}
		if ((rc = check_modules(mods, torch_lib && torch_lib[0] ? torch_lib : NULL, profile,
					res, refusal, d)))
			goto out;
		if (res->status == BUILD_OK) {
			ca_strlcpy(res->library, lib, sizeof res->library);
			*modules = json_incref(mods);
		}
	}
out:
	json_decref(rep);
	ca_run_result_free(&run);
	return rc;
}

int torch_build_run(const char *python, const char *const *args, double timeout_s,
		    struct build_result *res, json_t **modules, struct ca_diag *d)
{
	struct torch_refusal refusal;
	return torch_build_run_checked(python, args, timeout_s, TORCH_PROFILE_CUDA_AGENT, res,
				       modules, &refusal, d);
}

int torch_static_check_run(const char *python, const char *path, bool workdir,
			   enum torch_profile profile, double timeout_s,
			   struct torch_refusal *refusal, struct ca_diag *d)
{
	const char *args[] = {"--profile", torch_profile_name(profile),
			      workdir ? "--workdir" : path, workdir ? path : NULL, NULL};
	struct ca_run_result run = {0};
	json_t *rep = NULL;
	int rc;

	refusal->code[0] = refusal->message[0] = '\0';
	if ((rc = run_module(python, "cuda_agent_bridge.static_check", args, timeout_s,
			     CHECK_MAX_OUTPUT, &run, d)))
		return rc;
	rep = run.out && !run.timed_out ? last_json_line(run.out) : NULL;
	const char *status = json_string_value(json_object_get(rep, "status"));
	const char *code = json_string_value(json_object_get(rep, "code"));
	const char *msg = json_string_value(json_object_get(rep, "message"));
	if (!status) {
		char how[128];
		ca_run_describe(&run, how, sizeof how);
		rc = ca_fail(d, CA_ERR_CHILD, "the static check gave no verdict (%s): %.300s", how,
			     run.err ? run.err : "");
	} else if (strcmp(status, "ok") == 0) {
		rc = 0;
	} else if ((strcmp(status, "refused") == 0 || strcmp(status, "invalid") == 0) &&
		   refusal_code_known(code)) {
		refusal_set(refusal, code, msg);
	} else {
		rc = ca_fail(d, CA_ERR_CHILD, "the static check could not run: %.300s",
			     msg && msg[0] ? msg : status);
	}
	json_decref(rep);
	ca_run_result_free(&run);
	return rc;
}
