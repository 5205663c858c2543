/* libFuzzer target: host_pch_scan (build/host_pch.h), the scan of cudafe++'s host translation
 * unit for the prefix a precompiled header may hold, on arbitrary text. It must never crash or
 * read past the text, and it aborts on these inconsistencies:
 *   - a first line kept out of the header that is not a whole line holding a marker's name;
 *   - an accepted prefix that is shorter than HOST_PCH_MIN_PREFIX, longer than the text, does
 *     not end at a line's start, or is not followed by a line marker (`#` then a digit or
 *     `line`) naming a file under the candidate's directory or a relative one;
 *   - replayed text that is not whole `#pragma GCC diagnostic` lines, or whose length is wrong;
 *   - a second scan of the same text that answers otherwise (no state between calls);
 *   - an accepted prefix that holds a `#pragma` line (outside continuation lines) other than
 *     those the scan allows, or an #include other than cudafe++'s.
 * Seeds: tests/fuzz/corpus/fuzz_host_pch/ (the head and the split of nvcc 13.0's output for a
 * small kernel, a prefix with conditionals, pragmas and #include lines). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "build/host_pch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LOCAL "/cand/kernels"

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r';
}

static bool starts(const char *p, const char *end, const char *w)
{
	return (size_t)(end - p) >= strlen(w) && memcmp(p, w, strlen(w)) == 0;
}

/* w as a whole directive word at p */
static bool word(const char *p, const char *end, const char *w)
{
	size_t n = strlen(w);
	return starts(p, end, w) && (p + n == end || is_blank(p[n]) || p[n] == '(');
}

static const char *blanks(const char *p, const char *end)
{
	while (p < end && is_blank(*p))
		p++;
	return p;
}

/* Every directive line of the prefix outside `#if 0` is one the scan allows (a rough,
 * independent check). */
static void check_prefix(const char *text, size_t len)
{
	const char *end = text + len;
	bool continued = false;
	long depth = 0, skip_from = -1; /* the depth of the `#if 0` being skipped */
	for (const char *l = text; l < end;) {
		const char *eol = memchr(l, '\n', (size_t)(end - l));
		eol = eol ? eol : end;
		const char *p = blanks(l, eol);
		if (!continued && p < eol && *p == '#') {
			p = blanks(p + 1, eol);
			if (word(p, eol, "if") || word(p, eol, "ifdef") || word(p, eol, "ifndef")) {
				depth++;
				const char *q = blanks(p + 2, eol);
				if (skip_from < 0 && word(p, eol, "if") && q < eol && *q == '0' &&
				    blanks(q + 1, eol) == eol)
					skip_from = depth;
			} else if (word(p, eol, "else") || word(p, eol, "elif")) {
				if (depth == skip_from)
					skip_from = -1;
			} else if (word(p, eol, "endif")) {
				if (depth == skip_from)
					skip_from = -1;
				depth--;
			} else if (skip_from < 0 && starts(p, eol, "pragma")) {
				const char *q = blanks(p + 6, eol);
				if (!starts(q, eol, "GCC") && !starts(q, eol, "unroll") &&
				    !starts(q, eol, "nounroll"))
					abort();
			} else if (skip_from < 0 && starts(p, eol, "include")) {
				const char *q = blanks(p + 7, eol);
				if (!starts(q, eol, "\"crt/host_runtime.h\""))
					abort();
			}
		}
		const char *t = eol;
		while (t > l && is_blank(t[-1]))
			t--;
		continued = t > l && t[-1] == '\\';
		l = eol + 1;
	}
	if (depth != 0)
		abort();
}

static void check_replay(const struct host_pch_prefix *p)
{
	if (!p->replay) {
		if (p->replay_len)
			abort();
		return;
	}
	if (strlen(p->replay) != p->replay_len || p->replay[p->replay_len - 1] != '\n')
		abort();
	for (const char *l = p->replay; *l;) {
		const char *eol = strchr(l, '\n');
		const char *q = blanks(l, eol);
		if (q >= eol || *q != '#')
			abort();
		q = blanks(q + 1, eol);
		if (!starts(q, eol, "pragma"))
			abort();
		q = blanks(q + 6, eol);
		if (!starts(q, eol, "GCC"))
			abort();
		q = blanks(q + 3, eol);
		if (!starts(q, eol, "diagnostic"))
			abort();
		l = eol + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy exactly the input's size, so reading past it is caught */
	char *text = malloc(size ? size : 1);
	struct host_pch_prefix a, b;
	if (!text)
		return 0;
	memcpy(text, data, size);
	int ra = host_pch_scan(text, size, LOCAL, &a);
	int rb = host_pch_scan(text, size, LOCAL, &b);
	if (ra != rb || a.len != b.len || a.head != b.head || a.replay_len != b.replay_len ||
	    (a.replay_len && memcmp(a.replay, b.replay, a.replay_len) != 0))
		abort();
	if (ra == 0) {
		if (a.len < HOST_PCH_MIN_PREFIX || a.len >= size || text[a.len - 1] != '\n')
			abort();
		const char *end = text + size, *p = blanks(text + a.len, end);
		if (p >= end || *p != '#')
			abort();
		p = blanks(p + 1, end);
		if (starts(p, end, "line"))
			p = blanks(p + 4, end);
		if (p >= end || *p < '0' || *p > '9')
			abort();
		while (p < end && *p >= '0' && *p <= '9')
			p++;
		p = blanks(p, end);
		if (p >= end || *p != '"')
			abort();
		p++;
		if (*p == '/' && !(starts(p, end, LOCAL "/")))
			abort();
		/* the first line kept out of the header: a whole line, a marker naming a file */
		if (a.head > a.len ||
		    (a.head && (text[a.head - 1] != '\n' || *blanks(text, text + a.head) != '#' ||
				!memchr(text, '"', a.head))))
			abort();
		check_prefix(text, a.len);
		check_replay(&a);
	} else if (a.len || a.replay) {
		abort();
	}
	host_pch_prefix_free(&a);
	host_pch_prefix_free(&b);
	free(text);
	return 0;
}
