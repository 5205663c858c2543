/* torch_candidate: what the supervisor needs for PyTorch-format candidates (docs/protocol.md,
 * "PyTorch-format candidates"; docs/torch-build.md):
 *
 *   - the format of a candidate path (native kernels/, the CUDA-Agent workdir, a KernelBench
 *     ModelNew file);
 *   - the Python runtime the sandboxed runner must see (sys.executable, sys.prefix and the
 *     sys.path directories outside the system directories the sandbox always shows);
 *   - the build: `python -m cuda_agent_bridge.torch_build` (compilers only, no candidate code),
 *     whose one-line JSON report becomes a struct build_result plus the built modules.
 *
 * Nothing here starts the sandbox or the GPU runner: eval.c does, with what this returns. */
#ifndef CA_EVAL_TORCH_CANDIDATE_H
#define CA_EVAL_TORCH_CANDIDATE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "build/build.h"
#include "util/diag.h"

enum candidate_format {
	CANDIDATE_AUTO = 0, /* detect from the path */
	CANDIDATE_NATIVE,   /* a directory with kernels/ (the DLPack ABI) */
	CANDIDATE_WORKDIR,  /* the published CUDA-Agent workdir: binding.cpp, model_new.py, ... */
	CANDIDATE_KERNELBENCH, /* a .py file defining ModelNew (load_inline) */
};

/* "auto", "native", "workdir", "kernelbench". */
const char *candidate_format_name(enum candidate_format f);
/* The format named s; CA_ERR_INVALID (with the accepted names) otherwise. */
int candidate_format_parse(const char *s, enum candidate_format *out, struct ca_diag *d);

/* The format of path, when *fmt is CANDIDATE_AUTO (else *fmt is checked against the path):
 *   a file (*.py)                            kernelbench
 *   a directory holding binding.cpp          workdir
 *   a directory holding kernels/             native
 *   a directory holding model_new.py only    kernelbench (that file)
 * `resolved` receives the path the format works on: the .py file for kernelbench, else path.
 * Returns 0, or CA_ERR_NOTFOUND with a one-line message saying what a candidate holds. */
int candidate_format_detect(const char *path, enum candidate_format *fmt, char *resolved,
			    size_t resolved_size, struct ca_diag *d);

#define PY_RUNTIME_MAX_DIRS 16

/* What the sandbox must show for `python -m cuda_agent_bridge.candidate` to run. */
struct python_runtime {
	char exe[PATH_MAX];        /* sys.executable (absolute) */
	char package_dir[PATH_MAX]; /* <install root>/python: PYTHONPATH */
	char dirs[PY_RUNTIME_MAX_DIRS][PATH_MAX]; /* read-only binds, none inside another */
	int n_dirs;
};

/* Asks `python` (a few ms: no torch import) for its executable, prefixes and sys.path. */
int python_runtime_probe(const char *python, struct python_runtime *rt, struct ca_diag *d);

/* Runs `python -m cuda_agent_bridge.torch_build <args...>` (NULL-terminated) and fills res from
 * its report (status, hash, arch, units, seconds, errors, library: the first module's) and
 * *modules with the report's "modules" array (owned by the caller; NULL on failure). Returns 0
 * when a report was read (the verdict is in res->status), or a negative code when the builder
 * could not run or said nothing usable. */
int torch_build_run(const char *python, const char *const *args, double timeout_s,
		    struct build_result *res, json_t **modules, struct ca_diag *d);

#endif
