/* task_store: the imported tasks (docs/tasks.md).
 *
 * A store is a directory: STORE/tasks.sqlite indexes one task directory per task, laid out as
 * STORE/<source>/.../{model.py,task.json} (a normal task: the loader and `cuda-agent eval` take
 * it as it is). One row per task, keyed by id ("kernelbench/level1/19_ReLU"), with its source,
 * level (NULL when the source has none), name, directory (relative to STORE), content hash (the
 * loader's task hash), ops (JSON array text), data_source and import time, and the result of
 * the last degeneracy check (`cuda-agent tasks check`: the hash it checked and the bridge's
 * `degenerate` object, docs/evaluation.md "Degenerate tasks"). The schema version is PRAGMA
 * user_version (2; a version-1 store gains the check's columns when opened); WAL and a busy
 * timeout make it safe for several processes. */
#ifndef CA_STORE_TASK_STORE_H
#define CA_STORE_TASK_STORE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "task/task.h"
#include "util/diag.h"
#include "util/hash.h"

#define CA_TASK_STORE_SCHEMA 2
#define CA_TASK_STORE_DB "tasks.sqlite"
#define CA_TASK_STORE_OPS_MAX 8192 /* bytes of the ops JSON text */
#define CA_TASK_STORE_CHECK_MAX 2048 /* bytes of the degenerate JSON text */

struct task_store {
	void *db;            /* sqlite3 *, owned */
	char root[PATH_MAX]; /* absolute */
	bool in_txn;
};

struct task_record {
	char id[CA_TASK_ID_MAX];
	char source[CA_TASK_ID_MAX];
	int level; /* -1: none (NULL) */
	char name[CA_TASK_ID_MAX];
	char dir[PATH_MAX]; /* relative to the store's root */
	char hash[CA_HASH_HEX_LEN + 1];
	char ops[CA_TASK_STORE_OPS_MAX];            /* JSON array text, "[]" when none */
	char data_source[CA_TASK_DATA_SOURCE_MAX]; /* "" when none (NULL) */
	double imported_at;                         /* Unix seconds */
	char check_hash[CA_HASH_HEX_LEN + 1];       /* the hash the last check saw, "" never */
	char degenerate[CA_TASK_STORE_CHECK_MAX];   /* its degenerate object (JSON), "" when the
						       task was not degenerate (or never checked) */
};

/* Whether r's check is of its current content. */
bool task_record_checked(const struct task_record *r);

struct task_filter {
	const char *source; /* NULL: any */
	int level;          /* -1: any */
	const char *name;   /* NULL: any */
};

/* The store directory: opt if given, else $CUDA_AGENT_TASKS, else $XDG_DATA_HOME/cuda-agent/tasks,
 * else ~/.local/share/cuda-agent/tasks. Creates nothing. */
int task_store_default_dir(const char *opt, char *out, size_t size, struct ca_diag *d);

/* Opens STORE/tasks.sqlite. create: make the directory and the database when missing; without
 * it a store that does not exist is CA_ERR_NOTFOUND. A database of a newer schema is refused. */
int task_store_open(struct task_store *s, const char *root, bool create, struct ca_diag *d);
void task_store_close(struct task_store *s);

/* CA_ERR_NOTFOUND when absent. */
int task_store_get(struct task_store *s, const char *id, struct task_record *r,
		   struct ca_diag *d);
/* Inserts or replaces the row with r->id (its check columns too). */
int task_store_put(struct task_store *s, const struct task_record *r, struct ca_diag *d);
/* Records a degeneracy check of task id at hash: degenerate_json NULL when it is not degenerate
 * (at most CA_TASK_STORE_CHECK_MAX - 1 bytes, else CA_ERR_LIMIT). */
int task_store_set_check(struct task_store *s, const char *id, const char *hash,
			 const char *degenerate_json, struct ca_diag *d);

/* Calls fn for each matching row, ordered by source, level, the name's leading number, id. A
 * nonzero return from fn stops the walk and is returned. */
typedef int (*task_store_visit_fn)(const struct task_record *r, void *ctx);
int task_store_list(struct task_store *s, const struct task_filter *f, task_store_visit_fn fn,
		    void *ctx, struct ca_diag *d);

/* Write transactions around many puts (an import); rollback is harmless without one. */
int task_store_begin(struct task_store *s, struct ca_diag *d);
int task_store_commit(struct task_store *s, struct ca_diag *d);
void task_store_rollback(struct task_store *s);

/* The absolute directory of a record: STORE/<r->dir>. CA_ERR_INVALID when r->dir is empty,
 * absolute or holds "..", so a damaged database cannot point outside the store. */
int task_store_task_dir(const struct task_store *s, const struct task_record *r, char *out,
			size_t size);

#endif
