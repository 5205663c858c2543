/* import_int: what import.c (the shared install path), kernelbench.c and ops6k.c share (not for
 * other subsystems). */
#ifndef CA_IMPORT_IMPORT_INT_H
#define CA_IMPORT_IMPORT_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "import/import.h"

#define KB_MAX_LEVEL_FILES 100000u
#define COMMIT_EVERY 256u
#define ROWS_LINE_TIMEOUT_S 300.0
#define ROWS_EXIT_NO_PYARROW 3

/* KernelBench's tolerances (its eval uses atol = rtol = 1e-2), for both sources. */
#define IMPORT_ATOL 1e-2
#define IMPORT_RTOL 1e-2

struct import_ctx {
	struct task_store *s;
	const struct import_opts *o;
	struct import_stats *st;
	const char *label; /* "kernelbench", "ops6k" */
	char staging[PATH_MAX];
	double last_progress;
	size_t since_commit;
	int skips_shown;
};

struct new_task {
	const char *id, *source, *name, *rel_dir;
	int level;
	const char *code;
	size_t code_len;
	const struct ops6k_row *row; /* ops and data_source; NULL: none */
};

/* Counts a skipped file or row and prints its reason (up to import_opts.show_skips). */
void import_skip(struct import_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A progress line on stderr, at most every import_opts.progress_s seconds. */
void import_progress(struct import_ctx *c);
/* Stages nt, checks it with task_load and installs it in the store (imported, unchanged,
 * updated, or skipped with a reason naming `where`). Negative only when the store fails. */
int import_install(struct import_ctx *c, const struct new_task *nt, const char *where,
		   struct ca_diag *d);
/* An import's begin (a staging directory, a store transaction) and end (commits what was
 * imported whatever rc says: task directories already moved in keep their rows; returns rc, or
 * the commit's failure). */
int import_ctx_begin(struct import_ctx *c, struct task_store *s, const struct import_opts *o,
		     struct import_stats *st, const char *label, struct ca_diag *d);
int import_ctx_end(struct import_ctx *c, int rc, struct ca_diag *d);

#endif
