/* report_int: what report.c and report_html.c share (not for other subsystems). */
#ifndef CA_REPORT_REPORT_INT_H
#define CA_REPORT_REPORT_INT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "report/report.h"

#define REPORT_LEVEL_OTHER (-1) /* task.level absent or null */
#define REPORT_LEVEL_ALL   (-2) /* the overall row */
#define REPORT_REASON_MAX  64
#define REPORT_KB_REASON_MAX 208 /* KernelBench's reasons: bench/kb_runs.h, KB_REASON_MAX + 1 */

struct report_task {
	char *id;
	int level;     /* >= 0, or REPORT_LEVEL_OTHER */
	bool passed;
	double s_eager;   /* speed-up against eager; 0: not timed against eager */
	double s_compile; /* against torch.compile; 0: not timed against compile */
	char reason[REPORT_REASON_MAX];
	char degenerate[REPORT_REASON_MAX]; /* task.degenerate.kind, "" when not degenerate */
	bool degenerate_held;               /* still degenerate with perturbed parameters */
	char rules[16];                     /* the result's "rules", "" when absent */
	double our_ms;                      /* timing.candidate.median_ms of a passed task; 0: none */
	/* KernelBench's own verdict (the result's "kernelbench_eval": bench/kb_runs.h) */
	bool kb;                            /* present */
	int kb_compiled, kb_correct;        /* 1, 0, or -1 when it says nothing */
	double kb_runtime_ms;               /* < 0: none */
	double kb_ref_ms;                   /* its timing of the reference; < 0: none */
	bool kb_flagged;                    /* it flagged an excessive speed-up */
	char kb_reason[REPORT_KB_REASON_MAX]; /* why it refused (or flagged); "" when none */
};

/* KernelBench's verdict on a task, as shown: "correct", "incorrect", "not compiled",
 * "no verdict". */
const char *report_kb_verdict(const struct report_task *t);
/* Whether our verdict and KernelBench's differ on correctness. */
static inline bool report_kb_differ(const struct report_task *t)
{
	return t->kb && t->kb_correct >= 0 && t->passed != (t->kb_correct == 1);
}

/* Our time over KernelBench's for a task both call correct and both timed, else 0: our median
 * (timing.candidate.median_ms) over KernelBench's runtime (the mean of its CUDA-event trials). */
static inline double report_kb_time_ratio(const struct report_task *t)
{
	return t->kb && t->passed && t->our_ms > 0 && t->kb_correct == 1 && t->kb_runtime_ms > 0
		       ? t->our_ms / t->kb_runtime_ms
		       : 0.0;
}

/* Our verdicts against KernelBench's over the tasks that carry its verdict. */
struct report_kb_counts {
	size_t tasks;          /* with a kernelbench_eval */
	size_t both_correct, both_incorrect;
	size_t we_refuse;      /* we refuse, KernelBench accepts */
	size_t kb_refuses;     /* KernelBench refuses, we accept */
	size_t no_verdict;     /* KernelBench's correctness is null */
};
void report_kb_counts(const struct report *r, struct report_kb_counts *c);

/* The timing ratio's rows (report_kb_time_ratio): one per level with a timed task (ascending,
 * "other" last), then the overall row (REPORT_LEVEL_ALL); *rows heap, *count 0 when no task
 * is timed by both. */
struct report_kb_timing {
	int level;
	size_t tasks;
	double sumlog, min, max;
	/* of those tasks, the ones with both speed-ups against eager PyTorch: ours
	 * (timing.eager over timing.candidate, our protocol) and KernelBench's (its ref_runtime over
	 * its runtime, its protocol, the same run on the same GPU) */
	size_t speedups;
	double sumlog_ours, sumlog_kb;
};
int report_kb_timing_rows(const struct report *r, struct report_kb_timing **rows, size_t *count);
static inline double report_kb_timing_geomean(const struct report_kb_timing *t)
{
	return t->tasks ? exp(t->sumlog / (double)t->tasks) : 0.0;
}
/* KernelBench's own speed-up of a task: its reference time over its candidate time; 0: none. */
static inline double report_kb_speedup(const struct report_task *t)
{
	return t->kb && t->kb_correct == 1 && t->kb_ref_ms > 0 && t->kb_runtime_ms > 0
		       ? t->kb_ref_ms / t->kb_runtime_ms
		       : 0.0;
}

struct report {
	struct report_task *tasks;
	size_t count, cap;
	size_t *slots; /* open addressing on task id: index + 1, 0 empty */
	size_t nslots; /* a power of two, at least 2 x count */
	size_t results;
	size_t replaced;
};

struct report_stats {
	int level; /* >= 0, REPORT_LEVEL_OTHER or REPORT_LEVEL_ALL */
	size_t tasks, passed, timed, faster_eager, faster_compile, n_eager, n_compile;
	double sumlog_eager, sumlog_compile;
	size_t fast_eager[REPORT_FAST_P_POINTS], fast_compile[REPORT_FAST_P_POINTS];
};

/* p of fast_p point i: i x REPORT_FAST_P_STEP, rounded so that 1.0, 2.0, 3.0 are exact. */
double report_fast_p_value(int i);
/* Rows: one per level (ascending, "other" last), then the overall row; *rows heap. */
int report_stats_rows(const struct report *r, struct report_stats **rows, size_t *count);
/* Geometric means; 0 when n is 0. */
double report_geomean_eager(const struct report_stats *s);
double report_geomean_compile(const struct report_stats *s);
/* "1", "other", "all" */
void report_level_label(int level, char *buf, size_t size);
/* Task indices sorted by level ("other" last), then id; *order heap. */
int report_task_order(const struct report *r, size_t **order);

#endif
