/* sandbox: starts an untrusted program (the GPU worker) inside a sandbox.
 *
 * Contract. sandbox_spawn() starts argv[0] like ca_child_spawn() does (pipes to its stdin and
 * stdout in sb->child, stderr appended to a file, its own process group), inside these layers,
 * each attempted on its own and reported in sb->report:
 *
 *   user_ns      new user namespace; the program runs as one mapped id (see "identity")
 *   mount_ns, pid_ns, net_ns (no interfaces, lo down), ipc_ns, uts_ns, cgroup_ns
 *   filesystem   a fresh read-only root (tmpfs + pivot_root) holding read-only binds of /usr,
 *                /etc (only SANDBOX_MINIMAL_ETC of it with opts->minimal_etc), /opt, /lib*,
 *                /bin, /sbin, a minimal /dev (null, zero, random, urandom,
 *                full, every /dev/nvidia* node unless opts->no_gpu), a fresh /proc for
 *                the PID namespace (CUDA needs it), a fresh read-only /sys, at /tmp and /dev/shm either a private
 *                size-capped tmpfs or the caller's scratch directories (opts->tmp_dir,
 *                shm_dir: see "Scratch"), and the caller's binds. Nothing else of the host is
 *                visible.
 *   no_new_privs prctl(PR_SET_NO_NEW_PRIVS)
 *   capabilities bounding, ambient, permitted, effective and inheritable sets emptied
 *   rlimits      CPU, FSIZE, NOFILE, NPROC, CORE; AS only when opts->as_bytes asks (never for
 *                a program with the GPU: CUDA reserves huge ranges)
 *   cgroup       cgroup v2 memory.max + pids.max, where /sys/fs/cgroup is a writable cgroup2
 *   seccomp      default allow (the CUDA driver needs many ioctls), kill the process (SIGSYS)
 *                on ptrace, process_vm_*, bpf, mount and the new mount API, pivot_root,
 *                unshare, setns, perf_event_open, kexec, modules, reboot, swap, keys,
 *                userfaultfd, io_uring, handle syscalls, socket() of any family but AF_UNIX,
 *                process creation (fork, vfork, clone() without CLONE_THREAD; threads are
 *                fine), clone() with a CLONE_NEW* flag, execveat, execve() other than the
 *                sandbox's own exec of argv[0] (process creation and exec are allowed with
 *                opts->allow_processes, for a shell), other ABIs; clone3() fails with ENOSYS so that
 *                libc falls back to clone(). Installed last, right before execve.
 *   seccomp_wx   W^X rules in the same filter (wx.c; off with allow_processes): killed are mmap,
 *                mprotect and pkey_mprotect whose prot has both PROT_WRITE and PROT_EXEC, shmat
 *                with SHM_EXEC, memfd_create and memfd_secret (a memfd is a file no mount option
 *                covers: written through one mapping, mapped PROT_EXEC through another),
 *                mremap(old_size 0) and mremap(MREMAP_DONTUNMAP) (both alias a shared mapping:
 *                one view RX, the other made RW), remap_file_pages, and personality() asking
 *                for READ_IMPLIES_EXEC; where MDWE is not on, also every mprotect/pkey_mprotect
 *                with PROT_EXEC (the RX -> RW -> RX patching dance; with MDWE the kernel refuses
 *                its last step itself, softly, knowing the mapping's previous protection).
 *   mdwe         prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN) (Linux 6.3+; off with
 *                allow_processes), inherited across execve: the kernel refuses (EACCES) any
 *                mapping that is writable and executable and any mapping that gains PROT_EXEC.
 *   noexec       noexec on every writable mount the sandbox makes: /tmp and /dev/shm (the
 *                scratch directories or the private tmpfs) and every writable bind, so that no
 *                file the program writes can be mapped PROT_EXEC (EPERM) or executed (needs the
 *                filesystem layer; off with allow_processes).
 *   landlock     a Landlock ruleset (ABI >= 1) handling every write access right: writes only
 *                under /tmp, /dev/shm and the writable binds, and to files under /dev (the GPU
 *                nodes, /dev/null), plus the files stdin/stdout/stderr already are; everything
 *                else is EACCES: without GPU nodes (opts->no_gpu, or none on the host) that
 *                includes /proc/self/mem and /proc/<pid>/task/<tid>/mem (a write there bypasses
 *                page protections). With GPU nodes bound, files under /proc stay writable: the
 *                CUDA driver writes /proc/self/task/<tid>/comm for each thread it makes and
 *                fails (cudaErrorOperatingSystem) when it cannot, and a Landlock rule cannot
 *                allow that file without /proc/self/mem (the detail says so). Applied after the
 *                mounts, before seccomp. Also with allow_processes.
 *
 * W^X. The four layers above make run-time code injection and self-modifying code fail: no
 * page is ever writable and executable, no page that was writable becomes executable, nothing
 * the program wrote (a file, a memfd, shared memory) can be mapped executable, and, without
 * GPU nodes, the kernel's own write path into code (/proc/self/mem) is closed. Each layer is
 * reported on its own and
 * can be disabled on its own (tests); docs/security.md ("W^X") lists, per attack route, the
 * layer that stops it and what remains: a program with the GPU can still write code through
 * /proc/self/mem (see landlock), map its own library's (already executable) code over another
 * library's with mmap(MAP_FIXED), and redirect calls through data (a GOT made writable with
 * mprotect(PROT_READ|PROT_WRITE), function pointers). With
 * allow_processes (a shell) only landlock applies: JIT runtimes (node, java) need W+X memory
 * and a shell runs programs it builds in its workspace and /tmp; nothing there is timed.
 *
 * A layer this machine cannot provide (no user namespaces, no cgroup v2, ...) is reported off
 * with a one-line reason and the program runs without it, unless opts->strict asks to fail
 * instead. When user namespaces are refused and the caller is root, the other namespaces are
 * made without one. A setup error (a bind source that does not exist, a mount that fails, a bind
 * the program's uid cannot read) fails the spawn with CA_ERR_CHILD and "sandbox: cannot <step>:
 * <reason>".
 *
 * Identity. When the caller is root the program runs as opts->uid/gid (default 65534/65534,
 * nobody/nogroup), never as root: RLIMIT_NPROC is not enforced for uid 0, and root could chmod
 * its way around the binds. Inside a user namespace only that id is mapped, to the same number
 * (files owned by other host ids show as 65534, the overflow id). A caller that is not root runs
 * the program as itself. Read-only binds must be readable by that uid (checked: a bind it cannot
 * read is a setup error); writable binds are made owned by it (chown of the bound directory or
 * file itself, not of its contents) when the caller is root, so they must be per-run paths.
 *
 * Processes. The program is PID 1 of its PID namespace: when it dies, the kernel kills every
 * process in the namespace, so ca_child_finish()/sandbox_finish() killing it (SIGKILL from the
 * supervisor) leaves nothing behind. As PID 1 it ignores signals it has no handler for unless
 * the kernel forces them (faults, seccomp, SIGKILL): exceeding RLIMIT_FSIZE makes its own
 * write() fail with EFBIG instead of killing it with SIGXFSZ (its children get SIGXFSZ); its own
 * orphaned children are not reaped. The wall-clock watchdog stays with the supervisor
 * (ca_child_read_line deadlines + sandbox_finish).
 *
 * Paths. argv[0] is an absolute path as seen inside the sandbox (no PATH search). Bind paths
 * are absolute, without "." or ".." components; dst NULL means "the same path as src", which is
 * what the worker needs (its plan names host paths, and they stay valid even when the
 * filesystem layer is unavailable). A bind's dst must not lie inside a read-only bind unless it
 * already exists there. Binds are made in the order given, after /tmp and /dev/shm, so
 * destinations under those land in the sandbox's private tmpfs (or scratch directory).
 *
 * Scratch. With opts->tmp_dir / shm_dir, /tmp and /dev/shm inside are writable binds of those
 * host directories (owned by the program's uid like any writable bind; no size cap but the
 * cgroup's memory and RLIMIT_FSIZE per file), so the caller can see afterwards what the program
 * wrote there: sandbox_scratch_check() after sandbox_finish(). Mount points the sandbox itself
 * makes there for the caller's binds (a bind under /dev/shm lands in the shm directory) are
 * remembered in sb and not reported.
 *
 * Ownership. sb owns the child's pipes and its cgroup until sandbox_finish(); everything in
 * opts is borrowed for the duration of sandbox_spawn() only. The child is started with a raw
 * clone() carrying the namespace flags and synchronized over a socketpair (the parent writes
 * the id maps and moves it into its cgroup, then says go; the child answers with its half of
 * the report or one error line, then execs). The code between clone and execve allocates
 * nothing and uses raw syscalls for id changes, so sandbox_spawn() may be called from a
 * multi-threaded supervisor. */
