#include "import/import.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"

#define KB_MAX_LEVEL_FILES 100000u
#define COMMIT_EVERY 256u
#define ROWS_LINE_TIMEOUT_S 300.0
#define ROWS_EXIT_NO_PYARROW 3

/* KernelBench's tolerances (its eval uses atol = rtol = 1e-2), for both sources. */
#define IMPORT_ATOL 1e-2
#define IMPORT_RTOL 1e-2

void import_opts_defaults(struct import_opts *o)
{
	o->python = NULL;
	o->progress_s = 2.0;
	o->show_skips = 20;
}

void import_summary(const struct import_stats *st, char *out, size_t size)
{
	size_t off = 0;
	out[0] = '\0';
	ca_appendf(out, size, &off, "imported %zu, unchanged %zu, updated %zu, skipped %zu",
		   st->imported, st->unchanged, st->updated, st->skipped);
	if (st->skipped)
		ca_appendf(out, size, &off, " (first: %s)", st->first_skip);
}

/* ---- names ---------------------------------------------------------------------------- */

static bool name_char(unsigned char c)
{
	return isalnum(c) || c == '_' || c == '.' || c == '+' || c == '-';
}

int import_sanitize_name(const char *in, char *out, size_t size)
{
	size_t n = strlen(in), i;
	bool changed = n > CA_IMPORT_NAME_MAX;

	if (size <= CA_IMPORT_NAME_MAX)
		return CA_ERR_LIMIT;
	out[0] = '\0';
	if (n == 0)
		return CA_ERR_INVALID;
	for (i = 0; i < n && i < CA_IMPORT_NAME_MAX; i++) {
		unsigned char c = (unsigned char)in[i];
		/* no leading '.', no ".." anywhere (a store path never holds "..") */
		char o = name_char(c) && !(c == '.' && (i == 0 || out[i - 1] == '.')) ? (char)c
										      : '_';
		changed |= o != (char)c;
		out[i] = o;
	}
	out[i] = '\0';
	if (changed) {
		char hex[CA_HASH_HEX_LEN + 1];
		ca_hash_hex(in, n, hex);
		if (i > CA_IMPORT_NAME_MAX - 9)
			i = CA_IMPORT_NAME_MAX - 9;
		snprintf(out + i, size - i, "_%.8s", hex);
	}
	return 0;
}

void ops6k_short_name(const struct ops6k_row *row, char *out, size_t size)
{
	size_t len = 0;

	out[0] = '\0';
	for (size_t k = 0; k < row->n_ops && len < CA_IMPORT_SHORT_OPS_MAX; k++) {
		char part[CA_TASK_OP_MAX];
		const char *op = row->ops[k];
		const char *dot = strrchr(op, '.');
		const char *base = dot && dot[1] ? dot + 1 : op;
		size_t pl = 0;

		for (const char *p = base; *p && pl + 1 < sizeof part; p++) {
			unsigned char c = (unsigned char)*p;
			if (isalnum(c))
				part[pl++] = (char)tolower(c);
			else if (c == '_' && pl > 0 && part[pl - 1] != '_')
				part[pl++] = '_';
		}
		while (pl > 0 && part[pl - 1] == '_')
			pl--;
		part[pl] = '\0';
		if (pl == 0)
			continue;
		/* drop an op already in the name (as a whole '_'-separated run) */
		size_t outl = strlen(out);
		bool dup = false;
		for (const char *hit = out; (hit = strstr(hit, part)) != NULL; hit++)
			if ((hit == out || hit[-1] == '_') &&
			    (hit[pl] == '\0' || hit[pl] == '_')) {
				dup = true;
				break;
			}
		if (dup)
			continue;
		if (outl) {
			if (outl + 1 >= CA_IMPORT_SHORT_OPS_MAX)
				break;
			out[outl++] = '_';
			out[outl] = '\0';
		}
		for (size_t i = 0; i < pl && outl < CA_IMPORT_SHORT_OPS_MAX && outl + 1 < size; i++)
			out[outl++] = part[i];
		out[outl] = '\0';
		len = outl;
	}
	while (len > 0 && out[len - 1] == '_')
		out[--len] = '\0';
	if (len == 0)
		ca_strlcpy(out, "task", size);
}

/* ---- one Ops-6K row ------------------------------------------------------------------- */

void ops6k_row_free(struct ops6k_row *row)
{
	free(row->code);
	row->code = NULL;
	row->code_len = 0;
}

