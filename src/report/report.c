/* report: reading results, the per-level statistics, the terminal table and the JSON summary
 * (report.h; the definitions are in docs/report.md). The HTML is in report_html.c. */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/report_int.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/jsonl.h"
#include "util/str.h"

#define RESULT_SCHEMA "cuda-agent.result/1"

int report_new(struct report **out, struct ca_diag *d)
{
	*out = calloc(1, sizeof **out);
	if (!*out)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory creating a report");
	return 0;
}

void report_free(struct report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->count; i++)
		free(r->tasks[i].id);
	free(r->tasks);
	free(r->slots);
	free(r);
}

size_t report_tasks(const struct report *r)
{
	return r->count;
}

size_t report_results(const struct report *r)
{
	return r->results;
}

/* ---- the task table: id -> index ---------------------------------------------------------- */

static size_t slot_of(const struct report *r, const char *id, size_t len)
{
	size_t mask = r->nslots - 1;
	size_t i = (size_t)ca_hash64(id, len) & mask;
	while (r->slots[i]) {
		const char *other = r->tasks[r->slots[i] - 1].id;
		if (strcmp(other, id) == 0)
			break;
		i = (i + 1) & mask;
	}
	return i;
}

static int grow(struct report *r, struct ca_diag *d)
{
	if (r->count == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct report_task *t = realloc(r->tasks, cap * sizeof *t);
		if (!t)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory: %zu tasks", r->count);
		r->tasks = t;
		r->cap = cap;
	}
	if (2 * (r->count + 1) > r->nslots) {
		size_t n = r->nslots ? r->nslots * 2 : 128;
		size_t *slots = calloc(n, sizeof *slots);
		if (!slots)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory: %zu tasks", r->count);
		free(r->slots);
		r->slots = slots;
		r->nslots = n;
		for (size_t i = 0; i < r->count; i++) {
			const char *id = r->tasks[i].id;
			r->slots[slot_of(r, id, strlen(id))] = i + 1;
		}
	}
	return 0;
}

/* ---- one result ----------------------------------------------------------------------------- */

static double positive(const json_t *v)
{
	double x = json_is_number(v) ? json_number_value(v) : 0.0;
	return isfinite(x) && x > 0 ? x : 0.0;
}

/* Speed-up against one baseline: its median over the candidate's, else timing.speedup_<name>;
 * 0 when neither is a finite positive number. */
/* 1 true, 0 false, -1 anything else. */
static int tristate(const json_t *v)
{
	return json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : -1;
}

static double speedup(const json_t *timing, const char *baseline, const char *field)
{
	double cand = positive(json_object_get(json_object_get(timing, "candidate"), "median_ms"));
	double base = positive(json_object_get(json_object_get(timing, baseline), "median_ms"));
	if (cand > 0 && base > 0) {
		double s = base / cand;
		return isfinite(s) && s > 0 ? s : 0.0;
	}
	return positive(json_object_get(timing, field));
}

static int parse_level(const json_t *task, int *level, struct ca_diag *d)
{
	const json_t *v = json_object_get(task, "level");
	*level = REPORT_LEVEL_OTHER;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
		return ca_fail(d, CA_ERR_INVALID,
			       "task.level must be a whole number from 0 to 1000000, or null");
	*level = (int)json_integer_value(v);
	return 0;
}

