/* commands: the CLI's subcommands beyond compile/verify/profile/eval (src/cli/main.c), one file
 * each. Each takes argv with argv[0] the subcommand's name, prints its own --help, and returns
 * the process exit code (docs/cli.md: 0 ok, 1 candidate failed, 2 usage, 3 task broken,
 * 4 environment, 5 internal). */
#ifndef CA_CLI_COMMANDS_H
#define CA_CLI_COMMANDS_H

#include <stddef.h>

enum { EXIT_OK = 0, EXIT_CANDIDATE = 1, EXIT_USAGE = 2, EXIT_TASK = 3, EXIT_ENV = 4,
       EXIT_INTERNAL = 5 };

/* A command with subcommands (`tasks import|list|show`, `workspace new`): argv[1] picks one of
 * subs (n of them), which runs with argv + 1; no subcommand prints usage + help to stderr
 * (EXIT_USAGE), --help/-h/help to stdout (EXIT_OK), an unknown one a one-line error naming it
 * and the usage (EXIT_USAGE). */
struct cli_subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
};

int cli_dispatch(const char *command, int argc, char **argv, const char *usage,
		 const char *help, const struct cli_subcommand *subs, size_t n);

int cmd_tasks(int argc, char **argv);  /* tasks import|list|show (cmd_tasks.c) */
int cmd_report(int argc, char **argv); /* report RESULTS.jsonl... (cmd_report.c) */
int cmd_bench(int argc, char **argv);  /* bench TASKS CANDIDATES (cmd_bench.c) */
int cmd_workspace_tool(int argc, char **argv); /* workspace new TASK DIR (cmd_workspace.c) */
int cmd_solve(int argc, char **argv);  /* solve TASK --llm-url URL --model NAME (cmd_solve.c) */
int cmd_baselines(int argc, char **argv); /* baselines export|import|measure (cmd_baselines.c) */
int cmd_serve(int argc, char **argv);     /* serve [options] (cmd_serve.c) */
int cmd_serve_worker(int argc, char **argv); /* serve-worker: serve's worker process */
int cmd_synth(int argc, char **argv);    /* synth STEP: data synthesis (cmd_synth.c) */
int cmd_rft(int argc, char **argv);      /* rft: RFT data from trajectories (cmd_rft.c) */
int cmd_sandbox_exec(int argc, char **argv); /* sandbox-exec: one program in the build
					      * sandbox (cmd_sandbox_exec.c) */
int cmd_worker(int argc, char **argv);    /* worker --redis URL: a fleet's node (cmd_serve.c) */

#endif