static bool printable_text(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static int add_op(struct ops6k_row *row, const char *s, size_t len, struct ca_diag *d)
{
	while (len && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	if (row->n_ops == CA_TASK_MAX_OPS)
		return ca_fail(d, CA_ERR_LIMIT, "ops: more than %d names", CA_TASK_MAX_OPS);
	if (len == 0 || len >= CA_TASK_OP_MAX || !printable_text(s, len) || memchr(s, '\0', len))
		return ca_fail(d, CA_ERR_INVALID,
			       "ops: entry %zu is not a name of 1-%d printable bytes", row->n_ops + 1,
			       CA_TASK_OP_MAX - 1);
	memcpy(row->ops[row->n_ops], s, len);
	row->ops[row->n_ops][len] = '\0';
	row->n_ops++;
	return 0;
}

static int ops_from_array(struct ops6k_row *row, const json_t *a, struct ca_diag *d)
{
	size_t i;
	const json_t *v;
	json_array_foreach(a, i, v) {
		int rc;
		if (!json_is_string(v))
			return ca_fail(d, CA_ERR_INVALID, "ops: entry %zu is not a string", i + 1);
		rc = add_op(row, json_string_value(v), json_string_length(v), d);
		if (rc)
			return rc;
	}
	return 0;
}

/* Names separated by commas, each bare or quoted with ' or " (backslash escapes the next
 * byte): the inside of a Python list, or a plain "a, b" list. */
static int ops_from_list_text(struct ops6k_row *row, const char *p, const char *end,
			      struct ca_diag *d)
{
	char tok[CA_TASK_OP_MAX];
	for (;;) {
		size_t tl = 0;
		int rc;
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p == end)
			return 0;
		if (*p == '\'' || *p == '"') {
			char q = *p++;
			for (;;) {
				if (p == end)
					return ca_fail(d, CA_ERR_PARSE, "ops: unterminated quote");
				if (*p == q)
					break;
				if (*p == '\\' && p + 1 < end)
					p++;
				if (tl + 1 >= sizeof tok)
					return ca_fail(d, CA_ERR_INVALID,
						       "ops: entry %zu is longer than %d bytes",
						       row->n_ops + 1, CA_TASK_OP_MAX - 1);
				tok[tl++] = *p++;
			}
			p++; /* the closing quote */
		} else {
			while (p < end && *p != ',') {
				if (tl + 1 >= sizeof tok)
					return ca_fail(d, CA_ERR_INVALID,
						       "ops: entry %zu is longer than %d bytes",
						       row->n_ops + 1, CA_TASK_OP_MAX - 1);
				tok[tl++] = *p++;
			}
		}
		rc = add_op(row, tok, tl, d);
		if (rc)
			return rc;
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p == end)
			return 0;
		if (*p != ',')
			return ca_fail(d, CA_ERR_PARSE, "ops: expected ',' between names");
		p++;
	}
}

static int ops_from_string(struct ops6k_row *row, const char *s, size_t len, struct ca_diag *d)
{
	const char *end = s + len;
	while (s < end && isspace((unsigned char)*s))
		s++;
	while (end > s && isspace((unsigned char)end[-1]))
		end--;
	if (s == end)
		return 0;
	if (*s == '[') {
		json_t *a = json_loadb(s, (size_t)(end - s), 0, NULL);
		int rc;
		if (json_is_array(a)) {
			rc = ops_from_array(row, a, d);
			json_decref(a);
			return rc;
		}
		json_decref(a);
		if (end[-1] != ']' || end - s < 2)
			return ca_fail(d, CA_ERR_PARSE, "ops: a '[' list without its closing ']'");
		return ops_from_list_text(row, s + 1, end - 1, d);
	}
	return ops_from_list_text(row, s, end, d);
}

static int parse_row_object(const json_t *root, struct ops6k_row *row, struct ca_diag *d)
{
	const json_t *v = json_object_get(root, "_skip");
	char shown[256];

	if (json_is_string(v))
		return ca_fail(d, CA_ERR_INVALID, "%s",
			       ca_printable(shown, json_string_value(v), sizeof shown));
	v = json_object_get(root, "code");
	if (!v || json_is_null(v))
		return ca_fail(d, CA_ERR_INVALID, "no code");
	if (!json_is_string(v))
		return ca_fail(d, CA_ERR_INVALID, "code is not a string");
	if (json_string_length(v) == 0)
		return ca_fail(d, CA_ERR_INVALID, "code is empty");
	if (json_string_length(v) > CA_IMPORT_MAX_CODE)
		return ca_fail(d, CA_ERR_LIMIT, "code is %zu bytes, over the limit of %u",
			       json_string_length(v), CA_IMPORT_MAX_CODE);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return ca_fail(d, CA_ERR_INVALID, "code contains NUL bytes");

	v = json_object_get(root, "ops");
	if (json_is_array(v)) {
		int rc = ops_from_array(row, v, d);
		if (rc)
			return rc;
	} else if (json_is_string(v)) {
		int rc = ops_from_string(row, json_string_value(v), json_string_length(v), d);
		if (rc)
			return rc;
	} else if (v && !json_is_null(v)) {
		return ca_fail(d, CA_ERR_INVALID, "ops is neither a list nor a string");
	}

	v = json_object_get(root, "data_source");
	if (json_is_string(v)) {
		size_t n = json_string_length(v);
		if (n >= sizeof row->data_source || !printable_text(json_string_value(v), n) ||
		    strlen(json_string_value(v)) != n)
			return ca_fail(d, CA_ERR_INVALID,
				       "data_source is not a string of at most %zu printable bytes",
				       sizeof row->data_source - 1);
		memcpy(row->data_source, json_string_value(v), n + 1);
	} else if (v && !json_is_null(v)) {
		return ca_fail(d, CA_ERR_INVALID, "data_source is not a string");
	}

	v = json_object_get(root, "code");
	row->code_len = json_string_length(v);
	row->code = malloc(row->code_len + 1);
	if (!row->code)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	memcpy(row->code, json_string_value(v), row->code_len + 1);
	return 0;
}