int report_add(struct report *r, const json_t *result, struct ca_diag *d)
{
	struct report_task t = {0};
	const json_t *task, *id, *schema, *timing, *reward, *reason;
	const char *key;
	size_t len, slot;
	int rc = 0;

	if (r->results >= REPORT_MAX_RESULTS)
		return ca_fail(d, CA_ERR_LIMIT, "more than %d results", REPORT_MAX_RESULTS);
	if (!json_is_object(result))
		return ca_fail(d, CA_ERR_INVALID, "a result must be a JSON object");
	schema = json_object_get(result, "schema");
	if (!schema)
		return ca_fail(d, CA_ERR_INVALID, "schema is missing (not a result object?)");
	if (!json_is_string(schema))
		return ca_fail(d, CA_ERR_INVALID, "schema is not a string");
	if (strcmp(json_string_value(schema), RESULT_SCHEMA) != 0) {
		char shown[64];
		return ca_fail(d, CA_ERR_INVALID, "schema is '%s', not " RESULT_SCHEMA,
			       ca_printable(shown, json_string_value(schema), sizeof shown));
	}
	task = json_object_get(result, "task");
	if (!json_is_object(task))
		return ca_fail(d, CA_ERR_INVALID, "the result has no task object");
	id = json_object_get(task, "id");
	if (!json_is_string(id) || json_string_length(id) == 0)
		id = json_object_get(task, "dir"); /* a task that failed to load has no id */
	if (!json_is_string(id) || json_string_length(id) == 0)
		return ca_fail(d, CA_ERR_INVALID, "the result has no task.id (nor task.dir)");
	key = json_string_value(id);
	len = json_string_length(id);
	if (len > REPORT_MAX_ID || strlen(key) != len)
		return ca_fail(d, CA_ERR_INVALID, "task.id is longer than %d bytes or holds NUL",
			       REPORT_MAX_ID);
	rc = parse_level(task, &t.level, d);
	if (rc)
		return rc;

	reward = json_object_get(result, "reward");
	t.passed = json_is_true(json_object_get(result, "correct")) &&
		   !(json_is_integer(reward) && json_integer_value(reward) == -1);
	timing = json_object_get(result, "timing");
	if (t.passed && json_is_object(timing) &&
	    json_is_string(json_object_get(result, "mode")) &&
	    strcmp(json_string_value(json_object_get(result, "mode")), "eval") == 0) {
		t.s_eager = speedup(timing, "eager", "speedup_eager");
		t.s_compile = speedup(timing, "compile", "speedup_compile");
		t.our_ms = positive(json_object_get(json_object_get(timing, "candidate"),
						    "median_ms"));
	}
	reason = json_object_get(json_object_get(result, "reason"), "code");
	ca_printable(t.reason, json_is_string(reason) ? json_string_value(reason) : "",
		     sizeof t.reason);
	{ /* docs/evaluation.md, "Degenerate tasks" */
		const json_t *deg = json_object_get(task, "degenerate");
		const json_t *kind = json_object_get(deg, "kind");
		if (json_is_string(kind)) {
			ca_printable(t.degenerate, json_string_value(kind), sizeof t.degenerate);
			t.degenerate_held = !json_is_true(json_object_get(deg, "params_perturbed")) ||
					    json_is_string(json_object_get(deg, "after"));
		}
	}

	{
		const json_t *rules = json_object_get(result, "rules");
		const json_t *kb = json_object_get(result, "kernelbench_eval");
		ca_printable(t.rules, json_is_string(rules) ? json_string_value(rules) : "",
			     sizeof t.rules);
		if (json_is_object(kb)) {
			const json_t *rt = json_object_get(kb, "runtime");
			const json_t *why = json_object_get(kb, "reason");
			double ref = positive(json_object_get(kb, "ref_runtime"));
			t.kb = true;
			t.kb_compiled = tristate(json_object_get(kb, "compiled"));
			t.kb_correct = tristate(json_object_get(kb, "correctness"));
			t.kb_runtime_ms = json_is_number(rt) && isfinite(json_number_value(rt))
						  ? json_number_value(rt)
						  : -1.0;
			t.kb_ref_ms = ref > 0 ? ref : -1.0;
			t.kb_flagged = json_is_true(json_object_get(kb, "excessive_speedup"));
			ca_printable(t.kb_reason, json_is_string(why) ? json_string_value(why) : "",
				     sizeof t.kb_reason);
		}
	}

	rc = grow(r, d);
	if (rc)
		return rc;
	slot = slot_of(r, key, len);
	if (r->slots[slot]) {
		struct report_task *old = &r->tasks[r->slots[slot] - 1];
		t.id = old->id;
		*old = t;
		r->replaced++;
	} else {
		t.id = strdup(key);
		if (!t.id)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory: %zu tasks", r->count);
		r->tasks[r->count++] = t;
		r->slots[slot] = r->count;
	}
	r->results++;
	return 0;
}

