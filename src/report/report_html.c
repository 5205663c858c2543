/* report_html: the report as one self-contained HTML document: inline CSS and inline SVG only
 * (no script, no external URL, no web font), laid out for a 1280 px wide window. Every string
 * that comes from results (task ids, reason codes) and the title are escaped.
 *
 * The charts' elements have stable ids and classes, and their fills are fixed colours, so that
 * tests/report/render_check.sh can find them in Chromium's DOM and count their pixels in a
 * screenshot; change the colours there too. docs/report.md describes the page. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"
#include "util/buf.h"
#include "util/fs.h"

#define HTML_MAX          (64u << 20) /* bytes of the whole document */
#define HTML_MAX_LEVELS   1000        /* rows of the summary table */
#define HTML_MAX_GROUPS   40          /* bar groups in the rates chart (levels + "all") */
#define HTML_MAX_TASKS    2000        /* rows of the task table */
#define HTML_ID_SHOWN     160         /* bytes of a task id shown */
#define DEFAULT_TITLE     "cuda-agent benchmark report"

/* Chart geometry (px): the plot area of every chart, the legend to its right. */
#define CHART_W   1160
#define CHART_H   340
#define PLOT_X0   64
#define PLOT_X1   984
#define PLOT_Y0   24
#define PLOT_Y1   284
#define LEGEND_X  1004
#define HIST_BINS 18

/* The fills the render test counts; each is used by one chart (and its legend) only. */
#define C_PASS         "#2f6fd0"
#define C_EAGER        "#e07b1a"
#define C_COMPILE      "#2a9d4b"
#define C_LINE_EAGER   "#c2410c"
#define C_LINE_COMPILE "#7c3aed"
#define C_HIST_SLOWER  "#b8336a"
#define C_HIST_FASTER  "#0f8b8d"

/* Escaped text for element content and quoted attributes; at most `max` bytes of s (cut at a
 * UTF-8 character boundary, then an ellipsis); control characters become U+FFFD. */
static void sb_esc(struct ca_buf *b, const char *s, size_t max)
{
	size_t n = strlen(s), start = 0;
	bool cut = n > max;
	if (cut) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *rep = c == '&'   ? "&amp;"
				  : c == '<' ? "&lt;"
				  : c == '>' ? "&gt;"
				  : c == '"' ? "&quot;"
				  : c == '\'' ? "&#39;"
				  : c < 0x20 || c == 0x7f ? "&#xfffd;"
				  : NULL;
		if (!rep)
			continue;
		ca_buf_add(b, s + start, i - start);
		ca_buf_puts(b, rep);
		start = i + 1;
	}
	ca_buf_add(b, s + start, n - start);
	if (cut)
		ca_buf_puts(b, "&#8230;");
}

static const char style[] =
	"<style>\n"
	"body{margin:0;background:#fff;color:#1f2328;"
	"font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,"
	"sans-serif}\n"
	"main{max-width:1200px;margin:0 auto;padding:16px 20px 40px}\n"
	"h1{font-size:22px;margin:4px 0}\n"
	"h2{font-size:17px;margin:26px 0 8px}\n"
	"p.meta,p.note{color:#57606a;margin:4px 0 10px}\n"
	"table{border-collapse:collapse;font-variant-numeric:tabular-nums}\n"
	"th,td{border-bottom:1px solid #d0d7de;padding:4px 10px;text-align:right;"
	"white-space:nowrap}\n"
	"th:first-child,td:first-child{text-align:left}\n"
	"thead th{background:#f6f8fa;font-weight:600}\n"
	"tr.all td{font-weight:600;border-top:2px solid #8c959f}\n"
	"td.id{max-width:560px;overflow:hidden;text-overflow:ellipsis}\n"
	"tr.fail td.status{color:#a40e26}\n"
	"svg.chart{display:block;background:#fff;margin:4px 0 0}\n"
	"svg.chart text{font-size:12px;fill:#1f2328;"
	"font-family:system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif}\n"
	"svg.chart text.axis-title{font-size:13px;fill:#57606a}\n"
	".grid line{stroke:#e4e7eb;stroke-width:1}\n"
	".axis line{stroke:#57606a;stroke-width:1}\n"
	".guide{stroke:#8c959f;stroke-width:1;stroke-dasharray:4 4}\n"
	"dl{margin:0}dt{font-weight:600;margin-top:6px}dd{margin:0 0 0 18px;max-width:980px}\n"
	"</style>\n";

