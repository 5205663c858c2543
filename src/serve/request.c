/* request: POST /v1/evaluate's body (request.h). */
#include "serve/request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "util/fs.h"
#include "util/str.h"

bool serve_path_ok(const char *path)
{
	size_t n = path ? strlen(path) : 0;
	int depth = 0;
	if (n == 0 || n > SERVE_MAX_PATH || path[0] == '/')
		return false;
	for (const char *p = path; *p;) {
		size_t k = strcspn(p, "/");
		if (k == 0 || p[0] == '.' || ++depth > SERVE_MAX_DEPTH)
			return false; /* empty component ("//", a trailing '/'), ".", "..", dotfiles */
		for (size_t i = 0; i < k; i++) {
			char c = p[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			      c == '.' || c == '_' || c == '-' || c == '+'))
				return false;
		}
		p += k;
		if (*p == '/' && !*++p)
			return false;
	}
	return true;
}

/* Only these keys in obj (a typo is an error, not a silent default). */
static int known_keys(const json_t *obj, const char *where, const char *const *keys,
		      struct ca_diag *d)
{
	const char *k;
	const json_t *v;
	json_object_foreach((json_t *)obj, k, v) {
		bool ok = false;
		for (const char *const *p = keys; *p; p++)
			ok = ok || strcmp(k, *p) == 0;
		if (!ok)
			return ca_fail(d, CA_ERR_INVALID, "%s: unknown field \"%.64s\"", where, k);
	}
	return 0;
}

static int get_choice(const json_t *obj, const char *key, const char *const *choices,
		      char *out, size_t size, struct ca_diag *d)
{
	const json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_string(v))
		return ca_fail(d, CA_ERR_INVALID, "\"%s\" must be a string", key);
	for (const char *const *p = choices; *p; p++)
		if (strcmp(json_string_value(v), *p) == 0)
			return ca_strlcpy(out, *p, size) ? ca_fail(d, CA_ERR_LIMIT, "too long") : 0;
	return ca_fail(d, CA_ERR_INVALID, "\"%s\": \"%.64s\" is not one of the choices (%s, ...)",
		       key, json_string_value(v), choices[0]);
}

/* {PATH: TEXT} into files (at most SERVE_MAX_FILES, each checked and capped). */
static int get_files(const json_t *obj, const char *where, struct serve_file *files, size_t *n,
		     struct ca_diag *d)
{
	const char *path;
	const json_t *v;
	if (!json_is_object(obj) || json_object_size(obj) == 0)
		return ca_fail(d, CA_ERR_INVALID, "%s.files must be an object of path: text", where);
	if (json_object_size(obj) > SERVE_MAX_FILES)
		return ca_fail(d, CA_ERR_LIMIT, "%s: %zu files (at most %d)", where,
			       json_object_size(obj), SERVE_MAX_FILES);
	json_object_foreach((json_t *)obj, path, v) {
		struct serve_file *f = &files[*n];
		if (!serve_path_ok(path))
			return ca_fail(d, CA_ERR_INVALID,
				       "%s: file name \"%.80s\" is not a relative path of plain "
				       "components ([A-Za-z0-9._+-], no leading dot, at most %d "
				       "bytes and %d levels)",
				       where, path, SERVE_MAX_PATH, SERVE_MAX_DEPTH);
		if (!json_is_string(v))
			return ca_fail(d, CA_ERR_INVALID, "%s: \"%.80s\" must be text", where, path);
		if (json_string_length(v) > SERVE_MAX_FILE_BYTES)
			return ca_fail(d, CA_ERR_LIMIT, "%s: \"%.80s\" has %zu bytes (at most %u)", where,
				       path, json_string_length(v), SERVE_MAX_FILE_BYTES);
		if (strlen(json_string_value(v)) != json_string_length(v))
			return ca_fail(d, CA_ERR_INVALID, "%s: \"%.80s\" holds a NUL byte", where, path);
		f->path = strdup(path);
		f->len = json_string_length(v);
		f->data = malloc(f->len + 1);
		if (!f->path || !f->data) {
			free(f->path);
			free(f->data);
			f->path = f->data = NULL;
			return ca_fail(d, CA_ERR_NOMEM, "out of memory");
		}
		memcpy(f->data, json_string_value(v), f->len + 1);
		(*n)++;
	}
	return 0;
}

