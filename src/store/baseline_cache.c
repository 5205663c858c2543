#include "store/baseline_cache.h"
#include "store/db.h"

#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/fs.h"
#include "util/jsonl.h"
#include "util/log.h"
#include "util/str.h"

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
	if ((rc = ca_db_open(&db, path, true, false, "baseline cache", d)))
		return rc;
	if ((rc = ca_db_exec(db, schema, d, "baseline cache %s", path))) {
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
		return ca_db_fail(c->db, d, "baseline cache");
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
		rc = ca_db_fail(c->db, d, "baseline cache");
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
			rc = ca_db_fail(c->db, d, "baseline cache");
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
		rc = ca_db_fail(c->db, d, "baseline cache");
	sqlite3_finalize(st);
	return rc;
}

void baseline_cache_close(struct baseline_cache *c)
{
	if (c->db)
		sqlite3_close(c->db);
	c->db = NULL;
}

/* ---- export and import ------------------------------------------------------------------------ */

static int key_string(const json_t *obj, const char *key, char *out, struct ca_diag *d)
{
	const json_t *v = json_object_get(obj, key);
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (!json_is_string(v) || n == 0 || n >= BASELINE_FIELD_MAX || strlen(s) != n)
		return ca_fail(d, CA_ERR_INVALID,
			       "'%s' must be a string of 1 to %d bytes", key, BASELINE_FIELD_MAX - 1);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return ca_fail(d, CA_ERR_INVALID, "'%s' holds a control character", key);
	memcpy(out, s, n + 1);
	return 0;
}

int baseline_entry_from_json(const json_t *obj, struct baseline_entry *e, struct ca_diag *d)
{
	static const char *const known[] = {"task_hash",  "gpu_name",    "torch_version",
					    "protocol_version", "measured_at", "timing"};
	const json_t *pv, *at, *v;
	const char *key;
	int rc;

	memset(e, 0, sizeof *e);
	if (!json_is_object(obj))
		return ca_fail(d, CA_ERR_INVALID, "a baseline entry must be a JSON object");
	json_object_foreach((json_t *)obj, key, v) {
		bool ok = false;
		for (size_t i = 0; i < sizeof known / sizeof *known; i++)
			ok = ok || strcmp(key, known[i]) == 0;
		if (!ok) {
			char shown[64];
			return ca_fail(d, CA_ERR_INVALID, "unknown key '%s'",
				       ca_printable(shown, key, sizeof shown));
		}
	}
	if ((rc = key_string(obj, "task_hash", e->task_hash, d)) ||
	    (rc = key_string(obj, "gpu_name", e->gpu_name, d)) ||
	    (rc = key_string(obj, "torch_version", e->torch_version, d)))
		return rc;
	pv = json_object_get(obj, "protocol_version");
	if (!json_is_integer(pv) || json_integer_value(pv) < 1 ||
	    json_integer_value(pv) > 1000000)
		return ca_fail(d, CA_ERR_INVALID, "'protocol_version' must be an integer >= 1");
	e->protocol_version = (int)json_integer_value(pv);
	at = json_object_get(obj, "measured_at");
	if (!json_is_number(at) || !isfinite(json_number_value(at)) || json_number_value(at) < 0)
		return ca_fail(d, CA_ERR_INVALID, "'measured_at' must be a time in seconds >= 0");
	e->measured_at = json_number_value(at);
	e->timing = json_object_get(obj, "timing");
	if (!json_is_object(e->timing))
		return ca_fail(d, CA_ERR_INVALID, "'timing' must be an object");
	return 0;
}

