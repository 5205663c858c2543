/* jsonl: reading a file of one JSON value per line (results, exported baselines).
 *
 * ca_jsonl_each() opens `path` (a regular file), reads it line by line, each line capped at
 * max_line bytes, skips blank lines, parses each other line (duplicate keys refused) and calls
 * each(ctx, value, d) with it; the value is the caller's only for the call. It stops at the first
 * line that is too long, not JSON, or refused by `each` (a negative code with d filled), and
 * returns that code with d's message prefixed by "FILE:LINE" (the file name printable). The
 * lines before it have been handed over. 0 when every line was. */
#ifndef CA_UTIL_JSONL_H
#define CA_UTIL_JSONL_H

#include <stddef.h>

#include <jansson.h>

#include "util/diag.h"

typedef int (*ca_jsonl_fn)(void *ctx, const json_t *value, struct ca_diag *d);

int ca_jsonl_each(const char *path, size_t max_line, ca_jsonl_fn each, void *ctx,
		  struct ca_diag *d);

#endif