/* ---- JSONL ---------------------------------------------------------------------------------- */

static int add_one(void *ctx, const json_t *obj, struct ca_diag *d)
{
	return report_add(ctx, obj, d);
}

int report_add_jsonl(struct report *r, const char *path, struct ca_diag *d)
{
	return ca_jsonl_each(path, REPORT_MAX_LINE, add_one, r, d);
}

/* ---- statistics ----------------------------------------------------------------------------- */

double report_fast_p_value(int i)
{
	return round((double)i * REPORT_FAST_P_STEP * 1e6) / 1e6;
}

static void count_task(struct report_stats *s, const struct report_task *t)
{
	s->tasks++;
	if (!t->passed)
		return;
	s->passed++;
	if (t->s_eager > 0 || t->s_compile > 0)
		s->timed++;
	if (t->s_eager > 0) {
		s->n_eager++;
		s->sumlog_eager += log(t->s_eager);
		if (t->s_eager > 1.0)
			s->faster_eager++;
	}
	if (t->s_compile > 0) {
		s->n_compile++;
		s->sumlog_compile += log(t->s_compile);
		if (t->s_compile > 1.0)
			s->faster_compile++;
	}
	for (int i = 0; i < REPORT_FAST_P_POINTS; i++) {
		double p = report_fast_p_value(i);
		if (t->s_eager > 0 && t->s_eager > p)
			s->fast_eager[i]++;
		if (t->s_compile > 0 && t->s_compile > p)
			s->fast_compile[i]++;
	}
}

static int cmp_level(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	/* "other" (-1) after every numbered level */
	unsigned ux = (unsigned)x, uy = (unsigned)y;
	return ux < uy ? -1 : ux > uy;
}

int report_stats_rows(const struct report *r, struct report_stats **rows_out, size_t *count)
{
	int *levels = malloc((r->count + 1) * sizeof *levels);
	struct report_stats *rows = NULL;
	size_t n = 0;

	*rows_out = NULL;
	*count = 0;
	if (!levels)
		return CA_ERR_NOMEM;
	for (size_t i = 0; i < r->count; i++)
		levels[i] = r->tasks[i].level;
	qsort(levels, r->count, sizeof *levels, cmp_level);
	for (size_t i = 0; i < r->count; i++)
		if (n == 0 || levels[n - 1] != levels[i])
			levels[n++] = levels[i];
	rows = calloc(n + 1, sizeof *rows);
	if (!rows) {
		free(levels);
		return CA_ERR_NOMEM;
	}
	for (size_t i = 0; i < n; i++)
		rows[i].level = levels[i];
	rows[n].level = REPORT_LEVEL_ALL;
	for (size_t i = 0; i < r->count; i++) {
		const struct report_task *t = &r->tasks[i];
		int *hit = bsearch(&t->level, levels, n, sizeof *levels, cmp_level);
		count_task(&rows[hit - levels], t);
		count_task(&rows[n], t);
	}
	free(levels);
	*rows_out = rows;
	*count = n + 1;
	return 0;
}

double report_geomean_eager(const struct report_stats *s)
{
	return s->n_eager ? exp(s->sumlog_eager / (double)s->n_eager) : 0.0;
}

double report_geomean_compile(const struct report_stats *s)
{
	return s->n_compile ? exp(s->sumlog_compile / (double)s->n_compile) : 0.0;
}

void report_level_label(int level, char *buf, size_t size)
{
	if (level == REPORT_LEVEL_ALL)
		snprintf(buf, size, "all");
	else if (level == REPORT_LEVEL_OTHER)
		snprintf(buf, size, "other");
	else
		snprintf(buf, size, "%d", level);
}

static int cmp_task(const void *a, const void *b, void *ctx)
{
	const struct report *r = ctx;
	const struct report_task *x = &r->tasks[*(const size_t *)a];
	const struct report_task *y = &r->tasks[*(const size_t *)b];
	int c = cmp_level(&x->level, &y->level);
	return c ? c : strcmp(x->id, y->id);
}

