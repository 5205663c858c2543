/* torch_candidate: what the supervisor needs for PyTorch-format candidates (docs/protocol.md,
 * "PyTorch-format candidates"; docs/torch-build.md):
 *
 *   - the format of a candidate path (native kernels/, the CUDA-Agent workdir, a KernelBench
 *     ModelNew file);
 *   - the Python runtime the sandboxed runner must see (sys.executable, sys.prefix and the
 *     sys.path directories outside the system directories the sandbox always shows);
 *   - the build: `python -m cuda_agent_bridge.torch_build` (compilers only, no candidate code),
 *     whose one-line JSON report becomes a struct build_result plus the built modules;
 *   - the static checks that run before any candidate code (docs/torch-rules.md): the Python
 *     check (`python -m cuda_agent_bridge.static_check`; torch_build runs it on a workdir) and
 *     the symbol check of every built module (build/torch_rules.h). A refused candidate comes
 *     back as a struct torch_refusal whose code is the result's reason.
 *
 * Nothing here starts the sandbox or the GPU runner: eval/spawn.c does, with what this returns. */
#ifndef CA_EVAL_TORCH_CANDIDATE_H
#define CA_EVAL_TORCH_CANDIDATE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "build/build.h"
#include "build/torch_rules.h"
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
#define PY_VIEW_MAX_MASKS 48

/* One file of the kernel-free view: `src` (in the view's cache) shown at `dst` (the original). */
struct python_mask {
	char src[PATH_MAX];
	char dst[PATH_MAX];
};

/* What the sandbox must show for `python -m cuda_agent_bridge.runner` to run. */
struct python_runtime {
	char exe[PATH_MAX];        /* sys.executable (absolute) */
	char package_dir[PATH_MAX]; /* <install root>/python: PYTHONPATH */
	char dirs[PY_RUNTIME_MAX_DIRS][PATH_MAX]; /* read-only binds, none inside another */
	int n_dirs;
	/* The kernel-free view of torch's CUDA libraries (python_torch_view), bound over the
	 * originals after the directories for candidates judged under the cuda-agent rules */
	struct python_mask masks[PY_VIEW_MAX_MASKS];
	int n_masks;
	char preload[PATH_MAX]; /* the view's refusal library (LD_PRELOAD; one of the masks) or "" */
	bool view_ready;
};

/* Asks `python` (a few ms: no torch import) for its executable, prefixes and sys.path. */
int python_runtime_probe(const char *python, struct python_runtime *rt, struct ca_diag *d);

/* Fills rt->masks from `python -m cuda_agent_bridge.torch_view --cache <cache>/torch-view`: the
 * copies of torch's CUDA libraries without torch's compute kernels (docs/security.md, "Torch
 * compute in PyTorch-format candidates"), built once per install (about 2 s and 0.9 GB of disk
 * for torch 2.11), found by key afterwards (tens of ms). Every mask's source must lie in that
 * directory and its destination be an absolute regular file; the preload, when given, must be
 * one of the masks. Sets rt->view_ready. */
int python_torch_view(const char *python, struct python_runtime *rt, struct ca_diag *d);

/* Runs `python -m cuda_agent_bridge.torch_build <args...> --profile <profile>` (args
 * NULL-terminated: "workdir DIR ..." or "inline SPECS.json ...") and fills res from its report
 * (status, hash, arch, units, seconds, errors, library: the first module's) and *modules with the
 * report's "modules" array (owned by the caller; NULL on failure). When the build succeeded, every
 * module's shared object then goes through the symbol check (torch_rules_check_library, run path
 * limited to the report's torch library directory).
 *
 * A refused candidate (torch_build's static check of a workdir's model_new.py, status "refused",
 * or the symbol check) ends with refusal->code set to the reason code ("hack.harness_tampering",
 * "hack.torch_compute", "candidate.load_failed") and refusal->message to its first finding,
 * res->status BUILD_RULE_VIOLATION (Python) or BUILD_SYMBOL_VIOLATION (module), res->errors
 * holding every finding, and *modules NULL. refusal->code is "" otherwise. The caller makes the
 * refusal the result's reason (compiled false, reward -1).
 *
 * Returns 0 when a verdict was reached (res->status, refusal), or a negative code when the
 * builder could not run, said nothing usable, or a built module could not be read. */
int torch_build_run_checked(const char *python, const char *const *args, double timeout_s,
			    enum torch_profile profile, struct build_result *res, json_t **modules,
			    struct torch_refusal *refusal, struct ca_diag *d);

/* torch_build_run_checked under the cuda-agent profile, without the refusal's code: a refused
 * candidate shows only as res->status (build.forbidden_source / build.forbidden_symbol). */
int torch_build_run(const char *python, const char *const *args, double timeout_s,
		    struct build_result *res, json_t **modules, struct ca_diag *d);

/* The static check of a kernelbench file (workdir = false) or a workdir (true), before any of it
 * is imported: runs `python -m cuda_agent_bridge.static_check [--workdir] --profile P PATH`
 * (no torch import; tenths of a second) and reads its one JSON line. Returns 0 with refusal->code
 * "" (accepted) or set (refused: the reason code and its first finding, as above), or a negative
 * code when the check could not run (no Python, no torch installation, no answer). */
int torch_static_check_run(const char *python, const char *path, bool workdir,
			   enum torch_profile profile, double timeout_s,
			   struct torch_refusal *refusal, struct ca_diag *d);

#endif
