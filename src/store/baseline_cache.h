/* baseline_cache: SQLite store of eager and torch.compile baseline timings.
 *
 * Key: (task hash, GPU name, torch version, protocol version). A task's compile baseline costs
 * seconds to tens of seconds, so it is paid once per key, not per evaluation. The value is the
 * bridge's `time` result as JSON text plus the time it was measured. Safe for several processes
 * (SQLite WAL, busy timeout). */
#ifndef CA_STORE_BASELINE_CACHE_H
#define CA_STORE_BASELINE_CACHE_H

#include <jansson.h>

#include "util/diag.h"

struct baseline_cache {
	void *db; /* sqlite3 *, owned */
};

struct baseline_key {
	const char *task_hash;
	const char *gpu_name;
	const char *torch_version;
	int protocol_version;
};

/* path NULL: <cache dir>/baselines.sqlite */
int baseline_cache_open(struct baseline_cache *c, const char *path, struct ca_diag *d);
/* CA_ERR_NOTFOUND when absent; else *timing is a new reference. */
int baseline_cache_get(struct baseline_cache *c, const struct baseline_key *k, json_t **timing,
		       struct ca_diag *d);
int baseline_cache_put(struct baseline_cache *c, const struct baseline_key *k,
		       const json_t *timing, struct ca_diag *d);
int baseline_cache_delete(struct baseline_cache *c, const struct baseline_key *k,
			  struct ca_diag *d);
void baseline_cache_close(struct baseline_cache *c);

#endif
