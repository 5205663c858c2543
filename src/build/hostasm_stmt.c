/* hostasm_stmt: one statement of host assembly judged (hostasm_int.h): directives (sections,
 * data in executable sections) and instructions (the refused mnemonics and why). */
#include "build/hostasm_int.h"

#include <stdio.h>
#include <string.h>



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


/* Names the linker puts into the executable segment (GNU ld's default script: .init, .plt*,
 * .text and .text.*, .stub, .gnu.linkonce.t.*, .gnu.warning, .fini), whatever their flags. */
static bool exec_by_name(const char *s, size_t n)
{
	return hostasm_span_starts(s, n, ".text") || hostasm_span_eq(s, n, ".init") || hostasm_span_eq(s, n, ".fini") ||
	       hostasm_span_starts(s, n, ".plt") || hostasm_span_eq(s, n, ".iplt") || hostasm_span_eq(s, n, ".stub") ||
	       hostasm_span_eq(s, n, ".gnu.warning") || hostasm_span_starts(s, n, ".gnu.linkonce.t.");
}

void hostasm_set_section(struct scan *s, const char *name, size_t n, bool exec)
{
	hostasm_shown(s->section, sizeof s->section, name, n);
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
			hostasm_unexpected(s, "a section name without its closing quote");
			return;
		}
		name = a + 1;
		nl = k - 1;
		k++;
	} else {
		while (k < n && a[k] != ',' && !hostasm_is_blank(a[k]))
			k++;
		nl = k;
	}
	while (k < n && hostasm_is_blank(a[k]))
		k++;
	if (k < n) {
		if (a[k] != ',') {
			hostasm_unexpected(s, "text after a section name");
			return;
		}
		k++;
		while (k < n && hostasm_is_blank(a[k]))
			k++;
		if (k >= n || a[k] != '"') {
			hostasm_unexpected(s, "section flags without quotes");
			return;
		}
		flags = a + k + 1;
		while (k + 1 + fl < n && flags[fl] != '"')
			fl++;
	}
	if (nl == 0) {
		hostasm_unexpected(s, "a section without a name");
		return;
	}
	exec = exec_by_name(name, nl);
	if (flags && memchr(flags, 'x', fl) && !exec) {
		char sec[SECTION_SHOWN + 4];
		hostasm_shown(sec, sizeof sec, name, nl);
		hostasm_finding(s, "the section '%s' is made executable (only the compiler's code sections may "
			   "hold code; an executable stack is refused too) %s", sec, M_FOREIGN);
		exec = true;
	}
	if (flags && memchr(flags, 'w', fl) && exec) {
		char sec[SECTION_SHOWN + 4];
		hostasm_shown(sec, sizeof sec, name, nl);
		hostasm_finding(s, "the executable section '%s' is made writable (code that can rewrite "
			   "itself) %s", sec, M_FOREIGN);
	}
	hostasm_set_section(s, name, nl, exec);
}

/* The two 0x66 prefix bytes GCC writes before `call __tls_get_addr` (general-dynamic TLS). */
static bool tls_padding(const char *name, size_t nn, const char *a, size_t n)
{
	return (hostasm_span_eq(name, nn, "value") && hostasm_span_eq(a, n, "0x6666")) ||
	       (hostasm_span_eq(name, nn, "byte") && hostasm_span_eq(a, n, "0x66"));
}

static void directive(struct scan *s, const char *st, size_t n)
{
	const char *name = st + 1, *args;
	size_t nn = 0, na;
	enum dkind kind = DK_ANY;
	bool known = false;

	while (1 + nn < n && hostasm_is_word(name[nn]) && name[nn] != '.' && name[nn] != '$' &&
	       (unsigned char)name[nn] < 0x80)
		nn++;
	if (nn == 0 || (1 + nn < n && !hostasm_is_blank(name[nn]))) {
		hostasm_unexpected(s, "a malformed directive");
		return;
	}
	args = name + nn;
	na = n - 1 - nn;
	hostasm_trim(&args, &na);
	if (hostasm_span_starts(name, nn, "cfi_")) {
		known = true;
	} else {
		for (size_t i = 0; i < NELEMS(directives); i++)
			if (hostasm_span_eq(name, nn, directives[i].name)) {
				kind = directives[i].kind;
				known = true;
				break;
			}
	}
	if (!known) {
		char d[40];
		hostasm_shown(d, sizeof d, name, nn);
		hostasm_finding(s, "the directive '.%s', which the compiler does not emit for host code %s", d,
			M_FOREIGN);
		return;
	}
	switch (kind) {
	case DK_ANY:
		/* `.set ., expr` moves the location counter like .org */
		if (hostasm_span_eq(name, nn, "set") && na && args[0] == '.' &&
		    (na == 1 || args[1] == ',' || hostasm_is_blank(args[1])))
			hostasm_unexpected(s, "an assignment to the location counter");
		break;
	case DK_SECTION:
		section_directive(s, args, na);
		break;
	case DK_TEXT:
	case DK_DATASEC:
		if (na) {
			hostasm_unexpected(s, "a subsection number");
			return;
		}
		hostasm_set_section(s, st, 1 + nn, kind == DK_TEXT);
		break;
	case DK_DATA:
		if (s->exec && !tls_padding(name, nn, args, na)) {
			char d[40];
			hostasm_shown(d, sizeof d, name, nn);
			hostasm_finding(s, "'.%s' places data in the executable section '%s' (bytes in code "
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
				hostasm_trim(&fill, &fn);
				if (fn)
					hostasm_finding(s, "padding of the executable section '%s' with chosen "
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
		if (hostasm_span_eq(w, n, prefix_words[i]))
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
		while (k < n && hostasm_is_blank(st[k]))
			k++;
		if (k < n && st[k] == '{') { /* pseudo prefix: {vex}, {disp32}, ... */
			const char *close = memchr(st + k, '}', n - k);
			if (!close) {
				hostasm_unexpected(s, "an unclosed '{'");
				return;
			}
			k = (size_t)(close - st) + 1;
			continue;
		}
		size_t w = k;
		while (k < n && hostasm_is_word(st[k]))
			k++;
		if (k == w) {
			hostasm_unexpected(s, "a statement that is neither a directive nor an instruction");
			return;
		}
		if (k < n && !hostasm_is_blank(st[k])) {
			hostasm_unexpected(s, "a malformed mnemonic");
			return;
		}
		size_t wl = k - w;
		if (wl >= sizeof word) { /* longer than any mnemonic: not one of the denied ones */
			if (!s->exec)
				hostasm_finding(s, "an instruction in the data section '%s' %s", s->section,
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
			hostasm_finding(s, "the instruction '%s' %s, which host code may not do", word, dn->why);
		else if (!s->exec)
			hostasm_finding(s, "the instruction '%s' in the data section '%s' %s", word, s->section,
				M_FOREIGN);
		break;
	}
}

static void statement(struct scan *s, const char *st, size_t n)
{
	hostasm_trim(&st, &n);
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
			while (k < n && hostasm_is_word(st[k]))
				k++;
		}
		if (k == 0 || k >= n || st[k] != ':')
			break;
		st += k + 1;
		n -= k + 1;
		hostasm_trim(&st, &n);
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
void hostasm_statements(struct scan *s, const char *ln, size_t n)
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
			hostasm_unexpected(s, what);
			return;
		}
	}
	if (str) {
		hostasm_unexpected(s, "an unterminated string");
		return;
	}
	statement(s, ln + start, n - start);
}