#ifndef CA_SANDBOX_SANDBOX_H
#define CA_SANDBOX_SANDBOX_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/diag.h"
#include "util/proc.h"

#define SANDBOX_UNLIMITED    UINT64_MAX
#define SANDBOX_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

enum sandbox_layer {
	SANDBOX_USER_NS,
	SANDBOX_MOUNT_NS,
	SANDBOX_PID_NS,
	SANDBOX_NET_NS,
	SANDBOX_IPC_NS,
	SANDBOX_UTS_NS,
	SANDBOX_CGROUP_NS,
	SANDBOX_FILESYSTEM,
	SANDBOX_NO_NEW_PRIVS,
	SANDBOX_CAPS,
	SANDBOX_RLIMITS,
	SANDBOX_CGROUP,
	SANDBOX_SECCOMP,
	SANDBOX_SECCOMP_WX,
	SANDBOX_MDWE,
	SANDBOX_NOEXEC,
	SANDBOX_LANDLOCK,
	SANDBOX_N_LAYERS
};

/* For sandbox_opts.disable: SANDBOX_BIT(SANDBOX_SECCOMP) | ... */
#define SANDBOX_BIT(layer) (1u << (layer))

struct sandbox_bind {
	const char *src; /* absolute host path: a directory or a file */
	const char *dst; /* absolute path inside; NULL: the same as src */
	bool writable;   /* read-write (else read-only, nosuid, nodev) */
	bool optional;   /* a missing src is skipped instead of being an error */
};

