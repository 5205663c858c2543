/* jobstore: the service's jobs on disk (jobstore.h). */
#include "serve/jobstore.h"

#include <stdio.h>
#include <string.h>

#include "store/db.h"
#include "util/clock.h"

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS jobs (key TEXT PRIMARY KEY, id TEXT NOT NULL, "
	"prio INTEGER NOT NULL, spec TEXT NOT NULL, deadline REAL NOT NULL, "
	"submitted REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, result TEXT, "
	"finished REAL);"
	"CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished);"
	"PRAGMA synchronous=NORMAL;";

int job_store_open(struct job_store *s, const char *path, struct ca_diag *d)
{
	sqlite3 *db = NULL;
	int rc;
	memset(s, 0, sizeof *s);
	if ((rc = ca_db_open(&db, path, true, true, "the job store", d)))
		return rc;
	if ((rc = ca_db_exec(db, schema, d, "the job store's schema"))) {
		sqlite3_close(db);
		return rc;
	}
	s->db = db;
	return 0;
}

void job_store_close(struct job_store *s)
{
	if (s->db)
		sqlite3_close(s->db);
	s->db = NULL;
}

int job_store_put(struct job_store *s, const struct job_row *r, struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (sqlite3_prepare_v2(s->db,
			       "INSERT OR REPLACE INTO jobs (key, id, prio, spec, deadline, "
			       "submitted, attempts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			       -1, &st, NULL) != SQLITE_OK)
		return ca_db_fail(s->db, d, "the job store (put)");
	sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, r->id, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 3, r->prio);
	sqlite3_bind_text(st, 4, r->spec, -1, SQLITE_STATIC);
	sqlite3_bind_double(st, 5, r->deadline);
	sqlite3_bind_double(st, 6, r->submitted);
	sqlite3_bind_int(st, 7, r->attempts);
	if (sqlite3_step(st) != SQLITE_DONE)
		rc = ca_db_fail(s->db, d, "the job store (put)");
	sqlite3_finalize(st);
	return rc;
}

int job_store_finish(struct job_store *s, const char *key, const char *result, int attempts,
		     struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0;
	if (sqlite3_prepare_v2(s->db,
			       "UPDATE jobs SET result = ?2, attempts = ?3, finished = ?4 "
			       "WHERE key = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return ca_db_fail(s->db, d, "the job store (finish)");
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, result, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 3, attempts);
	sqlite3_bind_double(st, 4, ca_wall_now());
	if (sqlite3_step(st) != SQLITE_DONE)
		rc = ca_db_fail(s->db, d, "the job store (finish)");
	sqlite3_finalize(st);
	s->finished++;
	return rc;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

int job_store_load(struct job_store *s, job_store_visit_fn fn, void *ctx, struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0, step;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT key, id, prio, spec, deadline, submitted, attempts, result "
			       "FROM jobs ORDER BY submitted",
			       -1, &st, NULL) != SQLITE_OK)
		return ca_db_fail(s->db, d, "the job store (load)");
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		struct job_row r = {.key = col_text(st, 0), .id = col_text(st, 1),
				    .prio = sqlite3_column_int(st, 2), .spec = col_text(st, 3),
				    .deadline = sqlite3_column_double(st, 4),
				    .submitted = sqlite3_column_double(st, 5),
				    .attempts = sqlite3_column_int(st, 6), .result = col_text(st, 7)};
		if (!r.key || !r.id || !r.spec)
			continue;
		if ((rc = fn(&r, ctx)))
			break;
	}
	if (!rc && step != SQLITE_DONE)
		rc = ca_db_fail(s->db, d, "the job store (load)");
	sqlite3_finalize(st);
	return rc;
}

int job_store_prune(struct job_store *s, size_t keep, struct ca_diag *d)
{
	char sql[256];
	snprintf(sql, sizeof sql,
		 "DELETE FROM jobs WHERE result IS NOT NULL AND key NOT IN (SELECT key FROM jobs "
		 "WHERE result IS NOT NULL ORDER BY finished DESC LIMIT %zu)",
		 keep);
	return ca_db_exec(s->db, sql, d, "the job store (prune)");
}