int baseline_cache_export(struct baseline_cache *c, FILE *out, size_t *count, struct ca_diag *d)
{
	sqlite3_stmt *st = NULL;
	int rc = 0, step;

	*count = 0;
	if (sqlite3_prepare_v2(c->db,
			       "SELECT task_hash, gpu_name, torch_version, protocol_version, "
			       "measured_at, timing_json FROM baselines ORDER BY task_hash, gpu_name, "
			       "torch_version, protocol_version",
			       -1, &st, NULL) != SQLITE_OK)
		return ca_db_fail(c->db, d, "baseline cache");
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(st, 5);
		json_t *timing = text ? json_loads(text, 0, NULL) : NULL;
		json_t *line;
		if (!timing) { /* a corrupt entry is not exported (get reports it too) */
			ca_log_warn("baseline cache: a corrupt entry of task %s is left out",
				    (const char *)sqlite3_column_text(st, 0));
			continue;
		}
		line = json_pack("{s:s, s:s, s:s, s:i, s:f, s:o}", "task_hash",
				 (const char *)sqlite3_column_text(st, 0), "gpu_name",
				 (const char *)sqlite3_column_text(st, 1), "torch_version",
				 (const char *)sqlite3_column_text(st, 2), "protocol_version",
				 sqlite3_column_int(st, 3), "measured_at", sqlite3_column_double(st, 4),
				 "timing", timing);
		if (!line || json_dumpf(line, out, JSON_COMPACT | JSON_SORT_KEYS) != 0 ||
		    fputc('\n', out) == EOF) {
			json_decref(line);
			rc = ca_fail(d, CA_ERR_IO, "cannot write the exported baselines");
			break;
		}
		json_decref(line);
		(*count)++;
	}
	if (!rc && step != SQLITE_DONE)
		rc = ca_db_fail(c->db, d, "baseline cache");
	sqlite3_finalize(st);
	return rc;
}

struct import_state {
	struct baseline_cache *c;
	bool replace;
	size_t added, skipped;
};

static int import_one(void *ctx, const json_t *obj, struct ca_diag *d)
{
	struct import_state *s = ctx;
	struct baseline_entry e;
	struct baseline_key k;
	sqlite3_stmt *st = NULL;
	char *text;
	int rc;

	if ((rc = baseline_entry_from_json(obj, &e, d)))
		return rc;
	k = (struct baseline_key){e.task_hash, e.gpu_name, e.torch_version, e.protocol_version};
	if (!(text = json_dumps(e.timing, JSON_COMPACT)))
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	/* a newer measurement of the same key wins, unless told to replace */
	rc = prepare_keyed(s->c,
			   s->replace
				   ? "INSERT OR REPLACE INTO baselines (task_hash, gpu_name, "
				     "torch_version, protocol_version, timing_json, measured_at) VALUES "
				     "(?1,?2,?3,?4,?5,?6)"
				   : "INSERT INTO baselines (task_hash, gpu_name, torch_version, "
				     "protocol_version, timing_json, measured_at) VALUES "
				     "(?1,?2,?3,?4,?5,?6) ON CONFLICT DO UPDATE SET "
				     "timing_json=excluded.timing_json, "
				     "measured_at=excluded.measured_at WHERE "
				     "excluded.measured_at > baselines.measured_at",
			   &k, &st, d);
	if (!rc) {
		sqlite3_bind_text(st, 5, text, -1, SQLITE_STATIC);
		sqlite3_bind_double(st, 6, e.measured_at);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = ca_db_fail(s->c->db, d, "baseline cache");
		else if (sqlite3_changes(s->c->db) > 0)
			s->added++;
		else
			s->skipped++;
	}
	sqlite3_finalize(st);
	free(text);
	return rc;
}

int baseline_cache_import(struct baseline_cache *c, const char *path, bool replace,
			  size_t *added, size_t *skipped, struct ca_diag *d)
{
	struct import_state s = {.c = c, .replace = replace};
	int rc;

	*added = *skipped = 0;
	if (sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return ca_db_fail(c->db, d, "baseline cache");
	rc = ca_jsonl_each(path, BASELINE_LINE_MAX, import_one, &s, d);
	if (rc) {
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	if (sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		rc = ca_db_fail(c->db, d, "baseline cache");
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	*added = s.added;
	*skipped = s.skipped;
	return 0;
}
