/* wx: the seccomp_wx rules and MDWE (see wx.h; the contract is in sandbox.h).
 *
 * Why each rule (a "route" is a way to run bytes the program wrote, or to change code):
 *   - mmap/mprotect/pkey_mprotect with PROT_WRITE|PROT_EXEC: a page that is both. Killed
 *     outright (MDWE refuses them too, with EACCES; the kill also reports the attempt).
 *   - mprotect/pkey_mprotect with PROT_EXEC (only for a program without MDWE): the last step
 *     of RX -> RW (patch) -> RX. The filter cannot see a mapping's current protection, so it
 *     kills every such call. glibc 2.36's loader makes one only for TEXTREL objects, for a
 *     non-writable segment with a partial .bss page ("Dag nab it" in dl-map-segments.h, W+X)
 *     and for executable stacks (dl-execstack.c, W+X), all of which MDWE refuses anyway; the
 *     CUDA stack (driver, runtime, cuBLAS, cuBLASLt, cuDNN, CUPTI) and an import of torch make
 *     none (measured with tests/sandbox/wxprobe.c on the H200). Where MDWE is on, the kernel
 *     refuses exactly the calls that gain PROT_EXEC, with EACCES, so the filter leaves them to
 *     it.
 *   - shmat(SHM_EXEC): System V shared memory attached twice, once writable and once
 *     executable, is W and X through two addresses. MDWE does not see aliases.
 *   - memfd_create, memfd_secret: an anonymous file on a kernel-internal mount that no noexec
 *     reaches: write machine code into it, mmap it PROT_READ|PROT_EXEC (also with
 *     MFD_NOEXEC_SEAL, which only forbids execve). Kept out of the worker entirely.
 *   - mremap(old_size 0) duplicates a shared mapping; mremap(MREMAP_DONTUNMAP) leaves the old
 *     one mapped: either way one view can be made RW while the other stays RX.
 *   - remap_file_pages: deprecated, unused; remaps file pages under an existing mapping.
 *   - personality() setting anything (READ_IMPLIES_EXEC makes every PROT_READ mapping
 *     executable): only the query personality(0xffffffff) passes. */
#include "sandbox/wx.h"

#include <errno.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#define PERSONALITY_QUERY 0xffffffffu

/* One rule: kill `name` when its argument `arg` satisfies `op` (mask, value) (or always, with
 * n_cmp 0). A syscall this libseccomp does not know is skipped (the kernel lacks it too). */
static int kill_rule(void *ctx, const char *name, unsigned n_cmp, unsigned arg,
		     enum scmp_compare op, uint64_t a, uint64_t b, struct ca_diag *d)
{
	int nr = seccomp_syscall_resolve_name(name), e;
	struct scmp_arg_cmp cmp = {.arg = arg, .op = op, .datum_a = a, .datum_b = b};
	if (nr == __NR_SCMP_ERROR)
		return 0;
	e = seccomp_rule_add_array(ctx, SCMP_ACT_KILL_PROCESS, nr, n_cmp, &cmp);
	if (e != 0)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot add the W^X rule for %s: %s",
			       name, strerror(-e));
	return 0;
}

int sandbox_wx_seccomp_rules(void *ctx, bool mprotect_exec, int *rules, struct ca_diag *d)
{
	static const char *const prot_calls[] = {"mmap", "mprotect", "pkey_mprotect"};
	const uint64_t wx = PROT_WRITE | PROT_EXEC;
	int rc = 0, n = 0;

	for (size_t i = 0; i < sizeof prot_calls / sizeof prot_calls[0] && !rc; i++) {
		rc = kill_rule(ctx, prot_calls[i], 1, 2, SCMP_CMP_MASKED_EQ, wx, wx, d);
		n++;
		/* without MDWE: any mprotect that asks for PROT_EXEC */
		if (!rc && mprotect_exec && i > 0) {
			rc = kill_rule(ctx, prot_calls[i], 1, 2, SCMP_CMP_MASKED_EQ, PROT_EXEC,
				       PROT_EXEC, d);
			n++;
		}
	}
	if (!rc) {
		rc = kill_rule(ctx, "shmat", 1, 2, SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC, d);
		n++;
	}
	if (!rc) {
		rc = kill_rule(ctx, "memfd_create", 0, 0, SCMP_CMP_EQ, 0, 0, d);
		n++;
	}
	if (!rc) {
		rc = kill_rule(ctx, "memfd_secret", 0, 0, SCMP_CMP_EQ, 0, 0, d);
		n++;
	}
	if (!rc) {
		rc = kill_rule(ctx, "mremap", 1, 1, SCMP_CMP_EQ, 0, 0, d);
		n++;
	}
	if (!rc) {
		rc = kill_rule(ctx, "mremap", 1, 3, SCMP_CMP_MASKED_EQ, MREMAP_DONTUNMAP,
			       MREMAP_DONTUNMAP, d);
		n++;
	}
	if (!rc) {
		rc = kill_rule(ctx, "remap_file_pages", 0, 0, SCMP_CMP_EQ, 0, 0, d);
		n++;
	}
	/* personality(x) with x != 0xffffffff. libseccomp takes one comparison per argument and
	 * rule, so: "bit i of the low 32 bits is clear", for each i (x is an unsigned int for
	 * the kernel; glibc zero-extends it). One rule in the count. */
	for (unsigned bit = 0; bit < 32 && !rc; bit++)
		rc = kill_rule(ctx, "personality", 1, 0, SCMP_CMP_MASKED_EQ, 1ull << bit, 0, d);
	n++;
	if (!rc)
		*rules += n;
	return rc;
}

bool sandbox_mdwe_supported(void)
{
	return prctl(PR_GET_MDWE, 0L, 0L, 0L, 0L) >= 0;
}

int sandbox_mdwe_apply(char *detail, size_t size)
{
	if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L) != 0) {
		int e = errno;
		const char *s = strerrordesc_np(e);
		snprintf(detail, size, "prctl(PR_SET_MDWE): %s%s", s ? s : "unknown error",
			 e == EINVAL ? " (Linux 6.3+ has it)" : "");
		return -e;
	}
	snprintf(detail, size,
		 "refuse exec gain: no mapping both writable and executable, none that becomes "
		 "executable (EACCES); inherited across execve");
	return 0;
}
