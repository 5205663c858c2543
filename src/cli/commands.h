/* commands: the CLI's subcommands beyond compile/verify/profile/eval (src/cli/main.c), one file
 * each. Each takes argv with argv[0] the subcommand's name, prints its own --help, and returns
 * the process exit code (docs/cli.md: 0 ok, 1 candidate failed, 2 usage, 3 task broken,
 * 4 environment, 5 internal). */
#ifndef CA_CLI_COMMANDS_H
#define CA_CLI_COMMANDS_H

int cmd_tasks(int argc, char **argv);  /* tasks import|list|show (cmd_tasks.c) */
int cmd_report(int argc, char **argv); /* report RESULTS.jsonl... (cmd_report.c) */
int cmd_bench(int argc, char **argv);  /* bench TASKS CANDIDATES (cmd_bench.c) */

#endif
