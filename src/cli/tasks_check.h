/* tasks_check: the degeneracy check of stored tasks (`cuda-agent tasks check`, and
 * `tasks import --check`; docs/tasks.md, docs/evaluation.md "Degenerate tasks").
 *
 * Each task the filter selects is described by the torch bridge (its `describe`, the same
 * survey an evaluation runs: degenerate.py), and the verdict is recorded in the store with the
 * hash it saw (task_store_set_check). Tasks already checked at their current hash are skipped
 * unless `again`. Degenerate tasks are printed one per line (or one JSON object each), then a
 * summary with the count per level. Owns nothing after it returns. */
#ifndef CA_CLI_TASKS_CHECK_H
#define CA_CLI_TASKS_CHECK_H

#include <stdbool.h>

#include "store/task_store.h"

struct tasks_check_opts {
	const char *python; /* the bridge's Python (NULL: default) */
	const char *device; /* "auto" (NULL), "cuda", "cpu" */
	bool again;         /* check tasks already checked at their current hash */
	bool json;          /* one JSON object per checked task, then the summary object */
	bool quiet;         /* no progress lines */
};

/* The process exit code: 0 (degenerate tasks are findings, not failures), 3 when some task could
 * not be described (task.*: named on stderr), 4 when the bridge cannot run or the store cannot be
 * written, 5 out of memory. */
int tasks_check_run(struct task_store *s, const struct task_filter *f,
		    const struct tasks_check_opts *o);

#endif