int report_task_order(const struct report *r, size_t **order)
{
	*order = malloc((r->count + 1) * sizeof **order);
	if (!*order)
		return CA_ERR_NOMEM;
	for (size_t i = 0; i < r->count; i++)
		(*order)[i] = i;
	qsort_r(*order, r->count, sizeof **order, cmp_task, (void *)r);
	return 0;
}

void report_kb_counts(const struct report *r, struct report_kb_counts *c)
{
	memset(c, 0, sizeof *c);
	for (size_t i = 0; i < r->count; i++) {
		const struct report_task *t = &r->tasks[i];
		if (!t->kb)
			continue;
		c->tasks++;
		if (t->kb_correct < 0)
			c->no_verdict++;
		else if (t->passed && t->kb_correct)
			c->both_correct++;
		else if (t->passed)
			c->kb_refuses++;
		else if (t->kb_correct)
			c->we_refuse++;
		else
			c->both_incorrect++;
	}
}

static void time_add(struct report_kb_timing *row, const struct report_task *t, double ratio)
{
	double kb = report_kb_speedup(t);
	row->sumlog += log(ratio);
	row->min = row->tasks == 0 || ratio < row->min ? ratio : row->min;
	row->max = row->tasks == 0 || ratio > row->max ? ratio : row->max;
	row->tasks++;
	if (t->s_eager > 0 && kb > 0 && isfinite(kb)) {
		row->speedups++;
		row->sumlog_ours += log(t->s_eager);
		row->sumlog_kb += log(kb);
	}
}

int report_kb_timing_rows(const struct report *r, struct report_kb_timing **rows_out,
			  size_t *count)
{
	struct report_stats *levels = NULL;
	struct report_kb_timing *rows;
	size_t nlevels = 0, n = 0;
	*rows_out = NULL;
	*count = 0;
	if (report_stats_rows(r, &levels, &nlevels) != 0)
		return CA_ERR_NOMEM;
	rows = calloc(nlevels, sizeof *rows);
	if (!rows) {
		free(levels);
		return CA_ERR_NOMEM;
	}
	/* levels: every level in order, then "all" (report_stats_rows) */
	for (size_t l = 0; l < nlevels; l++) {
		struct report_kb_timing row = {.level = levels[l].level};
		for (size_t i = 0; i < r->count; i++) {
			double q = report_kb_time_ratio(&r->tasks[i]);
			if (q > 0 && isfinite(q) &&
			    (row.level == REPORT_LEVEL_ALL || r->tasks[i].level == row.level))
				time_add(&row, &r->tasks[i], q);
		}
		if (row.tasks)
			rows[n++] = row;
	}
	free(levels);
	if (n == 0) {
		free(rows);
		return 0;
	}
	*rows_out = rows;
	*count = n;
	return 0;
}

/* ---- the terminal table --------------------------------------------------------------------- */

static void pct(char *buf, size_t size, size_t k, size_t n)
{
	if (n == 0)
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%.1f", 100.0 * (double)k / (double)n);
}

static void geo(char *buf, size_t size, double g, size_t n)
{
	if (n == 0)
		snprintf(buf, size, "- (0)");
	else
		snprintf(buf, size, "%.3fx (%zu)", g, n);
}

/* Degenerate tasks (a constant output can pass them), in the report's task order. */
static void print_degenerate(const struct report *r, FILE *f)
{
	size_t *order = NULL, n = 0;
	for (size_t i = 0; i < r->count; i++)
		n += r->tasks[i].degenerate[0] != 0;
	if (n == 0)
		return;
	fprintf(f, "%zu degenerate task%s (docs/evaluation.md, \"Degenerate tasks\"):\n", n,
		n == 1 ? "" : "s");
	if (report_task_order(r, &order) != 0) {
		fputs("  (out of memory)\n", f);
		return;
	}
	for (size_t k = 0; k < r->count; k++) {
		const struct report_task *t = &r->tasks[order[k]];
		if (t->degenerate[0])
			fprintf(f, "  %s: %s, %s\n", t->id, t->degenerate,
				t->degenerate_held ? "a kernel that does not compute can pass it"
						   : "verified with perturbed parameters");
	}
	free(order);
}

