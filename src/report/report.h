/* report: the benchmark report of many evaluation results, in the form of the CUDA Agent
 * paper's Table 1: per task level and overall, the pass rate, the rates of tasks faster than
 * eager PyTorch and than torch.compile, the geometric-mean speed-ups against both, and the
 * fast_p curves; printed as a terminal table and written as one self-contained HTML file with
 * inline SVG charts (no script, no external resource).
 *
 * Input: result objects of schema cuda-agent.result/1 (docs/result.md), one per (task,
 * candidate), as `cuda-agent eval --json` and `cuda-agent bench` write them. The level is
 * result.task.level (an integer; absent or null: "other"). Definitions (docs/report.md):
 *   - every result counts as one task, keyed by task.id (task.dir when a task that failed to
 *     load has no id); a result whose task appears again replaces the earlier one (the last
 *     line wins, so a re-run supersedes);
 *   - passed: correct is true (and reward is not -1);
 *   - timed: passed, mode "eval", and a speed-up against that baseline is known: the
 *     baseline's median_ms / the candidate's median_ms (timing.speedup_* when the medians are
 *     missing); a baseline with {"error": ...} is not timed;
 *   - faster than eager / compile: timed against it with speed-up > 1 (strictly), as a
 *     fraction of all tasks of the level;
 *   - geometric-mean speed-up: over the tasks timed against that baseline; n reported;
 *   - fast_p (KernelBench): the fraction of all tasks timed against the baseline with
 *     speed-up > p, for p = 0, 0.1, ..., REPORT_FAST_P_MAX (REPORT_FAST_P_POINTS values).
 *
 * Ownership: a report owns copies of what it keeps from the results; report_free releases it. */
#ifndef CA_REPORT_REPORT_H
#define CA_REPORT_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "util/diag.h"

#define REPORT_FAST_P_MAX    4.0
#define REPORT_FAST_P_STEP   0.1
#define REPORT_FAST_P_POINTS 41          /* 0 .. REPORT_FAST_P_MAX in REPORT_FAST_P_STEP */
#define REPORT_MAX_RESULTS   1000000     /* results per report (duplicates included) */
#define REPORT_MAX_LINE      (16u << 20) /* bytes per JSONL line */
#define REPORT_MAX_ID        1024        /* bytes of a task id */

struct report;

int report_new(struct report **out, struct ca_diag *d);
/* Adds one result object (not kept; what the report needs is copied). A result that is not
 * an object of schema cuda-agent.result/1 is an error naming what is wrong; the report is
 * then unchanged. */
int report_add(struct report *r, const json_t *result, struct ca_diag *d);
/* Adds every line of a JSONL file (blank lines skipped; a bad line is an error naming the
 * file and its line number; the lines before it stay added). */
int report_add_jsonl(struct report *r, const char *path, struct ca_diag *d);
/* Distinct tasks so far, and results added (replaced ones included). */
size_t report_tasks(const struct report *r);
size_t report_results(const struct report *r);
/* The terminal table: one row per level, then "all". */
void report_print(const struct report *r, FILE *f);
/* The same numbers as JSON: {"tasks", "results", "replaced", "levels": [{"level", "tasks",
 * "passed", "timed", "faster_eager", "faster_compile", "pass_rate", "faster_eager_rate",
 * "faster_compile_rate", "geomean_eager", "n_eager", "geomean_compile", "n_compile", "fast_p":
 * {"eager", "compile"}}], "all": {...}, "fast_p": {"p": [...], "eager": [...], "compile":
 * [...]}, "degenerate": [{"id", "kind", "passable"}]}. level is an integer or "other"; rates
 * and geomeans are null where undefined; "degenerate" lists the tasks whose results say
 * task.degenerate (passable: a kernel that does not compute can still pass it).
 * NULL only when out of memory. */
json_t *report_json(const struct report *r);
/* The HTML document in memory (*out heap, NUL-terminated, caller frees). */
int report_html(const struct report *r, const char *title, char **out, size_t *len,
		struct ca_diag *d);
/* One self-contained HTML file (atomic write). title: shown at the top (NULL: a default). */
int report_write_html(const struct report *r, const char *path, const char *title,
		      struct ca_diag *d);
void report_free(struct report *r);

#endif
