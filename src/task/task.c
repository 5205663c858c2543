#include "task/task.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/str.h"

const char *task_precision_name(enum task_precision p)
{
	switch (p) {
	case TASK_FP16: return "fp16";
	case TASK_BF16: return "bf16";
	default: return "fp32";
	}
}

static int parse_tolerance(const json_t *root, const char *key, double *out, struct ca_diag *d)
{
	const json_t *v = json_object_get(root, key);
	if (!v)
		return 0;
	if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0 ||
	    json_number_value(v) > 1e3)
		return ca_fail(d, CA_ERR_INVALID,
			       "task.json: '%s' must be a number between 0 and 1000", key);
	*out = json_number_value(v);
	return 0;
}

/* A string field of 1..size-1 bytes without control characters, copied into out; absent or null
 * leaves out as it is. */
static int parse_short_string(const json_t *root, const char *key, char *out, size_t size,
			      struct ca_diag *d)
{
	const json_t *v = json_object_get(root, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= size ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return ca_fail(d, CA_ERR_INVALID, "task.json: '%s' must be a string of 1-%zu bytes",
			       key, size - 1);
	for (const char *p = json_string_value(v); *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return ca_fail(d, CA_ERR_INVALID,
				       "task.json: '%s' must not hold control characters", key);
	ca_strlcpy(out, json_string_value(v), size);
	return 0;
}

/* The importers' fields (docs/tasks.md): level, name, ops, data_source. */
static int parse_import_fields(struct task *t, const json_t *root, struct ca_diag *d)
{
	const json_t *v = json_object_get(root, "level");
	size_t i;
	int rc;

	if (v && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > CA_TASK_LEVEL_MAX)
			return ca_fail(d, CA_ERR_INVALID,
				       "task.json: 'level' must be a whole number 0-%d or null",
				       CA_TASK_LEVEL_MAX);
		t->level = (int)json_integer_value(v);
	}
	rc = parse_short_string(root, "name", t->name, sizeof t->name, d);
	if (!rc)
		rc = parse_short_string(root, "data_source", t->data_source,
					sizeof t->data_source, d);
	if (rc)
		return rc;
	v = json_object_get(root, "ops");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > CA_TASK_MAX_OPS)
		return ca_fail(d, CA_ERR_INVALID,
			       "task.json: 'ops' must be an array of at most %d strings",
			       CA_TASK_MAX_OPS);
	for (i = 0; i < json_array_size(v); i++) {
		const json_t *op = json_array_get(v, i);
		if (!json_is_string(op) || json_string_length(op) == 0 ||
		    json_string_length(op) >= CA_TASK_OP_MAX ||
		    strlen(json_string_value(op)) != json_string_length(op))
			return ca_fail(d, CA_ERR_INVALID,
				       "task.json: 'ops' entries must be strings of 1-%d bytes",
				       CA_TASK_OP_MAX - 1);
	}
	return 0;
}

static int parse_task_json(struct task *t, const char *text, size_t len, struct ca_diag *d)
{
	static const char *const known[] = {"id",    "source", "precision", "atol", "rtol",
					    "notes", "level",  "name",      "ops",  "data_source",
					    NULL};
	json_error_t jerr;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	const char *key;
	json_t *val;
	int rc = 0;

	if (!root) {
		char shown[sizeof jerr.text];
		return ca_fail(d, CA_ERR_PARSE, "task.json line %d: %s", jerr.line,
			       ca_printable(shown, jerr.text, sizeof shown));
	}
	if (!json_is_object(root)) {
		rc = ca_fail(d, CA_ERR_PARSE, "task.json must hold a JSON object");
		goto out;
	}
	json_object_foreach(root, key, val) {
		int ok = 0;
		for (const char *const *k = known; *k; k++)
			ok |= strcmp(*k, key) == 0;
		if (!ok) {
			char shown[64];
			rc = ca_fail(d, CA_ERR_INVALID,
				     "task.json: unknown field '%s' (known: id, source, precision, "
				     "atol, rtol, notes, level, name, ops, data_source)",
				     ca_printable(shown, key, sizeof shown));
			goto out;
		}
	}
	val = json_object_get(root, "id");
	if (val) {
		if (!json_is_string(val) || json_string_length(val) == 0 ||
		    json_string_length(val) >= sizeof t->id) {
			rc = ca_fail(d, CA_ERR_INVALID, "task.json: 'id' must be a string of 1-%zu "
				     "characters", sizeof t->id - 1);
			goto out;
		}
		ca_strlcpy(t->id, json_string_value(val), sizeof t->id);
	}
	val = json_object_get(root, "source");
	if (json_is_string(val))
		ca_strlcpy(t->source, json_string_value(val), sizeof t->source);
	val = json_object_get(root, "precision");
	if (val) {
		const char *p = json_is_string(val) ? json_string_value(val) : "";
		if (strcmp(p, "fp32") == 0)
			t->precision = TASK_FP32;
		else if (strcmp(p, "fp16") == 0)
			t->precision = TASK_FP16;
		else if (strcmp(p, "bf16") == 0)
			t->precision = TASK_BF16;
		else {
			rc = ca_fail(d, CA_ERR_INVALID,
				     "task.json: 'precision' must be \"fp32\", \"fp16\" or \"bf16\"");
			goto out;
		}
	}
	rc = parse_tolerance(root, "atol", &t->atol, d);
	if (!rc)
		rc = parse_tolerance(root, "rtol", &t->rtol, d);
	if (!rc)
		rc = parse_import_fields(t, root, d);
out:
	json_decref(root);
	return rc;
}

