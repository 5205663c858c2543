/* sandbox: namespaces, a fresh root, no_new_privs, capabilities, rlimits, cgroup v2, seccomp and
 * the W^X layers (seccomp_wx, mdwe, noexec, landlock: wx.c, landlock.c) around one child
 * program. See sandbox.h for the contract.
 *
 * Shape. The supervisor (parent) prepares everything (mount plan, environment, seccomp BPF),
 * then starts the child with a raw clone() carrying the namespace flags, so the child is PID 1
 * of its PID namespace. Parent and child talk over a SOCK_SEQPACKET socketpair: the parent
 * writes the user namespace's id maps and moves the child into its cgroup, then sends "go"; the
 * child sets itself up and sends one record (its half of the report, or an error), then execs.
 * The child's end is close-on-exec, so EOF after a report means the exec succeeded. */
#include "sandbox/sandbox.h"
#include "sandbox/wx.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* mount_setattr(2) (Linux 5.12), declared here so that older C libraries build too. */
struct ca_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#define CA_MOUNT_ATTR_RDONLY 0x1u
#define CA_MOUNT_ATTR_NOSUID 0x2u
#define CA_MOUNT_ATTR_NODEV  0x4u
#define CA_MOUNT_ATTR_NOEXEC 0x8u
#define CA_AT_RECURSIVE      0x8000

#define DEFAULT_TMP_BYTES  (1ull << 30)
#define DEFAULT_SHM_BYTES  (64ull << 20)
#define DEFAULT_CPU_S      600ull
#define DEFAULT_FSIZE      (2ull << 30)
#define DEFAULT_NOFILE     1024ull
#define DEFAULT_NPROC      256ull
#define DEFAULT_MEMORY_MAX (32ull << 30)
#define DEFAULT_PIDS_MAX   1024ull
#define DEFAULT_RUN_ID     65534u
#define MAX_ENV            4096
#define MAX_BINDS          1024
#define STAGE_DIR          "/tmp" /* the new root's tmpfs is mounted here, then pivoted into */
#define OLD_ROOT           "/oldroot"

static const char *const layer_names[SANDBOX_N_LAYERS] = {
	[SANDBOX_USER_NS] = "user_ns",
	[SANDBOX_MOUNT_NS] = "mount_ns",
	[SANDBOX_PID_NS] = "pid_ns",
	[SANDBOX_NET_NS] = "net_ns",
	[SANDBOX_IPC_NS] = "ipc_ns",
	[SANDBOX_UTS_NS] = "uts_ns",
	[SANDBOX_CGROUP_NS] = "cgroup_ns",
	[SANDBOX_FILESYSTEM] = "filesystem",
	[SANDBOX_NO_NEW_PRIVS] = "no_new_privs",
	[SANDBOX_CAPS] = "capabilities",
	[SANDBOX_RLIMITS] = "rlimits",
	[SANDBOX_CGROUP] = "cgroup",
	[SANDBOX_SECCOMP] = "seccomp",
	[SANDBOX_SECCOMP_WX] = "seccomp_wx",
	[SANDBOX_MDWE] = "mdwe",
	[SANDBOX_NOEXEC] = "noexec",
	[SANDBOX_LANDLOCK] = "landlock",
};

/* Layers a caller may switch off. */
#define DISABLEABLE                                                           \
	(SANDBOX_BIT(SANDBOX_USER_NS) | SANDBOX_BIT(SANDBOX_NET_NS) |         \
	 SANDBOX_BIT(SANDBOX_IPC_NS) | SANDBOX_BIT(SANDBOX_UTS_NS) |          \
	 SANDBOX_BIT(SANDBOX_CGROUP_NS) | SANDBOX_BIT(SANDBOX_RLIMITS) |      \
	 SANDBOX_BIT(SANDBOX_CGROUP) | SANDBOX_BIT(SANDBOX_SECCOMP) |         \
	 SANDBOX_BIT(SANDBOX_SECCOMP_WX) | SANDBOX_BIT(SANDBOX_MDWE) |        \
	 SANDBOX_BIT(SANDBOX_NOEXEC) | SANDBOX_BIT(SANDBOX_LANDLOCK))
/* Not applied with allow_processes (a shell), like a disabled layer */
#define SHELL_OFF                                                        \
	(SANDBOX_BIT(SANDBOX_SECCOMP_WX) | SANDBOX_BIT(SANDBOX_MDWE) |   \
	 SANDBOX_BIT(SANDBOX_NOEXEC))
#define SHELL_OFF_WHY                                                                        \
	"not applied with allow_processes (a shell: JIT runtimes such as node and java need "  \
	"W+X memory, and it runs programs it builds in its workspace and /tmp)"

const char *sandbox_layer_name(enum sandbox_layer layer)
{
	return (unsigned)layer < SANDBOX_N_LAYERS ? layer_names[layer] : "?";
}

/* ---- plan: everything the child needs, prepared before clone --------------------------------- */

enum mnt_kind { MK_DIR, MK_BIND, MK_SYMLINK, MK_TMPFS, MK_PROC, MK_SYSFS };

struct mnt {
	enum mnt_kind kind;
	const char *src; /* bind: host path; symlink: target; tmpfs: mount options */
	const char *dst; /* path inside the sandbox */
	bool writable;   /* bind */
	bool device;     /* bind of a device node (or a directory of them): no nodev */
	bool optional;   /* bind: skip a missing source */
	bool check;      /* bind: caller's; check the program's uid can use it */
	int fd;          /* bind: O_PATH descriptor, opened by the child; -1 */
};

enum { MSG_REPORT = 1, MSG_ERROR = 2 };
enum { STAGE_SETUP = 1, STAGE_EXEC = 2 };

/* The one record the child sends before exec (or instead of it). */
struct child_msg {
	int kind;
	int stage;
	bool seccomp_alt; /* the filter installed was filter_alt (MDWE could not be set) */
	char text[768];
	bool decided[SANDBOX_N_LAYERS];
	struct sandbox_layer_state layer[SANDBOX_N_LAYERS];
};

