#include "store/task_store.h"
#include "store/db.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/str.h"

static const char schema_v1[] =
	"CREATE TABLE IF NOT EXISTS tasks ("
	" id TEXT PRIMARY KEY, source TEXT NOT NULL, level INTEGER, name TEXT NOT NULL,"
	" dir TEXT NOT NULL, hash TEXT NOT NULL, ops TEXT NOT NULL DEFAULT '[]', data_source TEXT,"
	" imported_at REAL NOT NULL);"
	"CREATE INDEX IF NOT EXISTS tasks_source_level ON tasks (source, level);"
	"PRAGMA user_version = 1;";
/* Version 2: the degeneracy check (tasks check). */
static const char schema_v2[] =
	"ALTER TABLE tasks ADD COLUMN check_hash TEXT;"
	"ALTER TABLE tasks ADD COLUMN degenerate TEXT;"
	"PRAGMA user_version = 2;";

static const char columns[] =
	"id, source, level, name, dir, hash, ops, data_source, imported_at, check_hash, degenerate";

int task_store_default_dir(const char *opt, char *out, size_t size, struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_TASKS");
	const char *xdg = getenv("XDG_DATA_HOME");
	const char *home = getenv("HOME");
	int n;

	if (opt && opt[0])
		n = snprintf(out, size, "%s", opt);
	else if (env && env[0])
		n = snprintf(out, size, "%s", env);
	else if (xdg && xdg[0])
		n = snprintf(out, size, "%s/cuda-agent/tasks", xdg);
	else if (home && home[0])
		n = snprintf(out, size, "%s/.local/share/cuda-agent/tasks", home);
	else
		return ca_fail(d, CA_ERR_NOTFOUND,
			       "no task store: pass --store DIR or set $CUDA_AGENT_TASKS");
	if (n < 0 || (size_t)n >= size)
		return ca_fail(d, CA_ERR_LIMIT, "task store path too long");
	return 0;
}

static int db_fail(struct task_store *s, struct ca_diag *d, const char *what)
{
	return ca_db_fail(s->db, d, "task store %s: %s", s->root, what);
}

static int exec_sql(struct task_store *s, const char *sql, struct ca_diag *d)
{
	return ca_db_exec(s->db, sql, d, "task store %s", s->root);
}

static int user_version(struct task_store *s, int *version, struct ca_diag *d)
{
	return ca_db_user_version(s->db, version, d, "task store %s: cannot read the schema version",
				  s->root);
}

