/* diag: error codes and the human-readable diagnostic that travels with them.
 *
 * Contract: every fallible function in cuda-agent returns 0 on success or a negative CA_ERR_*
 * code, and (when given a non-NULL struct ca_diag) writes one line a person understands into it.
 * The diag is caller-owned storage; nothing here allocates. */
#ifndef CA_UTIL_DIAG_H
#define CA_UTIL_DIAG_H

#include <stddef.h>

enum ca_err {
	CA_OK = 0,
	CA_ERR_NOMEM = -1,       /* allocation failed */
	CA_ERR_IO = -2,          /* file or pipe I/O failed */
	CA_ERR_PARSE = -3,       /* malformed input (JSON, safetensors, ELF, ...) */
	CA_ERR_INVALID = -4,     /* well-formed but semantically invalid input or argument */
	CA_ERR_LIMIT = -5,       /* a size or count cap was exceeded */
	CA_ERR_NOTFOUND = -6,    /* a file, key or symbol does not exist */
	CA_ERR_BUILD = -7,       /* compilation or link failed */
	CA_ERR_CHILD = -8,       /* a child process failed or crashed */
	CA_ERR_TIMEOUT = -9,     /* a deadline passed */
	CA_ERR_UNSUPPORTED = -10,/* not available here (no GPU, unsupported dtype, ...) */
	CA_ERR_REJECTED = -11,   /* a candidate broke a rule (forbidden symbol, source rule) */
	CA_ERR_INTERRUPTED = -12,/* stopped by a signal (SIGINT, SIGTERM) */
};

#define CA_DIAG_MAX 2048

struct ca_diag {
	char msg[CA_DIAG_MAX];
};

/* Short stable name of an error code, e.g. "parse". */
const char *ca_err_name(int code);

/* Formats the message into diag (if non-NULL) and returns code, so callers write
 * `return ca_fail(d, CA_ERR_IO, "cannot open %s: %s", path, strerror(errno));`. */
int ca_fail(struct ca_diag *diag, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the message already in diag; returns code. */
int ca_fail_prefix(struct ca_diag *diag, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

void ca_diag_clear(struct ca_diag *diag);

#endif
