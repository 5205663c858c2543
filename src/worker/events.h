/* events: the worker's JSON-lines channel to the supervisor (docs/protocol.md, "GPU worker").
 *
 * events_open() duplicates the original stdout into a private descriptor for events and points
 * file descriptor 1 at stderr, so whatever the candidate library prints (printf, std::cout) ends
 * up in the diagnostics and can never forge or corrupt an event line. Each event is one compact
 * JSON object with "event" first, written with a single write() and flushed.
 *
 * Also the JSON helpers every worker module uses: strings that may hold untrusted bytes (dlerror
 * text, kernel names) are made valid UTF-8, and non-finite doubles become null. */
#ifndef CA_WORKER_EVENTS_H
#define CA_WORKER_EVENTS_H

#include <jansson.h>

#include "util/diag.h"

/* Call once at start, before anything can print. */
int events_open(struct ca_diag *d);

/* Sets "event": name on obj (which it steals), writes the line. Returns 0 or CA_ERR_IO. */
int events_emit(const char *name, json_t *obj);

/* {"event": "error", "code": code, "message": message} */
void events_error(const char *code, const char *message);

/* A JSON string of s, with bytes that are not valid UTF-8 replaced by '?', truncated to
 * max_len bytes (0: no limit) with "..." appended. Never NULL for non-NULL s (NULL s: JSON null). */
json_t *json_str(const char *s, size_t max_len);
/* json_real, or JSON null for NaN and infinities. */
json_t *json_num(double x);

#endif