static int parse_task(struct serve_request *r, const json_t *t, struct ca_diag *d)
{
	static const char *const keys[] = {"id", "hash", "files", NULL};
	const json_t *id = json_object_get(t, "id"), *hash = json_object_get(t, "hash");
	const json_t *files = json_object_get(t, "files");
	int rc;
	if (!json_is_object(t))
		return ca_fail(d, CA_ERR_INVALID, "\"task\" must be an object");
	if ((rc = known_keys(t, "task", keys, d)))
		return rc;
	if (!!id + !!hash + !!files != 1)
		return ca_fail(d, CA_ERR_INVALID,
			       "\"task\" takes exactly one of \"id\", \"hash\" or \"files\"");
	if (files) {
		r->task_by = SERVE_TASK_INLINE;
		return get_files(files, "task", r->task_files, &r->ntask_files, d);
	}
	const json_t *ref = id ? id : hash;
	r->task_by = id ? SERVE_TASK_ID : SERVE_TASK_HASH;
	if (!json_is_string(ref) || json_string_length(ref) == 0 ||
	    json_string_length(ref) >= sizeof r->task_ref)
		return ca_fail(d, CA_ERR_INVALID, "task.%s must be a string of 1 to %zu bytes",
			       id ? "id" : "hash", sizeof r->task_ref - 1);
	ca_strlcpy(r->task_ref, json_string_value(ref), sizeof r->task_ref);
	for (const char *p = r->task_ref; *p; p++)
		if ((unsigned char)*p < 0x20)
			return ca_fail(d, CA_ERR_INVALID, "task reference holds a control character");
	return 0;
}

static int parse_candidate(struct serve_request *r, const json_t *c, struct ca_diag *d)
{
	static const char *const keys[] = {"format", "files", NULL};
	static const char *const formats[] = {"native", "kernelbench", "workdir", NULL};
	size_t py = 0;
	int rc;
	if (!json_is_object(c))
		return ca_fail(d, CA_ERR_INVALID, "\"candidate\" must be an object");
	if ((rc = known_keys(c, "candidate", keys, d)))
		return rc;
	if (!json_object_get(c, "format"))
		return ca_fail(d, CA_ERR_INVALID, "candidate.format is required (native, "
						  "kernelbench or workdir)");
	if ((rc = get_choice(c, "format", formats, r->format, sizeof r->format, d)) ||
	    (rc = get_files(json_object_get(c, "files"), "candidate", r->files, &r->nfiles, d)))
		return rc;
	for (size_t i = 0; i < r->nfiles; i++) {
		size_t l = strlen(r->files[i].path);
		py += l > 3 && strcmp(r->files[i].path + l - 3, ".py") == 0;
		if (strcmp(r->format, "native") == 0 && strncmp(r->files[i].path, "kernels/", 8) != 0)
			return ca_fail(d, CA_ERR_INVALID,
				       "a native candidate's files live in kernels/ (got \"%.80s\")",
				       r->files[i].path);
	}
	if (strcmp(r->format, "kernelbench") == 0 && (r->nfiles != 1 || py != 1))
		return ca_fail(d, CA_ERR_INVALID,
			       "a kernelbench candidate is one .py file (got %zu files)", r->nfiles);
	return 0;
}

/* The body as a JSON object with only `keys` (*root NULL or an object to release). */
static int load_body(const char *body, size_t len, const char *what, const char *const *keys,
		     json_t **root, struct ca_diag *d)
{
	json_error_t je;
	*root = NULL;
	if (len > SERVE_MAX_BODY)
		return ca_fail(d, CA_ERR_LIMIT, "the body has %zu bytes (at most %u)", len,
			       SERVE_MAX_BODY);
	if (!(*root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je)))
		return ca_fail(d, CA_ERR_PARSE, "the body is not JSON: %s (line %d, column %d)",
			       je.text, je.line, je.column);
	if (!json_is_object(*root))
		return ca_fail(d, CA_ERR_INVALID, "the body must be a JSON object");
	return known_keys(*root, what, keys, d);
}

int serve_request_parse(struct serve_request *r, const char *body, size_t len,
			struct ca_diag *d)
{
	static const char *const keys[] = {"task", "candidate", "rules", "mode", "deadline_s",
					   "idempotency_key", NULL};
	static const char *const rules[] = {"cuda-agent", "kernelbench", NULL};
	static const char *const modes[] = {"eval", "verify", "compile", NULL};
	json_t *root;
	const json_t *v;
	int rc;

	memset(r, 0, sizeof *r);
	strcpy(r->mode, "eval");
	r->deadline_s = SERVE_DEADLINE_DEFAULT_S;
	if ((rc = load_body(body, len, "request", keys, &root, d)))
		goto out;
	if (!json_object_get(root, "task") || !json_object_get(root, "candidate")) {
		rc = ca_fail(d, CA_ERR_INVALID, "\"task\" and \"candidate\" are required");
		goto out;
	}
	if ((rc = parse_task(r, json_object_get(root, "task"), d)) ||
	    (rc = parse_candidate(r, json_object_get(root, "candidate"), d)) ||
	    (rc = get_choice(root, "rules", rules, r->rules, sizeof r->rules, d)) ||
	    (rc = get_choice(root, "mode", modes, r->mode, sizeof r->mode, d)))
		goto out;
	if ((v = json_object_get(root, "deadline_s"))) {
		if (!json_is_number(v) || !(json_number_value(v) > 0) ||
		    json_number_value(v) > SERVE_DEADLINE_MAX_S) {
			rc = ca_fail(d, CA_ERR_INVALID, "deadline_s must be a number in (0, %.0f]",
				     SERVE_DEADLINE_MAX_S);
			goto out;
		}
		r->deadline_s = json_number_value(v);
	}
	if ((v = json_object_get(root, "idempotency_key"))) {
		if (!json_is_string(v) || json_string_length(v) == 0 ||
		    json_string_length(v) > SERVE_KEY_MAX) {
			rc = ca_fail(d, CA_ERR_INVALID, "idempotency_key must be a string of 1 to %d "
							"bytes",
				     SERVE_KEY_MAX);
			goto out;
		}
		ca_strlcpy(r->key, json_string_value(v), sizeof r->key);
	}
out:
	json_decref(root);
	if (rc)
		serve_request_free(r);
	return rc;
}

