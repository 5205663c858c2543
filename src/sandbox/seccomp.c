/* seccomp: the sandbox's syscall filter, built with libseccomp in the supervisor and exported as
 * classic BPF, so that the sandboxed child (between clone and execve) only has to install it.
 *
 * Default allow (the CUDA driver's ioctls and whatever a new driver needs), then:
 *   - killed: the syscalls in kill_names (escape routes, kernel attack surface, fork/vfork,
 *     execveat), socket() of any family but AF_UNIX;
 *   - clone(): killed without CLONE_THREAD (a new process: the program may make threads, never
 *     processes), and killed with any CLONE_NEW* flag (a thread may not make namespaces either);
 *   - clone3(): fails with ENOSYS (its flags are in memory the filter cannot read), so that libc
 *     falls back to clone(), whose flags the rules above see;
 *   - execve(): killed unless its path argument is the exact pointer `exec_path` (the sandbox's
 *     own exec of the program, from a page the supervisor mapped at a random address for the
 *     spawn; the program, after exec, neither has that page nor can read the filter to learn
 *     where it was). A program that guesses wrong is killed on its first try.
 * With allow_processes (a shell: the agent's bash tool) fork, vfork, execveat, clone() without
 * CLONE_THREAD and execve are not killed; the rest is the same.
 * With spec->wx, the seccomp_wx rules of wx.c are added (W^X: mappings both writable and
 * executable, aliasing routes, memfd; sandbox.h). */
#include "sandbox/sandbox.h"
#include "sandbox/wx.h"

#include <errno.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Killed outright. Most need privileges the program no longer has; the filter is a second wall
 * (and the only one where a layer before it could not be applied). */
/* clang-format off */
static const char *const kill_names[] = {
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
	"bpf", "perf_event_open", "userfaultfd",
	"mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr",
	"unshare", "setns",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm",
	"quotactl", "quotactl_fd", "uselib", "lookup_dcookie", "nfsservctl",
	"keyctl", "add_key", "request_key",
	"open_by_handle_at", "name_to_handle_at",
	/* process creation (clone without CLONE_THREAD: below); execve: below */
	"fork", "vfork", "execveat",
	/* io_uring performs socket, connect and open operations this filter never sees */
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	NULL,
};
/* clang-format on */

/* clone() flags that make namespaces (CLONE_NEWTIME shares its bit with the exit signal field
 * of clone() and can only be asked for through clone3/unshare, both handled otherwise). */
static const unsigned long clone_ns_flags[] = {
	CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
	CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
};

#define FILTER_MAX_BYTES (256u << 10)

/* Process creation and exec, allowed with allow_processes (a shell). */
static bool process_syscall(const char *name)
{
	return strcmp(name, "fork") == 0 || strcmp(name, "vfork") == 0 ||
	       strcmp(name, "execveat") == 0;
}

int sandbox_seccomp_build(uint64_t exec_path, struct sock_filter **filter, unsigned short *len,
			  int *rules, struct ca_diag *d)
{
	return sandbox_seccomp_build_opts(exec_path, false, filter, len, rules, d);
}

int sandbox_seccomp_build_opts(uint64_t exec_path, bool allow_processes,
			       struct sock_filter **filter, unsigned short *len, int *rules,
			       struct ca_diag *d)
{
	struct sandbox_seccomp_spec spec = {.exec_path = exec_path,
					    .allow_processes = allow_processes};
	return sandbox_seccomp_build_spec(&spec, filter, len, rules, NULL, d);
}

/* The rules of the spec: the kill list, sockets other than AF_UNIX, namespaces and processes by
 * clone, execve but the sandbox's own, clone3 (ENOSYS) and sched_setaffinity (EPERM). *n counts
 * them. */
static int add_rules(scmp_filter_ctx ctx, const struct sandbox_seccomp_spec *spec, int *count,
		     struct ca_diag *d)
{
	const uint64_t exec_path = spec->exec_path;
	const bool allow_processes = spec->allow_processes;
	const uint32_t kill = SCMP_ACT_KILL_PROCESS;
	int n = 0, e;

