/* wxprobe: what a program (the GPU worker, the PyTorch runner and the CUDA stack under them) does
 * that the sandbox's W^X layers (src/sandbox/sandbox.h: seccomp_wx, mdwe, noexec, landlock)
 * would refuse, measured without changing what it does. An LD_PRELOAD shared object.
 *
 * Build (no GPU, no -dev package needed: libc only):   make BUILD=build wxprobe
 *   -> build/tests/sandbox/wxprobe.so
 * Run on the GPU host: the wrapper sets LD_PRELOAD, turns the sandbox off (CUDA_AGENT_SANDBOX=0:
 * the sandbox gives the worker an explicit environment, without LD_PRELOAD) and prints the
 * summary (tests/sandbox/wxprobe-summary.py) at the end:
 *   tests/sandbox/wxprobe.sh -o /tmp/wx -- tests/adversarial/run.sh cublas_sgemm ...
 * or by hand:
 *   mkdir -p /tmp/wx; LD_PRELOAD=$PWD/build/tests/sandbox/wxprobe.so WXPROBE_DIR=/tmp/wx \
 *     WXPROBE_ONLY=cuda-agent-worker,cmd:cuda_agent_bridge.candidate CUDA_AGENT_SANDBOX=0 \
 *     <command>
 *   python3 tests/sandbox/wxprobe-summary.py /tmp/wx
 *
 * Environment:
 *   WXPROBE_DIR   directory for the logs, one file per process: wxprobe.<pid>.log (required;
 *                 without it the probe stays inert)
 *   WXPROBE_ONLY  which processes to watch, comma-separated: a prefix of the executable's
 *                 name (the basename of /proc/self/exe), or "cmd:" and a substring of the
 *                 command line; e.g. "cuda-agent-worker,cmd:cuda_agent_bridge.candidate"
 *                 (the GPU worker and the PyTorch runner; wxprobe.sh's default adds
 *                 "cmd:cuda_agent_bridge.runner"); default: every process
 *   WXPROBE_RAW   0: no raw-syscall catcher (below); default 1
 *
 * What it logs (tab-separated key=value lines; "caller" is the object and offset that called,
 * from dladdr(3) of the return address):
 *   start        exe, command line, pid
 *   mmap-exec    mmap with PROT_EXEC: prot, flags, the file (or "anon"), result
 *   mprotect-exec, pkey_mprotect-exec   with PROT_EXEC (W+X, or possibly an exec gain)
 *   mprotect-code-write   PROT_WRITE asked for on a page inside a loaded object's executable
 *                segment (the RX -> RW step of patching code)
 *   mremap-alias (old_size 0 or MREMAP_DONTUNMAP), remap_file_pages, memfd_create,
 *   memfd_secret, shmat (its flags), personality (any but the query)
 *   open-write   every open/openat/creat/fopen for writing, with the path (Landlock allows
 *                writes only under /tmp, /dev/shm, the writable binds, files under /dev)
 *   fork, exec   process creation and exec (the sandbox kills both in the worker)
 *   object       each loaded object once (at start, at each logged event, at exit), with
 *                rwx_segment (a PT_LOAD both writable and executable: MDWE refuses to map
 *                it), execstack (PT_GNU_STACK executable or missing: the loader then makes
 *                thread stacks W+X), textrel (DT_TEXTREL: the loader makes text RW then RX
 *                again)
 *   raw-<name>   one of the system calls above made by a raw `syscall` instruction outside
 *                libc, the loader and this probe (inline assembly), which no LD_PRELOAD
 *                wrapper sees: caught by a seccomp filter returning SECCOMP_RET_TRAP, logged
 *                by the SIGSYS handler, then made for real by the handler (same arguments,
 *                same result). Off with WXPROBE_RAW=0.
 * Calls the loader makes itself (mapping libraries) go through no wrapper: they are what the
 * "object" lines describe (and raw mode sees none: the loader is allowed).
 *
 * Limits. Raw mode installs a seccomp filter (as root no no_new_privs is needed; otherwise the
 * probe sets no_new_privs, which stops set-uid programs from gaining privileges). The filter
 * outlives an execve: a watched process that execs a program dies in the new image of SIGSYS
 * at its first trapped call, like the sandbox, which kills exec in the worker (the exec is
 * logged first); use WXPROBE_RAW=0 for programs that exec. A program that installs its own
 * SIGSYS handler loses the raw catcher (then trapped calls kill it). Calls made inside libc
 * (malloc's own mmap, fopen's open) are not seen (they are libc's, with known flags). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#define LINE_MAX_ 2048
#define MAX_OBJECTS 4096

#define EXPORT __attribute__((visibility("default")))

/* ---- the real functions --------------------------------------------------------------------- */

