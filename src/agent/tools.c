/* tools: the schemas, argument validation against them, dispatch, the output cap. See
 * tools.h and docs/agent-tools.md. */
#include "agent/tools.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/fs.h"
#include "util/str.h"

/* clang-format off */
static const char schemas_json[] =
"["
"{\"type\":\"function\",\"function\":{\"name\":\"bash\","
" \"description\":\"Run a bash command (/bin/bash -c) in a sandbox: the working directory is the workspace, "
"the only writable places are the workspace and /tmp, there is no network and no GPU. stdout and stderr are merged; "
"long output keeps its head and tail. The command is killed at its time limit (default 120 s).\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"command\":{\"type\":\"string\",\"description\":\"The command line.\"},"
"  \"timeout_s\":{\"type\":\"number\",\"minimum\":0.1,\"description\":\"Time limit in seconds (at most the session's limit).\"}},"
" \"required\":[\"command\"],\"additionalProperties\":false}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"read_file\","
" \"description\":\"Read a text file of the workspace; lines are numbered like cat -n. At most 1 MiB and limit_lines lines per call (default 2000); "
"lines longer than 2000 bytes are cut.\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"path\":{\"type\":\"string\",\"description\":\"Relative to the workspace.\"},"
"  \"offset_line\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"First line to show (1-based, default 1).\"},"
"  \"limit_lines\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"Lines to show (default 2000).\"}},"
" \"required\":[\"path\"],\"additionalProperties\":false}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"write_file\","
" \"description\":\"Create or replace a file of the workspace with content (at most 4 MiB); missing parent directories are created.\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"path\":{\"type\":\"string\",\"description\":\"Relative to the workspace.\"},"
"  \"content\":{\"type\":\"string\",\"description\":\"The whole new content.\"}},"
" \"required\":[\"path\",\"content\"],\"additionalProperties\":false}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"edit\","
" \"description\":\"Replace old_string by new_string in a file. old_string must occur exactly once (include enough context), "
"unless replace_all is true.\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"path\":{\"type\":\"string\",\"description\":\"Relative to the workspace.\"},"
"  \"old_string\":{\"type\":\"string\",\"description\":\"Exact text to replace (not empty).\"},"
"  \"new_string\":{\"type\":\"string\",\"description\":\"Replacement (different from old_string).\"},"
"  \"replace_all\":{\"type\":\"boolean\",\"description\":\"Replace every occurrence (default false).\"}},"
" \"required\":[\"path\",\"old_string\",\"new_string\"],\"additionalProperties\":false}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"multi_edit\","
" \"description\":\"Apply several edits to one file, in order, each on the result of the previous one. "
"The file is written only if every edit succeeds.\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"path\":{\"type\":\"string\",\"description\":\"Relative to the workspace.\"},"
"  \"edits\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"type\":\"object\",\"properties\":{"
"    \"old_string\":{\"type\":\"string\"},\"new_string\":{\"type\":\"string\"},\"replace_all\":{\"type\":\"boolean\"}},"
"   \"required\":[\"old_string\",\"new_string\"],\"additionalProperties\":false}}},"
" \"required\":[\"path\",\"edits\"],\"additionalProperties\":false}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"glob\","
" \"description\":\"List files of the workspace matching a pattern (fnmatch, ** for any number of directories, e.g. kernels/**/*.cu), "
"sorted, relative paths, at most 1000. .git directories are skipped.\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"pattern\":{\"type\":\"string\",\"description\":\"Relative to the workspace.\"}},"
" \"required\":[\"pattern\"],\"additionalProperties\":false}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"grep\","
" \"description\":\"Search text files of the workspace for a POSIX extended regular expression; prints path:line: text. "
"Binary files and files over 1 MiB are skipped.\","
" \"parameters\":{\"type\":\"object\",\"properties\":{"
"  \"pattern\":{\"type\":\"string\",\"description\":\"POSIX extended regular expression.\"},"
"  \"path\":{\"type\":\"string\",\"description\":\"File or directory to search, relative to the workspace (default: all of it).\"},"
"  \"glob\":{\"type\":\"string\",\"description\":\"Only files matching this pattern (a name like *.cu, or a path pattern with /).\"},"
"  \"ignore_case\":{\"type\":\"boolean\"},"
"  \"max_results\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,\"description\":\"Default 200.\"}},"
" \"required\":[\"pattern\"],\"additionalProperties\":false}}}"
"]";
/* clang-format on */

json_t *tools_schemas(void)
{
	return json_loads(schemas_json, 0, NULL);
}

/* ---- validation against the schema above (the subset it uses) ---- */

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_REAL: return "number";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	}
	return "?";
}

static bool type_ok(const char *want, const json_t *v)
{
	if (strcmp(want, "number") == 0)
		return json_is_number(v);
	if (strcmp(want, "integer") == 0)
		return json_is_integer(v);
	if (strcmp(want, "boolean") == 0)
		return json_is_boolean(v);
	return strcmp(want, type_name(v)) == 0;
}

