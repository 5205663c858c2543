/* cuda-agent synth: data synthesis (docs/synth.md). The steps are Python
 * (python/cuda_agent_bridge/synth); this command runs them in the bridge's Python with
 * cuda-agent's package on PYTHONPATH, its output going straight to the terminal.
 *
 * Exit codes: those of the step (0 done, 2 usage or a missing input, 3 a step failed); 4 the
 * Python cannot be run. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "util/fs.h"
#include "util/pylaunch.h"
#include "util/str.h"

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
	"            reads them), DIR/funnel.json and the funnel table; with --store S also\n"
	"            into the task store S as source --source NAME (default synth): the same as\n"
	"            `cuda-agent tasks import ops6k DIR/ops.jsonl --store S --source NAME`\n"
	"\n"
	"  --python PATH   the Python with torch ($CUDA_AGENT_PYTHON, else python3)\n";

/* export --store S: the step in a child, then the import here (the task store is C's). */
static int export_then_import(const char *python, const char *const *args, const char *dir,
			      const char *store, const char *source)
{
	char file[4096];
	int status;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "cuda-agent synth: fork: %s\n", strerror(errno));
		return EXIT_ENV;
	}
	if (pid == 0) {
		execvp(python, (char *const *)args);
		fprintf(stderr, "cuda-agent synth: cannot run %s: %s\n", python, strerror(errno));
		_exit(EXIT_ENV);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return EXIT_INTERNAL;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return WIFEXITED(status) ? WEXITSTATUS(status) : EXIT_ENV;
	if (ca_path_join(file, sizeof file, dir, "ops.jsonl") != 0) {
		fprintf(stderr, "cuda-agent synth: --dir is too long\n");
		return EXIT_USAGE;
	}
	char *argv[] = {"tasks", "import", "ops6k", file, "--store", (char *)store,
			"--source", (char *)source, NULL};
	return cmd_tasks(8, argv);
}

int cmd_synth(int argc, char **argv)
{
	const char *python = getenv("CUDA_AGENT_PYTHON"), *dir = NULL, *store = NULL;
	const char *source = "synth";
	char pp[PYLAUNCH_ENV_MAX];
	struct ca_diag d = {{0}};
	const char **args;
	int n = 0, rc;
	bool source_given = false;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fputs(synth_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : EXIT_OK;
	}
	args = calloc((size_t)argc + 4, sizeof *args);
	if (!args)
		return EXIT_INTERNAL;
	for (int i = 1; i + 1 < argc; i++) {
		if (strcmp(argv[i], "--python") == 0)
			python = argv[++i];
		else if (strcmp(argv[i], "--dir") == 0)
			dir = argv[++i];
		else if (strcmp(argv[i], "--store") == 0)
			store = argv[++i];
		else if (strcmp(argv[i], "--source") == 0) {
			source = argv[++i];
			source_given = true;
		}
	}
	if ((store || source_given) && strcmp(argv[1], "export") != 0) {
		fprintf(stderr, "cuda-agent synth: --store and --source are export's options\n");
		free(args);
		return EXIT_USAGE;
	}
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
		if ((strcmp(argv[i], "--python") == 0 || strcmp(argv[i], "--store") == 0 ||
		     strcmp(argv[i], "--source") == 0) &&
		    i + 1 < argc) {
			i++;
			continue;
		}
		args[n++] = argv[i];
	}
	args[n] = NULL;
	putenv(pp);
	if (store && dir) {
		rc = export_then_import(python, args, dir, store, source);
		free(args);
		return rc;
	}
	execvp(python, (char *const *)args);
	fprintf(stderr, "cuda-agent synth: cannot run %s: %s\n", python, strerror(errno));
	free(args);
	return EXIT_ENV;
}