#define REAL_DECL(ret, name, ...)                 \
	typedef ret (*name##_fn)(__VA_ARGS__);    \
	static name##_fn real_##name;             \
	static name##_fn get_##name(void)         \
	{                                         \
		if (!real_##name)                 \
			real_##name = (name##_fn)dlsym(RTLD_NEXT, #name); \
		return real_##name;               \
	}

REAL_DECL(void *, mmap, void *, size_t, int, int, int, off_t)
REAL_DECL(int, mprotect, void *, size_t, int)
REAL_DECL(int, pkey_mprotect, void *, size_t, int, int)
REAL_DECL(void *, mremap, void *, size_t, size_t, int, ...)
REAL_DECL(int, remap_file_pages, void *, size_t, int, size_t, int)
REAL_DECL(int, memfd_create, const char *, unsigned int)
REAL_DECL(void *, shmat, int, const void *, int)
REAL_DECL(int, personality, unsigned long)
REAL_DECL(long, syscall, long, ...)
REAL_DECL(int, open, const char *, int, ...)
REAL_DECL(int, open64, const char *, int, ...)
REAL_DECL(int, openat, int, const char *, int, ...)
REAL_DECL(int, openat64, int, const char *, int, ...)
REAL_DECL(int, __open_2, const char *, int)
REAL_DECL(int, __open64_2, const char *, int)
REAL_DECL(int, __openat_2, int, const char *, int)
REAL_DECL(int, __openat64_2, int, const char *, int)
REAL_DECL(int, creat, const char *, mode_t)
REAL_DECL(int, creat64, const char *, mode_t)
REAL_DECL(FILE *, fopen, const char *, const char *)
REAL_DECL(FILE *, fopen64, const char *, const char *)
REAL_DECL(FILE *, freopen, const char *, const char *, FILE *)
REAL_DECL(FILE *, freopen64, const char *, const char *, FILE *)
REAL_DECL(pid_t, fork, void)
REAL_DECL(int, execve, const char *, char *const[], char *const[])
REAL_DECL(int, execv, const char *, char *const[])
REAL_DECL(int, execvp, const char *, char *const[])
REAL_DECL(int, execvpe, const char *, char *const[], char *const[])
REAL_DECL(int, posix_spawn, pid_t *, const char *, const posix_spawn_file_actions_t *,
	  const posix_spawnattr_t *, char *const[], char *const[])
REAL_DECL(int, posix_spawnp, pid_t *, const char *, const posix_spawn_file_actions_t *,
	  const posix_spawnattr_t *, char *const[], char *const[])
REAL_DECL(void, _exit, int)

/* ---- state ---------------------------------------------------------------------------------- */

static bool active;         /* this process is watched */
static int log_fd = -1;     /* its log (a high, close-on-exec descriptor) */
static dev_t log_dev;
static ino_t log_ino;
static char log_path[PATH_MAX];
static pthread_mutex_t objects_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t objects_seen[MAX_OBJECTS]; /* load address ^ name hash of objects logged */
static size_t n_objects_seen;
static __thread int busy __attribute__((tls_model("initial-exec"))); /* inside the probe */

/* ---- logging -------------------------------------------------------------------------------- */

/* The log descriptor, reopened if the program closed it (or reused its number). */
static int log_descriptor(void)
{
	struct stat st;
	if (log_fd >= 0 && fstat(log_fd, &st) == 0 && st.st_dev == log_dev && st.st_ino == log_ino)
		return log_fd;
	int fd = (int)get_syscall()(SYS_openat, AT_FDCWD, log_path,
				    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 900);
	if (high >= 0) {
		close(fd);
		fd = high;
	}
	if (fstat(fd, &st) != 0) {
		close(fd);
		return -1;
	}
	log_fd = fd;
	log_dev = st.st_dev;
	log_ino = st.st_ino;
	return fd;
}

/* " caller=<object>+0x<offset>[ sym=<symbol>]" for code address `addr` */
static void describe_addr(char *out, size_t size, const char *key, const void *addr)
{
	Dl_info info;
	if (addr && dladdr(addr, &info) && info.dli_fname) {
		int n = snprintf(out, size, "\t%s=%s+0x%lx", key,
				 info.dli_fname[0] ? info.dli_fname : "(main)",
				 (unsigned long)((uintptr_t)addr - (uintptr_t)info.dli_fbase));
		if (info.dli_sname && n > 0 && (size_t)n < size)
			snprintf(out + n, size - (size_t)n, "\tsym=%s", info.dli_sname);
	} else {
		snprintf(out, size, "\t%s=%p", key, addr);
	}
}

static void scan_objects(void);

/* One line: "pid=..\ttid=..\tev=<event>\t<fields>[\tcaller=..]\n". */
static void logf_(const void *caller, const char *event, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void logf_(const void *caller, const char *event, const char *fmt, ...)
{
	char line[LINE_MAX_];
	va_list ap;
	int e = errno;
	size_t n = (size_t)snprintf(line, sizeof line, "pid=%d\ttid=%ld\tev=%s\t", (int)getpid(),
				    (long)gettid(), event);
	if (n < sizeof line) {
		va_start(ap, fmt);
		int k = vsnprintf(line + n, sizeof line - n, fmt, ap);
		va_end(ap);
		n = k > 0 ? n + (size_t)k : n;
	}
	if (n < sizeof line && caller)
		describe_addr(line + n, sizeof line - n, "caller", caller);
	n = strnlen(line, sizeof line - 2);
	line[n++] = '\n';
	int fd = log_descriptor();
	if (fd >= 0)
		(void)!write(fd, line, n);
	errno = e;
}

/* Whether to log now: watched, and not a call the probe itself makes. */
#define ENTER()                   \
	bool logging_ = active && !busy; \
	if (logging_)             \
		busy++;
#define LEAVE()          \
	if (logging_)    \
		busy--;

static const char *prot_str(char *b, int prot)
{
	b[0] = (prot & PROT_READ) ? 'R' : '-';
	b[1] = (prot & PROT_WRITE) ? 'W' : '-';
	b[2] = (prot & PROT_EXEC) ? 'X' : '-';
	b[3] = '\0';
	return b;
}

static const char *map_flags_str(char *b, size_t size, int flags)
{
	snprintf(b, size, "%s%s%s%s%s", (flags & MAP_SHARED) ? "SHARED" : "PRIVATE",
		 (flags & MAP_ANONYMOUS) ? "|ANON" : "", (flags & MAP_FIXED) ? "|FIXED" : "",
		 (flags & MAP_FIXED_NOREPLACE) ? "|FIXED_NOREPLACE" : "",
		 (flags & MAP_STACK) ? "|STACK" : "");
	return b;
}

/* What descriptor fd is ("anon" for -1) */
static const char *fd_str(char *b, size_t size, int fd)
{
	char link[64];
	if (fd < 0) {
		snprintf(b, size, "anon");
		return b;
	}
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t k = readlink(link, b, size - 1);
	if (k < 0)
		snprintf(b, size, "fd%d", fd);
	else
		b[k] = '\0';
	return b;
}

/* Whether addr lies in an executable segment of a loaded object. */
struct in_code {
	uintptr_t addr;
	bool found;
};
static int in_code_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct in_code *q = data;
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) &&
		    q->addr >= (lo & ~(uintptr_t)4095) && q->addr < lo + ph->p_memsz) {
			q->found = true;
			return 1;
		}
	}
	return 0;
}

