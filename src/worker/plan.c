#include "worker/plan.h"

#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

static int get_path(const json_t *obj, const char *key, const char *where, bool required,
		    char **out, struct ca_diag *d)
{
	const json_t *v = json_object_get(obj, key);
	size_t len;

	*out = NULL;
	if (!v || json_is_null(v)) {
		if (required)
			return ca_fail(d, CA_ERR_PARSE, "plan: %s needs '%s'", where, key);
		return 0;
	}
	if (!json_is_string(v))
		return ca_fail(d, CA_ERR_PARSE, "plan: %s.%s must be a string", where, key);
	len = json_string_length(v);
	if (len == 0)
		return ca_fail(d, CA_ERR_INVALID, "plan: %s.%s is empty", where, key);
	if (len > PLAN_MAX_PATH)
		return ca_fail(d, CA_ERR_LIMIT, "plan: %s.%s is longer than %d bytes", where, key,
			       PLAN_MAX_PATH);
	if (strlen(json_string_value(v)) != len)
		return ca_fail(d, CA_ERR_INVALID, "plan: %s.%s contains a NUL byte", where, key);
	*out = strdup(json_string_value(v));
	if (!*out)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	return 0;
}

static int get_list(const json_t *obj, const char *key, const char *where, size_t min,
		    size_t max, const json_t **out, struct ca_diag *d)
{
	const json_t *v = json_object_get(obj, key);
	*out = v;
	if (!v || !json_is_array(v))
		return ca_fail(d, CA_ERR_PARSE, "plan: %s needs '%s' as a list", where, key);
	if (json_array_size(v) < min)
		return ca_fail(d, CA_ERR_INVALID, "plan: %s.%s needs at least %zu entries", where, key,
			       min);
	if (json_array_size(v) > max)
		return ca_fail(d, CA_ERR_LIMIT, "plan: %s.%s has %zu entries, over the limit of %zu",
			       where, key, json_array_size(v), max);
	return 0;
}

static int parse_trial(struct plan_trial *t, const json_t *e, const char *where, bool params,
		       bool outputs, struct ca_diag *d)
{
	int rc;
	if (!json_is_object(e))
		return ca_fail(d, CA_ERR_PARSE, "plan: %s must be an object", where);
	if (params && (rc = get_path(e, "params", where, true, &t->params, d)))
		return rc;
	if ((rc = get_path(e, "inputs", where, true, &t->inputs, d)))
		return rc;
	if (outputs && (rc = get_path(e, "outputs", where, true, &t->outputs, d)))
		return rc;
	return 0;
}

static void free_trial(struct plan_trial *t)
{
	free(t->params);
	free(t->inputs);
	free(t->outputs);
	memset(t, 0, sizeof *t);
}

static int parse_verify(struct worker_plan *p, const json_t *root, struct ca_diag *d)
{
	const json_t *list, *e;
	size_t i;
	int rc;

	if (!json_object_get(root, "verify"))
		return 0; /* no verification trials: timing or profile only */
	if ((rc = get_list(root, "verify", "plan", 0, PLAN_MAX_VERIFY, &list, d)))
		return rc;
	if (json_array_size(list) == 0)
		return 0;
	p->verify = calloc(json_array_size(list), sizeof *p->verify);
	if (!p->verify)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	json_array_foreach(list, i, e) {
		char where[64];
		snprintf(where, sizeof where, "verify[%zu]", i);
		p->num_verify = (int)i + 1;
		if ((rc = parse_trial(&p->verify[i], e, where, true, true, d)))
			return rc;
	}
	return 0;
}

static int parse_timing(struct plan_timing *t, const json_t *obj, struct ca_diag *d)
{
	const json_t *list, *e, *seed, *proto;
	size_t i;
	int rc;

	if (!json_is_object(obj))
		return ca_fail(d, CA_ERR_PARSE, "plan: 'timing' must be an object");
	if ((rc = get_path(obj, "params", "timing", true, &t->params, d)))
		return rc;

	if ((rc = get_list(obj, "rotation", "timing", 1, PLAN_MAX_ROTATION, &list, d)))
		return rc;
	t->rotation = calloc(json_array_size(list), sizeof *t->rotation);
	if (!t->rotation)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	json_array_foreach(list, i, e) {
		json_t *wrap = json_pack("{s:O}", "path", e);
		char where[64];
		snprintf(where, sizeof where, "timing.rotation[%zu]", i);
		if (!wrap)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory");
		rc = get_path(wrap, "path", where, true, &t->rotation[i], d);
		json_decref(wrap);
		if (rc)
			return rc;
		t->num_rotation = (int)i + 1;
	}

	proto = json_object_get(obj, "protocol");
	if (!proto)
		timing_protocol_defaults(&t->protocol);
	else if ((rc = timing_protocol_from_json(&t->protocol, proto, d)))
		return ca_fail_prefix(d, rc, "plan: timing.protocol");

	seed = json_object_get(obj, "seed");
	if (!json_is_integer(seed))
		return ca_fail(d, CA_ERR_PARSE, "plan: timing needs 'seed' as an integer");
	t->seed = (uint64_t)json_integer_value(seed);

	if (json_object_get(obj, "checks")) {
		if ((rc = get_list(obj, "checks", "timing", 0, TIMING_MAX_CHECKS, &list, d)))
			return rc;
	} else {
		list = NULL;
	}
	if ((int)json_array_size(list) != t->protocol.checks)
		return ca_fail(d, CA_ERR_INVALID,
			       "plan: timing.checks lists %zu input sets but the protocol asks for "
			       "%d checked calls",
			       json_array_size(list), t->protocol.checks);
	if (t->protocol.checks > 0) {
		t->checks = calloc((size_t)t->protocol.checks, sizeof *t->checks);
		if (!t->checks)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory");
		json_array_foreach(list, i, e) {
			char where[64];
			snprintf(where, sizeof where, "timing.checks[%zu]", i);
			t->num_checks = (int)i + 1;
			if ((rc = parse_trial(&t->checks[i], e, where, false, true, d)))
				return rc;
		}
	}

	e = json_object_get(obj, "final");
	if (!e)
		return ca_fail(d, CA_ERR_PARSE, "plan: timing needs 'final' (inputs, outputs)");
	return parse_trial(&t->final, e, "timing.final", false, true, d);
}

