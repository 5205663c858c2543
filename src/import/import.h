/* import: KernelBench checkouts and CUDA-Agent-Ops-6K rows into the task store (docs/tasks.md).
 *
 * Each task found becomes a normal task directory in the store (model.py + task.json with id,
 * source, level, name, ops, data_source and KernelBench's 1e-2 tolerances) that passed the
 * loader's checks (task_load), and a row in tasks.sqlite. One bad file or row never stops an
 * import: it is skipped with a one-line reason and counted. Re-importing the same input changes
 * nothing (same task hash: "unchanged").
 *
 * Input is untrusted: JSONL lines are capped (CA_IMPORT_MAX_LINE), code at 1 MiB, ops at
 * CA_TASK_MAX_OPS names; every name that becomes a path component is sanitized and capped. */
#ifndef CA_IMPORT_IMPORT_H
#define CA_IMPORT_IMPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "store/task_store.h"
#include "task/task.h"
#include "util/diag.h"

#define CA_IMPORT_MAX_LINE (4u << 20)      /* bytes of one JSONL line (and rows.py line) */
#define CA_IMPORT_MAX_CODE CA_TASK_MAX_MODEL_BYTES
#define CA_IMPORT_MAX_ROWS 1000000u        /* rows or files of one import */
#define CA_IMPORT_NAME_MAX 96              /* bytes of a sanitized name */
#define CA_IMPORT_SHORT_OPS_MAX 40         /* bytes of the op names in an Ops-6K task's id */
#define CA_IMPORT_REASON_MAX 512

struct import_opts {
	const char *python;   /* parquet: a Python with pyarrow; NULL: $CUDA_AGENT_PYTHON, python3 */
	double progress_s;    /* seconds between progress lines on stderr; <= 0: none */
	int show_skips;       /* skip reasons printed on stderr (then "... and more"); -1: all */
	const char *source;   /* ops6k: the tasks' source and id prefix (NULL: "ops6k"), so that
			       * sets made elsewhere (cuda-agent synth) do not replace Ops-6K's rows */
};

struct import_stats {
	size_t rows; /* files or rows looked at */
	size_t imported, unchanged, updated, skipped;
	char first_skip[CA_IMPORT_REASON_MAX]; /* "row 17: model.py defines no 'class Model'" */
	bool input_bad; /* the failure returned concerns the input (missing, unreadable, not the
			 * expected format), not the store or the environment */
};

void import_opts_defaults(struct import_opts *o);

/* DIR: a KernelBench checkout (DIR/KernelBench/levelN), its KernelBench/ folder (DIR/levelN),
 * or one levelN folder; files <N>_<Name>.py. */
int import_kernelbench(struct task_store *s, const char *dir, const struct import_opts *o,
		       struct import_stats *st, struct ca_diag *d);

/* FILE: JSONL, or parquet (starts with "PAR1") read through `python -m cuda_agent_bridge.rows`.
 * Columns code (required), ops, data_source. Row N is line N+1 of a JSONL file. */
int import_ops6k(struct task_store *s, const char *file, const struct import_opts *o,
		 struct import_stats *st, struct ca_diag *d);

/* "imported 250, unchanged 0, updated 0, skipped 2 (first: row 17: ...)" */
void import_summary(const struct import_stats *st, char *out, size_t size);

/* ---- parts, exposed for the tests and the fuzz target ---------------------------------- */

struct ops6k_row {
	char *code; /* owned, NUL-terminated, no NUL inside */
	size_t code_len;
	char ops[CA_TASK_MAX_OPS][CA_TASK_OP_MAX];
	size_t n_ops;
	char data_source[CA_TASK_DATA_SOURCE_MAX]; /* "" when absent */
};

/* One row as a JSON object: "code" a string of 1 byte..1 MiB; "ops" absent, null, an array of
 * strings, or a string holding a JSON array, a Python list ("['torch.relu', 'F.gelu']") or
 * comma-separated names; "data_source" absent, null or a string. Other keys are ignored, except
 * "_skip" (a string: rows.py could not pass the row on; it is the reason). On failure row holds
 * nothing to free and d says why in one line. */
int ops6k_parse_row(const char *text, size_t len, struct ops6k_row *row, struct ca_diag *d);
void ops6k_row_free(struct ops6k_row *row);

/* The short op names of a row for its id: each op's last dotted part, lowercased, [a-z0-9_]
 * only, joined by '_', duplicates dropped, at most CA_IMPORT_SHORT_OPS_MAX bytes; "task" when
 * nothing is left. size must be > CA_IMPORT_SHORT_OPS_MAX. */
void ops6k_short_name(const struct ops6k_row *row, char *out, size_t size);

/* in as one safe path component: [A-Za-z0-9_.+-] kept, any other byte becomes '_', as do a
 * leading '.' and a '.' after a '.' (no "..": never a parent reference), capped at
 * CA_IMPORT_NAME_MAX bytes; when anything changed, "_<8 hex>" of in's hash is appended so that
 * distinct inputs keep distinct names. CA_ERR_INVALID for an empty name, CA_ERR_LIMIT when size
 * is not more than CA_IMPORT_NAME_MAX. */
int import_sanitize_name(const char *in, char *out, size_t size);

#endif
