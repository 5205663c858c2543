/* hostasm: the check of a native candidate's host assembly (see hostasm.h for the rules and why
 * they are exact). One pass over the lines of the file, in the order the assembler reads them. */
#include "build/hostasm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))
#define WHERE_MAX 600     /* "file:line" of an asm statement, as shown */
#define SECTION_SHOWN 96  /* how much of a section name a message shows */
#define MAX_SEEN 64       /* candidate asm statements remembered, so that each is named once */
#define READ_CHUNK (256u << 10)

/* ---- what is refused ------------------------------------------------------------------------ */

#define W_KERNEL "enters the kernel (a system call or software interrupt)"
#define W_FAR "is a far control transfer (it changes the code segment)"
#define W_PKEY "changes memory protection keys"
#define W_XRSTOR "restores processor state, protection keys included"
#define W_FSGS "rewrites the FS/GS base (the thread pointer)"
#define W_HV "calls the hypervisor, an enclave or the TDX module"
#define W_UINTR "sends or handles user interrupts"

struct denied {
	const char *name; /* lower case; an operand-size suffix (b, w, l, q, d) matches too */
	const char *why;
};

static const struct denied denied_insns[] = {
	{"syscall", W_KERNEL}, {"sysenter", W_KERNEL}, {"sysexit", W_KERNEL},
	{"sysret", W_KERNEL}, {"int", W_KERNEL}, {"int1", W_KERNEL}, {"int3", W_KERNEL},
	{"into", W_KERNEL}, {"icebp", W_KERNEL},
	{"iret", W_FAR}, {"lcall", W_FAR}, {"ljmp", W_FAR}, {"lret", W_FAR}, {"retf", W_FAR},
	{"callf", W_FAR}, {"jmpf", W_FAR},
	{"wrpkru", W_PKEY}, {"xrstor", W_XRSTOR}, {"xrstors", W_XRSTOR}, {"xrstor64", W_XRSTOR},
	{"xrstors64", W_XRSTOR},
	{"wrfsbase", W_FSGS}, {"wrgsbase", W_FSGS},
	{"vmcall", W_HV}, {"vmmcall", W_HV}, {"vmfunc", W_HV}, {"tdcall", W_HV},
	{"seamcall", W_HV}, {"enclu", W_HV}, {"encls", W_HV}, {"enclv", W_HV},
	{"senduipi", W_UINTR}, {"uiret", W_UINTR}, {"stui", W_UINTR}, {"clui", W_UINTR},
};

/* Words that may stand before the mnemonic on one line (as reads `rex64 syscall` as syscall). */
static const char *const prefix_words[] = {
	"lock", "rep", "repe", "repz", "repne", "repnz", "data16", "data32", "addr16", "addr32",
	"rex", "rex64", "notrack", "bnd", "xacquire", "xrelease", "cs", "ds", "es", "fs", "gs",
	"ss", "wait", "fwait",
};

enum dkind {
	DK_ANY,     /* symbols, types, sizes, call frame information: no bytes of code */
	DK_DATA,    /* emits bytes: refused in an executable section */
	DK_ALIGN,   /* padding: in an executable section only without a fill value */
	DK_SECTION, /* .section NAME[,"FLAGS"[,...]] */
	DK_TEXT,    /* .text */
	DK_DATASEC, /* .data, .bss */
};

