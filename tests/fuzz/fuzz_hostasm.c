/* libFuzzer target: hostasm_check_text (build/hostasm.h), the check of a candidate's host
 * assembly, on arbitrary text. It must never crash, and it aborts on these inconsistencies:
 *   - the count it returns disagrees with the report (no lines for findings, lines for none, more
 *     than HOSTASM_MAX_FINDINGS lines plus the "... and N more" one, a wrong line count);
 *   - a report line carries a control character (candidate text must not reach the messages raw);
 *   - a second run on the same text gives another verdict or report (no state between calls);
 *   - hostasm_check_file (the streaming reader the build driver uses) disagrees with it on the
 *     same bytes;
 *   - a text accepted as clean holds a line whose first word after blanks is a refused
 *     instruction or directive (syscall, sysenter, int, .macro, .rept, .insn, .incbin, ...);
 *   - a text accepted as clean accepts a `syscall` line appended to it (no prefix may switch the
 *     check off for what follows).
 * Seeds: tests/fuzz/corpus/fuzz_hostasm/ (GCC output, an inline asm statement between #APP and
 * #NO_APP, an asm label and a section name that paste a syscall into the assembly, nvcc's fatbin
 * block). */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "build/hostasm.h"
#include "build/rules.h"
#include "util/diag.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPORT_SIZE 16384

/* The unit: the seeds' asm markers name files under /cand/kernels. */
static const struct hostasm_unit unit_plain = {
	.shown = "kernels/k.cu", .kdir = "/cand/kernels", .label = "kernels"};

struct verdict {
	int n;
	int count;
	char report[REPORT_SIZE];
};

static void check_text(const struct hostasm_unit *u, const char *text, size_t len,
		       struct verdict *v)
{
	struct rules_report r;

	rules_report_init(&r, v->report, sizeof v->report);
	v->n = hostasm_check_text(u, text, len, &r);
	rules_report_finish(&r);
	v->count = r.count;
}

static size_t lines_of(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void consistent(const struct verdict *v)
{
	size_t len = strnlen(v->report, sizeof v->report);

	if (len >= sizeof v->report || v->n < 0)
		abort();
	if ((v->n == 0) != (len == 0))
		abort();
	/* one line per finding up to the cap, then one "... and N more" line */
	int want = v->n <= HOSTASM_MAX_FINDINGS ? v->n : HOSTASM_MAX_FINDINGS + 1;
	if (v->count != want || lines_of(v->report) != (size_t)want)
		abort();
	if (len && v->report[len - 1] != '\n')
		abort();
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)v->report[i];
		if ((c < 0x20 && c != '\n') || c == 0x7f)
			abort();
	}
}

static bool ci_word_at(const char *s, size_t n, const char *w)
{
	size_t k = strlen(w);
	if (n < k)
		return false;
	for (size_t i = 0; i < k; i++) {
		char c = s[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != w[i])
			return false;
	}
	return n == k || s[k] == ' ' || s[k] == '\t' || s[k] == ';';
}

/* Whether some line, after leading blanks, starts with a word the check always refuses as a
 * statement (a denied instruction or a directive GCC never emits). */
static bool has_refused_statement(const char *text, size_t len)
{
	static const char *const words[] = {"syscall", "sysenter", "int", "int3", "wrpkru",
					    ".macro", ".rept", ".irp", ".insn", ".incbin",
					    ".include", ".fill", ".org", ".code32"};
	size_t i = 0;

	while (i < len) {
		size_t end = i;
		while (end < len && text[end] != '\n')
			end++;
		size_t k = i;
		while (k < end && (text[k] == ' ' || text[k] == '\t'))
			k++;
		if (k > i || (k < end && text[k] != '#')) { /* '#' in column 1: a comment line */
			for (size_t w = 0; w < sizeof words / sizeof words[0]; w++)
				if (ci_word_at(text + k, end - k, words[w]))
					return true;
		}
		i = end + 1;
	}
	return false;
}

/* The same bytes through hostasm_check_file (a memfd, opened by its /proc path). */
static void check_file(const struct hostasm_unit *u, const uint8_t *data, size_t size,
		       struct verdict *v)
{
	static int fd = -2;
	char path[64];
	struct rules_report r;
	struct ca_diag d;

	if (fd == -2)
		fd = memfd_create("fuzz_hostasm", MFD_CLOEXEC);
	if (fd < 0) {
		v->n = -1;
		return;
	}
	if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
		v->n = -1;
		return;
	}
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	rules_report_init(&r, v->report, sizeof v->report);
	d.msg[0] = '\0';
	int rc = hostasm_check_file(u, path, &r, &d);
	rules_report_finish(&r);
	v->count = r.count;
	if (rc == 0)
		v->n = 0;
	else if (rc == CA_ERR_REJECTED)
		v->n = r.count; /* compared through the report below */
	else
		v->n = -1;
	if ((rc == CA_ERR_REJECTED) != (r.count > 0))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct verdict a, b;
	const char *text = (const char *)data;
	struct hostasm_unit u = unit_plain;

	/* half of the inputs also give the text as the unit's source (file-scope asm lookup) */
	if (size & 1) {
		u.source = text;
		u.source_len = size;
	}

	check_text(&u, text, size, &a);
	consistent(&a);

	check_text(&u, text, size, &b);
	if (a.n != b.n || strcmp(a.report, b.report) != 0)
		abort();

	if (size < HOSTASM_MAX_LINE) { /* the file reader refuses longer lines; the text scan does not */
		check_file(&u, data, size, &b);
		if (b.n >= 0 && ((a.n == 0) != (b.n == 0) || strcmp(a.report, b.report) != 0))
			abort();
	}

	if (a.n != 0)
		return 0;
	/* accepted as clean */
	if (has_refused_statement(text, size))
		abort();
	char *more = malloc(size + 10);
	if (!more)
		return 0;
	memcpy(more, data, size);
	memcpy(more + size, "\n\tsyscall\n", 10);
	check_text(&u, more, size + 10, &b);
	free(more);
	consistent(&b);
	if (b.n == 0)
		abort();
	return 0;
}
