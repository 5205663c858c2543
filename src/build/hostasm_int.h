/* hostasm_int: what the host assembly check's two parts share (not for other subsystems): the
 * scan's state and its small text helpers (hostasm.c: lines, markers, file-scope asm, the entry
 * points) and the statements with what is refused (hostasm_stmt.c). */
#ifndef CA_BUILD_HOSTASM_INT_H
#define CA_BUILD_HOSTASM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "build/hostasm.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))
#define WHERE_MAX 600     /* "file:line" of an asm statement, as shown */
#define SECTION_SHOWN 96  /* how much of a section name a message shows */
#define MAX_SEEN 64       /* candidate asm statements remembered, so that each is named once */
#define READ_CHUNK (256u << 10)

/* Why a statement is refused (W_: what an instruction does; M_: what the message adds). */
#define W_KERNEL "enters the kernel (a system call or software interrupt)"
#define W_FAR "is a far control transfer (it changes the code segment)"
#define W_PKEY "changes memory protection keys"
#define W_XRSTOR "restores processor state, protection keys included"
#define W_FSGS "rewrites the FS/GS base (the thread pointer)"
#define W_HV "calls the hypervisor, an enclave or the TDX module"
#define W_UINTR "sends or handles user interrupts"
#define M_FILESCOPE "file-scope asm is not allowed in host code (inline assembly in host code " \
	"is refused; inline PTX in __device__/__global__ functions is fine)"
#define M_FOREIGN "(assembler text of a candidate's own, through inline asm, an asm label or " \
	"a section name, is not allowed)"

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

void hostasm_finding(struct scan *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool hostasm_is_blank(char c);
bool hostasm_is_word(char c);
void hostasm_set_section(struct scan *s, const char *name, size_t n, bool exec);
void hostasm_shown(char *out, size_t out_size, const char *s, size_t n);
bool hostasm_span_eq(const char *s, size_t n, const char *lit);
bool hostasm_span_starts(const char *s, size_t n, const char *lit);
void hostasm_statements(struct scan *s, const char *ln, size_t n);
void hostasm_trim(const char **s, size_t *n);
void hostasm_unexpected(struct scan *s, const char *what);

#endif
