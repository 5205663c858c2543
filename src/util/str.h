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

/* Copies src into dst for display in a one-line message: control characters become '?',
 * truncated to size. Returns dst. */
char *ca_printable(char *dst, const char *src, size_t size);

#endif