struct sandbox_opts {
	/* The program's whole environment ("K=V", NULL-terminated; NULL: none). PATH
	 * (SANDBOX_DEFAULT_PATH) and HOME=/tmp are added when absent. */
	const char *const *env;
	bool pass_ld_library_path; /* also pass the caller's LD_LIBRARY_PATH (if set) */
	const char *cwd;           /* working directory inside; NULL: "/" */
	const struct sandbox_bind *binds;
	size_t n_binds;
	uint64_t tmp_bytes; /* size cap of the private /tmp; 0: 1 GiB */
	uint64_t shm_bytes; /* size cap of /dev/shm; 0: 64 MiB */
	/* Host directories bound writable at /tmp and /dev/shm instead of the private tmpfs (then
	 * tmp_bytes / shm_bytes do not apply); NULL: the tmpfs. Absolute, existing directories. */
	const char *tmp_dir;
	const char *shm_dir;
	/* rlimits (soft = hard); 0: the default; SANDBOX_UNLIMITED: left as inherited */
	uint64_t cpu_seconds; /* RLIMIT_CPU, default 600 (SIGKILL when reached) */
	uint64_t fsize_bytes; /* RLIMIT_FSIZE, default 2 GiB */
	uint64_t nofile;      /* RLIMIT_NOFILE, default 1024 */
	uint64_t nproc;       /* RLIMIT_NPROC, default 256 (threads count; per uid, and with a user
			       * namespace per uid in that namespace: only the sandbox's tasks) */
	/* cgroup v2; 0: the default; SANDBOX_UNLIMITED: not written */
	uint64_t memory_max;     /* memory.max (memory.swap.max is set to 0), default 32 GiB */
	uint64_t pids_max;       /* pids.max, default 1024 */
	const char *cgroup_root; /* where the child cgroup is made; NULL: /sys/fs/cgroup */
	unsigned uid, gid;       /* ids the program runs as when the caller is root; 0: 65534 */
	unsigned disable;        /* SANDBOX_BIT()s of layers not to attempt (tests, debugging):
				  * user_ns, net_ns, ipc_ns, uts_ns, cgroup_ns, rlimits, cgroup,
				  * seccomp (and with it seccomp_wx), seccomp_wx, mdwe, noexec,
				  * landlock; the others are always attempted */
	bool strict;             /* fail (CA_ERR_UNSUPPORTED) if an attempted layer is off */
	/* No GPU: the /dev/nvidia* nodes (and /dev/nvidia-caps) are not bound, so nothing inside
	 * can open the driver (the agent's bash tool, src/agent/tools.h). Default false: bound. */
	bool no_gpu;
	/* A shell: the seccomp filter (otherwise unchanged) lets process creation through: fork,
	 * vfork, clone() without CLONE_THREAD, execve of any path and execveat. clone() with a
	 * CLONE_NEW* flag, clone3 (ENOSYS) and everything else stay as described above. The W^X
	 * layers seccomp_wx, mdwe and noexec are not applied (reported off with the reason, and,
	 * like a disabled layer, not counted by strict); landlock is. Default false: one program,
	 * threads only, no exec after the sandbox's own. */
	bool allow_processes;
	double setup_timeout_s;  /* limit on the sandbox setup before execve; 0: 30 s */
	/* Descriptors the program gets as 3, 4, ... (shared memory handed over by the bridge:
	 * docs/protocol.md, device data); every other descriptor of the caller stays out. */
	const int *pass_fds;
	size_t n_pass_fds; /* at most SANDBOX_MAX_PASS_FDS */
	/* Not the host's whole /etc: only what compilers and the dynamic loader read
	 * (SANDBOX_MINIMAL_ETC below, each where it exists). The build profile. */
	bool minimal_etc;
	uint64_t as_bytes; /* RLIMIT_AS per process; 0: not set (see rlimits) */
	/* stderr to a pipe of its own (sb->err_from_child) instead of stderr_path */
	bool capture_stderr;
	/* SANDBOX_BIT()s of layers that must come on: when one is off the program is killed
	 * before it runs (it waits for the go after the report) and the spawn fails with
	 * CA_ERR_UNSUPPORTED naming it (strict asks this of every attempted layer). */
	unsigned require;
	/* The program is killed (SIGKILL) when the thread that started it ends, the caller's
	 * process included (PR_SET_PDEATHSIG, set after the uid change, which clears it): for
	 * programs run to completion by one thread (sandbox_run), so that killing the caller
	 * (`cuda-agent sandbox-exec`, a build) leaves nothing running. */
	bool kill_with_parent;
};