struct plan {
	const char *const *argv;
	char **envp;
	char *ld_env; /* owned "LD_LIBRARY_PATH=..." */
	struct mnt *mnts;
	size_t n_mnts, cap_mnts;
	char **owned; /* strings owned by the plan (symlink targets) */
	size_t n_owned, cap_owned;
	char tmp_opts[64], shm_opts[64], root_opts[64];
	const char *tmp_dir, *shm_dir; /* scratch directories bound at /tmp, /dev/shm; or NULL */
	bool no_gpu;                   /* opts->no_gpu: no /dev/nvidia* binds */
	char *exec_path;               /* argv[0] in a page of its own (see seccomp.c); or NULL */
	size_t exec_map_len;
	const char *cwd;
	uint64_t tmp_bytes;
	uint64_t rl_cpu, rl_fsize, rl_nofile, rl_nproc;
	bool rlimits;
	unsigned uid, gid;
	bool set_ids, can_setgroups;
	struct sock_filter *filter;
	unsigned short filter_len;
	bool seccomp;
	/* W^X (wx.c, landlock.c) */
	bool wx_seccomp;                /* the filter holds the seccomp_wx rules */
	bool wx_mprotect_exec;          /* ... and kills mprotect(PROT_EXEC) (MDWE not expected) */
	struct sock_filter *filter_alt; /* the filter with that rule too, for a child whose
					 * PR_SET_MDWE fails although the parent expected MDWE */
	unsigned short filter_alt_len;
	int rules, rules_alt, wx_rules, wx_rules_alt;
	bool seccomp_alt;               /* the child installed filter_alt (from its record) */
	bool mdwe, noexec, landlock;    /* attempt these layers */
	struct sandbox_landlock_path *ll_inside, *ll_host; /* writable places, as seen with and
							    * without the filesystem layer */
	size_t n_ll;
	bool cgroup_ns, uts;
	/* per attempt */
	bool mount_ns;
	int in_fd, out_fd, err_fd, sock;
	const int *pass_fds;
	size_t n_pass_fds;
	struct child_msg msg; /* the child's record (the child writes its copy) */
};

static int plan_add(struct plan *p, struct mnt m)
{
	if (p->n_mnts == p->cap_mnts) {
		size_t ncap = p->cap_mnts ? p->cap_mnts * 2 : 32;
		struct mnt *nm = realloc(p->mnts, ncap * sizeof *nm);
		if (!nm)
			return CA_ERR_NOMEM;
		p->mnts = nm;
		p->cap_mnts = ncap;
	}
	m.fd = -1;
	p->mnts[p->n_mnts++] = m;
	return 0;
}

static char *plan_own(struct plan *p, char *s)
{
	if (!s)
		return NULL;
	if (p->n_owned == p->cap_owned) {
		size_t ncap = p->cap_owned ? p->cap_owned * 2 : 16;
		char **no = realloc(p->owned, ncap * sizeof *no);
		if (!no) {
			free(s);
			return NULL;
		}
		p->owned = no;
		p->cap_owned = ncap;
	}
	p->owned[p->n_owned++] = s;
	return s;
}

static void plan_free(struct plan *p)
{
	free(p->envp);
	free(p->ld_env);
	free(p->mnts);
	for (size_t i = 0; i < p->n_owned; i++)
		free(p->owned[i]);
	free(p->owned);
	free(p->filter);
	free(p->filter_alt);
	free(p->ll_inside);
	free(p->ll_host);
	if (p->exec_path)
		munmap(p->exec_path, p->exec_map_len);
	free(p);
}

static void fmt_bytes(char *out, size_t size, uint64_t n)
{
	if (n >= (1ull << 30) && n % (1ull << 30) == 0)
		snprintf(out, size, "%llu GiB", (unsigned long long)(n >> 30));
	else if (n >= (1ull << 20) && n % (1ull << 20) == 0)
		snprintf(out, size, "%llu MiB", (unsigned long long)(n >> 20));
	else
		snprintf(out, size, "%llu bytes", (unsigned long long)n);
}

static void set_layer(struct sandbox_report *rep, enum sandbox_layer l, bool on, const char *fmt,
		      ...) __attribute__((format(printf, 4, 5)));
static void set_layer(struct sandbox_report *rep, enum sandbox_layer l, bool on, const char *fmt,
		      ...)
{
	va_list ap;
	rep->layer[l].on = on;
	va_start(ap, fmt);
	vsnprintf(rep->layer[l].detail, sizeof rep->layer[l].detail, fmt, ap);
	va_end(ap);
}

/* An absolute path without empty, "." or ".." components (a trailing '/' is refused too). */
static bool clean_abs_path(const char *path)
{
	const char *s = path;
	if (!path || path[0] != '/' || strlen(path) >= PATH_MAX - 64)
		return false;
	if (strcmp(path, "/") == 0)
		return false;
	while (*s) {
		const char *comp = ++s, *end = strchr(comp, '/');
		size_t n = end ? (size_t)(end - comp) : strlen(comp);
		if (n == 0 || (n == 1 && comp[0] == '.') ||
		    (n == 2 && comp[0] == '.' && comp[1] == '.'))
			return false;
		s = comp + n;
	}
	return true;
}

