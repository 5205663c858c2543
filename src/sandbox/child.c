/* child: the sandbox's child between clone and execve (sandbox_int.h): no allocation, no stdio
 * buffers. It applies the plan (filesystem, capabilities, rlimits, W^X, seccomp), sends its
 * one record and execs. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "sandbox/wx.h"
#include "util/str.h"

/* The child was made by a raw clone() of a possibly multi-threaded supervisor: it avoids libc
 * paths that assume the parent's threads exist or take locks another thread may have held
 * (setuid() and friends broadcast to every thread, strerror() may translate). */
static const char *cerr(int e)
{
	const char *s = strerrordesc_np(e);
	return s ? s : "unknown error";
}

static void child_send(struct plan *p)
{
	(void)send(p->sock, &p->msg, sizeof p->msg, MSG_NOSIGNAL);
}

static _Noreturn void child_fail(struct plan *p, int stage, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static _Noreturn void child_fail(struct plan *p, int stage, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(p->msg.text, sizeof p->msg.text, "sandbox: cannot ");
	va_start(ap, fmt);
	vsnprintf(p->msg.text + n, sizeof p->msg.text - (size_t)n, fmt, ap);
	va_end(ap);
	p->msg.kind = MSG_ERROR;
	p->msg.stage = stage;
	child_send(p);
	_exit(127);
}

static void child_layer(struct plan *p, enum sandbox_layer l, bool on, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void child_layer(struct plan *p, enum sandbox_layer l, bool on, const char *fmt, ...)
{
	va_list ap;
	p->msg.decided[l] = true;
	p->msg.layer[l].on = on;
	va_start(ap, fmt);
	vsnprintf(p->msg.layer[l].detail, sizeof p->msg.layer[l].detail, fmt, ap);
	va_end(ap);
}

/* mkdir -p of path's components (all of them when `last`, else all but the last). */
static int mkdirs_in(const char *path, bool last)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof buf)
		return -(errno = ENAMETOOLONG);
	memcpy(buf, path, n + 1);
	if (!last) {
		char *slash = strrchr(buf, '/');
		if (!slash)
			return 0;
		*slash = '\0';
	}
	for (char *s = buf + 1;; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;
			*s = '\0';
			if (buf[0] && mkdir(buf, 0755) != 0 && errno != EEXIST)
				return -1;
			*s = c;
			if (!c)
				break;
		}
	}
	return 0;
}

static int set_mount_attrs(const char *path, unsigned attrs)
{
#ifdef SYS_mount_setattr
	struct ca_mount_attr a = {.attr_set = attrs};
	if (syscall(SYS_mount_setattr, AT_FDCWD, path, CA_AT_RECURSIVE, &a, sizeof a) == 0)
		return 0;
	if (errno != ENOSYS)
		return -1;
#endif
	/* Before Linux 5.12: the top mount only, keeping the flags it has (some may be locked). */
	struct statvfs sv;
	unsigned long flags = MS_REMOUNT | MS_BIND;
	if (statvfs(path, &sv) == 0)
		flags |= sv.f_flag & (ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_NOATIME |
				      ST_NODIRATIME | ST_RELATIME);
	if (attrs & CA_MOUNT_ATTR_RDONLY)
		flags |= MS_RDONLY;
	if (attrs & CA_MOUNT_ATTR_NOSUID)
		flags |= MS_NOSUID;
	if (attrs & CA_MOUNT_ATTR_NODEV)
		flags |= MS_NODEV;
	if (attrs & CA_MOUNT_ATTR_NOEXEC)
		flags |= MS_NOEXEC;
	return mount(NULL, path, NULL, flags, NULL);
}