static double ratio(size_t k, size_t n)
{
	return n ? (double)k / (double)n : 0.0;
}

static void level_name(int level, char *buf, size_t size)
{
	if (level == REPORT_LEVEL_ALL)
		snprintf(buf, size, "All");
	else if (level == REPORT_LEVEL_OTHER)
		snprintf(buf, size, "Other");
	else
		snprintf(buf, size, "Level %d", level);
}

/* ---- the summary table ---------------------------------------------------------------------- */

static void cell_pct(struct ca_buf *b, size_t k, size_t n)
{
	if (n)
		ca_buf_printf(b, "<td>%.1f%%</td>", 100.0 * (double)k / (double)n);
	else
		ca_buf_puts(b, "<td>-</td>");
}

static void cell_geo(struct ca_buf *b, double g, size_t n)
{
	if (n)
		ca_buf_printf(b, "<td>%.3fx (%zu)</td>", g, n);
	else
		ca_buf_puts(b, "<td>- (0)</td>");
}

static void summary_table(struct ca_buf *b, const struct report_stats *rows, size_t count)
{
	ca_buf_puts(b, "<table id=\"summary-table\">\n<thead><tr><th>Level</th><th>Tasks</th>"
		   "<th>Pass rate</th><th>Faster than eager</th><th>Faster than compile</th>"
		   "<th>Geomean speed-up vs eager (n)</th>"
		   "<th>Geomean speed-up vs compile (n)</th></tr></thead>\n<tbody>\n");
	for (size_t i = 0; i < count; i++) {
		const struct report_stats *s = &rows[i];
		char name[32];
		if (i + 1 < count && i >= HTML_MAX_LEVELS)
			continue;
		level_name(s->level, name, sizeof name);
		ca_buf_printf(b, "<tr class=\"%s\"><td>%s</td><td>%zu</td>",
			  s->level == REPORT_LEVEL_ALL ? "all" : "level", name, s->tasks);
		cell_pct(b, s->passed, s->tasks);
		cell_pct(b, s->faster_eager, s->tasks);
		cell_pct(b, s->faster_compile, s->tasks);
		cell_geo(b, report_geomean_eager(s), s->n_eager);
		cell_geo(b, report_geomean_compile(s), s->n_compile);
		ca_buf_puts(b, "</tr>\n");
	}
	ca_buf_puts(b, "</tbody>\n</table>\n");
	if (count - 1 > HTML_MAX_LEVELS)
		ca_buf_printf(b, "<p class=\"note\">The table shows the first %d of %zu levels; the "
			     "overall row counts them all.</p>\n",
			  HTML_MAX_LEVELS, count - 1);
}

/* ---- chart pieces --------------------------------------------------------------------------- */

static void svg_open(struct ca_buf *b, const char *id, const char *label)
{
	ca_buf_printf(b, "<svg id=\"%s\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
		     "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
		     "aria-label=\"%s\">\n",
		  id, CHART_W, CHART_H, CHART_W, CHART_H, label);
}

/* Horizontal grid lines with percentage labels, and the two axes. */
static void percent_grid(struct ca_buf *b)
{
	ca_buf_puts(b, "<g class=\"grid\">\n");
	for (int v = 0; v <= 100; v += 25) {
		int y = PLOT_Y1 - (PLOT_Y1 - PLOT_Y0) * v / 100;
		ca_buf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
			     "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d%%</text>\n",
			  PLOT_X0, y, PLOT_X1, y, PLOT_X0 - 8, y + 4, v);
	}
	ca_buf_puts(b, "</g>\n");
}

static void axes(struct ca_buf *b)
{
	ca_buf_printf(b, "<g class=\"axis\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
		     "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n",
		  PLOT_X0, PLOT_Y1, PLOT_X1, PLOT_Y1, PLOT_X0, PLOT_Y0, PLOT_X0, PLOT_Y1);
}

