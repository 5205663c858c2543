/* cuda-agent workspace new TASK DIR: an agent's workspace for one task
 * (src/workspace/workspace.h, docs/workspace.md).
 *
 * Exit codes (docs/cli.md): 0 made; 2 usage (also: DIR exists and is not an empty directory);
 * 3 the task is broken (task.*); 4 environment (the bridge cannot run, SKILL.md is missing from
 * the installation, DIR cannot be written); 5 internal (out of memory). On any failure nothing
 * is left behind. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "protocol/reasons.h"
#include "util/log.h"
#include "util/str.h"
#include "workspace/workspace.h"


static const char usage_all[] = "usage: cuda-agent workspace new [options] TASK DIR\n";

static const char help_all[] =
	"\n"
	"Lays out DIR as an agent's workspace for the task TASK (a directory with model.py and an\n"
	"optional task.json), for the native ABI (docs/workspace.md):\n"
	"  model.py, task.json   copies of the task's files (read-only)\n"
	"  SKILL.md              the agent's rules and workflow (read-only)\n"
	"  INTERFACE.md          every arg, param and output: index, name, dtype, shape, strides,\n"
	"                        device; the C signature; how to read each DLTensor (read-only)\n"
	"  kernels/kernel.cu     a template that compiles; ca_forward returns \"not implemented\"\n"
	"The interface comes from running the task once with the torch bridge (CPU is enough).\n"
	"DIR and its parents are created; an existing DIR must be empty. Then:\n"
	"  cd DIR && cuda-agent compile && cuda-agent verify && cuda-agent profile\n"
	"\n"
	"options:\n"
	"  --python PATH          Python with torch for the bridge ($CUDA_AGENT_PYTHON, python3)\n"
	"  --device auto|cuda|cpu where the bridge runs PyTorch (default auto)\n"
	"  -q, --quiet            no progress messages\n"
	"  -v, --verbose          debug messages (and the bridge's own log on stderr)\n"
	"  -h, --help             this help\n"
	"\n"
	"Exit codes: 0 made, 2 usage (also DIR exists and is not empty), 3 the task is broken,\n"
	"4 environment (bridge, installation, DIR not writable), 5 internal. On failure nothing\n"
	"is left behind.\n";

static int exit_code(const char *code)
{
	if (strcmp(code, "ok") == 0)
		return EXIT_OK;
	if (strcmp(code, "usage") == 0)
		return EXIT_USAGE;
	switch (reason_class_of(code)) {
	case REASON_TASK: return EXIT_TASK;
	case REASON_ENV: return EXIT_ENV;
	default: return EXIT_INTERNAL;
	}
}

static int workspace_new(int argc, char **argv)
{
	enum { O_PYTHON = 256, O_DEVICE };
	static const struct option longopts[] = {
		{"python", required_argument, NULL, O_PYTHON},
		{"device", required_argument, NULL, O_DEVICE},
		{"quiet", no_argument, NULL, 'q'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct workspace_opts o = {0};
	struct workspace_report rep;
	struct ca_diag d = {{0}};
	int ch, rc;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "qvh", longopts, NULL)) != -1) {
		switch (ch) {
		case O_PYTHON: o.python = optarg; break;
		case O_DEVICE:
			if (strcmp(optarg, "auto") && strcmp(optarg, "cuda") && strcmp(optarg, "cpu")) {
				fprintf(stderr, "cuda-agent: --device takes auto, cuda or cpu\n");
				return EXIT_USAGE;
			}
			o.device = optarg;
			break;
		case 'q': ca_log_set_level(CA_LOG_QUIET); break;
		case 'v': ca_log_set_level(CA_LOG_DEBUG); break;
		case 'h':
			printf("%s%s", usage_all, help_all);
			exit(EXIT_OK);
		default: {
			char shown[64];
			fprintf(stderr, "cuda-agent: workspace new: bad option '%s'\n%sTry '--help'.\n",
				ca_printable(shown, optind > 0 && optind <= argc ? argv[optind - 1]
										: "?",
					     sizeof shown),
				usage_all);
			return EXIT_USAGE;
		}
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "%s(a task directory and the workspace directory to create)\n",
			usage_all);
		return EXIT_USAGE;
	}
	o.task_dir = argv[optind];
	o.dir = argv[optind + 1];
	rc = workspace_create(&o, &rep, &d);
	if (rc) {
		if (reason_class_of(rep.code) == REASON_TASK)
			fprintf(stderr, "cuda-agent: %s: %s\n", rep.code, d.msg);
		else
			fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return exit_code(rep.code);
	}
	printf("workspace %s: model.py%s, SKILL.md, INTERFACE.md (%d arg%s, %d param%s, %d "
	       "output%s), kernels/kernel.cu; next: cd %s && cuda-agent compile\n",
	       o.dir, rep.task_json ? ", task.json" : "", rep.num_args, rep.num_args == 1 ? "" : "s",
	       rep.num_params, rep.num_params == 1 ? "" : "s", rep.num_outputs,
	       rep.num_outputs == 1 ? "" : "s", o.dir);
	return EXIT_OK;
}

int cmd_workspace_tool(int argc, char **argv)
{
	static const struct cli_subcommand subs[] = {
		{"new", workspace_new},
	};
	return cli_dispatch("workspace", argc, argv, usage_all, help_all, subs,
			    sizeof subs / sizeof subs[0]);
}