int ops6k_parse_row(const char *text, size_t len, struct ops6k_row *row, struct ca_diag *d)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	memset(row, 0, sizeof *row);
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		char shown[sizeof jerr.text];
		return ca_fail(d, CA_ERR_PARSE, "invalid JSON at column %d: %s", jerr.column,
			       ca_printable(shown, jerr.text, sizeof shown));
	}
	if (!json_is_object(root))
		rc = ca_fail(d, CA_ERR_PARSE, "not a JSON object");
	else
		rc = parse_row_object(root, row, d);
	json_decref(root);
	if (rc)
		ops6k_row_free(row);
	return rc;
}

/* ---- installing one task -------------------------------------------------------------- */

struct import_ctx {
	struct task_store *s;
	const struct import_opts *o;
	struct import_stats *st;
	const char *label; /* "kernelbench", "ops6k" */
	char staging[PATH_MAX];
	double last_progress;
	size_t since_commit;
	int skips_shown;
};

struct new_task {
	const char *id, *source, *name, *rel_dir;
	int level;
	const char *code;
	size_t code_len;
	const struct ops6k_row *row; /* ops and data_source; NULL: none */
};

static void skip(struct import_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void skip(struct import_ctx *c, const char *fmt, ...)
{
	char reason[CA_IMPORT_REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof reason, fmt, ap);
	va_end(ap);
	for (char *p = reason; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	if (c->st->skipped++ == 0)
		ca_strlcpy(c->st->first_skip, reason, sizeof c->st->first_skip);
	if (ca_log_get_level() >= CA_LOG_DEBUG || c->o->show_skips < 0 ||
	    c->skips_shown < c->o->show_skips)
		ca_log_info("skipped %s", reason);
	else if (c->o->show_skips > 0 && c->skips_shown == c->o->show_skips)
		ca_log_info("(more skipped; -v shows every one)");
	c->skips_shown++;
}

static void progress(struct import_ctx *c)
{
	double now = ca_now();
	const struct import_stats *st = c->st;
	if (c->o->progress_s <= 0 || now - c->last_progress < c->o->progress_s)
		return;
	c->last_progress = now;
	ca_log_info("%s: %zu rows: imported %zu, unchanged %zu, updated %zu, skipped %zu",
		    c->label, st->rows, st->imported, st->unchanged, st->updated, st->skipped);
}

static json_t *task_json(const struct new_task *nt)
{
	json_t *j = json_object();
	if (!j)
		return NULL;
	json_object_set_new(j, "id", json_string(nt->id));
	json_object_set_new(j, "source", json_string(nt->source));
	if (nt->level >= 0)
		json_object_set_new(j, "level", json_integer(nt->level));
	json_object_set_new(j, "name", json_string(nt->name));
	if (nt->row && nt->row->n_ops) {
		json_t *ops = json_array();
		for (size_t i = 0; i < nt->row->n_ops; i++)
			json_array_append_new(ops, json_string(nt->row->ops[i]));
		json_object_set_new(j, "ops", ops);
	}
	if (nt->row && nt->row->data_source[0])
		json_object_set_new(j, "data_source", json_string(nt->row->data_source));
	json_object_set_new(j, "atol", json_real(IMPORT_ATOL));
	json_object_set_new(j, "rtol", json_real(IMPORT_RTOL));
	return j;
}

static int ops_text(const struct new_task *nt, char *out, size_t size)
{
	json_t *a = json_array();
	char *text;
	int rc = 0;

	if (!a)
		return CA_ERR_NOMEM;
	for (size_t i = 0; nt->row && i < nt->row->n_ops; i++)
		json_array_append_new(a, json_string(nt->row->ops[i]));
	text = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	if (!text)
		return CA_ERR_NOMEM;
	if (ca_strlcpy(out, text, size))
		rc = CA_ERR_LIMIT;
	free(text);
	return rc;
}

/* Writes model.py and task.json into a fresh staging directory. */
static int stage(struct import_ctx *c, const struct new_task *nt, char *dir, size_t size,
		 struct ca_diag *d)
{
	char path[PATH_MAX];
	json_t *j = NULL;
	char *text = NULL;
	int rc;

	if (ca_path_join(dir, size, c->staging, "task"))
		return ca_fail(d, CA_ERR_LIMIT, "staging path too long");
	rc = ca_remove_tree(dir, d);
	if (!rc)
		rc = ca_mkdirs(dir, 0755, d);
	if (rc)
		return rc;
	if (ca_path_join(path, sizeof path, dir, "model.py"))
		return ca_fail(d, CA_ERR_LIMIT, "staging path too long");
	rc = ca_write_file_atomic(path, nt->code, nt->code_len, d);
	if (rc)
		return rc;
	j = task_json(nt);
	text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) : NULL;
	if (!text) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (ca_path_join(path, sizeof path, dir, "task.json")) {
		rc = ca_fail(d, CA_ERR_LIMIT, "staging path too long");
		goto out;
	}
	{
		size_t n = strlen(text);
		char *nl = realloc(text, n + 2);
		if (!nl) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
			goto out;
		}
		text = nl;
		text[n] = '\n';
		text[n + 1] = '\0';
		rc = ca_write_file_atomic(path, text, n + 1, d);
	}
out:
	free(text);
	json_decref(j);
	return rc;
}