/* What minimal_etc leaves of /etc: the loader's cache and configuration, the alternatives
 * (Debian's cc, c++ and ld are symlinks through /etc/alternatives), the user and group names
 * and how to look them up, the time zone. */
#define SANDBOX_MINIMAL_ETC                                                                   \
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",        \
		"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime"

/* The build profile (sandbox_build_opts): what every build of candidate code runs in. */
#define SANDBOX_BUILD_AS_BYTES  (16ull << 30) /* RLIMIT_AS per process */
#define SANDBOX_BUILD_TMP_BYTES (2ull << 30)  /* the private /tmp */
#define SANDBOX_BUILD_NPROC     512ull
/* Layers without which no build runs (unless $CUDA_AGENT_SANDBOX=0 says to run unsandboxed) */
#define SANDBOX_BUILD_REQUIRED                                                                 \
	(SANDBOX_BIT(SANDBOX_MOUNT_NS) | SANDBOX_BIT(SANDBOX_PID_NS) |                          \
	 SANDBOX_BIT(SANDBOX_NET_NS) | SANDBOX_BIT(SANDBOX_FILESYSTEM) |                        \
	 SANDBOX_BIT(SANDBOX_NO_NEW_PRIVS))

#define SANDBOX_MAX_PASS_FDS 32

#define SANDBOX_DETAIL_MAX 192
#define SANDBOX_SCRATCH_MAX_ENTRIES 10000 /* sandbox_scratch_list() looks at no more entries */
#define SANDBOX_SCRATCH_MAX_DEPTH   16    /* nor below this many levels */
#define SANDBOX_SCRATCH_NAMED       3     /* entries named in a sandbox_scratch_list */
#define SANDBOX_MOUNT_POINTS_MAX    8192

