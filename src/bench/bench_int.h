/* bench_int: what bench.c (the run: compile pool, evaluations, progress, summary) and scan.c
 * (finding the tasks and candidates, fingerprints) share; not for other subsystems. */
#ifndef CA_BENCH_BENCH_INT_H
#define CA_BENCH_BENCH_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "bench/bench.h"
#include "util/hash.h"

#define CANDIDATE_MAX_FILES 1024
#define CANDIDATE_MAX_BYTES (64u << 20)
#define COMPILE_TIMEOUT_S   900.0

enum item_state { ITEM_PENDING, ITEM_COMPILING, ITEM_READY };

struct item {
	char *key;      /* relative to tasks_dir */
	char *task_dir; /* absolute or as given joined */
	char *cand_dir;
	char task_hash[CA_HASH_HEX_LEN + 1]; /* "" when the task does not load */
	char cand_fp[CA_HASH_HEX_LEN + 1];   /* "missing" when there is no candidate */
	bool has_candidate;
	bool resumed;
	enum item_state state;
};

struct run {
	const struct bench_opts *o;
	struct item *items;
	size_t n, cap;
	char settings_fp[CA_HASH_HEX_LEN + 1];
	char self_exe[PATH_MAX];
	json_t *kb_results;     /* KernelBench's eval_results.json, or NULL */
	/* the compile pool */
	pthread_mutex_t lock;
	pthread_cond_t ready;
	size_t compiled;
	bool stop;
};

/* Adds every task under dir (a directory holding model.py) to r->items, sorted, keys relative
 * to the tasks directory (scan.c). */
int bench_scan(struct run *r, const char *dir, const char *key, int depth, struct ca_diag *d);
/* What a stored result is reusable for: the candidate's files (it->cand_fp) and the settings
 * that change a result (scan.c). */
int bench_candidate_fingerprint(const struct run *r, struct item *it, struct ca_diag *d);
void bench_settings_fingerprint(const struct bench_opts *o, char out[CA_HASH_HEX_LEN + 1]);

#endif