int serve_session_request_parse(struct serve_request *r, const char *body, size_t len,
				struct ca_diag *d)
{
	static const char *const keys[] = {"task", "limits", NULL};
	static const char *const limit_keys[] = {"bash_timeout_s", "output_cap", NULL};
	json_t *root;
	const json_t *lim, *v;
	int rc;

	memset(r, 0, sizeof *r);
	rc = load_body(body, len, "session", keys, &root, d);
	if (!rc && !json_object_get(root, "task"))
		rc = ca_fail(d, CA_ERR_INVALID, "\"task\" is required");
	if (!rc)
		rc = parse_task(r, json_object_get(root, "task"), d);
	lim = json_object_get(root, "limits");
	if (!rc && lim)
		rc = json_is_object(lim) ? known_keys(lim, "limits", limit_keys, d)
					 : ca_fail(d, CA_ERR_INVALID, "\"limits\" must be an object");
	if (!rc && lim && (v = json_object_get(lim, "bash_timeout_s"))) {
		if (!json_is_number(v) || !(json_number_value(v) > 0) ||
		    json_number_value(v) > SERVE_DEADLINE_MAX_S)
			rc = ca_fail(d, CA_ERR_INVALID, "limits.bash_timeout_s must be in (0, 3600]");
		else
			r->bash_timeout_s = json_number_value(v);
	}
	if (!rc && lim && (v = json_object_get(lim, "output_cap"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1000 ||
		    json_integer_value(v) > (1 << 20))
			rc = ca_fail(d, CA_ERR_INVALID, "limits.output_cap must be an integer from "
							"1000 to 1048576");
		else
			r->output_cap = (size_t)json_integer_value(v);
	}
	json_decref(root);
	if (rc)
		serve_request_free(r);
	return rc;
}

static void free_files(struct serve_file *f, size_t *n)
{
	for (size_t i = 0; i < *n; i++) {
		free(f[i].path);
		free(f[i].data);
		f[i].path = f[i].data = NULL;
	}
	*n = 0;
}

void serve_request_free(struct serve_request *r)
{
	free_files(r->files, &r->nfiles);
	free_files(r->task_files, &r->ntask_files);
}

int serve_files_write(const char *dir, const struct serve_file *f, size_t n, struct ca_diag *d)
{
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX], parent[PATH_MAX];
		char *slash;
		int rc;
		if (ca_path_join(path, sizeof path, dir, f[i].path))
			return ca_fail(d, CA_ERR_LIMIT, "path too long");
		ca_strlcpy(parent, path, sizeof parent);
		slash = strrchr(parent, '/');
		*slash = '\0';
		if ((rc = ca_mkdirs(parent, 0755, d)) ||
		    (rc = ca_write_file_atomic(path, f[i].data, f[i].len, d)))
			return rc;
	}
	return 0;
}

int serve_request_write(const struct serve_request *r, const char *dir, char *cand_path,
			size_t cand_size, char *task_dir, size_t task_size, struct ca_diag *d)
{
	char cand[PATH_MAX];
	int rc;
	if (mkdir(dir, 0711) != 0 || chmod(dir, 0711) != 0)
		return ca_fail(d, CA_ERR_IO, "cannot make the job directory %s: %s", dir,
			       strerror(errno));
	task_dir[0] = '\0';
	if (r->task_by == SERVE_TASK_INLINE) {
		if (ca_format(task_dir, task_size, "%s/task", dir))
			return ca_fail(d, CA_ERR_LIMIT, "path too long");
		if ((rc = ca_mkdirs(task_dir, 0755, d)) ||
		    (rc = serve_files_write(task_dir, r->task_files, r->ntask_files, d)))
			return rc;
	}
	if (ca_format(cand, sizeof cand, "%s/candidate", dir))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	if ((rc = ca_mkdirs(cand, 0755, d)) || (rc = serve_files_write(cand, r->files, r->nfiles, d)))
		return rc;
	if (strcmp(r->format, "kernelbench") == 0)
		return ca_format(cand_path, cand_size, "%s/%s", cand, r->files[0].path)
			       ? ca_fail(d, CA_ERR_LIMIT, "path too long")
			       : 0;
	return ca_strlcpy(cand_path, cand, cand_size) ? ca_fail(d, CA_ERR_LIMIT, "path too long")
						       : 0;
}
