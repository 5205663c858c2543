#include "store/results_db.h"
#include "store/db.h"
#include "protocol/reasons.h"

#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "util/clock.h"

static int db_fail(struct results_db *r, struct ca_diag *d, const char *what)
{
	return ca_db_fail(r->db, d, "bench store: %s", what);
}

bool results_reason_final(const char *code)
{
	if (!code)
		return false;
	return reason_class_of(code) != REASON_ENV && reason_class_of(code) != REASON_INTERNAL;
}

int results_db_open(struct results_db *r, const char *path, struct ca_diag *d)
{
	static const char *const schema =
		"PRAGMA journal_mode=WAL;"
		"CREATE TABLE IF NOT EXISTS results ("
		" task_key TEXT PRIMARY KEY,"
		" task_hash TEXT NOT NULL,"
		" candidate_fp TEXT NOT NULL,"
		" settings_fp TEXT NOT NULL,"
		" reason TEXT NOT NULL,"
		" finished_at REAL NOT NULL,"
		" result TEXT NOT NULL);";
	sqlite3 *db = NULL;
	int version = -1, rc = 0;

	r->db = NULL;
	if ((rc = ca_db_open(&db, path, true, false, "the bench store", d)))
		return rc;
	r->db = db;
	if ((rc = ca_db_user_version(db, &version, d, "bench store: %s", path))) {
		results_db_close(r);
		return rc;
	}
	if (version != 0 && version != RESULTS_DB_SCHEMA) {
		rc = ca_fail(d, CA_ERR_INVALID,
			     "%s has schema version %d, this cuda-agent writes %d: use another --out "
			     "or remove it",
			     path, version, RESULTS_DB_SCHEMA);
		results_db_close(r);
		return rc;
	}
	if (sqlite3_exec(db, schema, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, "PRAGMA user_version=1", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	return 0;
fail:
	rc = db_fail(r, d, path);
	results_db_close(r);
	return rc;
}

void results_db_close(struct results_db *r)
{
	if (r->db)
		sqlite3_close(r->db);
	r->db = NULL;
}

int results_db_done(struct results_db *r, const struct results_key *key, bool *done,
		    struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0, step;

	*done = false;
	if (sqlite3_prepare_v2(r->db,
			       "SELECT reason FROM results WHERE task_key=?1 AND task_hash=?2 AND "
			       "candidate_fp=?3 AND settings_fp=?4",
			       -1, &st, NULL) != SQLITE_OK)
		return db_fail(r, d, "query");
	sqlite3_bind_text(st, 1, key->task_key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, key->task_hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, key->candidate_fp, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, key->settings_fp, -1, SQLITE_STATIC);
	step = sqlite3_step(st);
	if (step == SQLITE_ROW)
		*done = results_reason_final((const char *)sqlite3_column_text(st, 0));
	else if (step != SQLITE_DONE)
		rc = db_fail(r, d, "query");
	sqlite3_finalize(st);
	return rc;
}

int results_db_put(struct results_db *r, const struct results_key *key, const json_t *result,
		   struct ca_diag *d)
{
	const char *reason =
		json_string_value(json_object_get(json_object_get(result, "reason"), "code"));
	double finished = 0;
	sqlite3_stmt *st = NULL;
	char *text = json_dumps(result, JSON_COMPACT | JSON_REAL_PRECISION(9));
	int rc = 0;

	if (!text)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory serializing a result");
	if (strlen(text) > RESULTS_DB_MAX_ROW) {
		free(text);
		return ca_fail(d, CA_ERR_LIMIT, "the result of %s is larger than %u bytes",
			       key->task_key, RESULTS_DB_MAX_ROW);
	}
	finished = ca_wall_now();
	if (sqlite3_prepare_v2(r->db,
			       "INSERT OR REPLACE INTO results (task_key, task_hash, candidate_fp, "
			       "settings_fp, reason, finished_at, result) VALUES (?1,?2,?3,?4,?5,?6,?7)",
			       -1, &st, NULL) != SQLITE_OK) {
		free(text);
		return db_fail(r, d, "insert");
	}
	sqlite3_bind_text(st, 1, key->task_key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, key->task_hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, key->candidate_fp, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, key->settings_fp, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, reason ? reason : "", -1, SQLITE_STATIC);
	sqlite3_bind_double(st, 6, finished);
	sqlite3_bind_text(st, 7, text, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		rc = db_fail(r, d, "insert");
	sqlite3_finalize(st);
	free(text);
	return rc;
}

int results_db_each(struct results_db *r, char *const *keys, size_t n,
		    int (*fn)(const char *key, json_t *result, void *ctx), void *ctx,
		    struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0;

	if (sqlite3_prepare_v2(r->db, "SELECT result FROM results WHERE task_key=?1", -1, &st,
			       NULL) != SQLITE_OK)
		return db_fail(r, d, "query");
	for (size_t i = 0; i < n && rc == 0; i++) {
		int step;
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, keys[i], -1, SQLITE_STATIC);
		step = sqlite3_step(st);
		if (step == SQLITE_DONE)
			continue;
		if (step != SQLITE_ROW) {
			rc = db_fail(r, d, "query");
			break;
		}
		json_error_t je;
		json_t *result = json_loads((const char *)sqlite3_column_text(st, 0), 0, &je);
		if (!result) {
			rc = ca_fail(d, CA_ERR_PARSE, "bench store: the result of %s does not parse: %s",
				     keys[i], je.text);
			break;
		}
		rc = fn(keys[i], result, ctx);
		json_decref(result);
	}
	sqlite3_finalize(st);
	return rc;
}
