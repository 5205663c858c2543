/* plan: everything the sandbox's child needs, prepared by the parent before clone (sandbox_int.h):
 * the mounts, the environment, the scratch places, Landlock's paths. */
#include "sandbox/sandbox_int.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/wx.h"
#include "util/str.h"

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

void sandbox_plan_free(struct plan *p)
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

void sandbox_fmt_bytes(char *out, size_t size, uint64_t n)
{
	if (n >= (1ull << 30) && n % (1ull << 30) == 0)
		snprintf(out, size, "%llu GiB", (unsigned long long)(n >> 30));
	else if (n >= (1ull << 20) && n % (1ull << 20) == 0)
		snprintf(out, size, "%llu MiB", (unsigned long long)(n >> 20));
	else
		snprintf(out, size, "%llu bytes", (unsigned long long)n);
}

void sandbox_set_layer(struct sandbox_report *rep, enum sandbox_layer l, bool on, const char *fmt,
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
int sandbox_plan_system(struct plan *p)
{
	static const char *const dirs[] = {"/usr", "/etc",   "/opt",   "/bin",    "/sbin",
					   "/lib", "/lib64", "/lib32", "/libx32", NULL};
	static const char *const etc[] = {SANDBOX_MINIMAL_ETC, NULL};
	static const char *const devs[] = {"/dev/null",   "/dev/zero",    "/dev/full",
					   "/dev/random", "/dev/urandom", NULL};
	int rc;

	for (const char *const *dir = dirs; *dir; dir++) {
		struct stat st;
		if (lstat(*dir, &st) != 0)
			continue;
		if (p->minimal_etc && strcmp(*dir, "/etc") == 0) {
			/* an empty /etc with the few entries compilers read */
			if ((rc = plan_add(p, (struct mnt){.kind = MK_DIR, .dst = "/etc"})))
				return rc;
			for (const char *const *e = etc; *e; e++)
				if ((rc = plan_add(p, (struct mnt){.kind = MK_BIND,
								   .src = *e,
								   .dst = *e,
								   .optional = true})))
					return rc;
			continue;
		}
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
int sandbox_plan_scratch(const struct plan *p, const char *dir, const char *what, bool root,
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
int sandbox_map_exec_path(struct plan *p, const char *path)
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
int sandbox_plan_binds(struct sandbox *sb, struct plan *p, const struct sandbox_opts *o, bool root,
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
int sandbox_plan_landlock(struct plan *p)
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

int sandbox_plan_env(struct plan *p, const struct sandbox_opts *o, struct ca_diag *d)
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