static bool in_code(const void *addr)
{
	struct in_code q = {(uintptr_t)addr, false};
	dl_iterate_phdr(in_code_cb, &q);
	return q.found;
}

/* ---- objects -------------------------------------------------------------------------------- */

static int object_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "(main)";
	uintptr_t key = info->dlpi_addr;
	bool rwx = false, execstack = true, textrel = false;
	(void)size;
	(void)data;
	for (const char *c = name; *c; c++)
		key = key * 131 + (unsigned char)*c;
	for (size_t i = 0; i < n_objects_seen; i++)
		if (objects_seen[i] == key)
			return 0;
	if (n_objects_seen < MAX_OBJECTS)
		objects_seen[n_objects_seen++] = key;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) && (ph->p_flags & PF_X))
			rwx = true;
		if (ph->p_type == PT_GNU_STACK)
			execstack = (ph->p_flags & PF_X) != 0;
		if (ph->p_type == PT_DYNAMIC) {
			const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
			for (; dyn->d_tag != DT_NULL; dyn++)
				if (dyn->d_tag == DT_TEXTREL ||
				    (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL)))
					textrel = true;
		}
	}
	if (strncmp(name, "linux-vdso", 10) == 0)
		execstack = false; /* the vDSO has no PT_GNU_STACK */
	logf_(NULL, "object", "path=%s\tbase=0x%lx\trwx_segment=%d\texecstack=%d\ttextrel=%d",
	      name, (unsigned long)info->dlpi_addr, rwx, execstack, textrel);
	return 0;
}

static void scan_objects(void)
{
	pthread_mutex_lock(&objects_lock);
	dl_iterate_phdr(object_cb, NULL);
	pthread_mutex_unlock(&objects_lock);
}

/* ---- wrappers ------------------------------------------------------------------------------- */

