/* scratch: what a sandboxed program left in its scratch directories (/tmp and /dev/shm bound from
 * the caller's directories: sandbox_opts.tmp_dir / shm_dir), listed after it ended. The caller
 * decides what an entry means; for the GPU worker any entry is a violation: a candidate may write
 * its outputs, nothing else. See sandbox.h for the contract. */
#include "sandbox/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/str.h"

/* Entries the worker's own stack (CUDA driver and runtime, CUPTI, NVML) is known to leave in
 * /tmp or /dev/shm, as fnmatch(3) patterns on the path inside the sandbox (FNM_PATHNAME; a
 * directory that matches is allowed with everything in it). None is known yet: the worker runs
 * with HOME=/tmp and CUDA_CACHE_DISABLE=1 (no JIT cache under ~/.nv). If a GPU host shows one,
 * add its pattern here, e.g. "/dev/shm/cuda.shm.*": that is the whole change. */
static const char *const gpu_stack_files[] = {
	NULL,
};

struct walk {
	struct sandbox_scratch_list *out;
	const char *mp; /* mount points, '\0'-separated */
	size_t mp_len;
	const char *const *allow;
	char path[PATH_MAX]; /* the entry being looked at, as seen inside */
};

static void record(struct sandbox_scratch_list *out, const char *path)
{
	if (out->found < SANDBOX_SCRATCH_NAMED)
		ca_printable(out->named[out->found], path, sizeof out->named[0]);
	out->found++;
}

/* path is one of the sandbox's mount points, or a directory on the way to one. */
static bool on_mount_path(const struct walk *w, const char *path)
{
	size_t n = strlen(path);
	for (size_t off = 0; off < w->mp_len;) {
		const char *m = w->mp + off;
		size_t k = strnlen(m, w->mp_len - off);
		if (k >= n && memcmp(m, path, n) == 0 && (k == n || m[n] == '/'))
			return true;
		off += k + 1;
	}
	return false;
}

static bool allowed(const struct walk *w, const char *path)
{
	for (const char *const *a = w->allow; a && *a; a++)
		if (fnmatch(*a, path, FNM_PATHNAME) == 0)
			return true;
	return false;
}

/* A subdirectory, opened without following a symlink. One the supervisor cannot read is made
 * readable when it owns it (a supervisor that is not root runs the program as itself, and the
 * program may have hidden something behind a mode of 000). */
static int open_subdir(int parent, const char *name)
{
	int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(parent, name, flags);
	if (fd < 0 && errno == EACCES && fchmodat(parent, name, 0700, 0) == 0)
		fd = openat(parent, name, flags);
	return fd;
}

/* Lists the directory open as fd (w->path, len bytes, `depth` levels below the scratch
 * directory); closes fd. */
static void walk_dir(struct walk *w, int fd, size_t len, int depth)
{
	struct sandbox_scratch_list *out = w->out;
	DIR *dir = fdopendir(fd);
	struct dirent *e;

	if (!dir) {
		close(fd);
		out->incomplete = true;
		return;
	}
	while ((e = readdir(dir)) != NULL) {
		const char *name = e->d_name;
		size_t k = strlen(name);
		struct stat st;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (out->visited >= SANDBOX_SCRATCH_MAX_ENTRIES) {
			out->incomplete = true;
			break;
		}
		out->visited++;
		if (len + 1 + k >= sizeof w->path) {
			record(out, w->path); /* named by its directory */
			out->incomplete = true;
			continue;
		}
		w->path[len] = '/';
		memcpy(w->path + len + 1, name, k + 1);
		if (fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			memset(&st, 0, sizeof st); /* counted, of no known type */
		if (!allowed(w, w->path)) {
			bool dir_entry = S_ISDIR(st.st_mode);
			bool mount_point =
				on_mount_path(w, w->path) &&
				(dir_entry || (S_ISREG(st.st_mode) && st.st_size == 0));
			if (!mount_point)
				record(out, w->path);
			if (dir_entry && depth + 1 >= SANDBOX_SCRATCH_MAX_DEPTH) {
				out->incomplete = true;
			} else if (dir_entry) {
				int sub = open_subdir(dirfd(dir), name);
				if (sub >= 0) {
					walk_dir(w, sub, len + 1 + k, depth + 1);
				} else {
					out->incomplete = true;
					if (mount_point) /* what it hides is unknown */
						record(out, w->path);
				}
			}
		}
		w->path[len] = '\0';
	}
	closedir(dir);
}

int sandbox_scratch_list(const char *host_dir, const char *inside, const char *mount_points,
			 size_t mp_len, const char *const *allow, struct sandbox_scratch_list *out,
			 struct ca_diag *d)
{
	struct walk *w = NULL;
	char shown[256];
	int fd;

	if (!host_dir || !inside || strlen(inside) >= PATH_MAX / 2)
		return ca_fail(d, CA_ERR_INVALID, "sandbox: bad scratch directory");
	fd = open(host_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES && chmod(host_dir, 0700) == 0) /* see open_subdir */
		fd = open(host_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return ca_fail(d, CA_ERR_IO, "sandbox: cannot list %s (%s): %s", inside,
			       ca_printable(shown, host_dir, sizeof shown), strerror(errno));
	w = calloc(1, sizeof *w);
	if (!w) {
		close(fd);
		return ca_fail(d, CA_ERR_NOMEM, "sandbox: out of memory");
	}
	w->out = out;
	w->mp = mount_points;
	w->mp_len = mount_points ? mp_len : 0;
	w->allow = allow;
	ca_strlcpy(w->path, inside, sizeof w->path);
	walk_dir(w, fd, strlen(w->path), 0);
	free(w);
	return 0;
}

int sandbox_scratch_check(const struct sandbox *sb, size_t *found, char *list, size_t size,
			  struct ca_diag *d)
{
	static const char *const inside[2] = {"/tmp", "/dev/shm"};
	struct sandbox_scratch_list l;
	size_t off = 0, shown;
	int rc = 0;

	memset(&l, 0, sizeof l);
	*found = 0;
	if (size)
		list[0] = '\0';
	for (int i = 0; i < 2 && rc == 0; i++)
		if (sb->scratch[i][0])
			rc = sandbox_scratch_list(sb->scratch[i], inside[i], sb->mount_points,
						  sb->mount_points_len, gpu_stack_files, &l, d);
	if (rc)
		return rc;
	*found = l.found;
	shown = l.found < SANDBOX_SCRATCH_NAMED ? l.found : SANDBOX_SCRATCH_NAMED;
	for (size_t i = 0; i < shown; i++)
		ca_appendf(list, size, &off, "%s%s", i ? ", " : "", l.named[i]);
	if (l.found > shown)
		ca_appendf(list, size, &off, " and %zu more", l.found - shown);
	if (l.found && l.incomplete)
		ca_appendf(list, size, &off, " (not all listed)");
	return 0;
}