static void child_bind(struct plan *p, struct mnt *m)
{
	char src[64];
	struct stat st;
	unsigned attrs;
	if (m->fd < 0)
		return; /* optional and missing */
	if (fstat(m->fd, &st) != 0)
		child_fail(p, STAGE_SETUP, "stat bind source %s: %s", m->src, cerr(errno));
	if (mkdirs_in(m->dst, false) != 0)
		child_fail(p, STAGE_SETUP, "create the parents of %s: %s", m->dst, cerr(errno));
	struct stat dst_st;
	if (lstat(m->dst, &dst_st) != 0) {
		if (S_ISDIR(st.st_mode)) {
			if (mkdir(m->dst, 0755) != 0)
				child_fail(p, STAGE_SETUP, "create the mount point %s: %s", m->dst,
					   cerr(errno));
		} else {
			int fd = open(m->dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
			if (fd < 0)
				child_fail(p, STAGE_SETUP, "create the mount point %s: %s", m->dst,
					   cerr(errno));
			close(fd);
		}
	}
	snprintf(src, sizeof src, OLD_ROOT "/proc/self/fd/%d", m->fd);
	if (mount(src, m->dst, NULL, MS_BIND | MS_REC, NULL) != 0)
		child_fail(p, STAGE_SETUP, "bind %s to %s: %s", m->src, m->dst, cerr(errno));
	if (m->device)
		attrs = CA_MOUNT_ATTR_RDONLY | CA_MOUNT_ATTR_NOSUID | CA_MOUNT_ATTR_NOEXEC;
	else if (m->writable)
		attrs = CA_MOUNT_ATTR_NOSUID | CA_MOUNT_ATTR_NODEV |
			(p->noexec ? CA_MOUNT_ATTR_NOEXEC : 0u);
	else
		attrs = CA_MOUNT_ATTR_RDONLY | CA_MOUNT_ATTR_NOSUID | CA_MOUNT_ATTR_NODEV;
	if (set_mount_attrs(m->dst, attrs) != 0)
		child_fail(p, STAGE_SETUP, "make %s %s: %s", m->dst,
			   m->writable ? (p->noexec ? "nosuid and noexec" : "nosuid") : "read-only",
			   cerr(errno));
	close(m->fd);
	m->fd = -1;
}

/* Opens every bind source while the child still has the caller's credentials (the program's
 * uid may not be able to walk to them, e.g. through root's 0700 home). */
static void child_open_sources(struct plan *p)
{
	for (size_t i = 0; i < p->n_mnts; i++) {
		struct mnt *m = &p->mnts[i];
		if (m->kind != MK_BIND)
			continue;
		m->fd = open(m->src, O_PATH | O_CLOEXEC);
		if (m->fd < 0 && !(errno == ENOENT && m->optional))
			child_fail(p, STAGE_SETUP, "open bind source %s: %s", m->src, cerr(errno));
	}
}

/* Builds the new root (pivot_root into a tmpfs) following the plan. */
static void child_filesystem(struct plan *p)
{
	char sys_how[64] = "fresh";
	size_t binds = 0, noexec_binds = 0;
	const unsigned long tmpfs_flags = MS_NOSUID | MS_NODEV | (p->noexec ? MS_NOEXEC : 0ul);

	if (mount("tmpfs", STAGE_DIR, "tmpfs", MS_NOSUID | MS_NODEV, p->root_opts) != 0)
		child_fail(p, STAGE_SETUP, "mount a tmpfs for the new root on " STAGE_DIR ": %s",
			   cerr(errno));
	if (mkdir(STAGE_DIR OLD_ROOT, 0700) != 0)
		child_fail(p, STAGE_SETUP, "create " OLD_ROOT ": %s", cerr(errno));
	if (syscall(SYS_pivot_root, STAGE_DIR, STAGE_DIR OLD_ROOT) != 0)
		child_fail(p, STAGE_SETUP, "pivot_root: %s", cerr(errno));
	if (chdir("/") != 0)
		child_fail(p, STAGE_SETUP, "enter the new root: %s", cerr(errno));

	for (size_t i = 0; i < p->n_mnts; i++) {
		struct mnt *m = &p->mnts[i];
		switch (m->kind) {
		case MK_DIR:
			if (mkdirs_in(m->dst, true) != 0)
				child_fail(p, STAGE_SETUP, "create %s: %s", m->dst, cerr(errno));
			break;
		case MK_BIND:
			if (m->fd >= 0)
				binds++;
			if (m->fd >= 0 && m->writable && p->noexec && m->check)
				noexec_binds++; /* the caller's (scratch directories included) */
			child_bind(p, m);
			break;
		case MK_SYMLINK:
			if (mkdirs_in(m->dst, false) != 0 || symlink(m->src, m->dst) != 0)
				child_fail(p, STAGE_SETUP, "create the symlink %s: %s", m->dst,
					   cerr(errno));
			break;
		case MK_TMPFS:
			if (mkdirs_in(m->dst, true) != 0)
				child_fail(p, STAGE_SETUP, "create %s: %s", m->dst, cerr(errno));
			if (mount("tmpfs", m->dst, "tmpfs", tmpfs_flags, m->src) != 0)
				child_fail(p, STAGE_SETUP, "mount a tmpfs on %s: %s", m->dst,
					   cerr(errno));
			break;
		case MK_PROC:
			if (mkdirs_in(m->dst, true) != 0)
				child_fail(p, STAGE_SETUP, "create %s: %s", m->dst, cerr(errno));
			if (mount("proc", m->dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) !=
			    0)
				child_fail(p, STAGE_SETUP, "mount /proc for the PID namespace: %s",
					   cerr(errno));
			break;
		case MK_SYSFS:
			if (mkdirs_in(m->dst, true) != 0)
				child_fail(p, STAGE_SETUP, "create %s: %s", m->dst, cerr(errno));
			/* A fresh sysfs shows the network namespace's devices only; else the
			 * host's, read-only; else nothing. */
			if (mount("sysfs", m->dst, "sysfs",
				  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0)
				break;
			snprintf(sys_how, sizeof sys_how, "host's, read-only (fresh: %s)",
				 cerr(errno));
			if (mount(OLD_ROOT "/sys", m->dst, NULL, MS_BIND | MS_REC, NULL) == 0 &&
			    set_mount_attrs(m->dst, CA_MOUNT_ATTR_RDONLY | CA_MOUNT_ATTR_NOSUID |
							    CA_MOUNT_ATTR_NODEV |
							    CA_MOUNT_ATTR_NOEXEC) == 0)
				break;
			snprintf(sys_how, sizeof sys_how, "absent (%s)", cerr(errno));
			(void)umount2(m->dst, MNT_DETACH);
			break;
		}
	}
	if (umount2(OLD_ROOT, MNT_DETACH) != 0)
		child_fail(p, STAGE_SETUP, "detach the old root: %s", cerr(errno));
	if (rmdir(OLD_ROOT) != 0)
		child_fail(p, STAGE_SETUP, "remove " OLD_ROOT ": %s", cerr(errno));
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) !=
	    0)
		child_fail(p, STAGE_SETUP, "make the new root read-only: %s", cerr(errno));
	char tmp[32];
	sandbox_fmt_bytes(tmp, sizeof tmp, p->tmp_bytes);
	child_layer(p, SANDBOX_FILESYSTEM, true,
		    "fresh read-only root, %zu binds, /proc fresh, /sys %s, /tmp %s%s%s", binds,
		    sys_how, p->tmp_dir ? "scratch dir" : "tmpfs of ", p->tmp_dir ? "" : tmp,
		    p->shm_dir ? ", /dev/shm scratch dir" : "");
	if (p->noexec) {
		/* writable binds other than the scratch directories at /tmp and /dev/shm */
		size_t others = noexec_binds - (p->tmp_dir ? 1 : 0) - (p->shm_dir ? 1 : 0);
		child_layer(p, SANDBOX_NOEXEC, true,
			    "noexec on /tmp, /dev/shm and %zu writable bind%s: no file written "
			    "there can be mapped executable or run",
			    others, others == 1 ? "" : "s");
	}
}