struct sandbox_layer_state {
	bool on;
	char detail[SANDBOX_DETAIL_MAX]; /* off: why (one line); on: what it amounts to */
};

struct sandbox_report {
	struct sandbox_layer_state layer[SANDBOX_N_LAYERS];
	unsigned uid, gid; /* host ids the program runs as */
	int seccomp_rules; /* rules in the filter (0 when off) */
};

struct sandbox {
	struct ca_child child; /* for ca_child_write / ca_child_read_line / ca_child_alive */
	struct sandbox_report report;
	char cgroup[PATH_MAX]; /* the child's cgroup directory ("" if none) */
	bool oom_killed;       /* set by sandbox_finish from the cgroup's memory.events */
	/* For sandbox_scratch_check(): the scratch directories bound at /tmp ([0]) and /dev/shm
	 * ([1]) ("" when not bound: no tmp_dir / shm_dir, or no filesystem layer), and the mount
	 * points the sandbox made inside them (paths as seen inside, each '\0'-terminated). */
	char scratch[2][PATH_MAX];
	char mount_points[SANDBOX_MOUNT_POINTS_MAX];
	size_t mount_points_len;
	int err_from_child; /* read end of its stderr with opts->capture_stderr; else -1 */
};

/* What sandbox_scratch_list() found. */
struct sandbox_scratch_list {
	size_t found;    /* entries left (not allowed, not the sandbox's mount points) */
	size_t visited;  /* entries looked at, at most SANDBOX_SCRATCH_MAX_ENTRIES */
	bool incomplete; /* stopped at the entry cap, or a directory deeper than the depth cap or
			  * unreadable was not listed (its own entry counts) */
	char named[SANDBOX_SCRATCH_NAMED][256]; /* the first ones found, printable, as inside */
};

/* Starts argv (argv[0] absolute inside the sandbox) with stdin/stdout pipes in sb->child and
 * stderr appended to stderr_path (a host path; NULL: inherited). opts NULL: all defaults.
 * Returns 0 with sb->report filled, or a negative code (nothing left running, sb->child.pid
 * is -1; sb->report says what had been decided). */
int sandbox_spawn(struct sandbox *sb, const char *const *argv, const struct sandbox_opts *opts,
		  const char *stderr_path, struct ca_diag *d);

/* The build profile into *o (zeroed first): no GPU nodes, processes allowed (compilers fork
 * their steps), minimal /etc, RLIMIT_AS SANDBOX_BUILD_AS_BYTES, a private /tmp of
 * SANDBOX_BUILD_TMP_BYTES, nproc SANDBOX_BUILD_NPROC; the network, like every namespace, is
 * always attempted; required (opts->require): SANDBOX_BUILD_REQUIRED. The caller adds env, cwd
 * and binds. */
void sandbox_build_opts(struct sandbox_opts *o);

/* ca_run() inside the sandbox: starts argv (argv[0] absolute inside) with opts (NULL: all
 * defaults; capture_stderr is forced on), writes ro->stdin_data to its stdin (else end of
 * file), captures stdout and stderr up to ro->stdout_cap / stderr_cap (the rest counted as
 * dropped), and waits for it until ro->timeout_s (<= 0: no limit), when the whole sandbox is
 * killed (r->timed_out). The PID namespace means nothing it started outlives it. ro's env_add
 * and cwd are ignored (opts says them). Returns 0 with r filled (free with
 * ca_run_result_free) and *rep (may be NULL) the layers, or a negative code when the sandbox
 * could not be set up (r zeroed). */
int sandbox_run(const char *const *argv, const struct sandbox_opts *opts,
		const struct ca_run_opts *ro, struct ca_run_result *r, struct sandbox_report *rep,
		struct ca_diag *d);

/* ca_child_finish() on sb->child (the program and, through the PID namespace, everything it
 * started die), then removes the cgroup (after noting an OOM kill in sb->oom_killed). Safe to
 * call after a failed spawn. */
void sandbox_finish(struct sandbox *sb, double grace_s, struct ca_run_result *r);

