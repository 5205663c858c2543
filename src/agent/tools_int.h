/* tools_int: what the file tools share (not for other subsystems): read, write and edit
 * (tools_fs.c), glob and grep (tools_search.c) resolve paths inside the workspace the same way
 * and hand their text to the result the same way. */
#ifndef CA_AGENT_TOOLS_INT_H
#define CA_AGENT_TOOLS_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "agent/tools.h"
#include "util/buf.h"

#define GREP_LINE_SHOWN 300   /* bytes of a matching line grep shows */
#define GREP_TIME_S     20.0  /* grep stops looking after this long */
#define SCAN_MAX        (256ull << 20) /* bytes read_file scans to reach offset_line */
#define PATTERN_MAX     1024

struct rpath {
	char abs[PATH_MAX]; /* resolved, inside the workspace */
	const char *rel;    /* into abs: relative to the workspace ("." for itself) */
	char shown[256];    /* what the agent gave, printable */
};

/* glob and grep (tools_search.c): args already validated. */
int tools_glob(const char *ws, const json_t *args, struct tool_result *res, struct ca_diag *d);
int tools_grep(const char *ws, const json_t *args, struct tool_result *res, struct ca_diag *d);
/* A tool-level failure: ok=false with a one-line message. */
int tools_refuse(struct tool_result *res, struct ca_diag *d, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Resolves path (relative to ws, or absolute): the longest existing prefix through realpath(3),
 * then the missing rest, which must be plain names. 0 with r filled, 1 with a message in why
 * (refused: outside, "..", too long), or a negative code. */
int tools_resolve_path(const char *ws, const char *path, struct rpath *r, char *why,
		       size_t why_size);
/* Hands b's text to res (ok as given). */
int tools_text_result(struct ca_buf *b, struct tool_result *res, bool ok, struct ca_diag *d);
/* Reads a whole resolved regular file of at most cap bytes: 0, 1 with a message in why, or a
 * negative code. */
int tools_slurp(const struct rpath *r, size_t cap, char **out, size_t *len, char *why,
		size_t why_size);

#endif