/* The task at dir loads and has the given hash. */
static bool same_task(const char *dir, const char *hash)
{
	struct task t;
	struct ca_diag ignored;
	bool same;
	if (!ca_is_dir(dir) || task_load(&t, dir, &ignored) != 0)
		return false;
	same = strcmp(t.hash, hash) == 0;
	task_free(&t);
	return same;
}

static int commit_some(struct import_ctx *c, struct ca_diag *d)
{
	int rc;
	if (++c->since_commit < COMMIT_EVERY)
		return 0;
	c->since_commit = 0;
	rc = task_store_commit(c->s, d);
	return rc ? rc : task_store_begin(c->s, d);
}

/* Stages the task, checks it with the loader, and moves it into the store unless the same task
 * is already there. A task the loader refuses is skipped; only store failures are returned. */
static int install(struct import_ctx *c, const struct new_task *nt, const char *where,
		   struct ca_diag *d)
{
	char staged[PATH_MAX], final[PATH_MAX], parent[PATH_MAX];
	struct task_record *rec = calloc(1, sizeof *rec);
	struct task t;
	struct ca_diag td;
	bool loaded = false, existed;
	int rc;

	if (!rec)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	rc = ops_text(nt, rec->ops, sizeof rec->ops);
	if (rc == CA_ERR_LIMIT) {
		skip(c, "%s: its ops take more than %d bytes", where, CA_TASK_STORE_OPS_MAX - 1);
		rc = 0;
		goto out;
	}
	if (rc) {
		rc = ca_fail(d, rc, "out of memory");
		goto out;
	}
	rc = stage(c, nt, staged, sizeof staged, d);
	if (rc)
		goto out;
	if (task_load(&t, staged, &td) != 0) {
		skip(c, "%s: %s", where, td.msg);
		goto out;
	}
	loaded = true;
	if (ca_path_join(final, sizeof final, c->s->root, nt->rel_dir)) {
		rc = ca_fail(d, CA_ERR_LIMIT, "task path too long under %s", c->s->root);
		goto out;
	}
	rc = task_store_get(c->s, nt->id, rec, d);
	if (rc && rc != CA_ERR_NOTFOUND)
		goto out;
	existed = rc == 0;
	if (existed && strcmp(rec->hash, t.hash) == 0 && same_task(final, t.hash)) {
		c->st->unchanged++;
		rc = 0;
		goto out;
	}
	/* rc is 0 or NOTFOUND here: the record is rebuilt either way */
	rc = ops_text(nt, rec->ops, sizeof rec->ops);
	if (rc) {
		rc = ca_fail(d, rc, "out of memory");
		goto out;
	}
	existed = existed || ca_is_dir(final);
	ca_strlcpy(parent, final, sizeof parent);
	*strrchr(parent, '/') = '\0';
	rc = ca_mkdirs(parent, 0755, d);
	if (!rc)
		rc = ca_remove_tree(final, d);
	if (rc)
		goto out;
	if (rename(staged, final) != 0) {
		rc = ca_fail(d, CA_ERR_IO, "cannot move %s to %s: %s", staged, final,
			     strerror(errno));
		goto out;
	}
	ca_strlcpy(rec->id, nt->id, sizeof rec->id);
	ca_strlcpy(rec->source, nt->source, sizeof rec->source);
	rec->level = nt->level;
	ca_strlcpy(rec->name, nt->name, sizeof rec->name);
	ca_strlcpy(rec->dir, nt->rel_dir, sizeof rec->dir);
	ca_strlcpy(rec->hash, t.hash, sizeof rec->hash);
	ca_strlcpy(rec->data_source, nt->row ? nt->row->data_source : "",
		   sizeof rec->data_source);
	rec->imported_at = ca_wall_now();
	rec->check_hash[0] = rec->degenerate[0] = '\0'; /* a new version is unchecked */
	rc = task_store_put(c->s, rec, d);
	if (rc)
		goto out;
	if (existed)
		c->st->updated++;
	else
		c->st->imported++;
	rc = commit_some(c, d);
out:
	if (loaded)
		task_free(&t);
	free(rec);
	return rc;
}