static void child_caps(struct plan *p)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[2];
	bool bset = true;

	for (unsigned long c = 0; c < 64; c++) {
		if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) < 0)
			break; /* past the last capability */
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0)
			bset = false;
	}
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	/* uid 0 inside (never chosen, but belt and braces) gains nothing at exec. */
	(void)prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0, 0);
	memset(data, 0, sizeof data);
	if (syscall(SYS_capset, &hdr, data) != 0) {
		child_layer(p, SANDBOX_CAPS, false, "capset: %s", cerr(errno));
		return;
	}
	memset(data, 0xff, sizeof data);
	if (syscall(SYS_capget, &hdr, data) != 0 || data[0].permitted || data[1].permitted ||
	    data[0].effective || data[1].effective || data[0].inheritable || data[1].inheritable) {
		child_layer(p, SANDBOX_CAPS, false, "capabilities still held after capset");
		return;
	}
	child_layer(p, SANDBOX_CAPS, true, "none held%s",
		    bset ? "; bounding set emptied" : "; bounding set kept (no CAP_SETPCAP)");
}

static void child_rlimits(struct plan *p)
{
	static const struct {
		int res;
		const char *name;
	} names[] = {{RLIMIT_CPU, "cpu"},
		     {RLIMIT_FSIZE, "fsize"},
		     {RLIMIT_NOFILE, "nofile"},
		     {RLIMIT_NPROC, "nproc"},
		     {RLIMIT_CORE, "core"},
		     {RLIMIT_AS, "as"}};
	uint64_t want[] = {p->rl_cpu, p->rl_fsize, p->rl_nofile, p->rl_nproc, 0, p->rl_as};
	char detail[SANDBOX_DETAIL_MAX] = "";
	size_t off = 0;
	bool ok = true;

	if (!p->rlimits) {
		child_layer(p, SANDBOX_RLIMITS, false, "disabled by the caller");
		return;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct rlimit rl;
		if (want[i] == SANDBOX_UNLIMITED)
			continue;
		rl.rlim_cur = rl.rlim_max = (rlim_t)want[i];
		if (syscall(SYS_prlimit64, 0, names[i].res, &rl, NULL) != 0) {
			struct rlimit cur;
			/* Above the inherited hard limit: keep the hard limit. */
			if (syscall(SYS_prlimit64, 0, names[i].res, NULL, &cur) == 0 &&
			    cur.rlim_max < rl.rlim_max) {
				rl.rlim_cur = rl.rlim_max = cur.rlim_max;
				if (syscall(SYS_prlimit64, 0, names[i].res, &rl, NULL) == 0)
					want[i] = (uint64_t)cur.rlim_max;
				else
					ok = false;
			} else {
				ok = false;
			}
			if (!ok) {
				child_layer(p, SANDBOX_RLIMITS, false, "setrlimit(%s): %s",
					    names[i].name, cerr(errno));
				return;
			}
		}
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char v[32];
		if (want[i] == SANDBOX_UNLIMITED)
			continue;
		if (names[i].res == RLIMIT_FSIZE || names[i].res == RLIMIT_AS)
			sandbox_fmt_bytes(v, sizeof v, want[i]);
		else
			snprintf(v, sizeof v, "%llu%s", (unsigned long long)want[i],
				 names[i].res == RLIMIT_CPU ? " s" : "");
		ca_appendf(detail, sizeof detail, &off, "%s%s %s", off ? ", " : "", names[i].name,
			   v);
	}
	child_layer(p, SANDBOX_RLIMITS, true, "%s", detail);
}

