#include "store/baseline_cache.h"

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/fs.h"

static const char schema[] =
	"PRAGMA journal_mode=WAL;"
	"CREATE TABLE IF NOT EXISTS baselines ("
	" task_hash TEXT NOT NULL, gpu_name TEXT NOT NULL, torch_version TEXT NOT NULL,"
	" protocol_version INTEGER NOT NULL, timing_json TEXT NOT NULL, measured_at REAL NOT NULL,"
	" PRIMARY KEY (task_hash, gpu_name, torch_version, protocol_version));";

int baseline_cache_open(struct baseline_cache *c, const char *path, struct ca_diag *d)
{
	char def[PATH_MAX];
	sqlite3 *db = NULL;
	char *err = NULL;
	int rc;

	c->db = NULL;
	if (!path) {
		char dir[PATH_MAX];
		rc = ca_cache_dir(dir, sizeof dir, d);
		if (rc)
			return rc;
		if (ca_path_join(def, sizeof def, dir, "baselines.sqlite"))
			return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
		path = def;
	}
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
	    SQLITE_OK) {
		rc = ca_fail(d, CA_ERR_IO, "cannot open baseline cache %s: %s", path,
			     db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return rc;
	}
	sqlite3_busy_timeout(db, 10000);
	if (sqlite3_exec(db, schema, NULL, NULL, &err) != SQLITE_OK) {
		rc = ca_fail(d, CA_ERR_IO, "baseline cache %s: %s", path, err ? err : "error");
		sqlite3_free(err);
		sqlite3_close(db);
		return rc;
	}
	c->db = db;
	return 0;
}

static int prepare_keyed(struct baseline_cache *c, const char *sql,
			 const struct baseline_key *k, sqlite3_stmt **st, struct ca_diag *d)
{
	if (sqlite3_prepare_v2(c->db, sql, -1, st, NULL) != SQLITE_OK)
		return ca_fail(d, CA_ERR_IO, "baseline cache: %s", sqlite3_errmsg(c->db));
	sqlite3_bind_text(*st, 1, k->task_hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(*st, 2, k->gpu_name, -1, SQLITE_STATIC);
	sqlite3_bind_text(*st, 3, k->torch_version, -1, SQLITE_STATIC);
	sqlite3_bind_int(*st, 4, k->protocol_version);
	return 0;
}

int baseline_cache_get(struct baseline_cache *c, const struct baseline_key *k, json_t **timing,
		       struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = prepare_keyed(c,
			       "SELECT timing_json FROM baselines WHERE task_hash=?1 AND "
			       "gpu_name=?2 AND torch_version=?3 AND protocol_version=?4",
			       k, &st, d);
	*timing = NULL;
	if (rc)
		return rc;
	int step = sqlite3_step(st);
	if (step == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(st, 0);
		*timing = text ? json_loads(text, 0, NULL) : NULL;
		rc = *timing ? 0 : ca_fail(d, CA_ERR_PARSE, "baseline cache holds a corrupt entry");
	} else if (step == SQLITE_DONE) {
		rc = CA_ERR_NOTFOUND;
	} else {
		rc = ca_fail(d, CA_ERR_IO, "baseline cache: %s", sqlite3_errmsg(c->db));
	}
	sqlite3_finalize(st);
	return rc;
}

int baseline_cache_put(struct baseline_cache *c, const struct baseline_key *k,
		       const json_t *timing, struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	char *text = json_dumps(timing, JSON_COMPACT);
	int rc;

	if (!text)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	rc = prepare_keyed(c,
			   "INSERT OR REPLACE INTO baselines (task_hash, gpu_name, torch_version, "
			   "protocol_version, timing_json, measured_at) VALUES (?1,?2,?3,?4,?5,?6)",
			   k, &st, d);
	if (!rc) {
		sqlite3_bind_text(st, 5, text, -1, SQLITE_STATIC);
		sqlite3_bind_double(st, 6, ca_wall_now());
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = ca_fail(d, CA_ERR_IO, "baseline cache: %s", sqlite3_errmsg(c->db));
	}
	sqlite3_finalize(st);
	free(text);
	return rc;
}

int baseline_cache_delete(struct baseline_cache *c, const struct baseline_key *k,
			  struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = prepare_keyed(c,
			       "DELETE FROM baselines WHERE task_hash=?1 AND gpu_name=?2 AND "
			       "torch_version=?3 AND protocol_version=?4",
			       k, &st, d);
	if (!rc && sqlite3_step(st) != SQLITE_DONE)
		rc = ca_fail(d, CA_ERR_IO, "baseline cache: %s", sqlite3_errmsg(c->db));
	sqlite3_finalize(st);
	return rc;
}

void baseline_cache_close(struct baseline_cache *c)
{
	if (c->db)
		sqlite3_close(c->db);
	c->db = NULL;
}