/* The directives GCC emits for host code (and nvcc's fatbin block); every other one is refused. */
static const struct {
	const char *name;
	enum dkind kind;
} directives[] = {
	{"file", DK_ANY}, {"ident", DK_ANY}, {"loc", DK_ANY}, {"globl", DK_ANY},
	{"global", DK_ANY}, {"weak", DK_ANY}, {"weakref", DK_ANY}, {"hidden", DK_ANY},
	{"protected", DK_ANY}, {"internal", DK_ANY}, {"local", DK_ANY}, {"comm", DK_ANY},
	{"lcomm", DK_ANY}, {"type", DK_ANY}, {"size", DK_ANY}, {"set", DK_ANY},
	{"section", DK_SECTION}, {"text", DK_TEXT}, {"data", DK_DATASEC}, {"bss", DK_DATASEC},
	{"p2align", DK_ALIGN}, {"align", DK_ALIGN}, {"balign", DK_ALIGN},
	{"byte", DK_DATA}, {"value", DK_DATA}, {"short", DK_DATA}, {"long", DK_DATA},
	{"int", DK_DATA}, {"quad", DK_DATA}, {"octa", DK_DATA}, {"2byte", DK_DATA},
	{"4byte", DK_DATA}, {"8byte", DK_DATA}, {"string", DK_DATA}, {"ascii", DK_DATA},
	{"asciz", DK_DATA}, {"zero", DK_DATA}, {"skip", DK_DATA}, {"space", DK_DATA},
	{"uleb128", DK_DATA}, {"sleb128", DK_DATA},
};

#define M_FILESCOPE "file-scope asm is not allowed in host code (inline assembly in host code " \
	"is refused; inline PTX in __device__/__global__ functions is fine)"
#define M_FOREIGN "(assembler text of a candidate's own, through inline asm, an asm label or " \
	"a section name, is not allowed)"

/* ---- the scan ------------------------------------------------------------------------------- */

enum fatbin_state { FB_START, FB_ALIGN, FB_LABEL, FB_DATA };

struct scan {
	const struct hostasm_unit *u;
	struct rules_report *r;
	size_t kdir_len;
	unsigned long line;     /* of the assembly, 1-based */
	int findings, reported; /* all findings; lines added to r */
	bool app;               /* between #APP and #NO_APP: asm text follows */
	bool block;             /* inside "# LINE "FILE" 1" ... "# 0 "" 2": one asm statement */
	bool block_candidate;   /* ... from a file of the candidate's */
	bool quiet;             /* this line's findings are already covered by a refusal */
	bool filescope_reported;
	enum fatbin_state fatbin;
	bool exec;              /* the current section ends up executable */
	char section[SECTION_SHOWN + 4];
	char where[WHERE_MAX];  /* the current asm statement's "file:line" */
	uint64_t seen[MAX_SEEN];
	int num_seen;
};

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Characters of a word: a symbol, mnemonic or directive name (bytes >= 0x80 are UTF-8 names). */
static bool is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '$' || (unsigned char)c >= 0x80;
}

static bool span_eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static bool span_starts(const char *s, size_t n, const char *lit)
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

static void trim(const char **s, size_t *n)
{
	while (*n && is_blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_blank((*s)[*n - 1]))
		(*n)--;
}

/* Copies a span for a message: printable ASCII only, at most out_size - 1 bytes ("..." marks a
 * cut). */
