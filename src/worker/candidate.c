#include "worker/candidate.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int candidate_load(struct candidate *c, const char *path, struct worker_error *e)
{
	const char *err;

	memset(c, 0, sizeof *c);
	dlerror();
	c->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!c->handle) {
		err = dlerror();
		return werr(e, "abi.load_failed", true, CA_ERR_NOTFOUND, "cannot load %s: %s", path,
			    err ? err : "unknown dlopen error");
	}
	dlerror();
	c->forward = (ca_forward_fn)dlsym(c->handle, "ca_forward");
	if (!c->forward)
		return werr(e, "abi.missing_forward", true, CA_ERR_NOTFOUND,
			    "the library does not export ca_forward (declare it extern \"C\" with "
			    "the signature of cuda_agent/abi.h)");
	c->setup = (ca_setup_fn)dlsym(c->handle, "ca_setup");
	c->teardown = (ca_teardown_fn)dlsym(c->handle, "ca_teardown");
	dlerror();
	return 0;
}

int candidate_setup(struct candidate *c, struct gpu_ctx *g, struct tensor_set *params,
		    const char *what, struct worker_error *e)
{
	char where[256];
	int ret, rc;

	if (!c->setup)
		return 0;
	tensor_set_refresh(params);
	ret = c->setup(params->dl, params->n, g->stream);
	snprintf(where, sizeof where, "after ca_setup (%s)", what);
	if ((rc = gpu_sync_after_call(g, where, e)))
		return rc;
	if (ret != 0)
		return werr(e, "abi.setup_failed", false, CA_ERR_REJECTED,
			    "ca_setup returned %d (%s)", ret, what);
	return 0;
}

int candidate_teardown(struct candidate *c, struct gpu_ctx *g, struct worker_error *e)
{
	if (!c->teardown)
		return 0;
	c->teardown();
	return gpu_sync_after_call(g, "after ca_teardown", e);
}
