/* cuda-agent synth: data synthesis (docs/synth.md). The steps are Python
 * (python/cuda_agent_bridge/synth); this command runs them in the bridge's Python with
 * cuda-agent's package on PYTHONPATH, its output going straight to the terminal.
 *
 * Exit codes: those of the step (0 done, 2 usage or a missing input, 3 a step failed); 4 the
 * Python cannot be run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "util/pylaunch.h"

static const char synth_help[] =
	"usage: cuda-agent synth STEP --dir DIR [options]\n"
	"\n"
	"Makes training tasks from PyTorch's operators (docs/synth.md). Each step reads and writes\n"
	"files in DIR and goes on from where an interrupted run stopped.\n"
	"\n"
	"  crawl     DIR/catalog.json: the operators of torch.nn, torch.nn.functional, torch,\n"
	"            torch.special, torch.linalg (and transformers, when installed), found by\n"
	"            introspection and probed on the CPU\n"
	"  compose   DIR/tasks.jsonl: -n N tasks of 1-5 operators in the KernelBench convention,\n"
	"            the paper's mix, sized for 1-100 ms of eager runtime (--seed S)\n"
	"  filter    DIR/verdicts.jsonl: runs, deterministic, not stochastic, not degenerate,\n"
	"            torch.compile (--no-compile skips it), runtime, decontaminated against\n"
	"            --kernelbench PATH (AST similarity <= 0.9), no near-copies (--jobs J)\n"
	"  export    DIR/ops.jsonl and ops.parquet (Ops-6K columns: cuda-agent tasks import ops6k\n"
	"            reads them), DIR/funnel.json and the funnel table\n"
	"\n"
	"  --python PATH   the Python with torch ($CUDA_AGENT_PYTHON, else python3)\n";

int cmd_synth(int argc, char **argv)
{
	const char *python = getenv("CUDA_AGENT_PYTHON");
	char pp[PYLAUNCH_ENV_MAX];
	struct ca_diag d = {{0}};
	const char **args;
	int n = 0;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fputs(synth_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : EXIT_OK;
	}
	args = calloc((size_t)argc + 4, sizeof *args);
	if (!args)
		return EXIT_INTERNAL;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--python") == 0 && i + 1 < argc)
			python = argv[++i];
	if (!python || !python[0])
		python = "python3";
	if (ca_pythonpath_env(pp, sizeof pp, NULL, PYTHONPATH_INHERIT, "synth", &d)) {
		fprintf(stderr, "cuda-agent synth: %s\n", d.msg);
		free(args);
		return EXIT_ENV;
	}
	args[n++] = python;
	args[n++] = "-m";
	args[n++] = "cuda_agent_bridge.synth";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--python") == 0 && i + 1 < argc) {
			i++;
			continue;
		}
		args[n++] = argv[i];
	}
	args[n] = NULL;
	putenv(pp);
	execvp(python, (char *const *)args);
	fprintf(stderr, "cuda-agent synth: cannot run %s: %s\n", python, strerror(errno));
	free(args);
	return EXIT_ENV;
}