const char *report_kb_verdict(const struct report_task *t)
{
	if (t->kb_compiled == 0)
		return "not compiled";
	return t->kb_correct == 1 ? "correct" : t->kb_correct == 0 ? "incorrect" : "no verdict";
}

/* KernelBench's side of a task's row: its verdict, runtime and our time over its, or its
 * reason. */
static void kb_cell(const struct report_task *t, char *buf, size_t size)
{
	double q = report_kb_time_ratio(t);
	if (t->kb_correct == 1 && t->kb_runtime_ms >= 0 && q > 0)
		snprintf(buf, size, "correct, %.4g ms (ours %.4g ms, %.3gx)%s", t->kb_runtime_ms,
			 t->our_ms, q, t->kb_flagged ? ", speed-up flagged" : "");
	else if (t->kb_correct == 1 && t->kb_runtime_ms >= 0)
		snprintf(buf, size, "correct, %.4g ms%s", t->kb_runtime_ms,
			 t->kb_flagged ? ", speed-up flagged" : "");
	else if (t->kb_reason[0] && t->kb_correct != 1)
		snprintf(buf, size, "%s: %s", report_kb_verdict(t), t->kb_reason);
	else
		snprintf(buf, size, "%s%s", report_kb_verdict(t),
			 t->kb_flagged ? ", speed-up flagged" : "");
}

/* The tasks of one cell of the agreement table with both reasons, in task order. */
static void print_kb_list(const struct report *r, const size_t *order, bool passed, FILE *f)
{
	for (size_t k = 0; k < r->count; k++) {
		const struct report_task *t = &r->tasks[order[k]];
		if (!t->kb || t->kb_correct < 0 || t->passed != passed ||
		    t->passed == (t->kb_correct == 1))
			continue;
		if (passed)
			fprintf(f, "    %s: %s\n", t->id,
				t->kb_reason[0] ? t->kb_reason : report_kb_verdict(t));
		else
			fprintf(f, "    %s: %s (%s)\n", t->id, t->reason[0] ? t->reason : "not correct",
				t->rules[0] ? t->rules : "?");
	}
}

/* The agreement table, its disagreements, and the timing ratio per level. */
static void print_kb_agreement(const struct report *r, const size_t *order, FILE *f)
{
	struct report_kb_counts c;
	struct report_kb_timing *rows = NULL;
	size_t n = 0;
	report_kb_counts(r, &c);
	fprintf(f, "\n  agreement with KernelBench's eval:  %19s  %19s\n", "KernelBench correct",
		"KernelBench refuses");
	fprintf(f, "    %-32s  %19zu  %19zu\n", "ours correct", c.both_correct, c.kb_refuses);
	fprintf(f, "    %-32s  %19zu  %19zu\n", "ours refuses", c.we_refuse, c.both_incorrect);
	if (c.no_verdict)
		fprintf(f, "    (%zu task%s without KernelBench's verdict)\n", c.no_verdict,
			c.no_verdict == 1 ? "" : "s");
	if (c.we_refuse) {
		fprintf(f, "  we refuse, KernelBench accepts (%zu), with our reason:\n", c.we_refuse);
		print_kb_list(r, order, false, f);
	}
	if (c.kb_refuses) {
		fprintf(f, "  KernelBench refuses, we accept (%zu), with its reason:\n", c.kb_refuses);
		print_kb_list(r, order, true, f);
	}
	if (report_kb_timing_rows(r, &rows, &n) != 0 || n == 0) {
		free(rows);
		return;
	}
	fprintf(f, "  timing, our median ms over KernelBench's runtime (tasks both call correct; "
		   "docs/report.md, \"Comparing with KernelBench\"):\n");
	fprintf(f, "    %-6s  %5s  %9s  %9s  %9s   %s\n", "level", "tasks", "geomean", "min", "max",
		"speed-up vs eager, geomean: ours / KernelBench's (n)");
	for (size_t i = 0; i < n; i++) {
		char label[32], sp[96] = "-";
		const struct report_kb_timing *w = &rows[i];
		report_level_label(w->level, label, sizeof label);
		if (w->speedups)
			snprintf(sp, sizeof sp, "%.3fx / %.3fx (%zu)",
				 exp(w->sumlog_ours / (double)w->speedups),
				 exp(w->sumlog_kb / (double)w->speedups), w->speedups);
		fprintf(f, "    %-6s  %5zu  %8.3fx  %8.3fx  %8.3fx   %s\n", label, w->tasks,
			report_kb_timing_geomean(w), w->min, w->max, sp);
	}
	free(rows);
}

