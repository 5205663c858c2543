/* activity: the worker's one CUPTI activity client. CUPTI allows one pair of buffer callbacks
 * per process; profile (the per-kernel table) and audit (what a call really ran) both record
 * through this module, one at a time.
 *
 * activity_begin() enables the given record kinds and routes every record delivered until
 * activity_end() to sink(rec, ctx) (called with an internal lock held, from CUPTI's thread or
 * from activity_end's flush). activity_end() flushes, disables the kinds and returns the number
 * of dropped records; activity_abort() disables without flushing (after a candidate's failure
 * the context may be unusable). CUPTI failures are reported with the caller's error code, never
 * fatal: they are the tool's limits, not the candidate's fault.
 *
 * Ownership: the module owns its record buffers; sinks must copy what they keep. */
#ifndef CA_WORKER_ACTIVITY_H
#define CA_WORKER_ACTIVITY_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#include "worker/gpu.h"

#define ACTIVITY_BUFFER_BYTES (8u << 20)
#define ACTIVITY_MAX_KINDS    8

typedef void (*activity_sink_fn)(const CUpti_Activity *rec, void *ctx);

int activity_begin(const CUpti_ActivityKind *kinds, size_t n, activity_sink_fn sink, void *ctx,
		   const char *code, struct worker_error *e);
int activity_end(uint64_t *dropped, const char *code, struct worker_error *e);
void activity_abort(void);

#endif
