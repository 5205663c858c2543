/* helpers: shared fixtures of the cmocka unit tests (include after <cmocka.h>).
 * A per-test-file scratch directory under /tmp, removed after the group. */
#ifndef CA_TESTS_HELPERS_H
#define CA_TESTS_HELPERS_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/fs.h"

static char tmpdir[PATH_MAX];

/* Group setup: creates /tmp/ca-test-<TEST_NAME>-XXXXXX (define TEST_NAME before including). */
static int setup_dir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ca-test-%s-XXXXXX", TEST_NAME);
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	struct ca_diag d;
	(void)state;
	return ca_remove_tree(tmpdir, &d) == 0 ? 0 : -1;
}

/* <tmpdir>/<name> */
static void tmp_path(char *out, size_t size, const char *name)
{
	assert_int_equal(ca_path_join(out, size, tmpdir, name), 0);
}

#endif
