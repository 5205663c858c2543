#include "worker/plan.h"

#include <stdlib.h>
#include <string.h>

#include "protocol/wire.h"
#include "protocol/layout.h"
#include "util/fs.h"

static int get_slot(const json_t *obj, const char *where, struct plan_slot *s, struct ca_diag *d)
{
	const json_t *fd = json_object_get(obj, "fd"), *bytes = json_object_get(obj, "bytes");
	if (!json_is_object(obj) || !json_is_integer(fd) || !json_is_integer(bytes))
		return ca_fail(d, CA_ERR_PARSE, "plan: %s must be {\"fd\": n, \"bytes\": n}", where);
	if (json_integer_value(fd) < 3 || json_integer_value(fd) > PLAN_MAX_FD)
		return ca_fail(d, CA_ERR_INVALID, "plan: %s.fd must be in [3, %d]", where,
			       PLAN_MAX_FD);
	if (json_integer_value(bytes) <= 0 ||
	    (unsigned long long)json_integer_value(bytes) > LAYOUT_MAX_BYTES)
		return ca_fail(d, CA_ERR_INVALID, "plan: %s.bytes is out of range", where);
	s->fd = (int)json_integer_value(fd);
	s->bytes = (size_t)json_integer_value(bytes);
	return 0;
}

static int parse_slots(struct worker_plan *p, const json_t *obj, struct ca_diag *d)
{
	const char *kind = json_string_value(json_object_get(obj, "kind"));
	const json_t *inputs = json_object_get(obj, "inputs"), *e;
	size_t i;
	int rc;

	if (!json_is_object(obj))
		return ca_fail(d, CA_ERR_PARSE, "plan: needs 'slots' (kind, params, inputs, outputs)");
	if (kind && strcmp(kind, "cuda") == 0)
		p->kind = DEVICE_CUDA;
	else if (kind && strcmp(kind, "cpu") == 0)
		p->kind = DEVICE_CPU;
	else
		return ca_fail(d, CA_ERR_INVALID, "plan: slots.kind must be \"cuda\" or \"cpu\"");
	if ((rc = get_slot(json_object_get(obj, "params"), "slots.params", &p->params, d)) ||
	    (rc = get_slot(json_object_get(obj, "outputs"), "slots.outputs", &p->outputs, d)))
		return rc;
	if (!json_is_array(inputs) || json_array_size(inputs) < 1 ||
	    json_array_size(inputs) > PLAN_MAX_INPUTS)
		return ca_fail(d, CA_ERR_INVALID, "plan: slots.inputs must list 1 to %d slots",
			       PLAN_MAX_INPUTS);
	json_array_foreach(inputs, i, e) {
		char where[48];
		snprintf(where, sizeof where, "slots.inputs[%zu]", i);
		if ((rc = get_slot(e, where, &p->inputs[i], d)))
			return rc;
		p->num_inputs = (int)i + 1;
	}
	return 0;
}

static int get_device(struct worker_plan *p, const json_t *root, struct ca_diag *d)
{
	const json_t *v = json_object_get(root, "device");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > PLAN_MAX_DEVICE))
		return ca_fail(d, CA_ERR_INVALID, "plan: 'device' must be an integer in [0, %d]",
			       PLAN_MAX_DEVICE);
	p->device = v ? (int)json_integer_value(v) : 0;
	return 0;
}

int worker_plan_from_json(struct worker_plan *p, const json_t *root, struct ca_diag *d)
{
	const json_t *v;
	size_t len;
	int rc;

	memset(p, 0, sizeof *p);
	if (!json_is_object(root))
		return ca_fail(d, CA_ERR_PARSE, "plan: expected a JSON object");
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) != WIRE_PLAN_VERSION)
		return ca_fail(d, CA_ERR_INVALID, "plan: 'version' must be %d", WIRE_PLAN_VERSION);

	v = json_object_get(root, "reference");
	if (v && !json_is_boolean(v)) {
		rc = ca_fail(d, CA_ERR_INVALID, "plan: 'reference' must be true or false");
		goto out;
	}
	p->reference = json_is_true(v);
	if (p->reference) {
		if (json_object_get(root, "library") || json_object_get(root, "spec") ||
		    json_object_get(root, "slots")) {
			rc = ca_fail(d, CA_ERR_INVALID,
				     "plan: a reference process's plan names no library, spec or "
				     "slots");
			goto out;
		}
		rc = get_device(p, root, d);
		goto out;
	}

	v = json_object_get(root, "library");
	len = json_string_length(v);
	if (!json_is_string(v) || len == 0 || len > PLAN_MAX_PATH ||
	    strlen(json_string_value(v)) != len) {
		rc = ca_fail(d, CA_ERR_INVALID, "plan: 'library' must be a path of at most %d bytes",
			     PLAN_MAX_PATH);
		goto out;
	}
	if (!strchr(json_string_value(v), '/')) {
		rc = ca_fail(d, CA_ERR_INVALID,
			     "plan: library '%s' must be a path (with a '/'), not a name dlopen "
			     "would search for",
			     json_string_value(v));
		goto out;
	}
	if (!(p->library = strdup(json_string_value(v)))) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}

	if ((rc = get_device(p, root, d)))
		goto out;

	v = json_object_get(root, "spec");
	if (!v) {
		rc = ca_fail(d, CA_ERR_PARSE, "plan: needs 'spec' (args, params, outputs)");
		goto out;
	}
	if ((rc = task_spec_from_json(&p->spec, v, d))) {
		rc = ca_fail_prefix(d, rc, "plan: spec");
		goto out;
	}
	rc = parse_slots(p, json_object_get(root, "slots"), d);
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
	memset(p, 0, sizeof *p);
}
