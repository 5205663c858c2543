/* baseline_cache: SQLite store of eager and torch.compile baseline timings.
 *
 * Key: (task hash, GPU name, torch version, protocol version). A task's compile baseline costs
 * seconds to tens of seconds, so it is paid once per key, not per evaluation. The value is the
 * bridge's `time` result as JSON text plus the time it was measured. Safe for several processes
 * (SQLite WAL, busy timeout). */
#ifndef CA_STORE_BASELINE_CACHE_H
#define CA_STORE_BASELINE_CACHE_H

#include <stdbool.h>
#include <stdio.h>

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

/* A baseline table moves between machines as JSON lines, one entry each (docs/evaluation.md,
 * "Sharing baselines"): {"task_hash", "gpu_name", "torch_version", "protocol_version",
 * "measured_at" (Unix seconds), "timing" (the object baseline_cache_get gives)}. A fleet that
 * imports one table rewards every candidate against the same numbers. */
#define BASELINE_FIELD_MAX 256       /* bytes of a key string */
#define BASELINE_LINE_MAX  (4u << 20) /* bytes of an exported line */

struct baseline_entry {
	char task_hash[BASELINE_FIELD_MAX], gpu_name[BASELINE_FIELD_MAX],
		torch_version[BASELINE_FIELD_MAX];
	int protocol_version;
	double measured_at;
	const json_t *timing; /* borrowed from the parsed line */
};

/* Checks one exported line's object: strings of 1..BASELINE_FIELD_MAX-1 printable bytes,
 * protocol_version 1..1000000, measured_at finite and >= 0, timing an object; no other keys.
 * CA_ERR_INVALID naming the field. */
int baseline_entry_from_json(const json_t *obj, struct baseline_entry *e, struct ca_diag *d);
/* Writes every entry (ordered by key) as JSON lines; *count entries. */
int baseline_cache_export(struct baseline_cache *c, FILE *out, size_t *count, struct ca_diag *d);
/* Imports every line of a file in one transaction: all of it, or nothing when a line is bad
 * (the message names FILE:LINE). An entry replaces the one of its key only when it was measured
 * later (or `replace`); *added and *skipped count them. */
int baseline_cache_import(struct baseline_cache *c, const char *path, bool replace,
			  size_t *added, size_t *skipped, struct ca_diag *d);

#endif
