/* wx: the W^X layers' building blocks (internal to src/sandbox/; the contract the callers of
 * sandbox_spawn() see is in sandbox.h: "seccomp_wx", "mdwe", "noexec", "landlock", "W^X").
 *
 * Two sides, like the rest of the sandbox:
 *   - the supervisor (parent), before clone: sandbox_wx_seccomp_rules() adds the seccomp_wx
 *     rules to the libseccomp filter seccomp.c builds; sandbox_mdwe_supported() says whether
 *     this kernel has MDWE (then the filter leaves mprotect(PROT_EXEC) to it);
 *   - the child, between clone and execve (no allocation, raw system calls, no stdio):
 *     sandbox_mdwe_apply() and sandbox_landlock_apply(). They write a one-line detail into a
 *     caller buffer (on: what it amounts to; off: why) and return 0 or a negative errno. */
#ifndef CA_SANDBOX_WX_H
#define CA_SANDBOX_WX_H

#include <stdbool.h>
#include <stddef.h>

#include "util/diag.h"

/* prctl(2) MDWE (Linux 6.3; Debian 12's headers predate it) */
#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#ifndef PR_GET_MDWE
#define PR_GET_MDWE 66
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN (1UL << 0)
#endif

/* Adds the seccomp_wx rules (sandbox.h) to `ctx`, a scmp_filter_ctx (declared void * here so
 * that this header needs no <seccomp.h>), all with SCMP_ACT_KILL_PROCESS. mprotect_exec: also
 * kill every mprotect/pkey_mprotect whose prot has PROT_EXEC (for a program without MDWE).
 * Adds the number of rules added to *rules. Returns 0, or CA_ERR_UNSUPPORTED with a message
 * when libseccomp refuses a rule. */
int sandbox_wx_seccomp_rules(void *ctx, bool mprotect_exec, int *rules, struct ca_diag *d);

/* Whether this kernel knows PR_SET_MDWE (PR_GET_MDWE answers). Parent side. */
bool sandbox_mdwe_supported(void);

/* Child side: PR_SET_MDWE(PR_MDWE_REFUSE_EXEC_GAIN) on the calling process (inherited across
 * execve). Returns 0 with `detail` saying what it does, or -errno with `detail` saying why
 * not. */
int sandbox_mdwe_apply(char *detail, size_t size);

/* One place writes are allowed under (sandbox_landlock_apply). */
struct sandbox_landlock_path {
	const char *path;  /* absolute, as the child sees it after its mounts */
	bool files_only;   /* only write to existing files beneath (/dev): no creating, removing
			    * or renaming */
};

/* Child side, after the mounts and no_new_privs, before seccomp: a Landlock ruleset handling
 * every filesystem write right this kernel's Landlock ABI knows (write, truncate, create,
 * remove, rename/link across directories; reads and execution are left to the mount view),
 * allowing them beneath each of paths[0..n) (a path that does not exist is skipped: an
 * optional bind that was missing) and on the files descriptors 0, 1 and 2 refer to, when they
 * are files or devices (so that reopening /dev/stderr works); then landlock_restrict_self().
 * Returns 0 with `detail` ("ABI 7: writes only under ..."), or -errno with `detail` saying why
 * not (no Landlock in this kernel, disabled at boot, no no_new_privs, a rule refused). */
int sandbox_landlock_apply(const struct sandbox_landlock_path *paths, size_t n, char *detail,
			   size_t size);

#endif