static void log_map(const void *caller, const char *ev, void *addr, size_t len, int prot,
		    int flags, int fd, off_t off, void *ret)
{
	char p[4], fl[64], what[PATH_MAX];
	scan_objects();
	logf_(caller, ev, "prot=%s\tflags=%s\tfile=%s\toff=%lld\taddr=%p\tlen=%zu\tret=%s",
	      prot_str(p, prot), map_flags_str(fl, sizeof fl, flags),
	      fd_str(what, sizeof what, fd), (long long)off, addr, len,
	      ret == MAP_FAILED ? strerrorname_np(errno) : "ok");
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	ENTER();
	void *r = get_mmap()(addr, len, prot, flags, fd, off);
	if (logging_ && (prot & PROT_EXEC))
		log_map(__builtin_return_address(0), "mmap-exec", addr, len, prot, flags, fd, off,
			r);
	LEAVE();
	return r;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));

static void log_prot(const void *caller, const char *name, void *addr, size_t len, int prot,
		     int r)
{
	char p[4], ev[64];
	if (!(prot & PROT_EXEC) && !((prot & PROT_WRITE) && in_code(addr)))
		return;
	snprintf(ev, sizeof ev, "%s-%s", name, (prot & PROT_EXEC) ? "exec" : "code-write");
	scan_objects();
	logf_(caller, ev, "prot=%s\taddr=%p\tlen=%zu\tret=%s", prot_str(p, prot), addr, len,
	      r ? strerrorname_np(errno) : "ok");
}

EXPORT int mprotect(void *addr, size_t len, int prot)
{
	ENTER();
	int r = get_mprotect()(addr, len, prot);
	if (logging_)
		log_prot(__builtin_return_address(0), "mprotect", addr, len, prot, r);
	LEAVE();
	return r;
}

EXPORT int pkey_mprotect(void *addr, size_t len, int prot, int pkey)
{
	ENTER();
	int r = get_pkey_mprotect()(addr, len, prot, pkey);
	if (logging_)
		log_prot(__builtin_return_address(0), "pkey_mprotect", addr, len, prot, r);
	LEAVE();
	return r;
}

EXPORT void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
	void *new_addr = NULL;
	if (flags & MREMAP_FIXED) {
		va_list ap;
		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	ENTER();
	void *r = get_mremap()(old, old_size, new_size, flags, new_addr);
	if (logging_ && (old_size == 0 || (flags & MREMAP_DONTUNMAP)))
		logf_(__builtin_return_address(0), "mremap-alias",
		      "old=%p\told_size=%zu\tnew_size=%zu\tflags=0x%x\tret=%s", old, old_size,
		      new_size, (unsigned)flags, r == MAP_FAILED ? strerrorname_np(errno) : "ok");
	LEAVE();
	return r;
}

EXPORT int remap_file_pages(void *addr, size_t size, int prot, size_t pgoff, int flags)
{
	ENTER();
	int r = get_remap_file_pages()(addr, size, prot, pgoff, flags);
	if (logging_)
		logf_(__builtin_return_address(0), "remap_file_pages", "addr=%p\tsize=%zu\tret=%d",
		      addr, size, r);
	LEAVE();
	return r;
}

EXPORT int memfd_create(const char *name, unsigned int flags)
{
	ENTER();
	int r = get_memfd_create()(name, flags);
	if (logging_)
		logf_(__builtin_return_address(0), "memfd_create", "name=%s\tflags=0x%x\tret=%d",
		      name ? name : "(null)", flags, r);
	LEAVE();
	return r;
}

EXPORT void *shmat(int id, const void *addr, int flags)
{
	ENTER();
	void *r = get_shmat()(id, addr, flags);
	if (logging_)
		logf_(__builtin_return_address(0), "shmat", "flags=0x%x\texec=%d\tret=%s",
		      (unsigned)flags, (flags & SHM_EXEC) != 0,
		      r == (void *)-1 ? strerrorname_np(errno) : "ok");
	LEAVE();
	return r;
}

EXPORT int personality(unsigned long persona)
{
	ENTER();
	int r = get_personality()(persona);
	if (logging_ && (unsigned int)persona != 0xffffffffu)
		logf_(__builtin_return_address(0), "personality", "persona=0x%lx\tret=%d",
		      persona, r);
	LEAVE();
	return r;
}

/* Write intent of open flags / an fopen mode */
static bool writes(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0;
}

static void log_open(const void *caller, int dirfd, const char *path, int flags, long r)
{
	char where[PATH_MAX + 8] = "";
	if (path && path[0] != '/' && dirfd != AT_FDCWD) {
		char dir[PATH_MAX];
		fd_str(dir, sizeof dir, dirfd);
		snprintf(where, sizeof where, "\tdir=%s", dir);
	} else if (path && path[0] != '/') {
		char cwd[PATH_MAX];
		if (getcwd(cwd, sizeof cwd))
			snprintf(where, sizeof where, "\tdir=%s", cwd);
	}
	logf_(caller, "open-write", "path=%s%s\tflags=0x%x\tret=%s", path ? path : "(null)", where,
	      (unsigned)flags, r < 0 ? strerrorname_np(errno) : "ok");
}

