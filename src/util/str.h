/* str: small string helpers. */
#ifndef CA_UTIL_STR_H
#define CA_UTIL_STR_H

#include <stdbool.h>
#include <stddef.h>

/* Copies src into dst (size bytes), always NUL-terminating; returns true if it was truncated. */
bool ca_strlcpy(char *dst, const char *src, size_t size);

/* Appends formatted text at *off in buf (size bytes), advancing *off; never overflows. */
void ca_appendf(char *buf, size_t size, size_t *off, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Formats into out (size bytes): 0, or CA_ERR_LIMIT (util/diag.h) when it did not fit (out then
 * holds a truncated string). For paths and names that must be whole. */
int ca_format(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies src into dst for display in a one-line message: control characters become '?',
 * truncated to size. Returns dst. */
char *ca_printable(char *dst, const char *src, size_t size);

/* Makes s valid UTF-8 in place (what JSON strings must be): every byte that does not start a
 * well-formed sequence (a stray continuation byte, a sequence cut short by truncation, an
 * overlong form, a surrogate) becomes '?'. */
void ca_utf8_sanitize(char *s);

#endif
