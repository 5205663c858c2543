/* db: the one SQLite wrapper of the stores (the task store, the baseline cache, a bench run's
 * results): how a database is opened (read-write, created when asked, a 10 s busy timeout, WAL
 * journal) and how its failures read ("<what>: <SQLite's message>", CA_ERR_IO).
 *
 * Ownership: ca_db_open hands the connection to the caller (sqlite3_close it). */
#ifndef CA_STORE_DB_H
#define CA_STORE_DB_H

#include <stdbool.h>

#include <sqlite3.h>

#include "util/diag.h"

#define CA_DB_BUSY_MS 10000

/* Opens path: "cannot open <what> <path>: <why>" when it cannot. With wal, the journal is WAL. */
int ca_db_open(sqlite3 **db, const char *path, bool create, bool wal, const char *what,
	       struct ca_diag *d);
/* CA_ERR_IO with "<prefix>: <the connection's last error>" ("no connection" without one). */
int ca_db_fail(sqlite3 *db, struct ca_diag *d, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Runs sql (one or more statements); on failure "<prefix>: <error>". */
int ca_db_exec(sqlite3 *db, const char *sql, struct ca_diag *d, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* PRAGMA user_version into *version; on failure "<prefix>: <error>". */
int ca_db_user_version(sqlite3 *db, int *version, struct ca_diag *d, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