/* System parts of the root: read-only binds (symlinks like /lib -> usr/lib are recreated). */
static int plan_system(struct plan *p)
{
	static const char *const dirs[] = {"/usr", "/etc",   "/opt",   "/bin",    "/sbin",
					   "/lib", "/lib64", "/lib32", "/libx32", NULL};
	static const char *const devs[] = {"/dev/null",   "/dev/zero",    "/dev/full",
					   "/dev/random", "/dev/urandom", NULL};
	int rc;

	for (const char *const *dir = dirs; *dir; dir++) {
		struct stat st;
		if (lstat(*dir, &st) != 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = readlink(*dir, target, sizeof target - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			char *t = plan_own(p, strdup(target));
			if (!t)
				return CA_ERR_NOMEM;
			rc = plan_add(p, (struct mnt){.kind = MK_SYMLINK, .src = t, .dst = *dir});
		} else if (S_ISDIR(st.st_mode)) {
			rc = plan_add(p, (struct mnt){.kind = MK_BIND,
						      .src = *dir,
						      .dst = *dir,
						      .optional = true});
		} else {
			continue;
		}
		if (rc)
			return rc;
	}
	if ((rc = plan_add(p, (struct mnt){.kind = MK_DIR, .dst = "/dev"})))
		return rc;
	for (const char *const *dev = devs; *dev; dev++)
		if ((rc = plan_add(p, (struct mnt){.kind = MK_BIND,
						   .src = *dev,
						   .dst = *dev,
						   .device = true,
						   .optional = true})))
			return rc;
	/* Every /dev/nvidia* node (nvidia0.., nvidiactl, nvidia-uvm, nvidia-uvm-tools,
	 * nvidia-modeset) and the /dev/nvidia-caps directory: CUDA opens them. None with
	 * opts->no_gpu. */
	DIR *dir = p->no_gpu ? NULL : opendir("/dev");
	if (dir) {
		struct dirent *e;
		size_t count = 0;
		while ((e = readdir(dir)) && count < 256) {
			if (strncmp(e->d_name, "nvidia", 6) != 0)
				continue;
			char *path = malloc(strlen(e->d_name) + 6);
			if (!path) {
				closedir(dir);
				return CA_ERR_NOMEM;
			}
			snprintf(path, strlen(e->d_name) + 6, "/dev/%s", e->d_name);
			if (!plan_own(p, path) || plan_add(p, (struct mnt){.kind = MK_BIND,
									   .src = path,
									   .dst = path,
									   .device = true,
									   .optional = true})) {
				closedir(dir);
				return CA_ERR_NOMEM;
			}
			count++;
		}
		closedir(dir);
	}
	if (p->shm_dir)
		rc = plan_add(p, (struct mnt){.kind = MK_BIND,
					      .src = p->shm_dir,
					      .dst = "/dev/shm",
					      .writable = true,
					      .check = true});
	else
		rc = plan_add(p,
			      (struct mnt){.kind = MK_TMPFS, .src = p->shm_opts, .dst = "/dev/shm"});
	if (rc)
		return rc;
	static const char *const links[][2] = {{"/proc/self/fd", "/dev/fd"},
					       {"/proc/self/fd/0", "/dev/stdin"},
					       {"/proc/self/fd/1", "/dev/stdout"},
					       {"/proc/self/fd/2", "/dev/stderr"}};
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if ((rc = plan_add(p, (struct mnt){.kind = MK_SYMLINK,
						   .src = links[i][0],
						   .dst = links[i][1]})))
			return rc;
	if ((rc = plan_add(p, (struct mnt){.kind = MK_PROC, .dst = "/proc"})) ||
	    (rc = plan_add(p, (struct mnt){.kind = MK_SYSFS, .dst = "/sys"})))
		return rc;
	if (p->tmp_dir)
		return plan_add(p, (struct mnt){.kind = MK_BIND,
						.src = p->tmp_dir,
						.dst = "/tmp",
						.writable = true,
						.check = true});
	return plan_add(p, (struct mnt){.kind = MK_TMPFS, .src = p->tmp_opts, .dst = "/tmp"});
}

/* A scratch directory (opts->tmp_dir / shm_dir): an absolute, existing directory, handed to
 * the program's uid when the caller is root (like a writable bind). */
static int plan_scratch(const struct plan *p, const char *dir, const char *what, bool root,
			struct ca_diag *d)
{
	char shown[256];
	struct stat st;
	if (!dir)
		return 0;
	if (!clean_abs_path(dir))
		return ca_fail(d, CA_ERR_INVALID,
			       "sandbox: the %s directory must be an absolute path without '.', "
			       "'..' or empty components: %s",
			       what, ca_printable(shown, dir, sizeof shown));
	if (lstat(dir, &st) != 0)
		return ca_fail(d, errno == ENOENT ? CA_ERR_NOTFOUND : CA_ERR_IO,
			       "sandbox: the %s directory %s: %s", what,
			       ca_printable(shown, dir, sizeof shown), strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return ca_fail(d, CA_ERR_INVALID, "sandbox: the %s directory %s is not a directory",
			       what, ca_printable(shown, dir, sizeof shown));
	if (root && st.st_uid != p->uid && chown(dir, p->uid, p->gid) != 0)
		return ca_fail(d, CA_ERR_IO,
			       "sandbox: cannot give the %s directory %s to uid %u: %s", what,
			       ca_printable(shown, dir, sizeof shown), p->uid, strerror(errno));
	return 0;
}

/* Remembers a bind destination that lies inside a scratch directory: the sandbox makes its
 * mount point (and the directories on the way) there, which sandbox_scratch_check() must not
 * report. */
static int note_mount_point(struct sandbox *sb, const struct plan *p, const char *dst,
			    struct ca_diag *d)
{
	size_t n = strlen(dst) + 1;
	bool in_tmp = p->tmp_dir && strncmp(dst, "/tmp/", 5) == 0;
	bool in_shm = p->shm_dir && strncmp(dst, "/dev/shm/", 9) == 0;
	if (!in_tmp && !in_shm)
		return 0;
	if (n > sizeof sb->mount_points - sb->mount_points_len)
		return ca_fail(d, CA_ERR_LIMIT,
			       "sandbox: too many binds under /tmp and /dev/shm (%zu bytes of "
			       "paths at most)",
			       sizeof sb->mount_points);
	memcpy(sb->mount_points + sb->mount_points_len, dst, n);
	sb->mount_points_len += n;
	return 0;
}

/* argv[0] copied into a read-only mapping of its own, at a random address: the sandbox's
 * execve passes this pointer, the only one the seccomp filter lets through (seccomp.c). */
static int map_exec_path(struct plan *p, const char *path)
{
	size_t n = strlen(path) + 1, page = (size_t)sysconf(_SC_PAGESIZE), size;
	uint64_t r = 0;
	void *hint = NULL, *m;
	if (page == 0 || page == (size_t)-1)
		page = 4096;
	size = (n + page - 1) / page * page;
	/* a hint anywhere in [4 GiB, 64 TiB); the kernel picks another place if it is taken */
	if (getrandom(&r, sizeof r, 0) == (ssize_t)sizeof r)
		hint = (void *)(uintptr_t)(((1ull << 32) + r % ((1ull << 46) - (1ull << 32))) &
					   ~(uint64_t)(page - 1));
	m = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return CA_ERR_NOMEM;
	memcpy(m, path, n);
	(void)mprotect(m, size, PROT_READ);
	p->exec_path = m;
	p->exec_map_len = size;
	return 0;
}

/* The caller's binds: validated, optional ones that are missing dropped, writable ones made
 * owned by the program's uid when the caller is root. */
static int plan_binds(struct sandbox *sb, struct plan *p, const struct sandbox_opts *o, bool root,
		      struct ca_diag *d)
{
	char shown[256];
	if (o->n_binds > MAX_BINDS)
		return ca_fail(d, CA_ERR_LIMIT, "sandbox: more than %d binds", MAX_BINDS);
	for (size_t i = 0; i < o->n_binds; i++) {
		const struct sandbox_bind *b = &o->binds[i];
		const char *dst = b->dst ? b->dst : b->src;
		struct stat st;
		if (!clean_abs_path(b->src) || !clean_abs_path(dst))
			return ca_fail(d, CA_ERR_INVALID,
				       "sandbox: bind paths must be absolute, without '.', '..' or "
				       "empty components, and not '/': %s -> %s",
				       ca_printable(shown, b->src ? b->src : "(null)", 120),
				       ca_printable(shown + 128, dst ? dst : "(null)", 120));
		if (stat(b->src, &st) != 0) {
			if (errno == ENOENT && b->optional)
				continue;
			return ca_fail(d, errno == ENOENT ? CA_ERR_NOTFOUND : CA_ERR_IO,
				       "sandbox: cannot bind %s: %s",
				       ca_printable(shown, b->src, sizeof shown), strerror(errno));
		}
		if (b->writable && root && st.st_uid != p->uid &&
		    chown(b->src, p->uid, p->gid) != 0)
			return ca_fail(d, CA_ERR_IO,
				       "sandbox: cannot give the writable bind %s to uid %u: %s",
				       ca_printable(shown, b->src, sizeof shown), p->uid,
				       strerror(errno));
		int rc = plan_add(p, (struct mnt){.kind = MK_BIND,
						  .src = b->src,
						  .dst = dst,
						  .writable = b->writable,
						  .optional = b->optional,
						  .check = true});
		if (rc)
			return ca_fail(d, rc, "sandbox: out of memory");
		if ((rc = note_mount_point(sb, p, dst, d)) != 0)
			return rc;
	}
	return 0;
}

/* Where the program may write, for the landlock layer: /tmp, /dev/shm, files under /dev, and
 * the caller's writable binds; as seen inside (the filesystem layer on) and on the host
 * (without it: the binds' sources, the host's /tmp and /dev/shm). With GPU nodes bound, also
 * files under /proc: the CUDA driver names its threads by writing /proc/self/task/<tid>/comm
 * and fails (cudaErrorOperatingSystem) when it cannot, and Landlock rules, which are per
 * directory or file, cannot allow that file of threads yet to come without /proc/self/mem
 * (measured on the H200 host). Call after plan_binds and plan_system. */
static int plan_landlock(struct plan *p)
{
	static const struct sandbox_landlock_path fixed[] = {
		{"/tmp", false}, {"/dev/shm", false}, {"/dev", true}, {"/proc", true}};
	size_t n_fixed = sizeof fixed / sizeof fixed[0] - 1, n;
	for (size_t i = 0; i < p->n_mnts; i++)
		if (p->mnts[i].kind == MK_BIND && p->mnts[i].device &&
		    strncmp(p->mnts[i].dst, "/dev/nvidia", 11) == 0)
			n_fixed = sizeof fixed / sizeof fixed[0]; /* a GPU node: /proc too */
	n = n_fixed;
	p->ll_inside = calloc(p->n_mnts + n_fixed, sizeof *p->ll_inside);
	p->ll_host = calloc(p->n_mnts + n_fixed, sizeof *p->ll_host);
	if (!p->ll_inside || !p->ll_host)
		return CA_ERR_NOMEM;
	memcpy(p->ll_inside, fixed, n_fixed * sizeof fixed[0]);
	memcpy(p->ll_host, fixed, n_fixed * sizeof fixed[0]);
	for (size_t i = 0; i < p->n_mnts; i++) {
		const struct mnt *m = &p->mnts[i];
		/* the caller's writable binds; the scratch directories are /tmp and /dev/shm */
		if (m->kind != MK_BIND || !m->writable || !m->check ||
		    strcmp(m->dst, "/tmp") == 0 || strcmp(m->dst, "/dev/shm") == 0)
			continue;
		p->ll_inside[n] = (struct sandbox_landlock_path){m->dst, false};
		p->ll_host[n] = (struct sandbox_landlock_path){m->src, false};
		n++;
	}
	p->n_ll = n;
	return 0;
}

static bool env_has(char *const *env, size_t n, const char *key)
{
	size_t k = strlen(key);
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], key, k) == 0 && env[i][k] == '=')
			return true;
	return false;
}