/* Creates the schema when the database is new; refuses one written by a newer cuda-agent. */
static int ensure_schema(struct task_store *s, struct ca_diag *d)
{
	int version = 0;
	int rc = user_version(s, &version, d);
	if (rc)
		return rc;
	if (version == CA_TASK_STORE_SCHEMA)
		return 0;
	if (version > CA_TASK_STORE_SCHEMA)
		return ca_fail(d, CA_ERR_UNSUPPORTED,
			       "task store %s has schema version %d; this cuda-agent reads version "
			       "%d (upgrade cuda-agent)",
			       s->root, version, CA_TASK_STORE_SCHEMA);
	/* version 0: a new database, 1: an older one; two processes may get here at once, so
	 * the version is read again inside the transaction */
	rc = exec_sql(s, "BEGIN IMMEDIATE", d);
	if (!rc)
		rc = user_version(s, &version, d);
	if (!rc && version == 0)
		rc = exec_sql(s, schema_v1, d);
	if (!rc && version < 2)
		rc = exec_sql(s, schema_v2, d);
	if (rc) {
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	return exec_sql(s, "COMMIT", d);
}

int task_store_open(struct task_store *s, const char *root, bool create, struct ca_diag *d)
{
	char path[PATH_MAX];
	sqlite3 *db = NULL;
	int rc;

	memset(s, 0, sizeof *s);
	if (!ca_is_dir(root)) {
		if (!create)
			return ca_fail(d, CA_ERR_NOTFOUND,
				       "no task store at %s (cuda-agent tasks import ...)", root);
		rc = ca_mkdirs(root, 0755, d);
		if (rc)
			return rc;
	}
	rc = ca_realpath(root, s->root, sizeof s->root, d);
	if (rc)
		return rc;
	if (ca_path_join(path, sizeof path, s->root, CA_TASK_STORE_DB))
		return ca_fail(d, CA_ERR_LIMIT, "task store path too long");
	if (!create && !ca_is_file(path))
		return ca_fail(d, CA_ERR_NOTFOUND, "no task store at %s (no %s; cuda-agent tasks "
			       "import ...)", s->root, CA_TASK_STORE_DB);
	if ((rc = ca_db_open(&db, path, create, true, "task store", d)))
		return rc;
	s->db = db;
	rc = ensure_schema(s, d);
	if (rc)
		task_store_close(s);
	return rc;
}

void task_store_close(struct task_store *s)
{
	if (s->db) {
		if (s->in_txn)
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		sqlite3_close(s->db);
	}
	s->db = NULL;
	s->in_txn = false;
}

static void copy_col(sqlite3_stmt *st, int col, char *out, size_t size)
{
	const unsigned char *v = sqlite3_column_text(st, col);
	ca_strlcpy(out, v ? (const char *)v : "", size);
}

static void read_row(sqlite3_stmt *st, struct task_record *r)
{
	copy_col(st, 0, r->id, sizeof r->id);
	copy_col(st, 1, r->source, sizeof r->source);
	r->level = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 2);
	copy_col(st, 3, r->name, sizeof r->name);
	copy_col(st, 4, r->dir, sizeof r->dir);
	copy_col(st, 5, r->hash, sizeof r->hash);
	copy_col(st, 6, r->ops, sizeof r->ops);
	if (!r->ops[0])
		ca_strlcpy(r->ops, "[]", sizeof r->ops);
	copy_col(st, 7, r->data_source, sizeof r->data_source);
	r->imported_at = sqlite3_column_double(st, 8);
	copy_col(st, 9, r->check_hash, sizeof r->check_hash);
	copy_col(st, 10, r->degenerate, sizeof r->degenerate);
}

bool task_record_checked(const struct task_record *r)
{
	return r->check_hash[0] && strcmp(r->check_hash, r->hash) == 0;
}

static void bind_text_or_null(sqlite3_stmt *st, int col, const char *v)
{
	if (v && v[0])
		sqlite3_bind_text(st, col, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, col);
}

int task_store_set_check(struct task_store *s, const char *id, const char *hash,
			 const char *degenerate_json, struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (degenerate_json && strlen(degenerate_json) >= CA_TASK_STORE_CHECK_MAX)
		return ca_fail(d, CA_ERR_LIMIT, "task %s: the degenerate record is over %d bytes",
			       id, CA_TASK_STORE_CHECK_MAX - 1);
	if (sqlite3_prepare_v2(s->db,
			       "UPDATE tasks SET check_hash = ?1, degenerate = ?2 WHERE id = ?3", -1,
			       &st, NULL) != SQLITE_OK)
		return db_fail(s, d, "update failed");
	sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
	bind_text_or_null(st, 2, degenerate_json);
	sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		rc = db_fail(s, d, "update failed");
	else if (sqlite3_changes(s->db) != 1)
		rc = ca_fail(d, CA_ERR_NOTFOUND, "task store: no task %s", id);
	sqlite3_finalize(st);
	return rc;
}

int task_store_get(struct task_store *s, const char *id, struct task_record *r,
		   struct ca_diag *d)
{
	char sql[256];
	sqlite3_stmt *st = NULL;
	int rc = 0, step;

	snprintf(sql, sizeof sql, "SELECT %s FROM tasks WHERE id = ?1", columns);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return db_fail(s, d, "query failed");
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	step = sqlite3_step(st);
	if (step == SQLITE_ROW)
		read_row(st, r);
	else if (step == SQLITE_DONE)
		rc = CA_ERR_NOTFOUND;
	else
		rc = db_fail(s, d, "query failed");
	sqlite3_finalize(st);
	return rc;
}