static void legend_box(struct ca_buf *b, int row, const char *cls, const char *colour,
		       const char *text)
{
	int y = PLOT_Y0 + 6 + row * 24;
	ca_buf_printf(b, "<rect class=\"legend-swatch %s\" x=\"%d\" y=\"%d\" width=\"14\" "
		     "height=\"14\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
		  cls, LEGEND_X, y, colour, LEGEND_X + 20, y + 11, text);
}

static void legend_line(struct ca_buf *b, int y, const char *cls, const char *colour,
			const char *text)
{
	ca_buf_printf(b, "<line class=\"legend-swatch %s\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
		     "stroke=\"%s\" stroke-width=\"3\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
		  cls, LEGEND_X, y, LEGEND_X + 22, y, colour, LEGEND_X + 28, y + 4, text);
}

/* ---- chart 1: pass and faster rates per level ----------------------------------------------- */

static void rates_chart(struct ca_buf *b, const struct report_stats *rows, size_t count)
{
	static const char *const cls[3] = {"bar-pass", "bar-eager", "bar-compile"};
	static const char *const colour[3] = {C_PASS, C_EAGER, C_COMPILE};
	static const char *const what[3] = {"pass rate", "faster than eager",
					    "faster than torch.compile"};
	size_t levels = count - 1 < HTML_MAX_GROUPS - 1 ? count - 1 : HTML_MAX_GROUPS - 1;
	int groups = (int)levels + 1;
	int gw = (PLOT_X1 - PLOT_X0) / groups;
	int gap = 2, bw = (gw * 3 / 4 - 2 * gap) / 3;

	if (bw > 56)
		bw = 56;
	if (bw < 1)
		bw = 1;
	svg_open(b, "chart-rates", "pass rate and faster-than rates per level");
	percent_grid(b);
	ca_buf_puts(b, "<g class=\"bars\">\n");
	for (int g = 0; g < groups; g++) {
		const struct report_stats *s = g < (int)levels ? &rows[g] : &rows[count - 1];
		size_t k[3] = {s->passed, s->faster_eager, s->faster_compile};
		int x = PLOT_X0 + g * gw + (gw - 3 * bw - 2 * gap) / 2;
		char label[32], name[32];
		report_level_label(s->level, label, sizeof label);
		level_name(s->level, name, sizeof name);
		ca_buf_printf(b, "<g class=\"bar-group\" data-level=\"%s\">\n", label);
		for (int j = 0; j < 3; j++) {
			double v = ratio(k[j], s->tasks);
			int h = (int)lround(v * (PLOT_Y1 - PLOT_Y0));
			int bx = x + j * (bw + gap);
			ca_buf_printf(b, "<rect class=\"bar %s\" data-level=\"%s\" data-rate=\"%.4f\" "
				     "x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
				     "<title>%s: %s %.1f%% (%zu of %zu)</title></rect>\n",
				  cls[j], label, v, bx, PLOT_Y1 - h, bw, h, colour[j], name, what[j],
				  100 * v, k[j], s->tasks);
			if (bw >= 24)
				ca_buf_printf(b, "<text class=\"bar-value\" x=\"%d\" y=\"%d\" "
					     "text-anchor=\"middle\">%.0f%%</text>\n",
					  bx + bw / 2, PLOT_Y1 - h - 4, 100 * v);
		}
		ca_buf_printf(b, "<text class=\"group-label\" x=\"%d\" y=\"%d\" "
			     "text-anchor=\"middle\">%s</text>\n</g>\n",
			  PLOT_X0 + g * gw + gw / 2, PLOT_Y1 + 18, groups <= 16 ? name : label);
	}
	ca_buf_puts(b, "</g>\n");
	axes(b);
	ca_buf_puts(b, "<g class=\"legend\">\n");
	legend_box(b, 0, "bar-pass", C_PASS, "Pass rate");
	legend_box(b, 1, "bar-eager", C_EAGER, "Faster than eager");
	legend_box(b, 2, "bar-compile", C_COMPILE, "Faster than compile");
	ca_buf_puts(b, "</g>\n");
	ca_buf_printf(b, "<text class=\"axis-title\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
		     "share of the level's tasks</text>\n",
		  (PLOT_X0 + PLOT_X1) / 2, PLOT_Y1 + 44);
	ca_buf_puts(b, "</svg>\n");
	if (count - 1 > levels)
		ca_buf_printf(b, "<p class=\"note\">The chart shows the first %zu of %zu levels and the "
			     "overall group.</p>\n",
			  levels, count - 1);
}