/* Our verdict beside KernelBench's own eval, where the results carry it (bench/kb_runs.h). */
static void print_kernelbench(const struct report *r, FILE *f)
{
	size_t *order = NULL, n = 0, differ = 0;
	for (size_t i = 0; i < r->count; i++)
		if (r->tasks[i].kb) {
			n++;
			differ += report_kb_differ(&r->tasks[i]);
		}
	if (n == 0)
		return;
	fprintf(f, "\nbeside KernelBench's own eval (%zu task%s, %zu where the verdicts differ):\n",
		n, n == 1 ? "" : "s", differ);
	if (report_task_order(r, &order) != 0) {
		fputs("  (out of memory)\n", f);
		return;
	}
	fprintf(f, "  %-40s  %-34s  %s\n", "task", "ours (rules)", "KernelBench");
	for (size_t k = 0; k < r->count; k++) {
		const struct report_task *t = &r->tasks[order[k]];
		char ours[REPORT_REASON_MAX + 64], theirs[REPORT_KB_REASON_MAX + 96];
		const char *rules = t->rules[0] ? t->rules : "?";
		if (!t->kb)
			continue;
		if (t->passed && t->s_eager > 0)
			snprintf(ours, sizeof ours, "correct, %.2fx eager (%s)", t->s_eager, rules);
		else
			snprintf(ours, sizeof ours, "%s (%s)", t->passed ? "correct" : t->reason, rules);
		kb_cell(t, theirs, sizeof theirs);
		fprintf(f, "  %-40s  %-34s  %s%s\n", t->id, ours, theirs,
			report_kb_differ(t) ? "  <- differ" : "");
	}
	print_kb_agreement(r, order, f);
	free(order);
}

