#include "util/pylaunch.h"

#include <limits.h>
#include <stdlib.h>

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
	if (ca_format(out, size, "PYTHONPATH=%s%s%s", package_dir, old && old[0] ? ":" : "",
		      old && old[0] ? old : ""))
		return ca_fail(d, CA_ERR_LIMIT, "PYTHONPATH too long");
	return 0;
}
