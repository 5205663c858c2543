/* cuda-agent baselines export|import: the baseline table as JSON lines, so that a fleet rewards
 * every candidate against the same eager and torch.compile numbers (src/store/baseline_cache.h,
 * docs/evaluation.md "Sharing baselines").
 *
 * Exit codes (docs/cli.md): 0 ok; 2 usage, or a file that cannot be read or holds a bad line
 * (nothing is imported then: the message names FILE:LINE); 4 the cache cannot be opened or
 * written; 5 internal (out of memory). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "store/baseline_cache.h"

static const char usage_all[] =
	"usage: cuda-agent baselines export [--cache DB] [OUT.jsonl]\n"
	"       cuda-agent baselines import [--cache DB] [--replace] IN.jsonl...\n";

static const char help_all[] =
	"\n"
	"Moves the baseline table (eager and torch.compile timings per task, GPU, torch version\n"
	"and timing protocol) between machines as JSON lines (docs/evaluation.md, \"Sharing\n"
	"baselines\"). export writes every entry (to stdout without OUT); import adds the entries\n"
	"of each file in one transaction, all or none, keeping for each key the later measurement\n"
	"(--replace: the file's). Evaluations then find their baselines in the table and do not\n"
	"measure them again.\n"
	"\n"
	"options:\n"
	"  --cache DB   the baseline cache (default <cache dir>/baselines.sqlite; $CUDA_AGENT_CACHE)\n"
	"  --replace    import: the file's entries win over the table's\n"
	"  -h, --help   this help\n";

static int parse(int argc, char **argv, const char **db, bool *replace, bool import)
{
	enum { O_CACHE = 256, O_REPLACE };
	static const struct option longopts[] = {
		{"cache", required_argument, NULL, O_CACHE},
		{"replace", no_argument, NULL, O_REPLACE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_CACHE: *db = optarg; break;
		case O_REPLACE:
			if (!import) {
				fprintf(stderr, "%s(--replace is for import)\n", usage_all);
				return EXIT_USAGE;
			}
			*replace = true;
			break;
		case 'h': printf("%s%s", usage_all, help_all); return -1;
		default:
			fprintf(stderr, "%sTry 'cuda-agent baselines --help'.\n", usage_all);
			return EXIT_USAGE;
		}
	}
	return EXIT_OK;
}

static int open_cache(struct baseline_cache *c, const char *db)
{
	struct ca_diag d = {{0}};
	if (baseline_cache_open(c, db, &d) != 0) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return EXIT_ENV;
	}
	return EXIT_OK;
}

static int baselines_export(int argc, char **argv)
{
	const char *db = NULL, *path;
	struct baseline_cache c;
	struct ca_diag d = {{0}};
	bool unused = false;
	size_t n = 0;
	FILE *out;
	int rc = parse(argc, argv, &db, &unused, false);

	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (argc - optind > 1) {
		fprintf(stderr, "%s(export takes at most one output file)\n", usage_all);
		return EXIT_USAGE;
	}
	path = optind < argc ? argv[optind] : NULL;
	if ((rc = open_cache(&c, db)))
		return rc;
	out = path ? fopen(path, "w") : stdout;
	if (!out) {
		perror(path);
		baseline_cache_close(&c);
		return EXIT_USAGE;
	}
	if (baseline_cache_export(&c, out, &n, &d) != 0) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		rc = EXIT_ENV;
	}
	if ((path ? fclose(out) : fflush(out)) != 0 && rc == EXIT_OK) {
		perror(path ? path : "stdout");
		rc = EXIT_ENV;
	}
	baseline_cache_close(&c);
	if (rc == EXIT_OK)
		fprintf(stderr, "exported %zu baseline entr%s%s%s\n", n, n == 1 ? "y" : "ies",
			path ? " to " : "", path ? path : "");
	return rc;
}

static int baselines_import(int argc, char **argv)
{
	const char *db = NULL;
	struct baseline_cache c;
	bool replace = false;
	int rc = parse(argc, argv, &db, &replace, true);

	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (optind >= argc) {
		fprintf(stderr, "%s(at least one file to import)\n", usage_all);
		return EXIT_USAGE;
	}
	if ((rc = open_cache(&c, db)))
		return rc;
	for (int i = optind; i < argc && rc == EXIT_OK; i++) {
		struct ca_diag d = {{0}};
		size_t added = 0, skipped = 0;
		int err = baseline_cache_import(&c, argv[i], replace, &added, &skipped, &d);
		if (err) {
			fprintf(stderr, "cuda-agent: %s (nothing of this file was imported)\n", d.msg);
			rc = err == CA_ERR_NOMEM ? EXIT_INTERNAL
			     : err == CA_ERR_IO && strstr(d.msg, "baseline cache") ? EXIT_ENV
										 : EXIT_USAGE;
		} else {
			fprintf(stderr, "%s: %zu entr%s imported, %zu kept (the table's were newer)\n",
				argv[i], added, added == 1 ? "y" : "ies", skipped);
		}
	}
	baseline_cache_close(&c);
	return rc;
}

int cmd_baselines(int argc, char **argv)
{
	static const struct cli_subcommand subs[] = {
		{"export", baselines_export},
		{"import", baselines_import},
	};
	return cli_dispatch("baselines", argc, argv, usage_all, help_all, subs,
			    sizeof subs / sizeof subs[0]);
}
