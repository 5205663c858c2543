/* hostasm: the check of a native candidate's host assembly (see hostasm.h for the rules and why
 * they are exact). One pass over the lines of the file, in the order the assembler reads them;
 * the statements and what is refused are in hostasm_stmt.c (shared: hostasm_int.h). */
#include "build/hostasm.h"
#include "build/hostasm_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"

/* ---- the scan ------------------------------------------------------------------------------- */

bool hostasm_is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Characters of a word: a symbol, mnemonic or directive name (bytes >= 0x80 are UTF-8 names). */
bool hostasm_is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '$' || (unsigned char)c >= 0x80;
}

bool hostasm_span_eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

bool hostasm_span_starts(const char *s, size_t n, const char *lit)
{
	size_t k = strlen(lit);
	return n >= k && memcmp(s, lit, k) == 0;
}

/* Whether every one of the n bytes of s is in set. */
static bool all_of(const char *s, size_t n, const char *set)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i] || !strchr(set, s[i]))
			return false;
	return true;
}

void hostasm_trim(const char **s, size_t *n)
{
	while (*n && hostasm_is_blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && hostasm_is_blank((*s)[*n - 1]))
		(*n)--;
}

/* Copies a span for a message: printable ASCII only, at most out_size - 1 bytes ("..." marks a
 * cut). */