void report_print(const struct report *r, FILE *f)
{
	static const char *const head[] = {"level", "tasks", "pass %", "faster than eager %",
					   "faster than compile %", "geomean vs eager (n)",
					   "geomean vs compile (n)"};
	struct report_stats *rows = NULL;
	size_t count = 0;
	int width[7];

	if (report_stats_rows(r, &rows, &count) != 0) {
		fputs("report: out of memory\n", f);
		return;
	}
	for (int c = 0; c < 7; c++)
		width[c] = (int)strlen(head[c]);
	for (size_t i = 0; i < count; i++) {
		char label[32];
		report_level_label(rows[i].level, label, sizeof label);
		if ((int)strlen(label) > width[0])
			width[0] = (int)strlen(label);
	}
	fprintf(f, "%-*s", width[0], head[0]);
	for (int c = 1; c < 7; c++)
		fprintf(f, "  %*s", width[c], head[c]);
	fputc('\n', f);
	for (size_t i = 0; i < count; i++) {
		const struct report_stats *s = &rows[i];
		char cell[7][48];
		report_level_label(s->level, cell[0], sizeof cell[0]);
		snprintf(cell[1], sizeof cell[1], "%zu", s->tasks);
		pct(cell[2], sizeof cell[2], s->passed, s->tasks);
		pct(cell[3], sizeof cell[3], s->faster_eager, s->tasks);
		pct(cell[4], sizeof cell[4], s->faster_compile, s->tasks);
		geo(cell[5], sizeof cell[5], report_geomean_eager(s), s->n_eager);
		geo(cell[6], sizeof cell[6], report_geomean_compile(s), s->n_compile);
		fprintf(f, "%-*s", width[0], cell[0]);
		for (int c = 1; c < 7; c++)
			fprintf(f, "  %*s", width[c], cell[c]);
		fputc('\n', f);
	}
	fprintf(f, "%zu tasks from %zu results (%zu replaced by a later result for the same task)\n",
		r->count, r->results, r->replaced);
	free(rows);
	print_degenerate(r, f);
	print_kernelbench(r, f);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static json_t *rate(size_t k, size_t n)
{
	return n ? json_real((double)k / (double)n) : json_null();
}

static json_t *tristate_json(int v)
{
	return v < 0 ? json_null() : json_boolean(v == 1);
}

static json_t *real_or_null(double v, bool have)
{
	return have ? json_real(v) : json_null();
}

/* [{"id", "ours": {"correct", "reason", "rules", "speedup_eager", "median_ms"}, "kernelbench":
 * {"compiled", "correctness", "runtime_ms", "ref_runtime_ms", "reason", "excessive_speedup"},
 * "differ", "time_ratio"}] for the tasks whose results carry KernelBench's verdict, in task
 * order. */
static json_t *kernelbench_json(const struct report *r)
{
	json_t *out = json_array();
	size_t *order = NULL;
	if (!out || report_task_order(r, &order) != 0)
		return out;
	for (size_t k = 0; k < r->count; k++) {
		const struct report_task *t = &r->tasks[order[k]];
		double q = report_kb_time_ratio(t);
		if (!t->kb)
			continue;
		json_array_append_new(
			out,
			json_pack("{s:s, s:{s:b, s:s, s:s, s:o, s:o}, s:{s:o, s:o, s:o, s:o, s:o, s:b}, "
				  "s:b, s:o}",
				  "id", t->id, "ours", "correct", t->passed, "reason", t->reason,
				  "rules", t->rules, "speedup_eager",
				  real_or_null(t->s_eager, t->s_eager > 0), "median_ms",
				  real_or_null(t->our_ms, t->our_ms > 0), "kernelbench", "compiled",
				  tristate_json(t->kb_compiled), "correctness",
				  tristate_json(t->kb_correct), "runtime_ms",
				  real_or_null(t->kb_runtime_ms, t->kb_runtime_ms >= 0),
				  "ref_runtime_ms", real_or_null(t->kb_ref_ms, t->kb_ref_ms > 0),
				  "reason", t->kb_reason[0] ? json_string(t->kb_reason) : json_null(),
				  "excessive_speedup", t->kb_flagged, "differ", report_kb_differ(t),
				  "time_ratio", real_or_null(q, q > 0)));
		json_object_set_new(json_object_get(json_array_get(out, json_array_size(out) - 1),
						    "kernelbench"),
				    "speedup", real_or_null(report_kb_speedup(t),
							    report_kb_speedup(t) > 0));
	}
	free(order);
	return out;
}

/* {"tasks", "both_correct", "both_incorrect", "we_refuse_kb_accepts", "kb_refuses_we_accept",
 * "no_verdict", "timing": [{"level", "tasks", "geomean_ratio", "min_ratio", "max_ratio"}]} */
static json_t *kernelbench_agreement_json(const struct report *r)
{
	struct report_kb_counts c;
	struct report_kb_timing *rows = NULL;
	size_t n = 0;
	json_t *timing = json_array(), *out;
	report_kb_counts(r, &c);
	if (timing && report_kb_timing_rows(r, &rows, &n) == 0)
		for (size_t i = 0; i < n; i++) {
			json_t *level = rows[i].level >= 0 ? json_integer(rows[i].level)
				      : json_string(rows[i].level == REPORT_LEVEL_OTHER ? "other"
											 : "all");
			const struct report_kb_timing *w = &rows[i];
			double ours = w->speedups ? exp(w->sumlog_ours / (double)w->speedups) : 0;
			double kb = w->speedups ? exp(w->sumlog_kb / (double)w->speedups) : 0;
			json_array_append_new(
				timing,
				json_pack("{s:o, s:I, s:f, s:f, s:f, s:I, s:o, s:o}", "level", level,
					  "tasks", (json_int_t)w->tasks, "geomean_ratio",
					  report_kb_timing_geomean(w), "min_ratio", w->min,
					  "max_ratio", w->max, "speedups", (json_int_t)w->speedups,
					  "geomean_speedup_ours", real_or_null(ours, ours > 0),
					  "geomean_speedup_kb", real_or_null(kb, kb > 0)));
		}
	free(rows);
	out = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "tasks", (json_int_t)c.tasks,
			"both_correct", (json_int_t)c.both_correct, "both_incorrect",
			(json_int_t)c.both_incorrect, "we_refuse_kb_accepts",
			(json_int_t)c.we_refuse, "kb_refuses_we_accept", (json_int_t)c.kb_refuses,
			"no_verdict", (json_int_t)c.no_verdict, "timing",
			timing ? timing : json_array());
	return out;
}

