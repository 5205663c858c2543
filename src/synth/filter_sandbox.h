/* filter_sandbox: `cuda-agent synth filter` in the sandbox (docs/synth.md, "The sandbox").
 *
 * `synth filter` runs every task's code: the composer's, and an LLM's (untrusted: llm_compose.h).
 * synth_filter_sandboxed() runs `python -m cuda_agent_bridge.synth filter` inside the sandbox of
 * src/sandbox/sandbox.h, the layers the agent's shell gets (namespaces with no network, a fresh
 * read-only root, no capabilities, seccomp, Landlock; processes allowed, for the pool of
 * checking processes and torch.compile's compilers) plus the GPU nodes, for the runtime stage.
 * What the program sees of the host: the system directories, the Python runtime's directories
 * (read-only) and one staging directory (read-write) holding copies of DIR/tasks.jsonl,
 * DIR/verdicts.jsonl and the KernelBench corpus file, if any. Afterwards (also after a failure
 * or an interruption: the step is resumable) the staging directory's verdicts.jsonl replaces
 * DIR/verdicts.jsonl and the staging directory is removed. A task's code can therefore read no
 * file of the user's, write nothing outside the staging directory, and reach no network.
 *
 * Its stdout is forwarded line by line, its stderr (the progress line) inherited. SIGINT and
 * SIGTERM stop it (the verdicts so far are kept) and the call returns CA_ERR_INTERRUPTED.
 *
 * Ownership: everything is borrowed. */
#ifndef CA_SYNTH_FILTER_SANDBOX_H
#define CA_SYNTH_FILTER_SANDBOX_H

#include "util/diag.h"

struct synth_filter_run {
	const char *python;     /* the Python with torch */
	const char *dir;        /* the work directory (tasks.jsonl, verdicts.jsonl) */
	const char *corpus;     /* a KernelBench corpus JSON file (synth kb-corpus), or NULL */
	const char *const *args; /* more arguments for the step (--no-compile, --jobs J), NULL-ended */
};

/* 0 with *exit_code the step's exit status (a signal: 128 + its number), or a negative code
 * when it could not be run (CA_ERR_CHILD: the sandbox could not be set up; CA_ERR_IO: the files
 * could not be staged or copied back) or was interrupted (CA_ERR_INTERRUPTED). */
int synth_filter_sandboxed(const struct synth_filter_run *run, int *exit_code, struct ca_diag *d);

#endif