/* ---- chart 2: fast_p ------------------------------------------------------------------------ */

static int fast_x(double p)
{
	return PLOT_X0 + (int)lround(p / REPORT_FAST_P_MAX * (PLOT_X1 - PLOT_X0));
}

/* A step line: the value at p_i holds until p_(i+1). */
static void fast_line(struct ca_buf *b, const char *cls, const char *colour, const size_t *counts,
		      size_t tasks)
{
	int prev_y = 0;
	ca_buf_printf(b, "<polyline id=\"fastp-%s\" class=\"fastp-line fastp-%s\" fill=\"none\" "
		     "stroke=\"%s\" stroke-width=\"3\" data-values=\"",
		  cls, cls, colour);
	for (int i = 0; i < REPORT_FAST_P_POINTS; i++)
		ca_buf_printf(b, "%s%.4f", i ? " " : "", ratio(counts[i], tasks));
	ca_buf_puts(b, "\" points=\"");
	for (int i = 0; i < REPORT_FAST_P_POINTS; i++) {
		int x = fast_x(report_fast_p_value(i));
		int y = PLOT_Y1 - (int)lround(ratio(counts[i], tasks) * (PLOT_Y1 - PLOT_Y0));
		if (i)
			ca_buf_printf(b, " %d,%d", x, prev_y);
		ca_buf_printf(b, "%s%d,%d", i ? " " : "", x, y);
		prev_y = y;
	}
	ca_buf_puts(b, "\"/>\n");
}

static void fastp_chart(struct ca_buf *b, const struct report_stats *all)
{
	int one = (int)lround(1.0 / REPORT_FAST_P_STEP);
	int at[3] = {0, one, 2 * one}; /* the points of p = 0, 1, 2 */

	if (at[2] >= REPORT_FAST_P_POINTS)
		at[1] = at[2] = REPORT_FAST_P_POINTS - 1;

	svg_open(b, "chart-fastp", "fast_p against eager and torch.compile");
	percent_grid(b);
	ca_buf_puts(b, "<g class=\"ticks\">\n");
	for (int i = 0; i <= 8; i++) {
		double p = REPORT_FAST_P_MAX * i / 8;
		ca_buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
			  fast_x(p), PLOT_Y1 + 18, p);
	}
	ca_buf_puts(b, "</g>\n");
	ca_buf_printf(b, "<line class=\"guide\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
		  fast_x(1.0), PLOT_Y0, fast_x(1.0), PLOT_Y1);
	ca_buf_puts(b, "<g class=\"lines\">\n");
	fast_line(b, "eager", C_LINE_EAGER, all->fast_eager, all->tasks);
	fast_line(b, "compile", C_LINE_COMPILE, all->fast_compile, all->tasks);
	ca_buf_puts(b, "</g>\n");
	axes(b);
	ca_buf_puts(b, "<g class=\"legend\">\n");
	for (int k = 0; k < 2; k++) {
		const size_t *c = k ? all->fast_compile : all->fast_eager;
		int y = PLOT_Y0 + 10 + k * 86;
		legend_line(b, y, k ? "fastp-compile" : "fastp-eager",
			    k ? C_LINE_COMPILE : C_LINE_EAGER, k ? "vs torch.compile" : "vs eager");
		for (int j = 0; j < 3; j++)
			ca_buf_printf(b, "<text class=\"fastp-value\" x=\"%d\" y=\"%d\">fast_%d %.1f%%"
				     "</text>\n",
				  LEGEND_X + 28, y + 22 + 16 * j, j, 100 * ratio(c[at[j]], all->tasks));
	}
	ca_buf_puts(b, "</g>\n");
	ca_buf_printf(b, "<text class=\"axis-title\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
		     "p: speed-up threshold (fast_p: share of all tasks correct and more than p "
		     "times faster)</text>\n",
		  (PLOT_X0 + PLOT_X1) / 2, PLOT_Y1 + 44);
	ca_buf_puts(b, "</svg>\n");
}