static json_t *fast_array(const size_t *counts, size_t tasks)
{
	json_t *a = json_array();
	for (int i = 0; a && i < REPORT_FAST_P_POINTS; i++)
		json_array_append_new(a, json_real(tasks ? (double)counts[i] / (double)tasks : 0.0));
	return a;
}

static json_t *row_json(const struct report_stats *s)
{
	json_t *level = s->level >= 0 ? json_integer(s->level)
					: json_string(s->level == REPORT_LEVEL_OTHER ? "other"
										     : "all");
	return json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:I, s:o, s:I, "
			 "s:{s:o, s:o}}",
			 "level", level, "tasks", (json_int_t)s->tasks, "passed",
			 (json_int_t)s->passed, "timed", (json_int_t)s->timed, "faster_eager",
			 (json_int_t)s->faster_eager, "faster_compile",
			 (json_int_t)s->faster_compile, "pass_rate", rate(s->passed, s->tasks),
			 "faster_eager_rate", rate(s->faster_eager, s->tasks),
			 "faster_compile_rate", rate(s->faster_compile, s->tasks), "geomean_eager",
			 s->n_eager ? json_real(report_geomean_eager(s)) : json_null(), "n_eager",
			 (json_int_t)s->n_eager, "geomean_compile",
			 s->n_compile ? json_real(report_geomean_compile(s)) : json_null(),
			 "n_compile", (json_int_t)s->n_compile, "fast_p", "eager",
			 fast_array(s->fast_eager, s->tasks), "compile",
			 fast_array(s->fast_compile, s->tasks));
}

json_t *report_json(const struct report *r)
{
	struct report_stats *rows = NULL;
	size_t count = 0;
	json_t *out = NULL, *levels, *p;

	if (report_stats_rows(r, &rows, &count) != 0)
		return NULL;
	levels = json_array();
	p = json_array();
	for (size_t i = 0; levels && i + 1 < count; i++)
		json_array_append_new(levels, row_json(&rows[i]));
	for (int i = 0; p && i < REPORT_FAST_P_POINTS; i++)
		json_array_append_new(p, json_real(report_fast_p_value(i)));
	out = json_pack("{s:I, s:I, s:I, s:o, s:o, s:{s:o, s:o, s:o}}", "tasks",
			(json_int_t)r->count, "results", (json_int_t)r->results, "replaced",
			(json_int_t)r->replaced, "levels", levels, "all", row_json(&rows[count - 1]),
			"fast_p", "p", p, "eager",
			fast_array(rows[count - 1].fast_eager, rows[count - 1].tasks), "compile",
			fast_array(rows[count - 1].fast_compile, rows[count - 1].tasks));
	free(rows);
	if (out) {
		json_t *deg = json_array();
		size_t *order = NULL;
		if (deg && report_task_order(r, &order) == 0) {
			for (size_t k = 0; k < r->count; k++) {
				const struct report_task *t = &r->tasks[order[k]];
				if (t->degenerate[0])
					json_array_append_new(
						deg, json_pack("{s:s, s:s, s:b}", "id", t->id, "kind",
							       t->degenerate, "passable",
							       t->degenerate_held));
			}
			free(order);
		}
		json_object_set_new(out, "degenerate", deg);
		json_object_set_new(out, "kernelbench", kernelbench_json(r));
		json_object_set_new(out, "kernelbench_agreement", kernelbench_agreement_json(r));
	}
	return out;
}
