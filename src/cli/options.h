/* options: the evaluation options shared by compile, verify, profile, eval and bench
 * (src/cli/main.c). cli_parse_options() parses argv with getopt_long from optind = 1, fills c,
 * prints usage_line and the options' help for --help (and exits 0), and returns 0 or
 * EXIT_USAGE with a one-line message on stderr. Non-option arguments are left at
 * argv[optind...]. */
#ifndef CA_CLI_OPTIONS_H
#define CA_CLI_OPTIONS_H

#include "cli/commands.h"
#include "eval/eval.h"


struct cli {
	struct eval_opts opts;
	const char *task;
	const char *python;
	const char *device;
	int json;
	int eval_options; /* the command is eval: --verify-only (opts.mode EVAL_VERIFY) is one of its
			   * options */
};

int cli_parse_options(struct cli *c, int argc, char **argv, const char *usage_line);

/* For commands that take their own options out of argv before cli_parse_options (bench,
 * solve): if argv[*i] is `name VALUE` or `name=VALUE`, the value (advancing *i past it), else
 * NULL; *missing is set (never cleared) when the name matches but no value follows. */
const char *cli_option_value(int argc, char **argv, int *i, const char *name, bool *missing);

#endif