int task_store_put(struct task_store *s, const struct task_record *r, struct ca_diag *d)
{
	char sql[256];
	sqlite3_stmt *st = NULL;
	int rc = 0;

	if (!r->id[0] || !r->source[0] || !r->dir[0] || !r->hash[0])
		return ca_fail(d, CA_ERR_INVALID, "task store: a record needs id, source, dir and "
			       "hash");
	snprintf(sql, sizeof sql,
		 "INSERT OR REPLACE INTO tasks (%s) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
		 columns);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return db_fail(s, d, "insert failed");
	sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, r->source, -1, SQLITE_STATIC);
	if (r->level >= 0)
		sqlite3_bind_int(st, 3, r->level);
	else
		sqlite3_bind_null(st, 3);
	sqlite3_bind_text(st, 4, r->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, r->dir, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, r->hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, r->ops[0] ? r->ops : "[]", -1, SQLITE_STATIC);
	if (r->data_source[0])
		sqlite3_bind_text(st, 8, r->data_source, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 8);
	sqlite3_bind_double(st, 9, r->imported_at);
	bind_text_or_null(st, 10, r->check_hash);
	bind_text_or_null(st, 11, r->degenerate);
	if (sqlite3_step(st) != SQLITE_DONE)
		rc = db_fail(s, d, "insert failed");
	sqlite3_finalize(st);
	return rc;
}

int task_store_list(struct task_store *s, const struct task_filter *f, task_store_visit_fn fn,
		    void *ctx, struct ca_diag *d)
{
	char sql[512];
	sqlite3_stmt *st = NULL;
	struct task_record *r = malloc(sizeof *r);
	int rc = 0, step;

	if (!r)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	/* ?1/?2/?3 NULL match everything; CAST(name AS INTEGER) is the name's leading number */
	snprintf(sql, sizeof sql,
		 "SELECT %s FROM tasks WHERE (?1 IS NULL OR source = ?1) AND "
		 "(?2 IS NULL OR level = ?2) AND (?3 IS NULL OR name = ?3) "
		 "ORDER BY source, level, CAST(name AS INTEGER), id",
		 columns);
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
		rc = db_fail(s, d, "query failed");
		goto out;
	}
	if (f && f->source)
		sqlite3_bind_text(st, 1, f->source, -1, SQLITE_STATIC);
	if (f && f->level >= 0)
		sqlite3_bind_int(st, 2, f->level);
	if (f && f->name)
		sqlite3_bind_text(st, 3, f->name, -1, SQLITE_STATIC);
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		read_row(st, r);
		rc = fn(r, ctx);
		if (rc)
			goto out;
	}
	if (step != SQLITE_DONE)
		rc = db_fail(s, d, "query failed");
out:
	sqlite3_finalize(st);
	free(r);
	return rc;
}

int task_store_begin(struct task_store *s, struct ca_diag *d)
{
	int rc = exec_sql(s, "BEGIN IMMEDIATE", d);
	if (!rc)
		s->in_txn = true;
	return rc;
}

int task_store_commit(struct task_store *s, struct ca_diag *d)
{
	int rc = exec_sql(s, "COMMIT", d);
	if (!rc)
		s->in_txn = false;
	return rc;
}

void task_store_rollback(struct task_store *s)
{
	if (s->db && s->in_txn)
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	s->in_txn = false;
}

int task_store_task_dir(const struct task_store *s, const struct task_record *r, char *out,
			size_t size)
{
	/* the relative path of a task directory: never absolute, never ".." (a damaged database
	 * must not point outside the store) */
	if (!r->dir[0] || r->dir[0] == '/' || strstr(r->dir, "..") || strchr(r->dir, '\n'))
		return CA_ERR_INVALID;
	return ca_path_join(out, size, s->root, r->dir);
}
