/* import: the shared install path of every importer (import.h, import_int.h): names, staging,
 * one task into the store, progress and skips. */
#include "import/import_int.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

void import_opts_defaults(struct import_opts *o)
{
	o->python = NULL;
	o->progress_s = 2.0;
	o->show_skips = 20;
	o->source = NULL;
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

void import_skip(struct import_ctx *c, const char *fmt, ...)
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

void import_progress(struct import_ctx *c)
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
int import_install(struct import_ctx *c, const struct new_task *nt, const char *where,
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
		import_skip(c, "%s: its ops take more than %d bytes", where, CA_TASK_STORE_OPS_MAX - 1);
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
		import_skip(c, "%s: %s", where, td.msg);
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

int import_ctx_begin(struct import_ctx *c, struct task_store *s, const struct import_opts *o,
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
int import_ctx_end(struct import_ctx *c, int rc, struct ca_diag *d)
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