/* ---- chart 3: histogram of speed-ups against torch.compile ---------------------------------- */

/* Bins of half an octave: 0 holds s <= 1/16, 17 holds s > 16, bin i in 1..16 holds
 * 2^((i-9)/2) < s <= 2^((i-8)/2); so bins 0-8 are "not faster" (s <= 1), 9-17 faster. */
static int hist_bin(double s)
{
	int k;
	if (s <= 1.0 / 16)
		return 0;
	if (s > 16)
		return HIST_BINS - 1;
	k = (int)ceil(2 * log2(s)) + 8;
	return k < 1 ? 1 : k > 16 ? 16 : k;
}

static void hist_chart(struct ca_buf *b, const struct report *r)
{
	static const char *const edge[] = {"1/16", "1/8", "1/4", "1/2", "1", "2", "4", "8", "16"};
	size_t bins[HIST_BINS] = {0}, max = 0, n = 0, step;
	int bw = (PLOT_X1 - PLOT_X0) / HIST_BINS;

	for (size_t i = 0; i < r->count; i++)
		if (r->tasks[i].passed && r->tasks[i].s_compile > 0) {
			bins[hist_bin(r->tasks[i].s_compile)]++;
			n++;
		}
	for (int i = 0; i < HIST_BINS; i++)
		if (bins[i] > max)
			max = bins[i];
	step = max <= 4 ? 1 : (max + 3) / 4;
	svg_open(b, "chart-hist", "histogram of speed-ups against torch.compile");
	ca_buf_puts(b, "<g class=\"grid\">\n");
	for (size_t v = 0; max && v <= max; v += step) {
		int y = PLOT_Y1 - (int)lround((double)v / (double)max * (PLOT_Y1 - PLOT_Y0));
		ca_buf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
			     "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%zu</text>\n",
			  PLOT_X0, y, PLOT_X0 + HIST_BINS * bw, y, PLOT_X0 - 8, y + 4, v);
	}
	ca_buf_puts(b, "</g>\n<g class=\"bars\">\n");
	for (int i = 0; i < HIST_BINS; i++) {
		bool faster = i >= 9;
		int h = max ? (int)lround((double)bins[i] / (double)max * (PLOT_Y1 - PLOT_Y0)) : 0;
		if (bins[i] && h < 3)
			h = 3;
		ca_buf_printf(b, "<rect class=\"hist-bar %s\" data-bin=\"%d\" data-count=\"%zu\" "
			     "x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
			     "<title>%zu task%s</title></rect>\n",
			  faster ? "hist-faster" : "hist-slower", i, bins[i], PLOT_X0 + i * bw + 2,
			  PLOT_Y1 - h, bw - 4, h, faster ? C_HIST_FASTER : C_HIST_SLOWER, bins[i],
			  bins[i] == 1 ? "" : "s");
	}
	ca_buf_puts(b, "</g>\n<g class=\"ticks\">\n");
	for (int e = 1; e <= 17; e += 2)
		ca_buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
			  PLOT_X0 + e * bw, PLOT_Y1 + 18, edge[(e - 1) / 2]);
	ca_buf_puts(b, "</g>\n");
	ca_buf_printf(b, "<line class=\"guide\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
		  PLOT_X0 + 9 * bw, PLOT_Y0, PLOT_X0 + 9 * bw, PLOT_Y1);
	if (!n)
		ca_buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no task was timed "
			     "against torch.compile</text>\n",
			  (PLOT_X0 + PLOT_X1) / 2, (PLOT_Y0 + PLOT_Y1) / 2);
	axes(b);
	ca_buf_puts(b, "<g class=\"legend\">\n");
	legend_box(b, 0, "hist-slower", C_HIST_SLOWER, "Not faster (&#8804; 1x)");
	legend_box(b, 1, "hist-faster", C_HIST_FASTER, "Faster (&gt; 1x)");
	ca_buf_puts(b, "</g>\n");
	ca_buf_printf(b, "<text class=\"axis-title\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
		     "speed-up against torch.compile (log scale, half-octave bins; %zu passed "
		     "tasks timed)</text>\n",
		  (PLOT_X0 + PLOT_X1) / 2, PLOT_Y1 + 44, n);
	ca_buf_puts(b, "</svg>\n");
}