/* The caller's binds must be usable by the program's uid: say so now rather than let the
 * program fail on a permission error later. GPU device nodes it cannot open are noted in the
 * filesystem layer's detail. Runs after the capabilities are gone. */
static void child_check_binds(struct plan *p)
{
	struct sandbox_layer_state *fs = &p->msg.layer[SANDBOX_FILESYSTEM];
	size_t off = strlen(fs->detail);
	for (size_t i = 0; i < p->n_mnts; i++) {
		const struct mnt *m = &p->mnts[i];
		struct stat st;
		if (m->kind != MK_BIND || stat(m->dst, &st) != 0)
			continue;
		if (m->device && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
			if (access(m->dst, R_OK | W_OK) != 0)
				ca_appendf(fs->detail, sizeof fs->detail, &off,
					   "; %s not usable by uid %u", m->dst, p->uid);
			continue;
		}
		if (!m->check)
			continue;
		int mode = R_OK | (S_ISDIR(st.st_mode) ? X_OK : 0) | (m->writable ? W_OK : 0);
		if (access(m->dst, mode) != 0)
			child_fail(p, STAGE_SETUP,
				   "use the bind %s as uid %u: %s (make it %s by that uid)", m->dst,
				   p->uid, cerr(errno), m->writable ? "writable" : "readable");
	}
}

