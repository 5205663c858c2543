/* buf: one capped, growable text buffer (git's strbuf idea), for text built piece by piece
 * (tool output, the HTML report, generated files).
 *
 * Appends never fail on the spot: the first failure (out of memory, CA_ERR_NOMEM; or the cap,
 * CA_ERR_LIMIT) is kept in err and every later append does nothing, so a builder checks once at
 * the end. Once anything was added the text is NUL-terminated. A zeroed struct is an empty
 * buffer without a cap; set max (bytes of text) for one.
 *
 * Ownership: the buffer owns p until ca_buf_take hands it over; ca_buf_free releases it. */
#ifndef CA_UTIL_BUF_H
#define CA_UTIL_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct ca_buf {
	char *p;
	size_t len, cap;
	size_t max; /* 0: no cap */
	int err;    /* 0, CA_ERR_NOMEM or CA_ERR_LIMIT */
};

void ca_buf_add(struct ca_buf *b, const char *s, size_t n);
void ca_buf_puts(struct ca_buf *b, const char *s);
void ca_buf_printf(struct ca_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (an empty string when nothing was added; NULL only when that allocation fails); the
 * buffer is empty again afterwards, its cap kept. */
char *ca_buf_take(struct ca_buf *b);
void ca_buf_free(struct ca_buf *b);

#endif