static mode_t open_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_WRAPPER(name)                                                       \
	EXPORT int name(const char *path, int flags, ...)                        \
	{                                                                        \
		va_list ap;                                                      \
		va_start(ap, flags);                                             \
		mode_t mode = open_mode(flags, ap);                              \
		va_end(ap);                                                      \
		ENTER();                                                         \
		int r = get_##name()(path, flags, mode);                         \
		if (logging_ && writes(flags))                                   \
			log_open(__builtin_return_address(0), AT_FDCWD, path, flags, r); \
		LEAVE();                                                         \
		return r;                                                        \
	}
#define OPENAT_WRAPPER(name)                                                     \
	EXPORT int name(int dirfd, const char *path, int flags, ...)             \
	{                                                                        \
		va_list ap;                                                      \
		va_start(ap, flags);                                             \
		mode_t mode = open_mode(flags, ap);                              \
		va_end(ap);                                                      \
		ENTER();                                                         \
		int r = get_##name()(dirfd, path, flags, mode);                  \
		if (logging_ && writes(flags))                                   \
			log_open(__builtin_return_address(0), dirfd, path, flags, r); \
		LEAVE();                                                         \
		return r;                                                        \
	}
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

#define OPEN2_WRAPPER(name)                                                         \
	EXPORT int name(const char *path, int flags)                                \
	{                                                                           \
		ENTER();                                                            \
		int r = get_##name()(path, flags);                                  \
		if (logging_ && writes(flags))                                      \
			log_open(__builtin_return_address(0), AT_FDCWD, path, flags, r); \
		LEAVE();                                                            \
		return r;                                                           \
	}
#define OPENAT2_WRAPPER(name)                                                      \
	EXPORT int name(int dirfd, const char *path, int flags)                    \
	{                                                                          \
		ENTER();                                                           \
		int r = get_##name()(dirfd, path, flags);                          \
		if (logging_ && writes(flags))                                     \
			log_open(__builtin_return_address(0), dirfd, path, flags, r); \
		LEAVE();                                                           \
		return r;                                                          \
	}
OPEN2_WRAPPER(__open_2)
OPEN2_WRAPPER(__open64_2)
OPENAT2_WRAPPER(__openat_2)
OPENAT2_WRAPPER(__openat64_2)

#define CREAT_WRAPPER(name)                                                        \
	EXPORT int name(const char *path, mode_t mode)                             \
	{                                                                          \
		ENTER();                                                           \
		int r = get_##name()(path, mode);                                  \
		if (logging_)                                                      \
			log_open(__builtin_return_address(0), AT_FDCWD, path,      \
				 O_WRONLY | O_CREAT | O_TRUNC, r);                 \
		LEAVE();                                                           \
		return r;                                                          \
	}
CREAT_WRAPPER(creat)
CREAT_WRAPPER(creat64)

static bool mode_writes(const char *mode)
{
	return mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+'));
}

#define FOPEN_WRAPPER(name)                                                          \
	EXPORT FILE *name(const char *path, const char *mode)                        \
	{                                                                            \
		ENTER();                                                             \
		FILE *r = get_##name()(path, mode);                                  \
		if (logging_ && mode_writes(mode))                                   \
			log_open(__builtin_return_address(0), AT_FDCWD, path, O_WRONLY, \
				 r ? 0 : -1);                                        \
		LEAVE();                                                             \
		return r;                                                            \
	}
FOPEN_WRAPPER(fopen)
FOPEN_WRAPPER(fopen64)

#define FREOPEN_WRAPPER(name)                                                        \
	EXPORT FILE *name(const char *path, const char *mode, FILE *f)               \
	{                                                                            \
		ENTER();                                                             \
		FILE *r = get_##name()(path, mode, f);                               \
		if (logging_ && path && mode_writes(mode))                           \
			log_open(__builtin_return_address(0), AT_FDCWD, path, O_WRONLY, \
				 r ? 0 : -1);                                        \
		LEAVE();                                                             \
		return r;                                                            \
	}
FREOPEN_WRAPPER(freopen)
FREOPEN_WRAPPER(freopen64)

