/* results_db: a bench run's stored results (SQLite, out_dir/bench.sqlite), one row per task key.
 *
 * A row keeps what decides whether the task must be evaluated again (task hash, candidate
 * fingerprint, settings fingerprint, the result's reason code) and the whole result JSON.
 * results_db_put replaces the task's row in one transaction, so an interrupted run loses at most
 * the evaluation in flight.
 *
 * Ownership: results_db owns its connection; strings returned through callbacks are valid only
 * during the call. */
#ifndef CA_STORE_RESULTS_DB_H
#define CA_STORE_RESULTS_DB_H

#include <stdbool.h>

#include <jansson.h>

#include "util/diag.h"

#define RESULTS_DB_SCHEMA  1
#define RESULTS_DB_MAX_ROW (64u << 20) /* bytes of result JSON per row */

struct results_db {
	void *db; /* sqlite3 * */
};

struct results_key {
	const char *task_key;       /* path of the task relative to the tasks directory */
	const char *task_hash;      /* task_load's hash */
	const char *candidate_fp;   /* bench's fingerprint of the candidate's files ("missing") */
	const char *settings_fp;    /* fingerprint of the evaluation settings */
};

int results_db_open(struct results_db *r, const char *path, struct ca_diag *d);
void results_db_close(struct results_db *r);
/* True when a stored row matches all of key and its reason is final (not env.*, not internal). */
int results_db_done(struct results_db *r, const struct results_key *key, bool *done,
		    struct ca_diag *d);
int results_db_put(struct results_db *r, const struct results_key *key, const json_t *result,
		   struct ca_diag *d);
/* Calls fn for every stored result of the given task keys, in the given order (keys without a
 * row are skipped); a row whose JSON does not parse is an error. */
int results_db_each(struct results_db *r, char *const *keys, size_t n,
		    int (*fn)(const char *key, json_t *result, void *ctx), void *ctx,
		    struct ca_diag *d);
/* Whether a reason code is final: a re-run would not be expected to change it. */
bool results_reason_final(const char *code);

#endif