static int ctx_begin(struct import_ctx *c, struct task_store *s, const struct import_opts *o,
		     struct import_stats *st, const char *label, struct ca_diag *d)
{
	int rc;
	memset(c, 0, sizeof *c);
	memset(st, 0, sizeof *st);
	c->s = s;
	c->o = o;
	c->st = st;
	c->label = label;
	c->last_progress = ca_now();
	rc = ca_make_temp_dir(s->root, ".import-", c->staging, sizeof c->staging, d);
	if (rc)
		return rc;
	rc = task_store_begin(s, d);
	if (rc) {
		ca_remove_tree(c->staging, NULL);
		c->staging[0] = '\0';
	}
	return rc;
}

/* Commits what was imported, whatever rc says: the task directories already moved in must
 * keep their rows. */
static int ctx_end(struct import_ctx *c, int rc, struct ca_diag *d)
{
	struct ca_diag cd;
	if (c->s->in_txn && task_store_commit(c->s, &cd) != 0) {
		task_store_rollback(c->s);
		if (!rc)
			rc = ca_fail(d, CA_ERR_IO, "%s", cd.msg);
	}
	if (c->staging[0])
		ca_remove_tree(c->staging, NULL);
	return rc;
}

/* ---- KernelBench ---------------------------------------------------------------------- */

/* "level<N>" with N 0..99 -> N; else -1. */
static int level_number(const char *name)
{
	int n = 0;
	if (strncmp(name, "level", 5) != 0 || !name[5])
		return -1;
	for (const char *p = name + 5; *p; p++) {
		if (!isdigit((unsigned char)*p) || p - name > 7)
			return -1;
		n = n * 10 + (*p - '0');
	}
	return n <= CA_TASK_LEVEL_MAX ? n : -1;
}

struct kb_level {
	int level;
	char dir[PATH_MAX];
};

static int level_cmp(const void *a, const void *b)
{
	const struct kb_level *x = a, *y = b;
	return (x->level > y->level) - (x->level < y->level);
}

/* The levelN folders directly under base (at most 100, sorted by N). */
static int find_levels(const char *base, struct kb_level *levels, size_t *count,
		       struct ca_diag *d)
{
	DIR *dp = opendir(base);
	struct dirent *ent;
	*count = 0;
	if (!dp)
		return ca_fail(d, CA_ERR_IO, "cannot read %s: %s", base, strerror(errno));
	while ((ent = readdir(dp)) != NULL && *count <= CA_TASK_LEVEL_MAX) {
		int n = level_number(ent->d_name);
		struct kb_level *l = &levels[*count];
		if (n < 0 || ca_path_join(l->dir, sizeof l->dir, base, ent->d_name) ||
		    !ca_is_dir(l->dir))
			continue;
		l->level = n;
		(*count)++;
	}
	closedir(dp);
	qsort(levels, *count, sizeof *levels, level_cmp);
	return 0;
}

/* "<N>_<Name>.py" (N 1-6 digits, Name not empty) -> the stem "<N>_<Name>"; else false. */
static bool kb_file_name(const char *file, char *stem, size_t size)
{
	size_t n = strlen(file), digits = 0;
	while (isdigit((unsigned char)file[digits]))
		digits++;
	if (digits == 0 || digits > 6 || file[digits] != '_' || n < digits + 5 ||
	    strcmp(file + n - 3, ".py") != 0 || n - 3 >= size)
		return false;
	memcpy(stem, file, n - 3);
	stem[n - 3] = '\0';
	return true;
}

