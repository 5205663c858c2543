#include "store/db.h"

#include <stdarg.h>
#include <stdio.h>

#define PREFIX_MAX 1024

static void prefix(char *out, const char *fmt, va_list ap)
{
	vsnprintf(out, PREFIX_MAX, fmt, ap);
}

int ca_db_open(sqlite3 **db, const char *path, bool create, bool wal, const char *what,
	       struct ca_diag *d)
{
	int rc;
	*db = NULL;
	if (sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0),
			    NULL) != SQLITE_OK) {
		rc = ca_fail(d, CA_ERR_IO, "cannot open %s %s: %s", what, path,
			     *db ? sqlite3_errmsg(*db) : "out of memory");
		sqlite3_close(*db);
		*db = NULL;
		return rc;
	}
	sqlite3_busy_timeout(*db, CA_DB_BUSY_MS);
	if (wal && (rc = ca_db_exec(*db, "PRAGMA journal_mode=WAL", d, "%s %s", what, path))) {
		sqlite3_close(*db);
		*db = NULL;
		return rc;
	}
	return 0;
}

int ca_db_fail(sqlite3 *db, struct ca_diag *d, const char *fmt, ...)
{
	char p[PREFIX_MAX];
	va_list ap;
	va_start(ap, fmt);
	prefix(p, fmt, ap);
	va_end(ap);
	return ca_fail(d, CA_ERR_IO, "%s: %s", p, db ? sqlite3_errmsg(db) : "no connection");
}

int ca_db_exec(sqlite3 *db, const char *sql, struct ca_diag *d, const char *fmt, ...)
{
	char p[PREFIX_MAX], *err = NULL;
	va_list ap;
	int rc = 0;
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		va_start(ap, fmt);
		prefix(p, fmt, ap);
		va_end(ap);
		rc = ca_fail(d, CA_ERR_IO, "%s: %s", p, err ? err : "error");
	}
	sqlite3_free(err);
	return rc;
}

int ca_db_user_version(sqlite3 *db, int *version, struct ca_diag *d, const char *fmt, ...)
{
	char p[PREFIX_MAX];
	sqlite3_stmt *st = NULL;
	va_list ap;
	int rc = 0;
	if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		*version = sqlite3_column_int(st, 0);
	} else {
		va_start(ap, fmt);
		prefix(p, fmt, ap);
		va_end(ap);
		rc = ca_fail(d, CA_ERR_IO, "%s: %s", p, sqlite3_errmsg(db));
	}
	sqlite3_finalize(st);
	return rc;
}