void hostasm_shown(char *out, size_t out_size, const char *s, size_t n)
{
	size_t k = 0;

	if (!out_size)
		return;
	for (size_t i = 0; i < n && k + 1 < out_size; i++)
		out[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (k < n && k >= 3)
		memcpy(out + k - 3, "...", 3);
	out[k] = '\0';
}

static void add_line(struct scan *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One finding, unless the line is already covered; at most HOSTASM_MAX_FINDINGS become lines. */
static void add_line(struct scan *s, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	s->findings++;
	if (s->reported >= HOSTASM_MAX_FINDINGS)
		return;
	va_start(ap, fmt);
	if (vsnprintf(msg, sizeof msg, fmt, ap) < 0)
		msg[0] = '\0';
	va_end(ap);
	rules_report_add(s->r, "%s", msg);
	s->reported++;
}

/* A finding about a statement: located at the asm statement it comes from, else at the line of
 * the assembly. */

void hostasm_finding(struct scan *s, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (s->quiet)
		return;
	va_start(ap, fmt);
	if (vsnprintf(msg, sizeof msg, fmt, ap) < 0)
		msg[0] = '\0';
	va_end(ap);
	if (s->app && s->block)
		add_line(s, "%s (host code of %s): %s", s->where, s->u->shown, msg);
	else
		add_line(s, "%s (host assembly line %lu): %s", s->u->shown, s->line, msg);
}

void hostasm_unexpected(struct scan *s, const char *what)
{
	hostasm_finding(s, "%s, which the compiler does not emit %s", what, M_FOREIGN);
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* "# LINE "FILE" 1": the start of one inline asm statement's text. */
static void asm_marker(struct scan *s, const char *ln, size_t n)
{
	const char *p = ln + 1, *end = ln + n, *q1, *q2;
	unsigned long lineno = 0;
	char file[WHERE_MAX - 24];
	size_t fl;

	while (p < end && hostasm_is_blank(*p))
		p++;
	if (p >= end || *p < '0' || *p > '9')
		return; /* a plain comment */
	while (p < end && *p >= '0' && *p <= '9') {
		if (lineno < 100000000ul)
			lineno = lineno * 10 + (unsigned long)(*p - '0');
		p++;
	}
	q1 = memchr(p, '"', (size_t)(end - p));
	if (!q1)
		return;
	for (q2 = end - 1; q2 > q1 && *q2 != '"'; q2--)
		;
	if (q2 == q1)
		return;
	/* the flags after the name: "1" opens a statement, "2" closes it */
	const char *f = q2 + 1;
	size_t fn = (size_t)(end - f);
	hostasm_trim(&f, &fn);
	if (hostasm_span_eq(f, fn, "2")) {
		s->block = false;
		return;
	}
	if (!hostasm_span_eq(f, fn, "1"))
		return;
	fl = (size_t)(q2 - q1 - 1);
	const char *path = q1 + 1;
	s->block = true;
	s->block_candidate = true;
	if (s->kdir_len && fl > s->kdir_len && memcmp(path, s->u->kdir, s->kdir_len) == 0 &&
	    path[s->kdir_len] == '/') {
		hostasm_shown(file, sizeof file, path + s->kdir_len + 1, fl - s->kdir_len - 1);
		snprintf(s->where, sizeof s->where, "%s/%s:%lu", s->u->label, file, lineno);
	} else {
		hostasm_shown(file, sizeof file, path, fl);
		snprintf(s->where, sizeof s->where, "%s:%lu", file, lineno);
		s->block_candidate = fl == 0 || path[0] != '/';
	}
	if (!s->block_candidate)
		return;
	uint64_t h = hash_str(s->where);
	for (int i = 0; i < s->num_seen; i++)
		if (s->seen[i] == h)
			return; /* the same statement inlined again */
	if (s->num_seen < MAX_SEEN)
		s->seen[s->num_seen++] = h;
	add_line(s, "%s: %s", s->where, HOSTASM_MSG_INLINE);
}

static void comment_line(struct scan *s, const char *ln, size_t n)
{
	if (hostasm_span_eq(ln, n, "#APP")) {
		s->app = true;
		s->block = false;
		return;
	}
	if (hostasm_span_eq(ln, n, "#NO_APP")) {
		s->app = false;
		s->block = false;
		return;
	}
	if (memchr(ln, ';', n)) {
		s->quiet = s->app && s->block && s->block_candidate;
		hostasm_unexpected(s, "a ';' in a comment line");
		return;
	}
	asm_marker(s, ln, n);
}

/* nvcc's fatbin block, the one file-scope asm allowed (blanks removed):
 *   .section.nv_fatbin,"a"  .alignN  fatbinData:  .quad0x..,0x..  ...  .text
 * It only places data in the non-executable .nv_fatbin section. */
static bool fatbin_line(struct scan *s, const char *ln, size_t n)
{
	char head[32];
	size_t k = 0, i = 0;

	for (; i < n && k + 1 < sizeof head; i++)
		if (!hostasm_is_blank(ln[i]))
			head[k++] = ln[i];
	head[k] = '\0';
	if (k == 0)
		return true;
	switch (s->fatbin) {
	case FB_START:
		if (strcmp(head, ".section.nv_fatbin,\"a\"") == 0 && i == n) {
			s->fatbin = FB_ALIGN;
			return true;
		}
		break;
	case FB_ALIGN:
		if (strncmp(head, ".align", 6) == 0 && k > 6 && k < 9 &&
		    strspn(head + 6, "0123456789") == k - 6 && i == n) {
			s->fatbin = FB_LABEL;
			return true;
		}
		break;
	case FB_LABEL:
		if (strcmp(head, "fatbinData:") == 0 && i == n) {
			s->fatbin = FB_DATA;
			return true;
		}
		break;
	case FB_DATA:
		if (strcmp(head, ".text") == 0 && i == n) {
			s->fatbin = FB_START;
			return true;
		}
		if (strncmp(head, ".quad", 5) == 0 && k > 5) {
			const char *p = ln;
			size_t m = n;
			hostasm_trim(&p, &m);
			if (m > 6 && hostasm_is_blank(p[5]) && all_of(p + 6, m - 6, "0123456789abcdefABCDEFx, \t"))
				return true;
		}
		break;
	}
	s->fatbin = FB_START;
	return false;
}

/* A file-scope `.globl NAME`: allowed. GCC 13's <iostream> emits `.globl
 * _ZSt21ios_base_library_initv` at file scope (it pulls in the library's stream initializer);
 * the directive only changes a symbol's binding, it can place no byte anywhere. */
static bool globl_line(const char *ln, size_t n)
{
	const char *p = ln;
	size_t m = n;
	hostasm_trim(&p, &m);
	if (m <= 7 || memcmp(p, ".globl", 6) != 0 || !hostasm_is_blank(p[6]))
		return false;
	p += 7;
	m -= 7;
	hostasm_trim(&p, &m);
	if (m == 0 || (p[0] >= '0' && p[0] <= '9'))
		return false;
	return all_of(p, m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$");
}

/* File-scope asm of the candidate's: named once per unit (GCC gives it no marker; the line is
 * looked up in the unit's source, best effort). */
static void filescope_asm(struct scan *s)
{
	unsigned line = 0;

	if (s->filescope_reported)
		return;
	s->filescope_reported = true;
	if (s->u->source)
		line = rules_file_scope_asm_line(s->u->source, s->u->source_len);
	if (line)
		add_line(s, "%s:%u: %s", s->u->shown, line, M_FILESCOPE);
	else
		add_line(s, "%s: %s", s->u->shown, M_FILESCOPE);
}

static void scan_line(struct scan *s, const char *ln, size_t n)
{
	s->line++;
	s->quiet = false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)ln[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f) {
			s->quiet = s->app && s->block && s->block_candidate;
			hostasm_unexpected(s, "a control character");
			return;
		}
	}
	if (n && ln[0] == '#') {
		comment_line(s, ln, n);
		return;
	}
	if (s->app && s->block) {
		s->quiet = s->block_candidate; /* refused as a whole already */
	} else if (s->app && !fatbin_line(s, ln, n) && !globl_line(ln, n)) {
		filescope_asm(s);
		s->quiet = true;
	}
	hostasm_statements(s, ln, n);
}

static void scan_init(struct scan *s, const struct hostasm_unit *u, struct rules_report *r)
{
	memset(s, 0, sizeof *s);
	s->u = u;
	s->r = r;
	s->kdir_len = u->kdir ? strlen(u->kdir) : 0;
	while (s->kdir_len > 1 && u->kdir[s->kdir_len - 1] == '/')
		s->kdir_len--;
	hostasm_set_section(s, ".text", 5, true); /* the assembler starts in .text */
}

static int scan_finish(struct scan *s)
{
	if (s->findings > s->reported)
		rules_report_add(s->r, "%s: ... and %d more host assembly finding%s", s->u->shown,
				 s->findings - s->reported, s->findings - s->reported == 1 ? "" : "s");
	return s->findings;
}

int hostasm_check_text(const struct hostasm_unit *u, const char *text, size_t len,
		       struct rules_report *r)
{
	struct scan s;
	size_t start = 0;

	scan_init(&s, u, r);
	for (size_t i = 0; i <= len; i++) {
		if (i < len && text[i] != '\n')
			continue;
		if (i > start || i < len)
			scan_line(&s, text + start, i - start);
		start = i + 1;
	}
	return scan_finish(&s);
}

int hostasm_check_file(const struct hostasm_unit *u, const char *path, struct rules_report *r,
		       struct ca_diag *d)
{
	struct scan s;
	char *chunk = NULL, *line = NULL;
	size_t size = 0, line_len = 0, line_cap = 0;
	int fd = -1, rc, n;

	scan_init(&s, u, r);
	rc = ca_open_regular(path, &fd, &size, d);
	if (rc)
		return rc;
	if (size > HOSTASM_MAX_BYTES) {
		add_line(&s, "%s: the host assembly is %zu bytes, over the limit of %u", u->shown,
			 size, HOSTASM_MAX_BYTES);
		goto verdict;
	}
	chunk = malloc(READ_CHUNK);
	if (!chunk) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory reading %s", path);
		goto out;
	}
	for (;;) {
		ssize_t got = read(fd, chunk, READ_CHUNK);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = ca_fail(d, CA_ERR_IO, "cannot read %s: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		for (size_t i = 0, start = 0; i < (size_t)got; i++) {
			bool eol = chunk[i] == '\n';
			if (!eol && i + 1 < (size_t)got)
				continue;
			size_t piece = i - start + (eol ? 0 : 1);
			if (line_len + piece > HOSTASM_MAX_LINE) {
				add_line(&s, "%s (host assembly line %lu): a line longer than %u bytes",
					 u->shown, s.line + 1, HOSTASM_MAX_LINE);
				goto verdict;
			}
			if (line_len + piece > line_cap) {
				size_t cap = line_cap ? line_cap : 4096;
				while (cap < line_len + piece)
					cap *= 2;
				char *grown = realloc(line, cap);
				if (!grown) {
					rc = ca_fail(d, CA_ERR_NOMEM, "out of memory reading %s", path);
					goto out;
				}
				line = grown;
				line_cap = cap;
			}
			if (piece) /* a line may be empty before anything was allocated */
				memcpy(line + line_len, chunk + start, piece);
			line_len += piece;
			start = i + 1;
			if (eol) {
				scan_line(&s, line ? line : "", line_len);
				line_len = 0;
			}
		}
	}
	if (line_len)
		scan_line(&s, line, line_len);
verdict:
	n = scan_finish(&s);
	if (n > 0)
		rc = ca_fail(d, CA_ERR_REJECTED, "%s: %d host assembly finding%s", u->shown, n,
			     n == 1 ? "" : "s");
out:
	free(chunk);
	free(line);
	close(fd);
	return rc;
}
