/* workspace: lays out an agent's workspace for one task (docs/workspace.md).
 *
 * workspace_create() makes DIR (and its missing parents) holding:
 *   model.py, task.json   copies of the task's files (task.json only when the task has one)
 *   SKILL.md              the agent's instructions, <install root>/skills/native/SKILL.md
 *   INTERFACE.md          generated from the torch bridge's `describe` of the task: every arg,
 *                         param and output with index, name, dtype, shape, strides and device,
 *                         the C signature and how to read each DLTensor
 *   kernels/kernel.cu     a template that compiles and exports ca_forward, which checks the
 *                         tensor counts and returns "not implemented" (nonzero)
 * The four infrastructure files are mode 0444; DIR and kernels/ stay writable.
 *
 * Contract: DIR must not exist or be an empty directory. Everything that can fail without
 * touching the file system (the task's checks, SKILL.md, the bridge's describe, generating the
 * files) happens before anything is created; if creating or writing then fails, every file and
 * directory this call created is removed again (nothing else is touched), so a failed call
 * leaves nothing behind. Files are created with O_EXCL and never overwrite anything.
 *
 * Ownership: the caller owns opts and report; nothing returned needs freeing. The bridge is
 * started and stopped inside the call unless opts->bridge lends one. */
#ifndef CA_WORKSPACE_WORKSPACE_H
#define CA_WORKSPACE_WORKSPACE_H

#include <limits.h>
#include <stdbool.h>

#include "bridge/bridge.h"
#include "util/diag.h"

struct workspace_opts {
	const char *task_dir; /* the task: model.py and an optional task.json */
	const char *dir;      /* the workspace to create: absent, or an empty directory */
	const char *python;   /* the bridge's Python; NULL: $CUDA_AGENT_PYTHON, else python3 */
	const char *device;   /* where the bridge runs torch: "auto" (NULL), "cpu", "cuda" */
	struct bridge *bridge; /* a ready bridge to describe with (borrowed; the service's warm
				  one); NULL: one is started and stopped for the call */
};

struct workspace_report {
	/* "ok", or why it failed (the CLI maps it to an exit code, docs/cli.md):
	 * "usage"        DIR exists and is not an empty directory, or a bad argument (exit 2)
	 * "task.*"       the task is broken: the task loader's or the bridge's code (exit 3)
	 * "env.bridge"   the torch bridge cannot run or answer (exit 4)
	 * "env.install"  the installation lacks skills/native/SKILL.md (exit 4)
	 * "env.io"       DIR or its files cannot be created or written (exit 4)
	 * "internal"     out of memory (exit 5) */
	char code[64];
	int num_args, num_params, num_outputs;
	bool task_json;    /* task.json was copied */
	char dir[PATH_MAX]; /* the workspace, absolute */
};

/* Returns 0, or a negative CA_ERR_* code with the reason in report->code and one line in d. */
int workspace_create(const struct workspace_opts *opts, struct workspace_report *report,
		     struct ca_diag *d);

/* Path of the installed SKILL.md relative to the install root (ca_install_root). */
#define CA_WORKSPACE_SKILL_PATH "skills/native/SKILL.md"

#endif