	for (const char *const *name = kill_names; *name; name++) {
		if (allow_processes && process_syscall(*name))
			continue;
		int nr = seccomp_syscall_resolve_name(*name);
		if (nr == __NR_SCMP_ERROR)
			continue; /* unknown to this libseccomp: the kernel may not have it either
				   */
		if ((e = seccomp_rule_add(ctx, kill, nr, 0)) != 0) {
			return ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot add a rule for %s: %s",
				       *name, strerror(-e));
		}
		n++;
	}
	/* socket(domain != AF_UNIX) */
	struct scmp_arg_cmp not_unix = {
		.arg = 0, .op = SCMP_CMP_NE, .datum_a = (scmp_datum_t)AF_UNIX, .datum_b = 0};
	if ((e = seccomp_rule_add_array(ctx, kill, SCMP_SYS(socket), 1, &not_unix)) != 0) {
		return ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot add the socket rule: %s",
			       strerror(-e));
	}
	n++;
	/* clone(flags & CLONE_NEW*): one rule per flag (libseccomp compares masked equality). */
	for (size_t i = 0; i < sizeof clone_ns_flags / sizeof clone_ns_flags[0]; i++) {
		struct scmp_arg_cmp has_flag = {.arg = 0,
						.op = SCMP_CMP_MASKED_EQ,
						.datum_a = (scmp_datum_t)clone_ns_flags[i],
						.datum_b = (scmp_datum_t)clone_ns_flags[i]};
		if ((e = seccomp_rule_add_array(ctx, kill, SCMP_SYS(clone), 1, &has_flag)) != 0) {
			return ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot add a clone rule: %s",
				       strerror(-e));
		}
		n++;
	}
	/* clone() without CLONE_THREAD makes a process (fork, posix_spawn, a raw clone): threads,
	 * which the CUDA driver and libc make, always carry CLONE_THREAD. The CLONE_NEW* rules
	 * above stay for threads (clone(CLONE_THREAD | CLONE_NEWNET) is valid for the kernel). */
	struct scmp_arg_cmp no_thread = {.arg = 0,
					  .op = SCMP_CMP_MASKED_EQ,
					  .datum_a = (scmp_datum_t)CLONE_THREAD,
					  .datum_b = 0};
	if (!allow_processes) {
		if ((e = seccomp_rule_add_array(ctx, kill, SCMP_SYS(clone), 1, &no_thread)) != 0) {
			return ca_fail(d, CA_ERR_UNSUPPORTED,
				       "seccomp: cannot add the clone rule: %s", strerror(-e));
		}
		n++;
	}
	/* execve: only the sandbox's own, recognized by its path pointer */
	if (exec_path) {
		struct scmp_arg_cmp other_path = {.arg = 0,
						  .op = SCMP_CMP_NE,
						  .datum_a = (scmp_datum_t)exec_path,
						  .datum_b = 0};
		if ((e = seccomp_rule_add_array(ctx, kill, SCMP_SYS(execve), 1, &other_path)) !=
		    0) {
			return ca_fail(d, CA_ERR_UNSUPPORTED,
				       "seccomp: cannot add the execve rule: %s", strerror(-e));
		}
		n++;
	}
	/* clone3 passes its flags in memory the filter cannot read: make libc fall back. */
	if ((e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) != 0) {
		return ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot add the clone3 rule: %s",
			       strerror(-e));
	}
	n++;
	/* The candidate's process keeps the CPUs it was started on: moving itself to another core
	 * would change the host cost of its windows next to its reference process's
	 * (docs/security.md, "The outside bound"). EPERM, not a kill: OpenMP runtimes try it. */
	if ((e = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sched_setaffinity), 0)) !=
	    0) {
		return ca_fail(d, CA_ERR_UNSUPPORTED,
			       "seccomp: cannot add the sched_setaffinity rule: %s", strerror(-e));
	}
	n++;
	*count += n;
	return 0;
}

/* The filter as BPF (exported by libseccomp through a memfd, size-checked), into *filter. */
static int export_filter(scmp_filter_ctx ctx, struct sock_filter **filter, unsigned short *len,
			 struct ca_diag *d)
{
	struct stat st;
	char *buf = NULL;
	int fd, e, rc = 0;

	fd = memfd_create("ca-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return ca_fail(d, CA_ERR_IO, "seccomp: memfd_create: %s", strerror(errno));
	if ((e = seccomp_export_bpf(ctx, fd)) != 0) {
		rc = ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot export the filter: %s",
			     strerror(-e));
		goto done;
	}
	if (fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size > FILTER_MAX_BYTES ||
	    (size_t)st.st_size % sizeof(struct sock_filter) != 0 ||
	    (size_t)st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		rc = ca_fail(d, CA_ERR_LIMIT, "seccomp: the exported filter has an odd size");
		goto done;
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		rc = ca_fail(d, CA_ERR_NOMEM, "seccomp: out of memory");
		goto done;
	}
	if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
		rc = ca_fail(d, CA_ERR_IO, "seccomp: cannot read the exported filter");
		goto done;
	}
	*filter = (struct sock_filter *)(void *)buf;
	*len = (unsigned short)((size_t)st.st_size / sizeof(struct sock_filter));
	buf = NULL;
done:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

int sandbox_seccomp_build_spec(const struct sandbox_seccomp_spec *spec,
			       struct sock_filter **filter, unsigned short *len, int *rules,
			       int *wx_rules, struct ca_diag *d)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int n_wx = 0, n = 0, rc = 0, e;

	*filter = NULL;
	*len = 0;
	*rules = 0;
	if (wx_rules)
		*wx_rules = 0;
	if (!ctx)
		return ca_fail(d, CA_ERR_NOMEM, "seccomp_init failed");
	if (spec->allow_processes && spec->exec_path) {
		rc = ca_fail(d, CA_ERR_INVALID,
			     "seccomp: allow_processes leaves execve unrestricted (exec_path must "
			     "be 0)");
		goto out;
	}
	/* A syscall of another ABI (i386 int 0x80, x32) would dodge every rule below. */
	if ((e = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) != 0) {
		rc = ca_fail(d, CA_ERR_UNSUPPORTED, "seccomp: cannot set the bad-arch action: %s",
			     strerror(-e));
		goto out;
	}
	if ((rc = add_rules(ctx, spec, &n, d)) != 0)
		goto out;
	if (spec->wx) {
		if ((rc = sandbox_wx_seccomp_rules(ctx, spec->wx_mprotect_exec, &n_wx, d)) != 0)
			goto out;
		n += n_wx;
	}

	if ((rc = export_filter(ctx, filter, len, d)) != 0)
		goto out;
	*rules = n;
	if (wx_rules)
		*wx_rules = n_wx;
out:
	seccomp_release(ctx);
	return rc;
}