/* A word in model.py outside comments is enough for a first check; the bridge checks for real. */
static int mentions(const char *text, const char *word)
{
	return strstr(text, word) != NULL;
}

int task_load(struct task *t, const char *dir, struct ca_diag *d)
{
	char path[PATH_MAX];
	char *json_text = NULL;
	size_t json_len = 0;
	struct ca_hasher h = {0};
	const char *base;
	int rc;

	memset(t, 0, sizeof *t);
	t->atol = 1e-2;
	t->rtol = 1e-2;
	ca_strlcpy(t->source, "local", sizeof t->source);
	t->level = -1;
	if (!ca_is_dir(dir))
		return ca_fail(d, CA_ERR_NOTFOUND, "task directory %s does not exist", dir);
	rc = ca_realpath(dir, t->dir, sizeof t->dir, d);
	if (rc)
		return rc;
	base = strrchr(t->dir, '/');
	ca_strlcpy(t->id, base && base[1] ? base + 1 : t->dir, sizeof t->id);

	if (ca_path_join(path, sizeof path, t->dir, "model.py"))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	rc = ca_read_file(path, CA_TASK_MAX_MODEL_BYTES, &t->model_py, &t->model_py_len, d);
	if (rc == CA_ERR_NOTFOUND) {
		rc = ca_fail(d, rc, "%s has no model.py (a task is a directory holding model.py "
			     "with class Model, get_inputs() and get_init_inputs())", t->dir);
		goto out;
	}
	if (rc)
		goto out;
	if (memchr(t->model_py, '\0', t->model_py_len)) {
		rc = ca_fail(d, CA_ERR_INVALID, "model.py contains NUL bytes; it must be Python text");
		goto out;
	}
	if (!mentions(t->model_py, "class Model")) {
		rc = ca_fail(d, CA_ERR_INVALID, "model.py defines no 'class Model'");
		goto out;
	}
	if (!mentions(t->model_py, "def get_inputs")) {
		rc = ca_fail(d, CA_ERR_INVALID, "model.py defines no get_inputs()");
		goto out;
	}
	if (!mentions(t->model_py, "def get_init_inputs")) {
		rc = ca_fail(d, CA_ERR_INVALID, "model.py defines no get_init_inputs() (return [] "
			     "when Model takes no arguments)");
		goto out;
	}

	if (ca_path_join(path, sizeof path, t->dir, "task.json")) {
		rc = ca_fail(d, CA_ERR_LIMIT, "path too long");
		goto out;
	}
	rc = ca_read_file(path, CA_TASK_MAX_JSON_BYTES, &json_text, &json_len, d);
	if (rc == CA_ERR_NOTFOUND) {
		rc = 0;
	} else if (rc) {
		goto out;
	} else {
		rc = parse_task_json(t, json_text, json_len, d);
		if (rc)
			goto out;
	}

	rc = ca_hasher_init(&h);
	if (rc) {
		rc = ca_fail(d, rc, "out of memory");
		goto out;
	}
	ca_hasher_update_str(&h, "cuda-agent task v1");
	ca_hasher_update(&h, &t->model_py_len, sizeof t->model_py_len);
	ca_hasher_update(&h, t->model_py, t->model_py_len);
	ca_hasher_update(&h, &json_len, sizeof json_len);
	if (json_text)
		ca_hasher_update(&h, json_text, json_len);
	ca_hasher_final_hex(&h, t->hash);
out:
	ca_hasher_free(&h);
	free(json_text);
	if (rc)
		task_free(t);
	return rc;
}

void task_free(struct task *t)
{
	free(t->model_py);
	t->model_py = NULL;
	t->model_py_len = 0;
}
