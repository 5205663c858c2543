#include "util/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/diag.h"

/* Room for n more bytes and the NUL; false (err set) when there is none. */
static bool reserve(struct ca_buf *b, size_t n)
{
	size_t need, cap;
	char *p;
	if (b->err)
		return false;
	if ((b->max && (b->len > b->max || n > b->max - b->len)) || n > (size_t)-1 / 2 - b->len) {
		b->err = CA_ERR_LIMIT;
		return false;
	}
	need = b->len + n + 1;
	if (need <= b->cap)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	if (!(p = realloc(b->p, cap))) {
		b->err = CA_ERR_NOMEM;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void ca_buf_add(struct ca_buf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void ca_buf_puts(struct ca_buf *b, const char *s)
{
	ca_buf_add(b, s, strlen(s));
}

void ca_buf_printf(struct ca_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;
	if (b->err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = CA_ERR_INVALID;
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

char *ca_buf_take(struct ca_buf *b)
{
	char *p = b->p ? b->p : strdup("");
	size_t max = b->max;
	memset(b, 0, sizeof *b);
	b->max = max;
	return p;
}

void ca_buf_free(struct ca_buf *b)
{
	size_t max = b->max;
	free(b->p);
	memset(b, 0, sizeof *b);
	b->max = max;
}
