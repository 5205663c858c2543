#include "util/str.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/diag.h"

bool ca_strlcpy(char *dst, const char *src, size_t size)
{
	size_t len = strlen(src);
	if (size == 0)
		return len > 0;
	if (len >= size) {
		memcpy(dst, src, size - 1);
		dst[size - 1] = '\0';
		return true;
	}
	memcpy(dst, src, len + 1);
	return false;
}

void ca_appendf(char *buf, size_t size, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int n;
	if (*off >= size)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *off, size - *off, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	*off += (size_t)n;
	if (*off >= size)
		*off = size - 1;
}

char *ca_printable(char *dst, const char *src, size_t size)
{
	size_t i = 0;
	if (size == 0)
		return dst;
	for (; src[i] && i + 1 < size; i++)
		dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
	dst[i] = '\0';
	return dst;
}

int ca_format(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;
	va_start(ap, fmt);
	n = vsnprintf(out, size, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= size ? CA_ERR_LIMIT : 0;
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when p does not start one. */
static size_t utf8_seq(const unsigned char *p)
{
	unsigned char c = p[0];
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return (p[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c >= 0xE0 && c <= 0xEF) {
		unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
		return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
		return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80
			       ? 4
			       : 0;
	}
	return 0;
}

void ca_utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		size_t n = utf8_seq(p);
		if (n == 0) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}