static void shown(char *out, size_t out_size, const char *s, size_t n)
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
static void finding(struct scan *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void finding(struct scan *s, const char *fmt, ...)
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

static void unexpected(struct scan *s, const char *what)
{
	finding(s, "%s, which the compiler does not emit %s", what, M_FOREIGN);
}

/* ---- statements ----------------------------------------------------------------------------- */

/* Names the linker puts into the executable segment (GNU ld's default script: .init, .plt*,
 * .text and .text.*, .stub, .gnu.linkonce.t.*, .gnu.warning, .fini), whatever their flags. */
static bool exec_by_name(const char *s, size_t n)
{
	return span_starts(s, n, ".text") || span_eq(s, n, ".init") || span_eq(s, n, ".fini") ||
	       span_starts(s, n, ".plt") || span_eq(s, n, ".iplt") || span_eq(s, n, ".stub") ||
	       span_eq(s, n, ".gnu.warning") || span_starts(s, n, ".gnu.linkonce.t.");
}

static void set_section(struct scan *s, const char *name, size_t n, bool exec)
{
	shown(s->section, sizeof s->section, name, n);
	s->exec = exec;
}

static void section_directive(struct scan *s, const char *a, size_t n)
{
	const char *name = a, *flags = NULL;
	size_t k = 0, nl, fl = 0;
	bool exec;

	if (n && a[0] == '"') {
		for (k = 1; k < n && a[k] != '"'; k++)
			;
		if (k >= n) {
			unexpected(s, "a section name without its closing quote");
			return;
		}
		name = a + 1;
		nl = k - 1;
		k++;
	} else {
		while (k < n && a[k] != ',' && !is_blank(a[k]))
			k++;
		nl = k;
	}
	while (k < n && is_blank(a[k]))
		k++;
	if (k < n) {
		if (a[k] != ',') {
			unexpected(s, "text after a section name");
			return;
		}
		k++;
		while (k < n && is_blank(a[k]))
			k++;
		if (k >= n || a[k] != '"') {
			unexpected(s, "section flags without quotes");
			return;
		}
		flags = a + k + 1;
		while (k + 1 + fl < n && flags[fl] != '"')
			fl++;
	}
	if (nl == 0) {
		unexpected(s, "a section without a name");
		return;
	}
	exec = exec_by_name(name, nl);
	if (flags && memchr(flags, 'x', fl) && !exec) {
		char sec[SECTION_SHOWN + 4];
		shown(sec, sizeof sec, name, nl);
		finding(s, "the section '%s' is made executable (only the compiler's code sections may "
			   "hold code; an executable stack is refused too) %s", sec, M_FOREIGN);
		exec = true;
	}
	if (flags && memchr(flags, 'w', fl) && exec) {
		char sec[SECTION_SHOWN + 4];
		shown(sec, sizeof sec, name, nl);
		finding(s, "the executable section '%s' is made writable (code that can rewrite "
			   "itself) %s", sec, M_FOREIGN);
	}
	set_section(s, name, nl, exec);
}

/* The two 0x66 prefix bytes GCC writes before `call __tls_get_addr` (general-dynamic TLS). */
static bool tls_padding(const char *name, size_t nn, const char *a, size_t n)
{
	return (span_eq(name, nn, "value") && span_eq(a, n, "0x6666")) ||
	       (span_eq(name, nn, "byte") && span_eq(a, n, "0x66"));
}

static void directive(struct scan *s, const char *st, size_t n)
{
	const char *name = st + 1, *args;
	size_t nn = 0, na;
	enum dkind kind = DK_ANY;
	bool known = false;

	while (1 + nn < n && is_word(name[nn]) && name[nn] != '.' && name[nn] != '$' &&
	       (unsigned char)name[nn] < 0x80)
		nn++;
	if (nn == 0 || (1 + nn < n && !is_blank(name[nn]))) {
		unexpected(s, "a malformed directive");
		return;
	}
	args = name + nn;
	na = n - 1 - nn;
	trim(&args, &na);
	if (span_starts(name, nn, "cfi_")) {
		known = true;
	} else {
		for (size_t i = 0; i < NELEMS(directives); i++)
			if (span_eq(name, nn, directives[i].name)) {
				kind = directives[i].kind;
				known = true;
				break;
			}
	}
	if (!known) {
		char d[40];
		shown(d, sizeof d, name, nn);
		finding(s, "the directive '.%s', which the compiler does not emit for host code %s", d,
			M_FOREIGN);
		return;
	}
	switch (kind) {
	case DK_ANY:
		/* `.set ., expr` moves the location counter like .org */
		if (span_eq(name, nn, "set") && na && args[0] == '.' &&
		    (na == 1 || args[1] == ',' || is_blank(args[1])))
			unexpected(s, "an assignment to the location counter");
		break;
	case DK_SECTION:
		section_directive(s, args, na);
		break;
	case DK_TEXT:
	case DK_DATASEC:
		if (na) {
			unexpected(s, "a subsection number");
			return;
		}
		set_section(s, st, 1 + nn, kind == DK_TEXT);
		break;
	case DK_DATA:
		if (s->exec && !tls_padding(name, nn, args, na)) {
			char d[40];
			shown(d, sizeof d, name, nn);
			finding(s, "'.%s' places data in the executable section '%s' (bytes in code "
				   "sections must be the compiler's instructions) %s", d, s->section,
				M_FOREIGN);
		}
		break;
	case DK_ALIGN:
		if (s->exec) {
			const char *comma = memchr(args, ',', na);
			if (comma) {
				const char *fill = comma + 1;
				size_t fn = na - (size_t)(fill - args);
				const char *end = memchr(fill, ',', fn);
				if (end)
					fn = (size_t)(end - fill);
				trim(&fill, &fn);
				if (fn)
					finding(s, "padding of the executable section '%s' with chosen "
						   "bytes %s", s->section, M_FOREIGN);
			}
		}
		break;
	}
}

static bool is_prefix_word(const char *w, size_t n)
{
	if (n > 4 && strncmp(w, "rex.", 4) == 0)
		return true;
	for (size_t i = 0; i < NELEMS(prefix_words); i++)
		if (span_eq(w, n, prefix_words[i]))
			return true;
	return false;
}

static const struct denied *denied_mnemonic(const char *w, size_t n)
{
	const char *dot = memchr(w, '.', n);
	if (dot) /* as's old encoding suffixes: syscall.s, int.d8 */
		n = (size_t)(dot - w);
	for (size_t i = 0; i < NELEMS(denied_insns); i++) {
		size_t k = strlen(denied_insns[i].name);
		if ((n == k || (n == k + 1 && w[k] && strchr("bwlqd", w[k]))) &&
		    memcmp(w, denied_insns[i].name, k) == 0)
			return &denied_insns[i];
	}
	return NULL;
}

static void instruction(struct scan *s, const char *st, size_t n)
{
	size_t k = 0;
	char word[32];

	for (;;) {
		while (k < n && is_blank(st[k]))
			k++;
		if (k < n && st[k] == '{') { /* pseudo prefix: {vex}, {disp32}, ... */
			const char *close = memchr(st + k, '}', n - k);
			if (!close) {
				unexpected(s, "an unclosed '{'");
				return;
			}
			k = (size_t)(close - st) + 1;
			continue;
		}
		size_t w = k;
		while (k < n && is_word(st[k]))
			k++;
		if (k == w) {
			unexpected(s, "a statement that is neither a directive nor an instruction");
			return;
		}
		if (k < n && !is_blank(st[k])) {
			unexpected(s, "a malformed mnemonic");
			return;
		}
		size_t wl = k - w;
		if (wl >= sizeof word) { /* longer than any mnemonic: not one of the denied ones */
			if (!s->exec)
				finding(s, "an instruction in the data section '%s' %s", s->section,
					M_FOREIGN);
			break;
		}
		for (size_t i = 0; i < wl; i++)
			word[i] = (st[w + i] >= 'A' && st[w + i] <= 'Z') ? (char)(st[w + i] - 'A' + 'a')
									: st[w + i];
		word[wl] = '\0';
		if (is_prefix_word(word, wl)) {
			if (k >= n)
				break; /* a prefix alone on its line (GCC's rex64 before a TLS call) */
			continue;
		}
		const struct denied *dn = denied_mnemonic(word, wl);
		if (dn)
			finding(s, "the instruction '%s' %s, which host code may not do", word, dn->why);
		else if (!s->exec)
			finding(s, "the instruction '%s' in the data section '%s' %s", word, s->section,
				M_FOREIGN);
		break;
	}
}

static void statement(struct scan *s, const char *st, size_t n)
{
	trim(&st, &n);
	for (;;) { /* labels: "name:", "\"name\":", local "0:" (the CET property note has them) */
		size_t k = 0;
		if (n && st[0] == '"') {
			const char *close = memchr(st + 1, '"', n - 1);
			if (!close)
				break;
			k = (size_t)(close - st) + 1;
		} else if (n && st[0] >= '0' && st[0] <= '9') {
			while (k < n && st[k] >= '0' && st[k] <= '9')
				k++;
		} else {
			while (k < n && is_word(st[k]))
				k++;
		}
		if (k == 0 || k >= n || st[k] != ':')
			break;
		st += k + 1;
		n -= k + 1;
		trim(&st, &n);
	}
	if (!n)
		return;
	if (st[0] == '.')
		directive(s, st, n);
	else
		instruction(s, st, n);
}

/* Splits a line at ';' outside strings, the way the assembler does, and refuses what it might
 * read otherwise than this check: comments after a statement, character constants, backslashes
 * and C comments outside strings, '=' assignments, unterminated strings. */
static void statements(struct scan *s, const char *ln, size_t n)
{
	size_t start = 0;
	bool str = false;

	for (size_t i = 0; i < n; i++) {
		char c = ln[i];
		if (str) {
			if (c == '\\' && i + 1 < n)
				i++;
			else if (c == '"')
				str = false;
			continue;
		}
		if (c == '"') {
			str = true;
		} else if (c == ';') {
			statement(s, ln + start, i - start);
			start = i + 1;
		} else if (c == '#' || c == '\'' || c == '\\' || c == '=' ||
			   (c == '/' && i + 1 < n && ln[i + 1] == '*')) {
			char what[64];
			snprintf(what, sizeof what, "a '%c' outside a string", c);
			unexpected(s, what);
			return;
		}
	}
	if (str) {
		unexpected(s, "an unterminated string");
		return;
	}
	statement(s, ln + start, n - start);
}

/* ---- asm markers, file-scope asm ------------------------------------------------------------ */

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

	while (p < end && is_blank(*p))
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
	trim(&f, &fn);
	if (span_eq(f, fn, "2")) {
		s->block = false;
		return;
	}
	if (!span_eq(f, fn, "1"))
		return;
	fl = (size_t)(q2 - q1 - 1);
	const char *path = q1 + 1;
	s->block = true;
	s->block_candidate = true;
	if (s->kdir_len && fl > s->kdir_len && memcmp(path, s->u->kdir, s->kdir_len) == 0 &&
	    path[s->kdir_len] == '/') {
		shown(file, sizeof file, path + s->kdir_len + 1, fl - s->kdir_len - 1);
		snprintf(s->where, sizeof s->where, "%s/%s:%lu", s->u->label, file, lineno);
	} else {
		shown(file, sizeof file, path, fl);
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
	if (span_eq(ln, n, "#APP")) {
		s->app = true;
		s->block = false;
		return;
	}
	if (span_eq(ln, n, "#NO_APP")) {
		s->app = false;
		s->block = false;
		return;
	}
	if (memchr(ln, ';', n)) {
		s->quiet = s->app && s->block && s->block_candidate;
		unexpected(s, "a ';' in a comment line");
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
		if (!is_blank(ln[i]))
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
			trim(&p, &m);
			if (m > 6 && is_blank(p[5]) && all_of(p + 6, m - 6, "0123456789abcdefABCDEFx, \t"))
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
	trim(&p, &m);
	if (m <= 7 || memcmp(p, ".globl", 6) != 0 || !is_blank(p[6]))
		return false;
	p += 7;
	m -= 7;
	trim(&p, &m);
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
			unexpected(s, "a control character");
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
	statements(s, ln, n);
}

static void scan_init(struct scan *s, const struct hostasm_unit *u, struct rules_report *r)
{
	memset(s, 0, sizeof *s);
	s->u = u;
	s->r = r;
	s->kdir_len = u->kdir ? strlen(u->kdir) : 0;
	while (s->kdir_len > 1 && u->kdir[s->kdir_len - 1] == '/')
		s->kdir_len--;
	set_section(s, ".text", 5, true); /* the assembler starts in .text */
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