static int import_level(struct import_ctx *c, const struct kb_level *l, struct ca_diag *d)
{
	static const char *const py[] = {".py", NULL};
	char **files = NULL;
	size_t n = 0;
	int rc = ca_list_files(l->dir, py, KB_MAX_LEVEL_FILES, &files, &n, d);

	if (rc) {
		c->st->input_bad = true;
		return rc;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		char stem[PATH_MAX], name[CA_IMPORT_NAME_MAX + 1], shown[160];
		char id[CA_TASK_ID_MAX], path[PATH_MAX], where[256];
		char *code = NULL;
		size_t code_len = 0;
		struct ca_diag fd;

		if (++c->st->rows > CA_IMPORT_MAX_ROWS) {
			c->st->input_bad = true;
			rc = ca_fail(d, CA_ERR_LIMIT, "more than %u files", CA_IMPORT_MAX_ROWS);
			break;
		}
		ca_printable(shown, files[i], sizeof shown);
		snprintf(where, sizeof where, "level%d/%s", l->level, shown);
		if (!kb_file_name(files[i], stem, sizeof stem)) {
			skip(c, "%s: not named <N>_<Name>.py", where);
			continue;
		}
		if (import_sanitize_name(stem, name, sizeof name) != 0) {
			skip(c, "%s: no usable name", where);
			continue;
		}
		if (ca_path_join(path, sizeof path, l->dir, files[i]) ||
		    ca_read_file(path, CA_IMPORT_MAX_CODE, &code, &code_len, &fd) != 0) {
			skip(c, "%s: %s", where, fd.msg);
			continue;
		}
		snprintf(id, sizeof id, "kernelbench/level%d/%s", l->level, name);
		struct new_task nt = {.id = id, .source = "kernelbench", .name = name,
				      .rel_dir = id, .level = l->level, .code = code,
				      .code_len = code_len};
		rc = install(c, &nt, where, d);
		free(code);
		progress(c);
	}
	ca_free_names(files, n);
	return rc;
}

int import_kernelbench(struct task_store *s, const char *dir, const struct import_opts *o,
		       struct import_stats *st, struct ca_diag *d)
{
	struct import_ctx c;
	struct kb_level *levels = NULL;
	char root[PATH_MAX], sub[PATH_MAX];
	const char *base;
	size_t count = 0;
	int rc;

	memset(st, 0, sizeof *st);
	if (!ca_is_dir(dir)) {
		st->input_bad = true;
		return ca_fail(d, CA_ERR_NOTFOUND, "KernelBench directory %s does not exist", dir);
	}
	rc = ca_realpath(dir, root, sizeof root, d);
	if (rc) {
		st->input_bad = true;
		return rc;
	}
	levels = calloc(CA_TASK_LEVEL_MAX + 1, sizeof *levels);
	if (!levels)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	base = strrchr(root, '/');
	base = base ? base + 1 : root;
	if (level_number(base) >= 0) {
		levels[0].level = level_number(base);
		ca_strlcpy(levels[0].dir, root, sizeof levels[0].dir);
		count = 1;
	} else {
		if (ca_path_join(sub, sizeof sub, root, "KernelBench") == 0 && ca_is_dir(sub))
			rc = find_levels(sub, levels, &count, d);
		if (!rc && count == 0)
			rc = find_levels(root, levels, &count, d);
		if (!rc && count == 0)
			rc = ca_fail(d, CA_ERR_INVALID,
				     "%s holds no KernelBench levels (expected KernelBench/level1.."
				     "level4, level1..level4, or one levelN folder)",
				     root);
		if (rc) {
			st->input_bad = true;
			free(levels);
			return rc;
		}
	}
	rc = ctx_begin(&c, s, o, st, "kernelbench", d);
	if (rc) {
		free(levels);
		return rc;
	}
	for (size_t i = 0; i < count && !rc; i++)
		rc = import_level(&c, &levels[i], d);
	if (!rc && st->rows == 0) {
		st->input_bad = true;
		rc = ca_fail(d, CA_ERR_INVALID, "%s holds no .py files in its level folders", root);
	}
	free(levels);
	return ctx_end(&c, rc, d);
}

/* ---- Ops-6K --------------------------------------------------------------------------- */

static int import_row(struct import_ctx *c, size_t index, const char *text, size_t len,
		      const char *where, struct ca_diag *d)
{
	struct ops6k_row *row = malloc(sizeof *row);
	struct ca_diag rd;
	char shortname[CA_IMPORT_SHORT_OPS_MAX + 1], name[80], id[CA_TASK_ID_MAX];
	int rc = 0;

	if (!row)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	if (ops6k_parse_row(text, len, row, &rd) != 0) {
		skip(c, "%s: %s", where, rd.msg);
		free(row);
		return 0;
	}
	ops6k_short_name(row, shortname, sizeof shortname);
	snprintf(name, sizeof name, "%06zu_%s", index, shortname);
	snprintf(id, sizeof id, "ops6k/%s", name);
	struct new_task nt = {.id = id, .source = "ops6k", .name = name, .rel_dir = id,
			      .level = -1, .code = row->code, .code_len = row->code_len,
			      .row = row};
	rc = install(c, &nt, where, d);
	ops6k_row_free(row);
	free(row);
	return rc;
}