EXPORT long syscall(long nr, ...)
{
	va_list ap;
	long a[6];
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	ENTER();
	long r = get_syscall()(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (logging_) {
		const void *caller = __builtin_return_address(0);
		char name[32];
		snprintf(name, sizeof name, "syscall-%ld", nr);
		switch (nr) {
		case SYS_mmap:
			if (a[2] & PROT_EXEC)
				log_map(caller, "mmap-exec", (void *)a[0], (size_t)a[1], (int)a[2],
					(int)a[3], (int)a[4], (off_t)a[5],
					r == -1 ? MAP_FAILED : (void *)r);
			break;
		case SYS_mprotect:
			log_prot(caller, "mprotect", (void *)a[0], (size_t)a[1], (int)a[2], (int)r);
			break;
		case SYS_pkey_mprotect:
			log_prot(caller, "pkey_mprotect", (void *)a[0], (size_t)a[1], (int)a[2],
				 (int)r);
			break;
		case SYS_memfd_create:
			logf_(caller, "memfd_create", "name=%s\tflags=0x%lx\tret=%ld\tvia=syscall",
			      a[0] ? (const char *)a[0] : "(null)", a[1], r);
			break;
		case SYS_memfd_secret:
			logf_(caller, "memfd_secret", "flags=0x%lx\tret=%ld", a[0], r);
			break;
		case SYS_shmat:
			logf_(caller, "shmat", "flags=0x%lx\texec=%d\tvia=syscall", a[2],
			      (a[2] & SHM_EXEC) != 0);
			break;
		case SYS_mremap:
			if (a[1] == 0 || (a[3] & MREMAP_DONTUNMAP))
				logf_(caller, "mremap-alias",
				      "old_size=%ld\tflags=0x%lx\tvia=syscall", a[1], a[3]);
			break;
		case SYS_remap_file_pages:
			logf_(caller, "remap_file_pages", "via=syscall");
			break;
		case SYS_personality:
			if ((unsigned int)a[0] != 0xffffffffu)
				logf_(caller, "personality", "persona=0x%lx\tvia=syscall", a[0]);
			break;
		case SYS_open:
		case SYS_creat:
			if (nr == SYS_creat || writes((int)a[1]))
				log_open(caller, AT_FDCWD, (const char *)a[0],
					 nr == SYS_creat ? O_WRONLY | O_CREAT : (int)a[1], r);
			break;
		case SYS_openat:
			if (writes((int)a[2]))
				log_open(caller, (int)a[0], (const char *)a[1], (int)a[2], r);
			break;
		case SYS_execve:
		case SYS_execveat:
		case SYS_fork:
		case SYS_vfork:
			logf_(caller, nr == SYS_fork || nr == SYS_vfork ? "fork" : "exec", "via=%s",
			      name);
			break;
		case SYS_clone:
			if (!(a[0] & CLONE_THREAD))
				logf_(caller, "fork", "via=%s\tflags=0x%lx", name, a[0]);
			break;
		default:
			break;
		}
	}
	LEAVE();
	return r;
}

EXPORT pid_t fork(void)
{
	ENTER();
	if (logging_)
		logf_(__builtin_return_address(0), "fork", "via=fork");
	LEAVE();
	return get_fork()();
}

static void log_exec(const void *caller, const char *how, const char *path)
{
	logf_(caller, "exec", "via=%s\tpath=%s", how, path ? path : "(null)");
}

#define EXEC_WRAPPER(name, ...)                                         \
	{                                                               \
		ENTER();                                                \
		if (logging_)                                           \
			log_exec(__builtin_return_address(0), #name, path); \
		LEAVE();                                                \
		return get_##name()(__VA_ARGS__);                       \
	}
EXPORT int execve(const char *path, char *const argv[], char *const envp[])
	EXEC_WRAPPER(execve, path, argv, envp)
EXPORT int execv(const char *path, char *const argv[]) EXEC_WRAPPER(execv, path, argv)
EXPORT int execvp(const char *path, char *const argv[]) EXEC_WRAPPER(execvp, path, argv)
EXPORT int execvpe(const char *path, char *const argv[], char *const envp[])
	EXEC_WRAPPER(execvpe, path, argv, envp)
EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *at, char *const argv[], char *const envp[])
	EXEC_WRAPPER(posix_spawn, pid, path, fa, at, argv, envp)
EXPORT int posix_spawnp(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *at, char *const argv[], char *const envp[])
	EXEC_WRAPPER(posix_spawnp, pid, path, fa, at, argv, envp)

EXPORT void _exit(int status)
{
	if (active)
		scan_objects();
	get__exit()(status);
	__builtin_unreachable();
}

/* ---- raw system calls (seccomp SECCOMP_RET_TRAP) -------------------------------------------- */

/* The calls the raw catcher traps (those the wrappers above watch, and exec/fork). */
static const struct {
	long nr;
	const char *name;
} raw_calls[] = {
	{SYS_mmap, "mmap"},
	{SYS_mprotect, "mprotect"},
	{SYS_pkey_mprotect, "pkey_mprotect"},
	{SYS_mremap, "mremap"},
	{SYS_remap_file_pages, "remap_file_pages"},
	{SYS_memfd_create, "memfd_create"},
	{SYS_memfd_secret, "memfd_secret"},
	{SYS_shmat, "shmat"},
	{SYS_personality, "personality"},
	{SYS_open, "open"},
	{SYS_openat, "openat"},
	{SYS_openat2, "openat2"},
	{SYS_creat, "creat"},
	{SYS_execve, "execve"},
	{SYS_execveat, "execveat"},
	{SYS_fork, "fork"},
	{SYS_vfork, "vfork"},
};
#define N_RAW (sizeof raw_calls / sizeof raw_calls[0])

static void on_sigsys(int sig, siginfo_t *si, void *context)
{
	ucontext_t *uc = context;
	greg_t *g = uc->uc_mcontext.gregs;
	long nr = si->si_syscall;
	long a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
	const char *name = "?";
	char ev[48], p[4];
	(void)sig;
	busy++;
	for (size_t i = 0; i < N_RAW; i++)
		if (raw_calls[i].nr == nr)
			name = raw_calls[i].name;
	snprintf(ev, sizeof ev, "raw-%s", name);
	logf_(si->si_call_addr, ev, "a0=0x%lx\ta1=0x%lx\ta2=0x%lx\ta3=0x%lx\tprot=%s", a[0], a[1],
	      a[2], a[3],
	      nr == SYS_mmap || nr == SYS_mprotect || nr == SYS_pkey_mprotect
		      ? prot_str(p, (int)a[2])
		      : "-");
	/* made for real from libc's syscall(), which the filter lets through */
	long r = get_syscall()(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	g[REG_RAX] = r == -1 ? -errno : r;
	busy--;
}

struct text_range {
	uintptr_t lo, last; /* [lo, last] */
	bool found;
	const char *want; /* a substring of the object's name; NULL: the object holding `addr` */
	uintptr_t addr;
};

static int range_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct text_range *r = data;
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, last = lo + ph->p_memsz - 1;
		bool match = r->want ? (info->dlpi_name && strstr(info->dlpi_name, r->want))
				     : (r->addr >= lo && r->addr <= last);
		if (match) {
			r->lo = lo;
			r->last = last;
			r->found = true;
			return 1;
		}
	}
	return 0;
}

