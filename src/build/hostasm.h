/* hostasm: the check of a native candidate's host assembly (ARCHITECTURE.md sections 4, 6, 6a;
 * issue 12). Every translation unit is compiled with `-Xcompiler -S`, so that nvcc's last step,
 * the host compiler (GCC), stops at its assembly; the build driver (build/build.h) checks that
 * file, assembles the very same file into the object only when it is clean (`gcc -c -x
 * assembler`), and keeps the verdict with the cached object.
 *
 * The attack class. Native host code that issues system calls itself (mprotect to patch the
 * worker's timers, a raw clone for a thread, open/read of files) is invisible to the symbol
 * allowlist (build/rules.h): it needs instructions such as `syscall`, not imports. A candidate
 * can put such instructions into its library only through assembler text of its own: inline asm
 * (statements or file scope), or a string that GCC pastes unchecked into its assembly output (an
 * asm label `int f() __asm__("f\n\tsyscall")`, a section name
 * `__attribute__((section(".data\n\tsyscall\n#")))`), or bytes it places in an executable section
 * (`__attribute__((section(".text.x"))) const unsigned char code[] = {0x0f, 0x05}`). The compiler
 * itself never emits a kernel-entering instruction: GCC has no builtin for syscall, sysenter or
 * int; the few intrinsics of this kind (_wrpkru, _xrstor, _writefsbase_u64) are refused below.
 *
 * Why the whole class fails: the check reads the very file the assembler then reads, with the
 * assembler's own statement syntax, and accepts only what GCC emits:
 *   - Every statement is split the way GNU as splits it (newlines and ';' outside strings); text
 *     that as would read differently from GCC's output (a '#' comment after a statement, "'"
 *     character constants, backslashes or C comments outside strings, an unterminated string,
 *     '=' assignments, an indented '#') is refused, so no statement can hide from the check.
 *   - A directive must be one GCC emits (.section, .p2align, .quad, .cfi_*, ...); .macro, .rept,
 *     .irp, .insn, .incbin, .include, .reloc, .fill, .org, .pushsection, .code32, .intel_syntax
 *     and every other directive are refused, so no instruction can be built out of pieces.
 *   - No instruction whose mnemonic (after any prefixes) enters the kernel or hypervisor, changes
 *     protection keys or the FS/GS base, or transfers control far: syscall, sysenter, int, int1,
 *     int3, into, iret, lcall, ljmp, lret, wrpkru, xrstor*, wrfsbase, wrgsbase, vmcall, ... in
 *     any spelling as accepts (any case, with an operand-size suffix).
 *   - No data in an executable section: sections named like the linker's code sections (.text*,
 *     .init, .fini, .plt*, ...) take only instructions and GCC's padding (.p2align without a fill
 *     value; the two 0x66 prefix bytes GCC writes before __tls_get_addr calls); a section of any
 *     other name may not be made executable (flags with 'x', .note.GNU-stack included), and no
 *     executable section writable (flags with 'w': code that could rewrite itself).
 *   - Every inline asm statement that comes from a file under kernels/ is refused outright, as
 *     is file-scope asm other than nvcc's own fatbin block (GCC marks both: `#APP` ... `#NO_APP`,
 *     and `# LINE "FILE" 1` before each asm statement). These markers are only ever used to
 *     refuse; a candidate that forges them (a `#line` naming a system header) still meets the
 *     rules above, which apply to the whole file whatever its markers say.
 * Device code never reaches the host assembly (nvcc compiles it separately to PTX/SASS, and the
 * host pass sees only stubs of __device__/__global__ functions and the #else side of
 * `#ifdef __CUDA_ARCH__`), so inline PTX is unaffected. The check is of what was emitted: asm in
 * a function GCC drops (unused, dead code) is not in the object and not refused.
 *
 * What it does not stop: reusing kernel-entering bytes that are already executable. libc and
 * libcudart hold syscall instructions that code can jump to after finding them by walking memory
 * from a known function, and the candidate's own compiled code holds constants whose bytes decode
 * as `syscall; ret` when entered at an offset through a computed function pointer; neither needs
 * assembler text. Those are the run-time sandbox's job (seccomp, namespaces) and the trust
 * boundary of ARCHITECTURE.md 6a (no reward-deciding number is measured only inside the worker).
 * A disassembler pass over the object would see no more: its linear sweep sees exactly the
 * intended instructions this check reads as text, and it cannot see instructions that start
 * inside others.
 *
 * Inputs are untrusted: sizes are capped (HOSTASM_MAX_BYTES, HOSTASM_MAX_LINE), every buffer
 * holding candidate text is bounded, and at most HOSTASM_MAX_FINDINGS lines are reported per
 * unit. Nothing here keeps state between calls; it is safe from several threads at once. */
#ifndef CA_BUILD_HOSTASM_H
#define CA_BUILD_HOSTASM_H

#include <stddef.h>

#include "build/rules.h"
#include "util/diag.h"

#define HOSTASM_MAX_BYTES (1024u << 20) /* one assembly file (fatbins make them large) */
#define HOSTASM_MAX_LINE (1u << 20)     /* one line of it */
#define HOSTASM_MAX_FINDINGS 8          /* report lines per unit, then "... and N more" */

/* The unit whose assembly is checked. */
struct hostasm_unit {
	const char *shown;  /* the unit as messages name it: "kernels/k.cu" */
	const char *kdir;   /* absolute path of kernels/: asm markers naming a file under it (or a
			       relative path) are the candidate's */
	const char *label;  /* how kdir is shown: "kernels" */
	const char *source; /* optional: the unit's text, to give file-scope asm a line number */
	size_t source_len;
};

/* The message of a refused inline asm statement (after "kernels/k.cu:42: "). */
#define HOSTASM_MSG_INLINE "inline assembly in host code is not allowed (system calls and " \
	"self-modifying code are refused; inline PTX in __device__/__global__ functions is fine)"

/* Checks assembly text (len bytes, need not be NUL-terminated). Adds one line per finding to r
 * ("kernels/k.cu:42: inline assembly in host code is not allowed (...)", "kernels/k.cu (host
 * assembly line 7): the instruction 'syscall' enters the kernel ...") and returns how many
 * findings there were (lines past HOSTASM_MAX_FINDINGS are summed up in one more line). */
int hostasm_check_text(const struct hostasm_unit *u, const char *text, size_t len,
		       struct rules_report *r);

/* Reads the file (at most HOSTASM_MAX_BYTES, streamed) and checks it. 0: clean;
 * CA_ERR_REJECTED: findings, added to r and summarized in d; other negative codes: the file
 * cannot be read. */
int hostasm_check_file(const struct hostasm_unit *u, const char *path, struct rules_report *r,
		       struct ca_diag *d);

#endif
