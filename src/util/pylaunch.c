#include "util/pylaunch.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/str.h"

int ca_pythonpath_env(char *out, size_t size, const char *package_dir, enum pythonpath_mode mode,
		      const char *who, struct ca_diag *d)
{
	char dir[PATH_MAX];
	const char *old = mode == PYTHONPATH_INHERIT ? getenv("PYTHONPATH") : NULL;
	int rc;
	if (!package_dir) {
		if ((rc = ca_python_dir(dir, sizeof dir, who, d)))
			return rc;
		package_dir = dir;
	}
	/* Already first in the inherited path (a caller that set it before execing another): kept
	 * once. */
	size_t plen = strlen(package_dir);
	if (old && strncmp(old, package_dir, plen) == 0 && (old[plen] == ':' || old[plen] == '\0'))
		old = old[plen] == ':' ? old + plen + 1 : NULL;
	if (ca_format(out, size, "PYTHONPATH=%s%s%s", package_dir, old && old[0] ? ":" : "",
		      old && old[0] ? old : ""))
		return ca_fail(d, CA_ERR_LIMIT, "PYTHONPATH too long");
	return 0;
}

int ca_exec_python_module(const char *python, const char *module, const char *const *args,
			  const char *who, struct ca_diag *d)
{
	static char env[PYLAUNCH_ENV_MAX]; /* putenv keeps the pointer: it must outlive the call */
	const char *argv[256];
	size_t n = 0;
	int rc = ca_pythonpath_env(env, sizeof env, NULL, PYTHONPATH_INHERIT, who, d);
	if (rc)
		return rc;
	argv[n++] = python;
	argv[n++] = "-m";
	argv[n++] = module;
	for (size_t i = 0; args && args[i]; i++) {
		if (n + 1 >= sizeof argv / sizeof argv[0])
			return ca_fail(d, CA_ERR_LIMIT, "more than %zu arguments",
				       sizeof argv / sizeof argv[0] - 4);
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	putenv(env);
	execvp(python, (char *const *)argv);
	return ca_fail(d, CA_ERR_CHILD, "cannot run %s: %s", python, strerror(errno));
}
