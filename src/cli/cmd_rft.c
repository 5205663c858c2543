/* cuda-agent rft: rejection fine-tuning data from `solve` trajectories (docs/rl.md). The work
 * is Python (python/cuda_agent_rl/rft.py); this command runs it in the bridge's Python with
 * cuda-agent's packages on PYTHONPATH.
 *
 * Exit codes: those of rft.py (0 written, 2 usage, 3 an input that is not a trajectory or a
 * directory holding none); 4 the Python cannot be run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "util/pylaunch.h"

static const char rft_help[] =
	"usage: cuda-agent rft TRAJECTORIES... --out SFT.parquet [--min-reward R] [--python PATH]\n"
	"\n"
	"Keeps the trajectories of `cuda-agent solve` (files, or directories searched for\n"
	"trajectory.jsonl) that earned at least --min-reward (default 1), made no tool-schema\n"
	"violation and hold no redundant loop (a call repeated with nothing changed between, an edit\n"
	"undone; docs/rl.md), and writes them in verl's multi-turn SFT format: SFT.parquet (columns\n"
	"messages, tools, extra_info; needs pyarrow) and SFT.jsonl beside it. Prints what it\n"
	"dropped and why.\n"
	"\n"
	"  --python PATH   the Python ($CUDA_AGENT_PYTHON, else python3)\n";

int cmd_rft(int argc, char **argv)
{
	const char *python = getenv("CUDA_AGENT_PYTHON");
	struct ca_diag d = {{0}};
	const char **args;
	int n = 0;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fputs(rft_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : EXIT_OK;
	}
	args = calloc((size_t)argc + 1, sizeof *args);
	if (!args)
		return EXIT_INTERNAL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--python") == 0 && i + 1 < argc)
			python = argv[++i];
		else
			args[n++] = argv[i];
	}
	args[n] = NULL;
	(void)ca_exec_python_module(python && python[0] ? python : "python3", "cuda_agent_rl.rft",
				    args, "rft", &d);
	fprintf(stderr, "cuda-agent rft: %s\n", d.msg);
	free(args);
	return EXIT_ENV;
}