/* Landlock (after the mounts and no_new_privs: it needs the final paths) and MDWE (inherited by
 * the exec'ed program); picks the seccomp filter that matches: without MDWE, the one that also
 * kills mprotect(PROT_EXEC). */
static void child_wx(struct plan *p)
{
	char detail[SANDBOX_DETAIL_MAX];
	int rc;
	if (p->landlock) {
		const struct sandbox_landlock_path *ll = p->mount_ns ? p->ll_inside : p->ll_host;
		rc = sandbox_landlock_apply(ll, p->n_ll, detail, sizeof detail);
		child_layer(p, SANDBOX_LANDLOCK, rc == 0, "%s", detail);
	}
	if (p->mdwe) {
		rc = sandbox_mdwe_apply(detail, sizeof detail);
		child_layer(p, SANDBOX_MDWE, rc == 0, "%s", detail);
		if (rc != 0 && p->filter_alt)
			p->msg.seccomp_alt = true;
	}
}

/* opts->require: a required layer that is off stops the program before it runs. Namespaces
 * are this attempt's clone flags; the other layers the child decided itself. */
static void child_require(struct plan *p)
{
	static const struct {
		enum sandbox_layer l;
		unsigned long flag;
	} ns[] = {{SANDBOX_MOUNT_NS, CLONE_NEWNS}, {SANDBOX_PID_NS, CLONE_NEWPID},
		  {SANDBOX_NET_NS, CLONE_NEWNET},  {SANDBOX_IPC_NS, CLONE_NEWIPC},
		  {SANDBOX_UTS_NS, CLONE_NEWUTS}};
	for (int l = 0; l < SANDBOX_N_LAYERS; l++) {
		if (!(p->require & SANDBOX_BIT(l)) || l == SANDBOX_USER_NS || l == SANDBOX_CGROUP)
			continue; /* decided by the parent; see sandbox_spawn */
		bool on = p->msg.decided[l] && p->msg.layer[l].on;
		for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
			if ((int)ns[i].l == l)
				on = (p->ns & ns[i].flag) != 0;
		if (!on)
			child_fail(p, STAGE_REQUIRE, "run without the %s layer, which is required%s%s",
				   sandbox_layer_name((enum sandbox_layer)l),
				   p->msg.decided[l] ? ": " : "",
				   p->msg.decided[l] ? p->msg.layer[l].detail : "");
	}
}

