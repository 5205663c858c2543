/* cuda-agent report: the benchmark report of result files (src/report/report.h,
 * docs/report.md): a terminal table per level and overall, or the same numbers as JSON, and
 * optionally one self-contained HTML file with SVG charts. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "report/report.h"


static const char usage[] = "usage: cuda-agent report [options] RESULTS.jsonl...\n";

static const char help[] =
	"\n"
	"Reads result objects (one JSON object per line, as `cuda-agent eval --json` and\n"
	"`cuda-agent bench` write them; docs/result.md) and prints, per task level and overall:\n"
	"the pass rate, the rates of tasks faster than eager PyTorch and than torch.compile,\n"
	"and the geometric-mean speed-ups against both (with n, the tasks they are over). The\n"
	"last result of a task wins. Definitions: docs/report.md.\n"
	"\n"
	"options:\n"
	"  --html FILE     also write the report as one self-contained HTML file (table,\n"
	"                  rate bars per level, fast_p curves, speed-up histogram)\n"
	"  --json          print the numbers as one JSON object instead of the table\n"
	"                  (per level and overall, and the fast_p curves)\n"
	"  --title TEXT    the HTML report's title\n"
	"  -h, --help      this help\n"
	"\n"
	"Exit codes: 0 ok, 2 usage or unreadable/invalid results (the message names the file and\n"
	"line), 5 internal (out of memory).\n";

int cmd_report(int argc, char **argv)
{
	enum { O_HTML = 256, O_JSON, O_TITLE };
	static const struct option longopts[] = {
		{"html", required_argument, NULL, O_HTML},
		{"json", no_argument, NULL, O_JSON},
		{"title", required_argument, NULL, O_TITLE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *html = NULL, *title = NULL;
	struct report *r = NULL;
	struct ca_diag d = {{0}};
	int json = 0, ch, rc = EXIT_OK;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_HTML: html = optarg; break;
		case O_JSON: json = 1; break;
		case O_TITLE: title = optarg; break;
		case 'h':
			printf("%s%s", usage, help);
			return EXIT_OK;
		default:
			fprintf(stderr, "%sTry 'cuda-agent report --help'.\n", usage);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "%s(at least one results file)\n", usage);
		return EXIT_USAGE;
	}
	if (report_new(&r, &d) != 0) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return EXIT_INTERNAL;
	}
	for (int i = optind; i < argc && rc == EXIT_OK; i++) {
		int err = report_add_jsonl(r, argv[i], &d);
		if (err) {
			fprintf(stderr, "cuda-agent: %s\n", d.msg);
			rc = err == CA_ERR_NOMEM ? EXIT_INTERNAL : EXIT_USAGE;
		}
	}
	if (rc == EXIT_OK && report_tasks(r) == 0)
		fprintf(stderr, "cuda-agent: warning: no results in the given files\n");
	if (rc == EXIT_OK && html) {
		int err = report_write_html(r, html, title, &d);
		if (err) {
			fprintf(stderr, "cuda-agent: %s\n", d.msg);
			rc = err == CA_ERR_NOMEM ? EXIT_INTERNAL : EXIT_USAGE;
		}
	}
	if (rc == EXIT_OK && json) {
		json_t *obj = report_json(r);
		char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
		if (text)
			puts(text);
		else
			rc = EXIT_INTERNAL;
		free(text);
		json_decref(obj);
	} else if (rc == EXIT_OK) {
		report_print(r, stdout);
		if (html)
			printf("HTML report: %s\n", html);
	}
	report_free(r);
	return rc;
}