static int validate(const char *tool, const char *where, const json_t *schema, const json_t *v,
		    struct ca_diag *d)
{
	const char *type = json_string_value(json_object_get(schema, "type"));
	char shown[128];
	if (type && !type_ok(type, v))
		return ca_fail(d, CA_ERR_INVALID, "%s: %s must be %s %s, not %s", tool, where,
			       strchr("aeiou", type[0]) ? "an" : "a", type, type_name(v));
	if (json_is_number(v)) {
		double x = json_number_value(v);
		const json_t *mn = json_object_get(schema, "minimum"),
			     *mx = json_object_get(schema, "maximum");
		if (!isfinite(x) || (mn && x < json_number_value(mn)))
			return ca_fail(d, CA_ERR_INVALID, "%s: %s must be at least %g", tool, where,
				       mn ? json_number_value(mn) : 0.0);
		if (mx && x > json_number_value(mx))
			return ca_fail(d, CA_ERR_INVALID, "%s: %s must be at most %g", tool, where,
				       json_number_value(mx));
	}
	if (json_is_object(v)) {
		const json_t *props = json_object_get(schema, "properties"), *req, *item;
		const char *key;
		json_t *val;
		size_t i;
		json_object_foreach((json_t *)v, key, val) {
			const json_t *ps = json_object_get(props, key);
			char sub[256];
			if (!ps)
				return ca_fail(d, CA_ERR_INVALID, "%s: unexpected field '%s'%s%s",
					       tool, ca_printable(shown, key, sizeof shown),
					       strcmp(where, "the arguments") ? " in " : "",
					       strcmp(where, "the arguments") ? where : "");
			snprintf(sub, sizeof sub, "%s%s'%s'",
				 strcmp(where, "the arguments") ? where : "",
				 strcmp(where, "the arguments") ? "." : "",
				 ca_printable(shown, key, sizeof shown));
			int rc = validate(tool, sub, ps, val, d);
			if (rc)
				return rc;
		}
		req = json_object_get(schema, "required");
		json_array_foreach(req, i, item) {
			if (!json_object_get(v, json_string_value(item)))
				return ca_fail(d, CA_ERR_INVALID,
					       "%s: missing required field '%s'%s%s", tool,
					       json_string_value(item),
					       strcmp(where, "the arguments") ? " in " : "",
					       strcmp(where, "the arguments") ? where : "");
		}
	}
	if (json_is_array(v)) {
		const json_t *items = json_object_get(schema, "items"),
			     *mi = json_object_get(schema, "minItems");
		const json_t *el;
		size_t i;
		if (mi && json_array_size(v) < (size_t)json_integer_value(mi))
			return ca_fail(d, CA_ERR_INVALID, "%s: %s must have at least %lld item(s)",
				       tool, where, (long long)json_integer_value(mi));
		json_array_foreach(v, i, el) {
			char sub[256];
			snprintf(sub, sizeof sub, "%s[%zu]", where, i);
			int rc = items ? validate(tool, sub, items, el, d) : 0;
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* ---- the capture ---- */

int tool_capture_init(struct tool_capture *c, size_t cap)
{
	memset(c, 0, sizeof *c);
	c->cap = cap ? cap : 1;
	c->head_cap = (c->cap + 1) / 2;
	c->tail_cap = c->cap - c->head_cap;
	c->head = malloc(c->head_cap + 1);
	c->tail = malloc(c->tail_cap + 1);
	if (!c->head || !c->tail) {
		tool_capture_free(c);
		return CA_ERR_NOMEM;
	}
	return 0;
}

void tool_capture_add(struct tool_capture *c, const char *buf, size_t len)
{
	c->total += len;
	if (c->head_len < c->head_cap) {
		size_t n = c->head_cap - c->head_len < len ? c->head_cap - c->head_len : len;
		memcpy(c->head + c->head_len, buf, n);
		c->head_len += n;
		buf += n;
		len -= n;
	}
	if (c->tail_cap == 0 || len == 0)
		return;
	if (len > c->tail_cap) { /* only the last tail_cap bytes can survive */
		buf += len - c->tail_cap;
		len = c->tail_cap;
	}
	while (len) {
		size_t n = c->tail_cap - c->tail_pos < len ? c->tail_cap - c->tail_pos : len;
		memcpy(c->tail + c->tail_pos, buf, n);
		c->tail_pos = (c->tail_pos + n) % c->tail_cap;
		c->tail_len = c->tail_len + n > c->tail_cap ? c->tail_cap : c->tail_len + n;
		buf += n;
		len -= n;
	}
}

char *tool_capture_finish(struct tool_capture *c, const char *trailer, size_t *omitted)
{
	size_t kept = c->head_len + c->tail_len, dropped = c->total - kept;
	size_t tlen = trailer ? strlen(trailer) : 0;
	char note[96] = "";
	if (dropped)
		snprintf(note, sizeof note, "\n[... %zu bytes omitted ...]\n", dropped);
	char *out = malloc(kept + strlen(note) + tlen + 1), *p = out;
	*omitted = dropped;
	if (out) {
		memcpy(p, c->head, c->head_len);
		p += c->head_len;
		memcpy(p, note, strlen(note));
		p += strlen(note);
		/* the ring in order: oldest byte at tail_pos when it is full */
		size_t start = c->tail_len == c->tail_cap ? c->tail_pos : 0;
		for (size_t i = 0; i < c->tail_len; i++)
			*p++ = c->tail[(start + i) % c->tail_cap];
		if (tlen)
			memcpy(p, trailer, tlen);
		p[tlen] = '\0';
	}
	tool_capture_free(c);
	return out;
}

void tool_capture_free(struct tool_capture *c)
{
	free(c->head);
	free(c->tail);
	c->head = c->tail = NULL;
}

/* NUL bytes and bytes that are not part of valid UTF-8 become '?', so the text can go into a
 * JSON string (jansson refuses invalid UTF-8). */
static void sanitize_utf8(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		unsigned char b = *p;
		size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3
				 : (b & 0xF8) == 0xF0			    ? 4
									    : 0;
		bool valid = n > 0;
		for (size_t i = 1; valid && i < n; i++)
			valid = (p[i] & 0xC0) == 0x80;
		if (valid && n == 2 && b < 0xC2)
			valid = false; /* overlong */
		if (valid && n == 3) {
			unsigned cp = ((b & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
			valid = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
		}
		if (valid && n == 4) {
			unsigned cp = ((b & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) |
				      ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
			valid = cp >= 0x10000 && cp <= 0x10FFFF;
		}
		if (!valid) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

/* ---- dispatch ---- */

int tools_run(const struct tool_ctx *ctx, const char *name, const json_t *args,
	      struct tool_result *res, struct ca_diag *d)
{
	json_t *all = NULL;
	const json_t *fn = NULL, *entry;
	char ws[PATH_MAX], shown[96];
	size_t cap = ctx && ctx->output_cap ? ctx->output_cap : TOOLS_DEFAULT_CAP, i;
	double start = ca_now();
	int rc = 0;

	memset(res, 0, sizeof *res);
	if (!ctx || !ctx->workspace || !name)
		return ca_fail(d, CA_ERR_INVALID, "tools: no workspace or tool name");
	all = tools_schemas();
	if (!all)
		return ca_fail(d, CA_ERR_NOMEM, "tools: cannot build the schemas");
	json_array_foreach(all, i, entry) {
		const json_t *f = json_object_get(entry, "function");
		if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0)
			fn = f;
	}
	if (!fn) {
		rc = ca_fail(d, CA_ERR_NOTFOUND,
			     "unknown tool '%s' (tools: bash, read_file, write_file, edit, "
			     "multi_edit, glob, grep)",
			     ca_printable(shown, name, sizeof shown));
		goto out;
	}
	if (!args || !json_is_object(args)) {
		rc = ca_fail(d, CA_ERR_INVALID, "%s: the arguments must be a JSON object", name);
		goto out;
	}
	if ((rc = validate(name, "the arguments", json_object_get(fn, "parameters"), args, d)))
		goto out;
	if ((rc = ca_realpath(ctx->workspace, ws, sizeof ws, d)) != 0) {
		ca_fail_prefix(d, rc, "tools: the workspace");
		goto out;
	}
	if (strcmp(name, "bash") == 0) {
		rc = tools_bash_run(ctx, ws, cap, args, res, d);
	} else {
		rc = tools_fs_run(ctx, ws, cap, name, args, res, d);
		if (rc == 0 && res->output && strlen(res->output) > cap) {
			struct tool_capture c;
			char *capped;
			if ((rc = tool_capture_init(&c, cap)) != 0) {
				rc = ca_fail(d, rc, "tools: out of memory");
				goto out;
			}
			tool_capture_add(&c, res->output, strlen(res->output));
			capped = tool_capture_finish(&c, NULL, &res->bytes_omitted);
			if (!capped) {
				rc = ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
				goto out;
			}
			free(res->output);
			res->output = capped;
		}
	}
	if (rc == 0 && !res->output && !(res->output = strdup("")))
		rc = ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
	if (rc == 0)
		sanitize_utf8(res->output);
out:
	if (rc != 0)
		tool_result_free(res);
	res->seconds = ca_now() - start;
	json_decref(all);
	return rc;
}

void tool_result_free(struct tool_result *res)
{
	if (!res)
		return;
	free(res->output);
	res->output = NULL;
}