_Noreturn void sandbox_child_main(struct plan *p)
{
	char go;
	/* Above the numbers the passed descriptors will take (3, 4, ...) */
	const int high = 3 + SANDBOX_MAX_PASS_FDS;
	int in = fcntl(p->in_fd, F_DUPFD_CLOEXEC, high);
	int out = fcntl(p->out_fd, F_DUPFD_CLOEXEC, high);
	int err = p->err_fd >= 0 ? fcntl(p->err_fd, F_DUPFD_CLOEXEC, high) : -1;
	int sock = fcntl(p->sock, F_DUPFD_CLOEXEC, high);
	int passed[SANDBOX_MAX_PASS_FDS];

	p->sock = sock;
	if (in < 0 || out < 0 || sock < 0 || (p->err_fd >= 0 && err < 0) || dup2(in, 0) != 0 ||
	    dup2(out, 1) != 1 || (err >= 0 && dup2(err, 2) != 2))
		child_fail(p, STAGE_SETUP, "set up stdin/stdout/stderr: %s", cerr(errno));
	for (size_t i = 0; i < p->n_pass_fds; i++)
		if ((passed[i] = fcntl(p->pass_fds[i], F_DUPFD_CLOEXEC, high)) < 0)
			child_fail(p, STAGE_SETUP, "take passed descriptor %d: %s",
				   p->pass_fds[i], cerr(errno));
	/* Nothing else of the supervisor's may reach the program (a directory descriptor would
	 * walk around the new root). */
	if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
		struct rlimit rl;
		unsigned long top = syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl) == 0
					    ? (unsigned long)rl.rlim_cur
					    : 4096;
		if (top > 65536)
			top = 65536;
		for (int fd = 3; fd < (int)top; fd++)
			(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	/* The passed descriptors, at 3, 4, ...: dup2 leaves them open across execve */
	for (size_t i = 0; i < p->n_pass_fds; i++)
		if (dup2(passed[i], 3 + (int)i) != 3 + (int)i)
			child_fail(p, STAGE_SETUP, "place passed descriptor %zu: %s", i, cerr(errno));
	(void)setpgid(0, 0);
	if (read(p->sock, &go, 1) != 1)
		_exit(127); /* the supervisor gave up on us */

	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, SIG_DFL);

	if (p->cgroup_ns) {
		if (unshare(CLONE_NEWCGROUP) == 0)
			child_layer(p, SANDBOX_CGROUP_NS, true,
				    "the program sees its own cgroup as the root");
		else
			child_layer(p, SANDBOX_CGROUP_NS, false, "unshare(CLONE_NEWCGROUP): %s",
				    cerr(errno));
	}
	if (p->uts)
		(void)sethostname("sandbox", 7);
	if (p->mount_ns) {
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
			child_fail(p, STAGE_SETUP, "make the mounts private: %s", cerr(errno));
		child_open_sources(p);
	}
	if (p->set_ids) {
		/* Become the program's uid now, keeping the capabilities for the setup: files and
		 * mount points made from here on belong to an id mapped in the user namespace. */
		if (prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS | SECBIT_NO_SETUID_FIXUP, 0, 0, 0) !=
		    0)
			child_fail(p, STAGE_SETUP, "keep capabilities across the uid change: %s",
				   cerr(errno));
		if (p->can_setgroups && syscall(SYS_setgroups, 0, NULL) != 0)
			child_fail(p, STAGE_SETUP, "drop supplementary groups: %s", cerr(errno));
		if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) != 0)
			child_fail(p, STAGE_SETUP, "set gid %u: %s", p->gid, cerr(errno));
		if (syscall(SYS_setresuid, p->uid, p->uid, p->uid) != 0)
			child_fail(p, STAGE_SETUP, "set uid %u: %s", p->uid, cerr(errno));
	}
	/* After the uid change (a change of credentials clears it) */
	if (p->kill_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
		child_fail(p, STAGE_SETUP, "die with the caller (PR_SET_PDEATHSIG): %s", cerr(errno));
	if (p->mount_ns)
		child_filesystem(p);
	else
		child_layer(p, SANDBOX_FILESYSTEM, false,
			    "needs a mount namespace: the program sees the host's files");
	if (!p->mount_ns && p->noexec)
		child_layer(p, SANDBOX_NOEXEC, false,
			    "needs the filesystem layer: the program writes to the host's mounts");
	if (chdir(p->cwd) != 0)
		child_fail(p, STAGE_SETUP, "enter the working directory %s: %s", p->cwd,
			   cerr(errno));
	child_caps(p);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
		child_layer(p, SANDBOX_NO_NEW_PRIVS, true, "execve cannot grant privileges");
	else
		child_layer(p, SANDBOX_NO_NEW_PRIVS, false, "prctl: %s", cerr(errno));
	child_rlimits(p);
	if (p->mount_ns)
		child_check_binds(p);
	child_wx(p);
	child_require(p);
	/* Last: the filter. Only send() and execve() follow, both allowed. */
	if (p->seccomp) {
		struct sock_fprog prog = {.len = p->filter_len, .filter = p->filter};
		if (p->msg.seccomp_alt) {
			prog.len = p->filter_alt_len;
			prog.filter = p->filter_alt;
		}
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0)
			child_layer(p, SANDBOX_SECCOMP, true, "on");
		else
			child_layer(p, SANDBOX_SECCOMP, false, "cannot install the filter: %s",
				    cerr(errno));
	}
	p->msg.kind = MSG_REPORT;
	child_send(p);
	/* the filter lets execve through with this very pointer only */
	execve(p->exec_path ? p->exec_path : p->argv[0], (char *const *)p->argv, p->envp);
	child_fail(p, STAGE_EXEC, "execute %s: %s%s", p->argv[0], cerr(errno),
		   errno == ENOENT && p->mount_ns ? " (is it bound into the sandbox?)" : "");
}