static int plan_env(struct plan *p, const struct sandbox_opts *o, struct ca_diag *d)
{
	size_t n = 0, k = 0;
	if (o->env)
		while (o->env[n])
			if (++n > MAX_ENV)
				return ca_fail(d, CA_ERR_LIMIT,
					       "sandbox: more than %d environment "
					       "entries",
					       MAX_ENV);
	p->envp = calloc(n + 4, sizeof *p->envp);
	if (!p->envp)
		return ca_fail(d, CA_ERR_NOMEM, "sandbox: out of memory");
	for (size_t i = 0; i < n; i++)
		if (strchr(o->env[i], '='))
			p->envp[k++] = (char *)o->env[i];
	if (!env_has(p->envp, k, "PATH"))
		p->envp[k++] = (char *)"PATH=" SANDBOX_DEFAULT_PATH;
	if (!env_has(p->envp, k, "HOME"))
		p->envp[k++] = (char *)"HOME=/tmp";
	const char *ld = getenv("LD_LIBRARY_PATH");
	if (o->pass_ld_library_path && ld && !env_has(p->envp, k, "LD_LIBRARY_PATH")) {
		size_t len = strlen(ld) + sizeof "LD_LIBRARY_PATH=";
		p->ld_env = malloc(len);
		if (!p->ld_env)
			return ca_fail(d, CA_ERR_NOMEM, "sandbox: out of memory");
		snprintf(p->ld_env, len, "LD_LIBRARY_PATH=%s", ld);
		p->envp[k++] = p->ld_env;
	}
	p->envp[k] = NULL;
	return 0;
}

/* ---- the child (between clone and execve: no allocation, no stdio buffers) ------------------- */

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
	fmt_bytes(tmp, sizeof tmp, p->tmp_bytes);
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
		     {RLIMIT_CORE, "core"}};
	uint64_t want[] = {p->rl_cpu, p->rl_fsize, p->rl_nofile, p->rl_nproc, 0};
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
		if (names[i].res == RLIMIT_FSIZE)
			fmt_bytes(v, sizeof v, want[i]);
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

static _Noreturn void child_main(struct plan *p)
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

/* ---- the parent -------------------------------------------------------------------------------
 */

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t n = strlen(s);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, s, n);
	int e = errno;
	close(fd);
	errno = e;
	if (w != (ssize_t)n) {
		if (w >= 0)
			errno = EIO;
		return -1;
	}
	return 0;
}

static bool read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	if (fd < 0)
		return false;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return false;
	buf[n] = '\0';
	return true;
}

static bool has_word(const char *list, const char *word)
{
	size_t k = strlen(word);
	for (const char *s = list; (s = strstr(s, word)); s += k)
		if ((s == list || s[-1] == ' ' || s[-1] == '+') &&
		    (s[k] == '\0' || s[k] == ' ' || s[k] == '\n'))
			return true;
	return false;
}