static void free_timing(struct plan_timing *t)
{
	free(t->params);
	for (int i = 0; i < t->num_rotation; i++)
		free(t->rotation[i]);
	free(t->rotation);
	for (int i = 0; i < t->num_checks; i++)
		free_trial(&t->checks[i]);
	free(t->checks);
	free_trial(&t->final);
	memset(t, 0, sizeof *t);
}

static int parse_profile(struct plan_profile *p, const json_t *obj, struct ca_diag *d)
{
	const json_t *calls;
	int rc;

	if (!json_is_object(obj))
		return ca_fail(d, CA_ERR_PARSE, "plan: 'profile' must be an object");
	if ((rc = get_path(obj, "params", "profile", true, &p->params, d)) ||
	    (rc = get_path(obj, "inputs", "profile", true, &p->inputs, d)))
		return rc;
	calls = json_object_get(obj, "calls");
	p->calls = PLAN_DEFAULT_PROFILE_CALLS;
	if (calls) {
		if (!json_is_integer(calls))
			return ca_fail(d, CA_ERR_PARSE, "plan: profile.calls must be an integer");
		if (json_integer_value(calls) < 1 ||
		    json_integer_value(calls) > PLAN_MAX_PROFILE_CALLS)
			return ca_fail(d, CA_ERR_LIMIT, "plan: profile.calls must be in [1, %d]",
				       PLAN_MAX_PROFILE_CALLS);
		p->calls = (int)json_integer_value(calls);
	}
	return 0;
}

int worker_plan_from_json(struct worker_plan *p, const json_t *root, struct ca_diag *d)
{
	const json_t *v;
	int rc;

	memset(p, 0, sizeof *p);
	if (!json_is_object(root))
		return ca_fail(d, CA_ERR_PARSE, "plan: expected a JSON object");

	if ((rc = get_path(root, "library", "plan", true, &p->library, d)))
		goto out;
	if (!strchr(p->library, '/')) {
		rc = ca_fail(d, CA_ERR_INVALID,
			     "plan: library '%s' must be a path (with a '/'), not a name dlopen "
			     "would search for",
			     p->library);
		goto out;
	}

	v = json_object_get(root, "device");
	if (v && !json_is_integer(v)) {
		rc = ca_fail(d, CA_ERR_PARSE, "plan: 'device' must be an integer");
		goto out;
	}
	if (v && (json_integer_value(v) < 0 || json_integer_value(v) > PLAN_MAX_DEVICE)) {
		rc = ca_fail(d, CA_ERR_INVALID, "plan: device %lld is out of range",
			     (long long)json_integer_value(v));
		goto out;
	}
	p->device = v ? (int)json_integer_value(v) : 0;

	v = json_object_get(root, "spec");
	if (!v) {
		rc = ca_fail(d, CA_ERR_PARSE, "plan: needs 'spec' (args, params, outputs)");
		goto out;
	}
	if ((rc = task_spec_from_json(&p->spec, v, d))) {
		rc = ca_fail_prefix(d, rc, "plan: spec");
		goto out;
	}

	if ((rc = parse_verify(p, root, d)))
		goto out;

	v = json_object_get(root, "timing");
	if (v && !json_is_null(v)) {
		p->has_timing = true;
		if ((rc = parse_timing(&p->timing, v, d)))
			goto out;
	}
	v = json_object_get(root, "gate_after_verify");
	if (v && !json_is_boolean(v) && !json_is_integer(v) && !json_is_null(v)) {
		rc = ca_fail(d, CA_ERR_PARSE, "plan: 'gate_after_verify' must be a boolean");
		goto out;
	}
	p->gate_after_verify = json_is_true(v) || (json_is_integer(v) && json_integer_value(v));

	v = json_object_get(root, "profile");
	if (v && !json_is_null(v)) {
		p->has_profile = true;
		if ((rc = parse_profile(&p->profile, v, d)))
			goto out;
	}
out:
	if (rc)
		worker_plan_free(p);
	return rc;
}

int worker_plan_load(struct worker_plan *p, const char *path, struct ca_diag *d)
{
	char *text = NULL;
	size_t len = 0;
	json_error_t err;
	json_t *root;
	int rc;

	memset(p, 0, sizeof *p);
	if ((rc = ca_read_file(path, PLAN_MAX_BYTES, &text, &len, d)))
		return ca_fail_prefix(d, rc, "plan");
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
	free(text);
	if (!root)
		return ca_fail(d, CA_ERR_PARSE, "plan %s: invalid JSON at line %d: %s", path,
			       err.line, err.text);
	rc = worker_plan_from_json(p, root, d);
	json_decref(root);
	return rc;
}

void worker_plan_free(struct worker_plan *p)
{
	free(p->library);
	task_spec_free(&p->spec);
	for (int i = 0; i < p->num_verify; i++)
		free_trial(&p->verify[i]);
	free(p->verify);
	free_timing(&p->timing);
	free(p->profile.params);
	free(p->profile.inputs);
	memset(p, 0, sizeof *p);
}