/* ---- definitions and the task table --------------------------------------------------------- */

static const char definitions[] =
	"<h2>Definitions</h2>\n<dl>\n"
	"<dt>Task</dt><dd>One result per task id; when a task appears again, the later result "
	"replaces the earlier one.</dd>\n"
	"<dt>Pass rate</dt><dd>Share of the tasks whose candidate compiled and was correct on "
	"every verification trial (<code>correct</code> true, reward not -1).</dd>\n"
	"<dt>Faster than eager / compile</dt><dd>Share of <em>all</em> the tasks whose candidate "
	"passed, was timed (mode <code>eval</code>) and whose median time is strictly below the "
	"baseline's (speed-up &gt; 1).</dd>\n"
	"<dt>Geomean speed-up</dt><dd>Geometric mean of baseline median / candidate median over "
	"the passed tasks timed against that baseline; n is their number.</dd>\n"
	"<dt>fast_p</dt><dd>Share of all tasks that passed with a speed-up greater than p "
	"(KernelBench); fast_0 counts the passed tasks that were timed.</dd>\n"
	"</dl>\n";

static void task_table(struct ca_buf *b, const struct report *r)
{
	size_t *order = NULL;
	size_t shown = r->count < HTML_MAX_TASKS ? r->count : HTML_MAX_TASKS;

	if (report_task_order(r, &order) != 0) {
		b->err = CA_ERR_NOMEM;
		return;
	}
	ca_buf_printf(b, "<h2>Tasks</h2>\n<p class=\"meta\">%zu task%s", r->count,
		  r->count == 1 ? "" : "s");
	if (shown < r->count)
		ca_buf_printf(b, " (the first %zu shown)", shown);
	ca_buf_puts(b, "</p>\n");
	bool kb = false; /* KernelBench's own verdicts beside ours (bench/kb_runs.h) */
	for (size_t i = 0; i < r->count; i++)
		kb = kb || r->tasks[i].kb;
	ca_buf_puts(b, "<table id=\"task-table\">\n<thead><tr><th>Task</th><th>Level</th>"
		   "<th>Result</th><th>Speed-up vs eager</th><th>Speed-up vs compile</th>");
	ca_buf_puts(b, kb ? "<th>Rules</th><th>KernelBench's eval</th></tr></thead>\n<tbody>\n"
		      : "</tr></thead>\n<tbody>\n");
	for (size_t i = 0; i < shown && !b->err; i++) {
		const struct report_task *t = &r->tasks[order[i]];
		char level[32];
		report_level_label(t->level, level, sizeof level);
		ca_buf_printf(b, "<tr class=\"%s\"><td class=\"id\">", t->passed ? "pass" : "fail");
		sb_esc(b, t->id, HTML_ID_SHOWN);
		ca_buf_printf(b, "</td><td>%s</td><td class=\"status\">", level);
		if (t->passed)
			ca_buf_puts(b, t->s_eager > 0 || t->s_compile > 0 ? "passed" : "passed (not timed)");
		else {
			ca_buf_puts(b, "failed");
			if (t->reason[0]) {
				ca_buf_puts(b, ": ");
				sb_esc(b, t->reason, sizeof t->reason);
			}
		}
		ca_buf_puts(b, "</td>");
		if (t->s_eager > 0)
			ca_buf_printf(b, "<td>%.3fx</td>", t->s_eager);
		else
			ca_buf_puts(b, "<td>-</td>");
		if (t->s_compile > 0)
			ca_buf_printf(b, "<td>%.3fx</td>", t->s_compile);
		else
			ca_buf_puts(b, "<td>-</td>");
		if (kb) {
			ca_buf_puts(b, "<td>");
			sb_esc(b, t->rules[0] ? t->rules : "-", sizeof t->rules);
			ca_buf_printf(b, "</td><td class=\"kb%s\">%s", report_kb_differ(t) ? " differ" : "",
				  t->kb ? report_kb_verdict(t) : "-");
			if (t->kb && t->kb_correct == 1 && t->kb_runtime_ms >= 0)
				ca_buf_printf(b, ", %.4g ms", t->kb_runtime_ms);
			if (t->kb && report_kb_time_ratio(t) > 0)
				ca_buf_printf(b, ", ours/its time %.3gx", report_kb_time_ratio(t));
			if (t->kb && t->kb_flagged)
				ca_buf_puts(b, ", speed-up flagged");
			if (t->kb && t->kb_correct != 1 && t->kb_reason[0]) {
				ca_buf_puts(b, ": ");
				sb_esc(b, t->kb_reason, sizeof t->kb_reason);
			}
			ca_buf_puts(b, report_kb_differ(t) ? " (differs)</td>" : "</td>");
		}
		ca_buf_puts(b, "</tr>\n");
	}
	ca_buf_puts(b, "</tbody>\n</table>\n");
	free(order);
}