/* A bounded line reader: lines longer than max are reported (CA_ERR_LIMIT) and skipped whole. */
struct line_reader {
	int fd;
	char *buf;
	size_t cap, max;
	size_t beg, end;
	bool eof;
	size_t line_no; /* of the line last returned, from 1 */
};

static int lr_fill(struct line_reader *lr, struct ca_diag *d)
{
	ssize_t n;
	if (lr->beg) {
		memmove(lr->buf, lr->buf + lr->beg, lr->end - lr->beg);
		lr->end -= lr->beg;
		lr->beg = 0;
	}
	do
		n = read(lr->fd, lr->buf + lr->end, lr->cap - lr->end);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return ca_fail(d, CA_ERR_IO, "read failed: %s", strerror(errno));
	if (n == 0)
		lr->eof = true;
	lr->end += (size_t)n;
	return 0;
}

/* 1: a line in line and len (valid until the next call); 0: end of file; CA_ERR_LIMIT: the line
 * lr->line_no was too long (skipped); other negative codes: read errors. */
static int lr_next(struct line_reader *lr, const char **line, size_t *len, struct ca_diag *d)
{
	bool too_long = false;
	size_t scanned = 0;
	for (;;) {
		char *start = lr->buf + lr->beg;
		char *nl = memchr(start + scanned, '\n', lr->end - lr->beg - scanned);
		if (nl) {
			size_t n = (size_t)(nl - start);
			lr->line_no++;
			lr->beg += n + 1;
			if (too_long || n > lr->max)
				return CA_ERR_LIMIT;
			*line = start;
			*len = n;
			return 1;
		}
		scanned = lr->end - lr->beg;
		if (scanned > lr->max) {
			too_long = true;
			lr->beg = lr->end;
			scanned = 0;
		}
		if (lr->eof) {
			if (lr->end == lr->beg && !too_long)
				return 0;
			lr->line_no++;
			*line = lr->buf + lr->beg;
			*len = lr->end - lr->beg;
			lr->beg = lr->end;
			return too_long || *len > lr->max ? CA_ERR_LIMIT : 1;
		}
		int rc = lr_fill(lr, d);
		if (rc)
			return rc;
	}
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!isspace((unsigned char)s[i]))
			return false;
	return true;
}

static int count_row(struct import_ctx *c, struct ca_diag *d)
{
	if (++c->st->rows <= CA_IMPORT_MAX_ROWS)
		return 0;
	c->st->input_bad = true;
	return ca_fail(d, CA_ERR_LIMIT, "more than %u rows (split the file)", CA_IMPORT_MAX_ROWS);
}

static int import_jsonl(struct import_ctx *c, int fd, const char *file, struct ca_diag *d)
{
	struct line_reader lr = {.fd = fd, .max = CA_IMPORT_MAX_LINE};
	int rc = 0;

	lr.cap = lr.max + 65536;
	lr.buf = malloc(lr.cap);
	if (!lr.buf)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	for (;;) {
		const char *line = NULL;
		size_t len = 0;
		char where[64];
		int got = lr_next(&lr, &line, &len, d);
		if (got == 0)
			break;
		if (got < 0 && got != CA_ERR_LIMIT) {
			c->st->input_bad = true;
			rc = ca_fail_prefix(d, got, "%s", file);
			break;
		}
		snprintf(where, sizeof where, "row %zu (line %zu)", lr.line_no - 1, lr.line_no);
		if (got == CA_ERR_LIMIT) {
			rc = count_row(c, d);
			if (rc)
				break;
			skip(c, "%s: longer than %u bytes", where, CA_IMPORT_MAX_LINE);
			continue;
		}
		if (len && line[len - 1] == '\r')
			len--;
		if (blank(line, len))
			continue;
		rc = count_row(c, d);
		if (!rc)
			rc = import_row(c, lr.line_no - 1, line, len, where, d);
		if (rc)
			break;
		progress(c);
	}
	free(lr.buf);
	if (!rc && c->st->rows == 0) {
		c->st->input_bad = true;
		rc = ca_fail(d, CA_ERR_INVALID, "%s holds no rows", file);
	}
	return rc;
}