/* After sandbox_finish(): lists what the program left in the scratch directories (paths as
 * seen inside: "/tmp/x", "/dev/shm/y"), minus the sandbox's own mount points and the entries
 * the worker's GPU stack is known to make (an allowlist in scratch.c, empty until a GPU host
 * shows one). Returns 0 with *found = 0 when nothing is there (or no scratch directory was
 * bound), 0 with *found > 0 and a one-line list in `list` ("/tmp/x, /dev/shm/y and 4 more"),
 * or a negative code when a directory could not be listed. */
int sandbox_scratch_check(const struct sandbox *sb, size_t *found, char *list, size_t size,
			  struct ca_diag *d);

/* The walk behind it: appends to *out what host_dir (shown as `inside`, e.g. "/tmp") holds,
 * recursively, never following symlinks (a symlink is an entry, its target is not looked at),
 * at most SANDBOX_SCRATCH_MAX_ENTRIES entries and SANDBOX_SCRATCH_MAX_DEPTH levels. Not
 * counted: an entry at one of `mount_points` (a '\0'-separated list of `mp_len` bytes) or on
 * the way to one, when it is a directory or an empty regular file (what the sandbox makes), and
 * an entry whose inside path matches a pattern of `allow` (NULL-terminated fnmatch(3) patterns
 * with FNM_PATHNAME; a matching directory is not descended into). */
int sandbox_scratch_list(const char *host_dir, const char *inside, const char *mount_points,
			 size_t mp_len, const char *const *allow, struct sandbox_scratch_list *out,
			 struct ca_diag *d);

/* After sandbox_finish(): whether the seccomp filter killed the program (it died of SIGSYS
 * while the filter was on: a forbidden system call). */
bool sandbox_killed_by_seccomp(const struct sandbox *sb, const struct ca_run_result *r);

/* "user_ns", "mount_ns", ..., "seccomp", "seccomp_wx", "mdwe", "noexec", "landlock". */
const char *sandbox_layer_name(enum sandbox_layer layer);

/* The result's "isolation" object:
 * {"sandbox": true, "namespaces": <user, mount, pid, net, ipc, uts all on>, "seccomp": bool,
 *  "uid": n, "layers": {"<name>": {"on": bool, "detail": "..."}, ...},
 *  "off": ["<name>: <reason>", ...], "note": "one line"}.
 * The supervisor adds its own keys ("separate_process", "reference_outputs_hidden"). */
json_t *sandbox_report_json(const struct sandbox_report *rep);

/* The seccomp filter as a classic BPF program (seccomp.c): *filter is heap memory owned by the
 * caller (free()), *len its instruction count, *rules the number of rules. exec_path: the only
 * pointer execve() may be called with (the sandbox's exec of the program); 0: execve is not
 * restricted. */
struct sock_filter;
int sandbox_seccomp_build(uint64_t exec_path, struct sock_filter **filter, unsigned short *len,
			  int *rules, struct ca_diag *d);
/* The same with sandbox_opts.allow_processes: when allow_processes is true, fork, vfork,
 * execveat and clone() without CLONE_THREAD are not killed and exec_path must be 0 (execve is
 * not restricted); every other rule is the same. sandbox_seccomp_build(...) is
 * sandbox_seccomp_build_opts(exec_path, false, ...). */
int sandbox_seccomp_build_opts(uint64_t exec_path, bool allow_processes,
			       struct sock_filter **filter, unsigned short *len, int *rules,
			       struct ca_diag *d);

/* What sandbox_seccomp_build_spec() puts in the filter. */
struct sandbox_seccomp_spec {
	uint64_t exec_path;    /* as sandbox_seccomp_build() */
	bool allow_processes;  /* as sandbox_seccomp_build_opts() */
	bool wx;               /* the seccomp_wx rules (see "seccomp_wx" above) */
	bool wx_mprotect_exec; /* with wx: also kill every mprotect/pkey_mprotect with PROT_EXEC
				* (for a program without MDWE) */
};

/* The filter of `spec`; *rules counts every rule, *wx_rules (may be NULL) the seccomp_wx ones
 * among them. sandbox_seccomp_build_opts(e, a, ...) is this with {e, a, false, false}. */
int sandbox_seccomp_build_spec(const struct sandbox_seccomp_spec *spec,
			       struct sock_filter **filter, unsigned short *len, int *rules,
			       int *wx_rules, struct ca_diag *d);

#endif