/* The most windows install_raw_filter takes: three text ranges, each split in two at most. */
#define RAW_WINDOWS_MAX 6

/* BPF: trap the calls of raw_calls unless made from one of the ranges (libc, the loader, this
 * probe). Each range must lie within one 4 GiB window (its upper 32 bits fixed): split_windows
 * cuts one that crosses a boundary in two. */
static int install_raw_filter(const struct text_range *ranges, size_t n)
{
	struct sock_filter f[4 + N_RAW + 5 * RAW_WINDOWS_MAX + 2];
	size_t k = 0;
	const unsigned off_nr = offsetof(struct seccomp_data, nr);
	const unsigned off_arch = offsetof(struct seccomp_data, arch);
	const unsigned off_ip = offsetof(struct seccomp_data, instruction_pointer);
	if (n > RAW_WINDOWS_MAX)
		return -1;
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off_arch);
	/* not x86-64 (x32 / i386 entry): allow; the index of ALLOW is patched below */
	size_t arch_jump = k;
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off_nr);
	size_t nr_first = k;
	for (size_t i = 0; i < N_RAW; i++)
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      (unsigned)raw_calls[i].nr, 0, 0);
	size_t not_watched = k;
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	size_t check_ip = k;
	size_t allow_jumps[RAW_WINDOWS_MAX], n_allow = 0;
	for (size_t i = 0; i < n; i++) {
		/* 5 instructions per range; a mismatch goes to the next range (+5 - position) */
		f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off_ip + 4);
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      (uint32_t)(ranges[i].lo >> 32), 0, 3);
		f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off_ip);
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K,
						      (uint32_t)ranges[i].lo, 0, 1);
		allow_jumps[n_allow++] = k;
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K,
						      (uint32_t)ranges[i].last, 0, 0);
	}
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	size_t allow = k;
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	/* patch the jumps: the arch check's false branch, each watched number's true branch */
	f[arch_jump].jf = (uint8_t)(allow - arch_jump - 1);
	for (size_t i = nr_first; i < not_watched; i++)
		f[i].jt = (uint8_t)(check_ip - i - 1);
	for (size_t i = 0; i < n_allow; i++) {
		/* jgt last: true (above the range) -> next range; false (inside) -> allow */
		size_t j = allow_jumps[i];
		f[j].jt = 0;
		f[j].jf = (uint8_t)(allow - j - 1);
	}
	struct sock_fprog prog = {.len = (unsigned short)k, .filter = f};
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