static int import_parquet(struct import_ctx *c, const char *file, struct ca_diag *d)
{
	char pypath[PATH_MAX], errpath[PATH_MAX], tail[512];
	const char *python = c->o->python ? c->o->python : getenv("CUDA_AGENT_PYTHON");
	const char *old_pp = getenv("PYTHONPATH");
	struct ca_child child = {.pid = -1, .to_child = -1, .from_child = -1};
	struct ca_run_result how = {0};
	char *pp_env = NULL;
	bool spawned = false;
	size_t index = 0;
	int rc;

	if (!python || !python[0])
		python = "python3";
	rc = ca_python_dir(pypath, sizeof pypath, "parquet", d);
	if (rc)
		return rc;
	if (ca_path_join(errpath, sizeof errpath, c->staging, "rows.stderr"))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	if (asprintf(&pp_env, "PYTHONPATH=%s%s%s", pypath, old_pp && old_pp[0] ? ":" : "",
		     old_pp ? old_pp : "") < 0)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	const char *env_add[] = {pp_env, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", NULL};
	const char *argv[] = {python, "-m", "cuda_agent_bridge.rows", file, NULL};
	struct ca_run_opts ro = {.env_add = env_add};
	rc = ca_child_spawn(&child, argv, &ro, errpath, d);
	free(pp_env);
	if (rc) {
		rc = ca_fail_prefix(d, CA_ERR_UNSUPPORTED, "parquet: cannot run %s", python);
		goto out;
	}
	spawned = true;
	for (;;) {
		char *line = NULL;
		char where[64];
		struct ca_diag ld;
		int got = ca_child_read_line(&child, CA_IMPORT_MAX_LINE, ROWS_LINE_TIMEOUT_S, &line,
					     &ld);
		if (got == CA_ERR_CHILD)
			break; /* end of output: how it ended is below */
		if (got) {
			rc = ca_fail(d, got, "parquet: reading rows from %s: %s", python, ld.msg);
			goto out;
		}
		snprintf(where, sizeof where, "row %zu", index);
		rc = count_row(c, d);
		if (!rc && !blank(line, strlen(line)))
			rc = import_row(c, index, line, strlen(line), where, d);
		free(line);
		index++;
		if (rc)
			goto out;
		progress(c);
	}
	ca_child_finish(&child, 10.0, &how);
	spawned = false;
	ca_file_tail(errpath, 1, tail, sizeof tail);
	for (char *p = tail; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	if (!how.timed_out && !how.term_signal && how.exit_code == 0) {
		if (c->st->rows == 0) {
			c->st->input_bad = true;
			rc = ca_fail(d, CA_ERR_INVALID, "%s holds no rows", file);
		}
	} else if (!how.term_signal && !how.timed_out && how.exit_code == ROWS_EXIT_NO_PYARROW) {
		rc = ca_fail(d, CA_ERR_UNSUPPORTED, "%s",
			     tail[0] ? tail : "parquet needs pyarrow: pip install pyarrow, or "
					      "convert to JSONL");
	} else if (!how.term_signal && !how.timed_out && how.exit_code == 127) {
		rc = ca_fail(d, CA_ERR_UNSUPPORTED,
			     "parquet: cannot run %s (set --python or $CUDA_AGENT_PYTHON)", python);
	} else if (!how.term_signal && !how.timed_out && how.exit_code == 2) {
		c->st->input_bad = true;
		rc = ca_fail(d, CA_ERR_PARSE, "%s", tail[0] ? tail : "cannot read the parquet file");
	} else {
		char desc[128];
		ca_run_describe(&how, desc, sizeof desc);
		rc = ca_fail(d, CA_ERR_CHILD, "parquet: %s -m cuda_agent_bridge.rows failed (%s)%s%s",
			     python, desc, tail[0] ? ": " : "", tail);
	}
out:
	if (spawned)
		ca_child_close(&child, 1.0);
	return rc;
}

int import_ops6k(struct task_store *s, const char *file, const struct import_opts *o,
		 struct import_stats *st, struct ca_diag *d)
{
	struct import_ctx c;
	char magic[4] = {0};
	size_t size = 0;
	ssize_t got;
	int fd = -1, rc;

	memset(st, 0, sizeof *st);
	rc = ca_open_regular(file, &fd, &size, d);
	if (rc) {
		st->input_bad = true;
		return rc;
	}
	do
		got = pread(fd, magic, sizeof magic, 0);
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		rc = ca_fail(d, CA_ERR_IO, "cannot read %s: %s", file, strerror(errno));
		st->input_bad = true;
		close(fd);
		return rc;
	}
	rc = ctx_begin(&c, s, o, st, "ops6k", d);
	if (rc) {
		close(fd);
		return rc;
	}
	if (got == 4 && memcmp(magic, "PAR1", 4) == 0) {
		close(fd);
		fd = -1;
		rc = import_parquet(&c, file, d);
	} else {
		rc = import_jsonl(&c, fd, file, d);
	}
	if (fd >= 0)
		close(fd);
	return ctx_end(&c, rc, d);
}