/* Makes <root>/cuda-agent-<pid>-<n> with memory.max and pids.max, or says why not. */
static void cgroup_prepare(struct sandbox *sb, const struct sandbox_opts *o, uint64_t memory_max,
			   uint64_t pids_max)
{
	static unsigned counter;
	const char *root = o->cgroup_root ? o->cgroup_root : "/sys/fs/cgroup";
	struct sandbox_report *rep = &sb->report;
	struct statfs sf;
	char path[PATH_MAX], ctl[1024], file[PATH_MAX + 32], mem[32], detail[SANDBOX_DETAIL_MAX];
	size_t off = 0;

	if (o->disable & SANDBOX_BIT(SANDBOX_CGROUP)) {
		set_layer(rep, SANDBOX_CGROUP, false, "disabled by the caller");
		return;
	}
	if (statfs(root, &sf) != 0) {
		set_layer(rep, SANDBOX_CGROUP, false, "cgroup v2 not available: %s: %s", root,
			  strerror(errno));
		return;
	}
	if (sf.f_type != CGROUP2_SUPER_MAGIC) {
		set_layer(
			rep, SANDBOX_CGROUP, false,
			"cgroup v2 not available: %s is not a cgroup2 mount (cgroup v1 or hybrid)",
			root);
		return;
	}
	if (access(root, W_OK) != 0) {
		set_layer(rep, SANDBOX_CGROUP, false,
			  "cgroup v2 not available: %s is not writable "
			  "(%s)",
			  root, strerror(errno));
		return;
	}
	snprintf(file, sizeof file, "%s/cgroup.subtree_control", root);
	if (!read_small(file, ctl, sizeof ctl))
		ctl[0] = '\0';
	if (!has_word(ctl, "memory") || !has_word(ctl, "pids")) {
		/* Enable what the parent cgroup offers (allowed at the root, or in a cgroup
		 * without processes of its own). */
		(void)write_str(file, "+memory");
		(void)write_str(file, "+pids");
		if (!read_small(file, ctl, sizeof ctl))
			ctl[0] = '\0';
	}
	if (!has_word(ctl, "memory")) {
		set_layer(rep, SANDBOX_CGROUP, false,
			  "cgroup v2 not available: the memory controller is not enabled in %s",
			  root);
		return;
	}
	snprintf(path, sizeof path, "%s/cuda-agent-%d-%u", root, (int)getpid(),
		 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
	if (mkdir(path, 0755) != 0) {
		set_layer(rep, SANDBOX_CGROUP, false,
			  "cgroup v2 not available: cannot create %s: %s", path, strerror(errno));
		return;
	}
	if (memory_max != SANDBOX_UNLIMITED) {
		char v[32];
		snprintf(v, sizeof v, "%llu", (unsigned long long)memory_max);
		snprintf(file, sizeof file, "%s/memory.max", path);
		if (write_str(file, v) != 0) {
			set_layer(rep, SANDBOX_CGROUP, false, "cannot write %s: %s", file,
				  strerror(errno));
			(void)rmdir(path);
			return;
		}
		snprintf(file, sizeof file, "%s/memory.swap.max", path);
		(void)write_str(file, "0");
		fmt_bytes(mem, sizeof mem, memory_max);
		ca_appendf(detail, sizeof detail, &off, "memory.max %s", mem);
	} else {
		ca_appendf(detail, sizeof detail, &off, "memory.max not set");
	}
	if (pids_max != SANDBOX_UNLIMITED && has_word(ctl, "pids")) {
		char v[32];
		snprintf(v, sizeof v, "%llu", (unsigned long long)pids_max);
		snprintf(file, sizeof file, "%s/pids.max", path);
		if (write_str(file, v) == 0)
			ca_appendf(detail, sizeof detail, &off, ", pids.max %s", v);
	}
	ca_appendf(detail, sizeof detail, &off, " in %s", path);
	ca_strlcpy(sb->cgroup, path, sizeof sb->cgroup);
	set_layer(rep, SANDBOX_CGROUP, true, "%s", detail);
}

static void cgroup_remove(struct sandbox *sb)
{
	char file[PATH_MAX + 32], buf[1024];
	if (!sb->cgroup[0])
		return;
	snprintf(file, sizeof file, "%s/memory.events", sb->cgroup);
	if (read_small(file, buf, sizeof buf)) {
		const char *s = strstr(buf, "oom_kill ");
		if (s && atol(s + 9) > 0)
			sb->oom_killed = true;
	}
	snprintf(file, sizeof file, "%s/cgroup.kill", sb->cgroup);
	(void)write_str(file, "1");
	for (int i = 0; i < 200; i++) {
		if (rmdir(sb->cgroup) == 0 || errno == ENOENT)
			break;
		if (errno != EBUSY) {
			ca_log_warn("sandbox: cannot remove %s: %s", sb->cgroup, strerror(errno));
			break;
		}
		usleep(10000);
	}
	sb->cgroup[0] = '\0';
}

static int write_id_maps(pid_t pid, const struct plan *p, bool root, char *why, size_t why_size)
{
	char path[64], map[64];
	if (!root) {
		snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
		if (write_str(path, "deny") != 0 && errno != ENOENT) {
			snprintf(why, why_size, "cannot write %s: %s", path, strerror(errno));
			return -1;
		}
	}
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", p->uid, p->uid);
	if (write_str(path, map) != 0) {
		snprintf(why, why_size, "cannot write uid_map: %s", strerror(errno));
		return -1;
	}
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", p->gid, p->gid);
	if (write_str(path, map) != 0) {
		snprintf(why, why_size, "cannot write gid_map: %s", strerror(errno));
		return -1;
	}
	return 0;
}

enum attempt_rc { ATT_OK, ATT_CLONE, ATT_MAPS, ATT_SETUP, ATT_FATAL };

/* One clone + setup. On ATT_OK the child has exec'ed (or is about to: its record was a report
 * and the channel closed). *why explains any other outcome. */
static enum attempt_rc attempt(struct sandbox *sb, struct plan *p, unsigned long ns, bool user,
			       bool root, double timeout_s, pid_t *out_pid, char *why,
			       size_t why_size, int *err_code)
{
	int sv[2];
	pid_t pid;
	struct child_msg *msg = NULL;
	bool got_report = false, got_error = false;
	int stage = 0;
	enum attempt_rc rc = ATT_OK;
	double deadline = ca_now() + timeout_s;

	*out_pid = -1;
	*err_code = CA_ERR_CHILD;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		snprintf(why, why_size, "sandbox: cannot create a socketpair: %s", strerror(errno));
		*err_code = CA_ERR_IO;
		return ATT_FATAL;
	}
	memset(&p->msg, 0, sizeof p->msg);
	p->sock = sv[1];
	p->mount_ns = (ns & CLONE_NEWNS) != 0;
	p->set_ids = user || root;
	p->can_setgroups = root;
	p->uts = (ns & CLONE_NEWUTS) != 0;

	pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD | ns | (user ? CLONE_NEWUSER : 0),
			     NULL, NULL, NULL, NULL);
	if (pid == 0) {
		close(sv[0]);
		child_main(p);
	}
	close(sv[1]);
	if (pid < 0) {
		int e = errno;
		snprintf(why, why_size, "clone%s: %s%s", user ? "(CLONE_NEWUSER)" : "", strerror(e),
			 !user         ? ""
			 : e == ENOSPC ? " (limited by /proc/sys/user/max_user_namespaces)"
			 : e == EPERM || e == EACCES
				 ? " (refused by a sysctl, an LSM or a container's seccomp profile)"
				 : "");
		close(sv[0]);
		return ATT_CLONE;
	}
	(void)setpgid(pid, pid);
	if (user && write_id_maps(pid, p, root, why, why_size) != 0) {
		rc = ATT_MAPS;
		goto kill_child;
	}
	if (sb->cgroup[0]) {
		char procs[PATH_MAX + 32], v[32];
		snprintf(procs, sizeof procs, "%s/cgroup.procs", sb->cgroup);
		snprintf(v, sizeof v, "%d", (int)pid);
		if (write_str(procs, v) != 0) {
			set_layer(&sb->report, SANDBOX_CGROUP, false,
				  "cannot move the child into %s: "
				  "%s",
				  sb->cgroup, strerror(errno));
			cgroup_remove(sb);
		}
	}
	if (send(sv[0], "g", 1, MSG_NOSIGNAL) != 1) {
		snprintf(why, why_size, "sandbox: the child died before its setup: %s",
			 strerror(errno));
		rc = ATT_FATAL;
		goto kill_child;
	}
	msg = malloc(sizeof *msg);
	if (!msg) {
		snprintf(why, why_size, "sandbox: out of memory");
		*err_code = CA_ERR_NOMEM;
		rc = ATT_FATAL;
		goto kill_child;
	}
	for (;;) {
		struct pollfd pf = {.fd = sv[0], .events = POLLIN};
		double left = deadline - ca_now();
		if (left <= 0) {
			snprintf(why, why_size, "sandbox: the setup did not finish within %.0f s",
				 timeout_s);
			*err_code = CA_ERR_TIMEOUT;
			rc = ATT_FATAL;
			goto kill_child;
		}
		int pr = poll(&pf, 1, (int)(left * 1000) + 1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue;
		ssize_t n = recv(sv[0], msg, sizeof *msg, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* EOF: exec'ed, or died */
		if ((size_t)n != sizeof *msg)
			continue;
		if (msg->kind == MSG_REPORT) {
			got_report = true;
			p->seccomp_alt = msg->seccomp_alt;
			for (int l = 0; l < SANDBOX_N_LAYERS; l++)
				if (msg->decided[l])
					sb->report.layer[l] = msg->layer[l];
		} else if (msg->kind == MSG_ERROR) {
			got_error = true;
			stage = msg->stage;
			msg->text[sizeof msg->text - 1] = '\0';
			snprintf(why, why_size, "%s", msg->text);
		}
	}
	if (got_error) {
		rc = stage == STAGE_SETUP ? ATT_SETUP : ATT_FATAL;
		goto kill_child;
	}
	if (!got_report) {
		int status = 0;
		char how[128];
		(void)waitpid(pid, &status, 0);
		struct ca_run_result r = {0};
		if (WIFSIGNALED(status))
			r.term_signal = WTERMSIG(status);
		else
			r.exit_code = WEXITSTATUS(status);
		ca_run_describe(&r, how, sizeof how);
		snprintf(why, why_size, "sandbox: the child died during its setup (%s)", how);
		rc = ATT_FATAL;
		pid = -1;
		goto out;
	}
	*out_pid = pid;
	pid = -1;
	goto out;
kill_child:
	kill(pid, SIGKILL);
	(void)waitpid(pid, NULL, 0);
out:
	free(msg);
	close(sv[0]);
	return rc;
}

static const unsigned long ns_flag[SANDBOX_N_LAYERS] = {
	[SANDBOX_MOUNT_NS] = CLONE_NEWNS, [SANDBOX_PID_NS] = CLONE_NEWPID,
	[SANDBOX_NET_NS] = CLONE_NEWNET,  [SANDBOX_IPC_NS] = CLONE_NEWIPC,
	[SANDBOX_UTS_NS] = CLONE_NEWUTS,
};
static const char *const ns_detail[SANDBOX_N_LAYERS] = {
	[SANDBOX_MOUNT_NS] = "private mounts",
	[SANDBOX_PID_NS] = "the program is PID 1",
	[SANDBOX_NET_NS] = "no interfaces but lo (down)",
	[SANDBOX_IPC_NS] = "private System V IPC and POSIX queues",
	[SANDBOX_UTS_NS] = "hostname \"sandbox\"",
};

/* Starts the child with a user namespace and the others, else (a user namespace refused, or a
 * setup step refused inside one while the caller is root) the others alone, else none; fills
 * the namespace layers of the report. */
static int start_child(struct sandbox *sb, struct plan *p, unsigned long ns_all, unsigned dis,
		       bool root, double timeout, pid_t *pid, struct ca_diag *d)
{
	struct sandbox_report *rep = &sb->report;
	struct
	try {
		bool user;
		unsigned long ns;
	}
	tries[3];
	int n_tries = 0, err_code = CA_ERR_CHILD;
	char why[1024] = "", shown[256];

	if (!(dis & SANDBOX_BIT(SANDBOX_USER_NS)))
		tries[n_tries++] = (struct try){true, ns_all};
	tries[n_tries++] = (struct try){false, ns_all};
	tries[n_tries++] = (struct try){false, 0};
	for (int t = 0; t < n_tries; t++) {
		const struct try *tr = &tries[t];
		switch (attempt(sb, p, tr->ns, tr->user, root, timeout, pid, why, sizeof why,
				&err_code)) {
		case ATT_OK:
			if (tr->user)
				set_layer(rep, SANDBOX_USER_NS, true,
					  "uid %u and gid %u mapped to themselves, nothing else "
					  "mapped",
					  p->uid, p->gid);
			for (int l = SANDBOX_MOUNT_NS; l <= SANDBOX_UTS_NS; l++)
				if (tr->ns & ns_flag[l])
					set_layer(rep, (enum sandbox_layer)l, true, "%s",
						  ns_detail[l]);
			return 0;
		case ATT_CLONE:
		case ATT_MAPS:
			if (tr->user) {
				set_layer(rep, SANDBOX_USER_NS, false, "%s", why);
			} else if (tr->ns) {
				for (int l = SANDBOX_MOUNT_NS; l <= SANDBOX_UTS_NS; l++)
					if (!(dis & SANDBOX_BIT(l)))
						set_layer(rep, (enum sandbox_layer)l, false,
							  "%s without a user namespace", why);
			}
			break;
		case ATT_SETUP:
			/* A step that works as root may be refused inside a user namespace (a
			 * /proc mount, ...): then go on without one. */
			if (tr->user && root) {
				set_layer(rep, SANDBOX_USER_NS, false,
					  "setup failed inside it (%s)", why);
				break;
			}
			return ca_fail(d, CA_ERR_CHILD, "%s", why);
		case ATT_FATAL:
			return ca_fail(d, err_code, "%s", why);
		}
	}
	return ca_fail(d, CA_ERR_CHILD, "sandbox: cannot start %s: %s",
		       ca_printable(shown, p->argv[0], sizeof shown), why);
}

/* The seccomp_wx layer after the child's record: on with the filter, saying what it kills. */
static void report_seccomp_wx(struct sandbox_report *rep, const struct plan *p)
{
	if (!p->wx_seccomp)
		return; /* disabled, or its rules could not be built: already said */
	if (!rep->layer[SANDBOX_SECCOMP].on) {
		set_layer(rep, SANDBOX_SECCOMP_WX, false, "no seccomp filter: %s",
			  rep->layer[SANDBOX_SECCOMP].detail);
		return;
	}
	set_layer(rep, SANDBOX_SECCOMP_WX, true,
		  "on (%d rules): kills W+X mmap/mprotect/pkey_mprotect, shmat(SHM_EXEC), "
		  "memfd_create, memfd_secret, mremap aliasing, remap_file_pages, personality "
		  "changes%s",
		  p->seccomp_alt ? p->wx_rules_alt : p->wx_rules,
		  p->seccomp_alt || p->wx_mprotect_exec ? "; any mprotect(PROT_EXEC) (no MDWE)"
							 : "");
}

/* The seccomp filter (and, when MDWE is expected, filter_alt: the same plus the rule that kills
 * mprotect(PROT_EXEC), for a child whose PR_SET_MDWE fails). A filter libseccomp cannot build
 * turns the layer off, reported in rep (without the seccomp_wx rules first, then entirely);
 * only running out of memory is an error. */
static int plan_seccomp(struct plan *p, const struct sandbox_opts *o, struct sandbox_report *rep,
			struct ca_diag *d)
{
	struct sandbox_seccomp_spec spec = {.exec_path = (uint64_t)(uintptr_t)p->exec_path,
					    .allow_processes = o->allow_processes,
					    .wx = p->wx_seccomp};
	/* without MDWE (disabled, or Linux < 6.3) the filter kills mprotect(PROT_EXEC) itself */
	spec.wx_mprotect_exec = !(p->mdwe && sandbox_mdwe_supported());
	struct ca_diag sd = {{0}};
	int rc = sandbox_seccomp_build_spec(&spec, &p->filter, &p->filter_len, &p->rules,
					    &p->wx_rules, &sd);
	if (rc != 0 && rc != CA_ERR_NOMEM && spec.wx) {
		set_layer(rep, SANDBOX_SECCOMP_WX, false, "%s", sd.msg);
		p->wx_seccomp = spec.wx = false;
		rc = sandbox_seccomp_build_spec(&spec, &p->filter, &p->filter_len, &p->rules,
						&p->wx_rules, &sd);
	}
	if (rc == CA_ERR_NOMEM)
		return ca_fail(d, rc, "sandbox: %s", sd.msg);
	if (rc != 0) {
		set_layer(rep, SANDBOX_SECCOMP, false, "%s", sd.msg);
		return 0;
	}
	p->seccomp = true;
	p->wx_mprotect_exec = spec.wx && spec.wx_mprotect_exec;
	if (spec.wx && !spec.wx_mprotect_exec) {
		spec.wx_mprotect_exec = true;
		rc = sandbox_seccomp_build_spec(&spec, &p->filter_alt, &p->filter_alt_len,
						&p->rules_alt, &p->wx_rules_alt, &sd);
		if (rc == CA_ERR_NOMEM)
			return ca_fail(d, rc, "sandbox: %s", sd.msg);
		/* else without it, a child whose PR_SET_MDWE fails keeps the first filter */
	}
	return 0;
}

int sandbox_spawn(struct sandbox *sb, const char *const *argv, const struct sandbox_opts *opts,
		  const char *stderr_path, struct ca_diag *d)
{
	static const struct sandbox_opts defaults = {0};
	const struct sandbox_opts *o = opts ? opts : &defaults;
	struct sandbox_report *rep = &sb->report;
	struct plan *p = NULL;
	int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_fd = -1, rc = 0;
	bool root = geteuid() == 0;
	unsigned dis = o->disable & DISABLEABLE;
	unsigned long ns_all = CLONE_NEWNS | CLONE_NEWPID;
	pid_t pid = -1;
	char shown[256];

	memset(sb, 0, sizeof *sb);
	sb->child.pid = -1;
	sb->child.to_child = sb->child.from_child = -1;
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (dis & SANDBOX_BIT(l))
			set_layer(rep, (enum sandbox_layer)l, false, "disabled by the caller");
		else
			set_layer(rep, (enum sandbox_layer)l, false, "not attempted");
	/* Layers that go with another choice count as disabled by the caller (strict ignores
	 * them): the W^X layers a shell does without, and seccomp_wx without seccomp. */
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (o->allow_processes && (SHELL_OFF & SANDBOX_BIT(l)) && !(dis & SANDBOX_BIT(l))) {
			dis |= SANDBOX_BIT(l);
			set_layer(rep, (enum sandbox_layer)l, false, SHELL_OFF_WHY);
		}
	if ((dis & SANDBOX_BIT(SANDBOX_SECCOMP)) && !(dis & SANDBOX_BIT(SANDBOX_SECCOMP_WX))) {
		dis |= SANDBOX_BIT(SANDBOX_SECCOMP_WX);
		set_layer(rep, SANDBOX_SECCOMP_WX, false, "disabled with the seccomp layer");
	}
	if (!argv || !argv[0] || argv[0][0] != '/')
		return ca_fail(d, CA_ERR_INVALID,
			       "sandbox: the program must be an absolute path: %s",
			       argv && argv[0] ? ca_printable(shown, argv[0], sizeof shown) : "");

	p = calloc(1, sizeof *p);
	if (!p)
		return ca_fail(d, CA_ERR_NOMEM, "sandbox: out of memory");
	p->argv = argv;
	p->cwd = o->cwd ? o->cwd : "/";
	p->tmp_bytes = o->tmp_bytes ? o->tmp_bytes : DEFAULT_TMP_BYTES;
	snprintf(p->tmp_opts, sizeof p->tmp_opts, "size=%llu,mode=1777",
		 (unsigned long long)p->tmp_bytes);
	snprintf(p->shm_opts, sizeof p->shm_opts, "size=%llu,mode=1777",
		 (unsigned long long)(o->shm_bytes ? o->shm_bytes : DEFAULT_SHM_BYTES));
	snprintf(p->root_opts, sizeof p->root_opts, "size=4m,mode=0755");
	p->rl_cpu = o->cpu_seconds ? o->cpu_seconds : DEFAULT_CPU_S;
	p->rl_fsize = o->fsize_bytes ? o->fsize_bytes : DEFAULT_FSIZE;
	p->rl_nofile = o->nofile ? o->nofile : DEFAULT_NOFILE;
	p->rl_nproc = o->nproc ? o->nproc : DEFAULT_NPROC;
	p->rlimits = !(dis & SANDBOX_BIT(SANDBOX_RLIMITS));
	p->uid = root ? (o->uid ? o->uid : DEFAULT_RUN_ID) : (unsigned)geteuid();
	p->gid = root ? (o->gid ? o->gid : DEFAULT_RUN_ID) : (unsigned)getegid();
	p->cgroup_ns = !(dis & SANDBOX_BIT(SANDBOX_CGROUP_NS));
	p->tmp_dir = o->tmp_dir;
	p->shm_dir = o->shm_dir;
	p->no_gpu = o->no_gpu;
	p->wx_seccomp = !(dis & SANDBOX_BIT(SANDBOX_SECCOMP_WX));
	p->mdwe = !(dis & SANDBOX_BIT(SANDBOX_MDWE));
	p->noexec = !(dis & SANDBOX_BIT(SANDBOX_NOEXEC));
	p->landlock = !(dis & SANDBOX_BIT(SANDBOX_LANDLOCK));
	p->in_fd = p->out_fd = p->err_fd = p->sock = -1;
	if (o->n_pass_fds > SANDBOX_MAX_PASS_FDS) {
		rc = ca_fail(d, CA_ERR_LIMIT, "sandbox: at most %d passed descriptors",
			     SANDBOX_MAX_PASS_FDS);
		goto fail;
	}
	p->pass_fds = o->pass_fds;
	p->n_pass_fds = o->n_pass_fds;
	rep->uid = p->uid;
	rep->gid = p->gid;
	if (!(dis & SANDBOX_BIT(SANDBOX_NET_NS)))
		ns_all |= CLONE_NEWNET;
	if (!(dis & SANDBOX_BIT(SANDBOX_IPC_NS)))
		ns_all |= CLONE_NEWIPC;
	if (!(dis & SANDBOX_BIT(SANDBOX_UTS_NS)))
		ns_all |= CLONE_NEWUTS;

	if ((rc = plan_scratch(p, p->tmp_dir, "tmp", root, d)) != 0 ||
	    (rc = plan_scratch(p, p->shm_dir, "shm", root, d)) != 0)
		goto fail;
	if ((rc = plan_system(p)) != 0) {
		rc = ca_fail(d, rc, "sandbox: out of memory");
		goto fail;
	}
	if ((rc = plan_binds(sb, p, o, root, d)) != 0 || (rc = plan_env(p, o, d)) != 0)
		goto fail;
	if (p->landlock && (rc = plan_landlock(p)) != 0) {
		rc = ca_fail(d, rc, "sandbox: out of memory");
		goto fail;
	}
	if (!(dis & SANDBOX_BIT(SANDBOX_SECCOMP))) {
		/* with allow_processes execve is not pinned: the child execs argv[0] itself */
		if (!o->allow_processes && map_exec_path(p, argv[0]) != 0) {
			rc = ca_fail(d, CA_ERR_NOMEM, "sandbox: mmap: %s", strerror(errno));
			goto fail;
		}
		if ((rc = plan_seccomp(p, o, rep, d)) != 0)
			goto fail;
		if (p->seccomp)
			rep->seccomp_rules = p->rules;
	}

	if (stderr_path) {
		err_fd = open(stderr_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (err_fd < 0) {
			rc = ca_fail(d, CA_ERR_IO, "sandbox: cannot open %s: %s",
				     ca_printable(shown, stderr_path, sizeof shown),
				     strerror(errno));
			goto fail;
		}
	}
	if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
		rc = ca_fail(d, CA_ERR_IO, "sandbox: pipe: %s", strerror(errno));
		goto fail;
	}
	p->in_fd = in_pipe[0];
	p->out_fd = out_pipe[1];
	p->err_fd = err_fd;
	cgroup_prepare(sb, o, o->memory_max ? o->memory_max : DEFAULT_MEMORY_MAX,
		       o->pids_max ? o->pids_max : DEFAULT_PIDS_MAX);

	double timeout = o->setup_timeout_s > 0 ? o->setup_timeout_s : 30.0;
	if ((rc = start_child(sb, p, ns_all, dis, root, timeout, &pid, d)) != 0)
		goto fail;
	if (p->seccomp && rep->layer[SANDBOX_SECCOMP].on) {
		rep->seccomp_rules = p->seccomp_alt ? p->rules_alt : p->rules;
		set_layer(rep, SANDBOX_SECCOMP, true, "on (%d rules)", rep->seccomp_rules);
	}
	report_seccomp_wx(rep, p);
	/* The scratch directories are what the program saw as /tmp and /dev/shm only with the
	 * filesystem layer; without it, it saw the host's. */
	if (rep->layer[SANDBOX_FILESYSTEM].on) {
		if (p->tmp_dir)
			ca_strlcpy(sb->scratch[0], p->tmp_dir, sizeof sb->scratch[0]);
		if (p->shm_dir)
			ca_strlcpy(sb->scratch[1], p->shm_dir, sizeof sb->scratch[1]);
	}

	close(in_pipe[0]);
	close(out_pipe[1]);
	if (err_fd >= 0)
		close(err_fd);
	sb->child.pid = pid;
	sb->child.to_child = in_pipe[1];
	sb->child.from_child = out_pipe[0];
	plan_free(p);

	if (o->strict) {
		char off[1900] = "";
		size_t n = 0;
		for (int l = 0; l < SANDBOX_N_LAYERS; l++)
			if (!rep->layer[l].on && !(dis & SANDBOX_BIT(l)))
				ca_appendf(off, sizeof off, &n, "%s%s (%s)", n ? "; " : "",
					   layer_names[l], rep->layer[l].detail);
		if (n) {
			struct ca_run_result r;
			sandbox_finish(sb, 0, &r);
			return ca_fail(d, CA_ERR_UNSUPPORTED, "sandbox: layers unavailable: %s",
				       off);
		}
	}
	return 0;

fail:
	for (int i = 0; i < 2; i++) {
		if (in_pipe[i] >= 0)
			close(in_pipe[i]);
		if (out_pipe[i] >= 0)
			close(out_pipe[i]);
	}
	if (err_fd >= 0)
		close(err_fd);
	cgroup_remove(sb);
	if (p)
		plan_free(p);
	return rc ? rc : CA_ERR_CHILD;
}

void sandbox_finish(struct sandbox *sb, double grace_s, struct ca_run_result *r)
{
	ca_child_finish(&sb->child, grace_s, r);
	cgroup_remove(sb);
}

bool sandbox_killed_by_seccomp(const struct sandbox *sb, const struct ca_run_result *r)
{
	return sb->report.layer[SANDBOX_SECCOMP].on && r->term_signal == SIGSYS;
}

json_t *sandbox_report_json(const struct sandbox_report *rep)
{
	json_t *o = json_object(), *layers = json_object(), *off = json_array();
	char note[1024];
	size_t n = 0;
	int on = 0;
	bool ns = true;

	for (int l = 0; l < SANDBOX_N_LAYERS; l++) {
		const struct sandbox_layer_state *s = &rep->layer[l];
		json_object_set_new(layers, layer_names[l],
				    json_pack("{s:b, s:s}", "on", s->on, "detail", s->detail));
		if (s->on) {
			on++;
		} else {
			char line[SANDBOX_DETAIL_MAX + 32];
			snprintf(line, sizeof line, "%s: %s", layer_names[l], s->detail);
			json_array_append_new(off, json_string(line));
		}
		if (l <= SANDBOX_UTS_NS && !s->on)
			ns = false;
	}
	ca_appendf(note, sizeof note, &n, "sandboxed as uid %u: %d of %d layers on", rep->uid, on,
		   SANDBOX_N_LAYERS);
	if (on < SANDBOX_N_LAYERS) {
		ca_appendf(note, sizeof note, &n, "; off:");
		for (int l = 0, k = 0; l < SANDBOX_N_LAYERS; l++)
			if (!rep->layer[l].on)
				ca_appendf(note, sizeof note, &n, "%s %s", k++ ? "," : "",
					   layer_names[l]);
	}
	json_object_set_new(o, "sandbox", json_true());
	json_object_set_new(o, "namespaces", json_boolean(ns));
	json_object_set_new(o, "seccomp", json_boolean(rep->layer[SANDBOX_SECCOMP].on));
	json_object_set_new(o, "uid", json_integer(rep->uid));
	json_object_set_new(o, "layers", layers);
	json_object_set_new(o, "off", off);
	json_object_set_new(o, "note", json_string(note));
	return o;
}
