#include "tensor/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const perturb_names[] = {"elements", "symmetric", "uniform", "none"};

static int parse_perturb(struct tensor_spec *t, const json_t *st, const char *kind, size_t idx,
			 struct ca_diag *d)
{
	const json_t *p = json_object_get(st, "perturb");
	t->perturb = TENSOR_PERTURB_ELEMENTS;
	if (!st)
		return 0;
	if (!json_is_object(st) || !json_is_string(p))
		return ca_fail(d, CA_ERR_PARSE, "%s[%zu] (%s): 'structure' needs a 'perturb' name",
			       kind, idx, t->name);
	for (size_t i = 0; i < sizeof perturb_names / sizeof *perturb_names; i++)
		if (strcmp(json_string_value(p), perturb_names[i]) == 0)
			t->perturb = (enum tensor_perturb)i;
	if (strcmp(json_string_value(p), perturb_names[t->perturb]) != 0)
		return ca_fail(d, CA_ERR_PARSE, "%s[%zu] (%s): unknown perturbation '%s'", kind, idx,
			       t->name, json_string_value(p));
	if (t->perturb == TENSOR_PERTURB_SYMMETRIC &&
	    (t->ndim < 2 || t->shape[t->ndim - 1] != t->shape[t->ndim - 2]))
		return ca_fail(d, CA_ERR_PARSE,
			       "%s[%zu] (%s): a symmetric perturbation needs square last two "
			       "dimensions",
			       kind, idx, t->name);
	return 0;
}

const char *tensor_perturb_name(enum tensor_perturb p)
{
	return (unsigned)p < sizeof perturb_names / sizeof *perturb_names ? perturb_names[p] : "?";
}

static int parse_one(struct tensor_spec *t, const json_t *e, const char *kind, size_t idx,
		     struct ca_diag *d)
{
	const json_t *name = json_object_get(e, "name");
	const json_t *dtype = json_object_get(e, "dtype");
	const json_t *shape = json_object_get(e, "shape");
	const json_t *device = json_object_get(e, "device");
	size_t i;
	const json_t *dim;

	if (!json_is_object(e) || !json_is_string(dtype) || !json_is_array(shape))
		return ca_fail(d, CA_ERR_PARSE, "%s[%zu]: needs dtype and shape", kind, idx);
	snprintf(t->name, sizeof t->name, "%s",
		 json_is_string(name) ? json_string_value(name) : "");
	t->dtype = ca_dtype_from_torch(json_string_value(dtype));
	if (t->dtype == CA_DTYPE_INVALID)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "%s[%zu] (%s): unsupported dtype %s", kind, idx,
			       t->name, json_string_value(dtype));
	if (json_array_size(shape) > CA_MAX_DIMS)
		return ca_fail(d, CA_ERR_LIMIT, "%s[%zu] (%s): more than %d dimensions", kind, idx,
			       t->name, CA_MAX_DIMS);
	t->ndim = (int)json_array_size(shape);
	json_array_foreach(shape, i, dim) {
		if (!json_is_integer(dim) || json_integer_value(dim) < 0)
			return ca_fail(d, CA_ERR_PARSE, "%s[%zu] (%s): bad dimension", kind, idx,
				       t->name);
		t->shape[i] = (int64_t)json_integer_value(dim);
	}
	{
		/* numel and nbytes must be computable without overflow (tensor_spec_numel/_nbytes) */
		int64_t n = 1, bytes;
		for (int k = 0; k < t->ndim; k++)
			if (__builtin_mul_overflow(n, t->shape[k], &n))
				return ca_fail(d, CA_ERR_LIMIT, "%s[%zu] (%s): shape is too large", kind,
					       idx, t->name);
		if (__builtin_mul_overflow(n, (int64_t)ca_dtype_size(t->dtype), &bytes))
			return ca_fail(d, CA_ERR_LIMIT, "%s[%zu] (%s): shape is too large", kind, idx,
				       t->name);
	}
	t->on_cpu = json_is_string(device) && strcmp(json_string_value(device), "cpu") == 0;
	return parse_perturb(t, json_object_get(e, "structure"), kind, idx, d);
}