/* The ranges as windows of one 4 GiB each: a range that crosses a boundary (libc's text, where
 * ASLR happens to place it so) becomes its part below the boundary and its part above. A text
 * segment is far smaller than 4 GiB, so it crosses one boundary at most. Returns how many. */
static size_t split_windows(const struct text_range *r, size_t n, struct text_range *w)
{
	size_t nw = 0;
	for (size_t i = 0; i < n; i++) {
		w[nw] = r[i];
		if ((r[i].lo >> 32) != (r[i].last >> 32)) {
			w[nw].last = r[i].lo | (uintptr_t)0xffffffffu;
			w[++nw] = r[i];
			w[nw].lo = r[i].last & ~(uintptr_t)0xffffffffu;
		}
		nw++;
	}
	return nw;
}

static void start_raw(void)
{
	struct text_range r[3] = {{.want = "libc.so"}, {.want = "ld-linux"}, {.want = NULL}};
	struct text_range w[RAW_WINDOWS_MAX];
	size_t nw;
	r[2].addr = (uintptr_t)(void *)start_raw;
	for (size_t i = 0; i < 3; i++) {
		dl_iterate_phdr(range_cb, &r[i]);
		if (!r[i].found || r[i].last - r[i].lo >= ((uintptr_t)1 << 32)) {
			logf_(NULL, "note", "raw=off\twhy=the text of %s %s",
			      r[i].want ? r[i].want : "the probe",
			      r[i].found ? "spans 4 GiB or more" : "was not found");
			return;
		}
	}
	nw = split_windows(r, 3, w);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) != 0) {
		logf_(NULL, "note", "raw=off\twhy=sigaction: %s", strerror(errno));
		return;
	}
	const char *nnp = "";
	if (install_raw_filter(w, nw) != 0) {
		if (errno == EACCES && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
		    install_raw_filter(w, nw) == 0) {
			nnp = "\tno_new_privs=set";
		} else {
			logf_(NULL, "note", "raw=off\twhy=seccomp: %s", strerror(errno));
			return;
		}
	}
	logf_(NULL, "note", "raw=on%s", nnp);
}

/* ---- start and end -------------------------------------------------------------------------- */

/* WXPROBE_ONLY: exe-name prefixes and "cmd:" command-line substrings */
static bool watched(const char *exe, const char *cmd)
{
	const char *only = getenv("WXPROBE_ONLY"), *base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	if (!only || !only[0])
		return true;
	for (const char *s = only; *s;) {
		size_t n = strcspn(s, ",");
		char item[256];
		if (n > 0 && n < sizeof item) {
			memcpy(item, s, n);
			item[n] = '\0';
			if (strncmp(item, "cmd:", 4) == 0 ? strstr(cmd, item + 4) != NULL
							  : strncmp(base, item, n) == 0)
				return true;
		}
		s += n + (s[n] == ',');
	}
	return false;
}

__attribute__((constructor(101))) static void wxprobe_start(void)
{
	const char *dir = getenv("WXPROBE_DIR"), *raw = getenv("WXPROBE_RAW");
	char exe[PATH_MAX] = "", cmd[1024] = "";
	ssize_t n;
	/* resolve every real function now, before any thread or signal can need one */
	get_mmap(), get_mprotect(), get_pkey_mprotect(), get_mremap(), get_syscall();
	get_open(), get_openat(), get_fopen(), get__exit();
	if (!dir || !dir[0])
		return;
	if ((n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0)
		exe[n] = '\0';
	int fd = (int)get_syscall()(SYS_open, "/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, cmd, sizeof cmd - 1);
		close(fd);
		for (ssize_t i = 0; i < n; i++)
			if (cmd[i] == '\0' || cmd[i] == '\t' || cmd[i] == '\n')
				cmd[i] = ' ';
		cmd[n > 0 ? n : 0] = '\0';
	}
	if (!watched(exe, cmd))
		return;
	snprintf(log_path, sizeof log_path, "%s/wxprobe.%d.log", dir, (int)getpid());
	active = true;
	busy++;
	logf_(NULL, "start", "exe=%s\tcmd=%s\tuid=%d", exe, cmd, (int)getuid());
	scan_objects();
	if (!raw || strcmp(raw, "0") != 0)
		start_raw();
	busy--;
}

__attribute__((destructor)) static void wxprobe_end(void)
{
	if (!active)
		return;
	busy++;
	scan_objects();
	logf_(NULL, "end", "objects=%zu", n_objects_seen);
	busy--;
}