int report_html(const struct report *r, const char *title, char **out, size_t *len,
		struct ca_diag *d)
{
	struct report_stats *rows = NULL;
	struct ca_buf b = {.max = HTML_MAX};
	size_t count = 0;
	int rc;

	*out = NULL;
	*len = 0;
	if (!title || !*title)
		title = DEFAULT_TITLE;
	rc = report_stats_rows(r, &rows, &count);
	if (rc)
		return ca_fail(d, rc, "out of memory writing the report");
	ca_buf_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
		    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
		    "<title>");
	sb_esc(&b, title, 400);
	ca_buf_puts(&b, "</title>\n");
	ca_buf_puts(&b, style);
	ca_buf_puts(&b, "</head>\n<body>\n<main>\n<h1 id=\"title\">");
	sb_esc(&b, title, 400);
	ca_buf_printf(&b, "</h1>\n<p class=\"meta\">%zu task%s from %zu result%s (%zu replaced by a "
		      "later result for the same task), in the form of the CUDA Agent paper's "
		      "Table 1. Generated by cuda-agent report.</p>\n",
		  r->count, r->count == 1 ? "" : "s", r->results, r->results == 1 ? "" : "s",
		  r->replaced);
	ca_buf_puts(&b, "<h2>Summary</h2>\n");
	summary_table(&b, rows, count);
	ca_buf_puts(&b, "<h2>Pass rate and faster rates per level</h2>\n");
	rates_chart(&b, rows, count);
	ca_buf_puts(&b, "<h2>fast_p: correct and faster than p times the baseline</h2>\n");
	fastp_chart(&b, &rows[count - 1]);
	ca_buf_puts(&b, "<h2>Speed-ups against torch.compile</h2>\n");
	hist_chart(&b, r);
	ca_buf_puts(&b, definitions);
	task_table(&b, r);
	ca_buf_puts(&b, "</main>\n</body>\n</html>\n");
	free(rows);
	if (b.err) {
		ca_buf_free(&b);
		return b.err == CA_ERR_LIMIT
			       ? ca_fail(d, b.err, "the HTML report would exceed %u MiB",
					 HTML_MAX >> 20)
			       : ca_fail(d, b.err, "cannot build the HTML report (%s)",
					 ca_err_name(b.err));
	}
	*out = b.p;
	*len = b.len;
	return 0;
}

int report_write_html(const struct report *r, const char *path, const char *title,
		      struct ca_diag *d)
{
	char *html = NULL;
	size_t len = 0;
	int rc = report_html(r, title, &html, &len, d);
	if (!rc)
		rc = ca_write_file_atomic(path, html, len, d);
	free(html);
	return rc;
}