static int parse_list(const json_t *obj, const char *key, struct tensor_spec **out, int *count,
		      struct ca_diag *d)
{
	const json_t *arr = json_object_get(obj, key);
	size_t i;
	const json_t *e;

	*out = NULL;
	*count = 0;
	if (!arr)
		return 0;
	if (!json_is_array(arr))
		return ca_fail(d, CA_ERR_PARSE, "spec: '%s' must be a list", key);
	if (json_array_size(arr) > CA_SPEC_MAX_TENSORS)
		return ca_fail(d, CA_ERR_LIMIT, "spec: more than %d %s", CA_SPEC_MAX_TENSORS, key);
	if (json_array_size(arr) == 0)
		return 0;
	*out = calloc(json_array_size(arr), sizeof **out);
	if (!*out)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	json_array_foreach(arr, i, e) {
		int rc = parse_one(&(*out)[i], e, key, i, d);
		if (rc)
			return rc;
		(*count)++;
	}
	return 0;
}

int task_spec_from_json(struct task_spec *spec, const json_t *obj, struct ca_diag *d)
{
	int rc;
	memset(spec, 0, sizeof *spec);
	if (!json_is_object(obj))
		return ca_fail(d, CA_ERR_PARSE, "spec: expected an object");
	rc = parse_list(obj, "args", &spec->args, &spec->num_args, d);
	if (!rc)
		rc = parse_list(obj, "params", &spec->params, &spec->num_params, d);
	if (!rc)
		rc = parse_list(obj, "outputs", &spec->outputs, &spec->num_outputs, d);
	if (!rc && spec->num_outputs == 0)
		rc = ca_fail(d, CA_ERR_INVALID, "spec: forward() returns no tensors");
	if (rc)
		task_spec_free(spec);
	return rc;
}

static json_t *list_to_json(const struct tensor_spec *t, int n)
{
	json_t *arr = json_array();
	for (int i = 0; i < n; i++) {
		json_t *shape = json_array();
		for (int k = 0; k < t[i].ndim; k++)
			json_array_append_new(shape, json_integer(t[i].shape[k]));
		json_t *e = json_pack("{s:i, s:s, s:s, s:o, s:s}", "index", i, "name", t[i].name,
				      "dtype", ca_dtype_torch_name(t[i].dtype), "shape", shape,
				      "device", t[i].on_cpu ? "cpu" : "cuda");
		if (t[i].perturb != TENSOR_PERTURB_ELEMENTS)
			json_object_set_new(e, "structure",
					    json_pack("{s:s}", "perturb",
						      tensor_perturb_name(t[i].perturb)));
		json_array_append_new(arr, e);
	}
	return arr;
}

json_t *task_spec_to_json(const struct task_spec *spec)
{
	return json_pack("{s:o, s:o, s:o}", "args", list_to_json(spec->args, spec->num_args),
			 "params", list_to_json(spec->params, spec->num_params), "outputs",
			 list_to_json(spec->outputs, spec->num_outputs));
}

void task_spec_free(struct task_spec *spec)
{
	free(spec->args);
	free(spec->params);
	free(spec->outputs);
	memset(spec, 0, sizeof *spec);
}

int64_t tensor_spec_numel(const struct tensor_spec *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

size_t tensor_spec_nbytes(const struct tensor_spec *t)
{
	return (size_t)tensor_spec_numel(t) * ca_dtype_size(t->dtype);
}

void tensor_spec_format(const struct tensor_spec *t, char *out, size_t out_size)
{
	size_t off = 0;
	int n = snprintf(out, out_size, "%s[", ca_dtype_torch_name(t->dtype));
	if (n < 0 || (size_t)n >= out_size)
		return;
	off = (size_t)n;
	for (int i = 0; i < t->ndim && off < out_size; i++) {
		n = snprintf(out + off, out_size - off, "%s%lld", i ? ", " : "",
			     (long long)t->shape[i]);
		if (n < 0)
			return;
		off += (size_t)n;
	}
	if (off < out_size)
		snprintf(out + off, out_size - off, "]");
}
