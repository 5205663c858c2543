/* pylaunch: how a Python child of ours finds cuda_agent_bridge, one rule for every launch.
 *
 * The PYTHONPATH entry names <install root>/python (util/fs.h, ca_python_dir). Children that run
 * as the user, trusted (the torch bridge, the parquet reader), keep the caller's PYTHONPATH
 * after it (PYTHONPATH_INHERIT), so that a torch reachable only through it is found; the
 * candidate's process, the probe of the runtime it gets and the build helpers get ours alone
 * (PYTHONPATH_OURS), so that what they import does not depend on the caller's shell.
 *
 * Ownership: writes into the caller's buffer. */
#ifndef CA_UTIL_PYLAUNCH_H
#define CA_UTIL_PYLAUNCH_H

#include <stddef.h>

#include "util/diag.h"

enum pythonpath_mode { PYTHONPATH_OURS, PYTHONPATH_INHERIT };

#define PYLAUNCH_ENV_MAX (3 * 4096) /* bytes of a PYTHONPATH= entry with an inherited path */

/* "PYTHONPATH=<package_dir>[:$PYTHONPATH]" into out (package_dir once: not again when the
 * inherited path already begins with it); package_dir NULL: <install root>/python,
 * which must exist when who names the caller ("<who> needs cuda-agent's python/ folder"). 0, or
 * CA_ERR_LIMIT when out is too small (or a failure of ca_python_dir). */
int ca_pythonpath_env(char *out, size_t size, const char *package_dir, enum pythonpath_mode mode,
		      const char *who, struct ca_diag *d);

/* Replaces this process with `python -m module args...` (args NULL-terminated), the package on
 * PYTHONPATH (PYTHONPATH_INHERIT): a command whose work is Python (synth, rft). Returns only
 * when that cannot be done, with the reason in d. */
int ca_exec_python_module(const char *python, const char *module, const char *const *args,
			  const char *who, struct ca_diag *d);

#endif
