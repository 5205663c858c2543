#include "util/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ca_open_regular(const char *path, int *fd_out, size_t *size, struct ca_diag *d)
{
	struct stat st;
	int rc = 0;
	/* O_NONBLOCK: a FIFO is refused below instead of blocking until a writer appears */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	*fd_out = -1;
	if (fd < 0)
		return ca_fail(d, errno == ENOENT ? CA_ERR_NOTFOUND : CA_ERR_IO, "cannot open %s: %s",
			       path, strerror(errno));
	if (fstat(fd, &st) != 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = ca_fail(d, CA_ERR_INVALID, "%s is not a regular file", path);
	else if ((unsigned long long)st.st_size > SIZE_MAX)
		rc = ca_fail(d, CA_ERR_LIMIT, "%s is too large", path);
	if (rc) {
		close(fd);
		return rc;
	}
	*fd_out = fd;
	*size = (size_t)st.st_size;
	return 0;
}

int ca_read_file(const char *path, size_t cap, char **out, size_t *out_len, struct ca_diag *d)
{
	int rc = 0;
	char *buf = NULL;
	size_t len = 0, size = 0;
	int fd;

	*out = NULL;
	if (out_len)
		*out_len = 0;
	rc = ca_open_regular(path, &fd, &size, d);
	if (rc)
		return rc;
	if (size > cap) {
		rc = ca_fail(d, CA_ERR_LIMIT, "%s is %zu bytes, over the limit of %zu", path, size,
			     cap);
		goto out;
	}
	buf = malloc(size + 1);
	if (!buf) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory reading %s", path);
		goto out;
	}
	while (len < size) {
		ssize_t n = read(fd, buf + len, size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = ca_fail(d, CA_ERR_IO, "cannot read %s: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*out = buf;
	buf = NULL;
	if (out_len)
		*out_len = len;
out:
	free(buf);
	close(fd);
	return rc;
}

int ca_write_file_atomic(const char *path, const void *data, size_t len, struct ca_diag *d)
{
	char tmp[PATH_MAX];
	int rc = 0;
	int fd;
	size_t done = 0;

	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
		return ca_fail(d, CA_ERR_LIMIT, "path too long: %s", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return ca_fail(d, CA_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
	/* 0644 whatever the umask: the sandbox's uid reads plans and libraries written here */
	if (fchmod(fd, 0644) != 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot chmod %s: %s", tmp, strerror(errno));
	while (rc == 0 && done < len) {
		ssize_t n = write(fd, (const char *)data + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = ca_fail(d, CA_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
			break;
		}
		done += (size_t)n;
	}
	if (close(fd) != 0 && rc == 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
	if (rc == 0 && rename(tmp, path) != 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
	if (rc != 0)
		unlink(tmp);
	return rc;
}

int ca_mkdirs(const char *path, unsigned mode, struct ca_diag *d)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof buf)
		return ca_fail(d, CA_ERR_INVALID, "bad directory path '%s'", path);
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char saved = buf[i];
		buf[i] = '\0';
		if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
			return ca_fail(d, CA_ERR_IO, "cannot create directory %s: %s", buf,
				       strerror(errno));
		buf[i] = saved;
	}
	if (!ca_is_dir(path))
		return ca_fail(d, CA_ERR_IO, "%s exists and is not a directory", path);
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* Number of components of path, not counting empty ones ("//") and "."; -1 if one is "..". */
static int path_components(const char *path)
{
	int n = 0;
	const char *p = path;

	while (*p) {
		const char *end;
		size_t len;
		while (*p == '/')
			p++;
		if (!*p)
			break;
		end = strchr(p, '/');
		if (!end)
			end = p + strlen(p);
		len = (size_t)(end - p);
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return -1;
		if (!(len == 1 && p[0] == '.'))
			n++;
		p = end;
	}
	return n;
}

int ca_remove_tree(const char *path, struct ca_diag *d)
{
	int comps = path_components(path);

	/* Guard: "", "/", "//", ".", "/tmp", "/tmp/..", "a/../.." and the like are refused. */
	if (comps <= 0 || (path[0] == '/' && comps < 2))
		return ca_fail(d, CA_ERR_INVALID, "refusing to remove '%s'", path);
	if (!ca_is_dir(path) && !ca_is_file(path))
		return 0;
	if (nftw(path, remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0)
		return ca_fail(d, CA_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
	return 0;
}

bool ca_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool ca_is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ca_path_join(char *out, size_t out_size, const char *a, const char *b)
{
	int n;
	if (b[0] == '/' || a[0] == '\0')
		n = snprintf(out, out_size, "%s", b);
	else
		n = snprintf(out, out_size, "%s%s%s", a, a[strlen(a) - 1] == '/' ? "" : "/", b);
	return n < 0 || (size_t)n >= out_size ? CA_ERR_LIMIT : 0;
}

int ca_make_temp_dir(const char *base, const char *prefix, char *out, size_t out_size,
		     struct ca_diag *d)
{
	int rc = ca_mkdirs(base, 0700, d);
	if (rc)
		return rc;
	if (snprintf(out, out_size, "%s/%sXXXXXX", base, prefix) >= (int)out_size)
		return ca_fail(d, CA_ERR_LIMIT, "temporary path too long under %s", base);
	if (!mkdtemp(out))
		return ca_fail(d, CA_ERR_IO, "cannot create a temporary directory in %s: %s", base,
			       strerror(errno));
	return 0;
}

int ca_cache_dir(char *out, size_t out_size, struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_CACHE");
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	int n;

	if (env && env[0])
		n = snprintf(out, out_size, "%s", env);
	else if (xdg && xdg[0])
		n = snprintf(out, out_size, "%s/cuda-agent", xdg);
	else if (home && home[0])
		n = snprintf(out, out_size, "%s/.cache/cuda-agent", home);
	else
		n = snprintf(out, out_size, "/tmp/cuda-agent-cache-%ld", (long)getuid());
	if (n < 0 || (size_t)n >= out_size)
		return ca_fail(d, CA_ERR_LIMIT, "cache directory path too long");
	return ca_mkdirs(out, 0755, d);
}

int ca_realpath(const char *path, char *out, size_t out_size, struct ca_diag *d)
{
	char buf[PATH_MAX];
	if (!realpath(path, buf))
		return ca_fail(d, errno == ENOENT ? CA_ERR_NOTFOUND : CA_ERR_IO, "%s: %s", path,
			       strerror(errno));
	if (strlen(buf) >= out_size)
		return ca_fail(d, CA_ERR_LIMIT, "path too long: %s", buf);
	memcpy(out, buf, strlen(buf) + 1);
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_suffix(const char *name, const char *const *suffixes)
{
	size_t len = strlen(name);
	if (!suffixes)
		return true;
	for (; *suffixes; suffixes++) {
		size_t sl = strlen(*suffixes);
		if (len > sl && strcmp(name + len - sl, *suffixes) == 0)
			return true;
	}
	return false;
}

int ca_list_files(const char *dir, const char *const *suffixes, size_t max_files, char ***names,
		  size_t *count, struct ca_diag *d)
{
	int rc = 0;
	DIR *dp = opendir(dir);
	char **list = NULL;
	size_t n = 0;
	struct dirent *ent;

	*names = NULL;
	*count = 0;
	if (!dp)
		return ca_fail(d, errno == ENOENT ? CA_ERR_NOTFOUND : CA_ERR_IO, "cannot open %s: %s",
			       dir, strerror(errno));
	list = calloc(max_files ? max_files : 1, sizeof *list);
	if (!list) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing %s", dir);
		goto out;
	}
	while ((ent = readdir(dp)) != NULL) {
		char full[PATH_MAX];
		if (ent->d_name[0] == '.' || !has_suffix(ent->d_name, suffixes))
			continue;
		if (ca_path_join(full, sizeof full, dir, ent->d_name) != 0 || !ca_is_file(full))
			continue;
		if (n == max_files) {
			rc = ca_fail(d, CA_ERR_LIMIT, "%s holds more than %zu files", dir, max_files);
			goto out;
		}
		list[n] = strdup(ent->d_name);
		if (!list[n]) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing %s", dir);
			goto out;
		}
		n++;
	}
	qsort(list, n, sizeof *list, name_cmp);
	*names = list;
	*count = n;
	list = NULL;
out:
	if (list)
		ca_free_names(list, n);
	closedir(dp);
	return rc;
}

void ca_free_names(char **names, size_t count)
{
	if (!names)
		return;
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

int ca_install_root(char *out, size_t out_size, struct ca_diag *d)
{
	const char *env = getenv("CUDA_AGENT_ROOT");
	char exe[PATH_MAX];
	ssize_t n;

	if (env && env[0])
		return ca_realpath(env, out, out_size, d);
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return ca_fail(d, CA_ERR_IO, "cannot find the running executable: %s",
			       strerror(errno));
	exe[n] = '\0';
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(exe, '/');
		if (!slash || slash == exe)
			return ca_fail(d, CA_ERR_NOTFOUND, "cannot derive the install root from %s",
				       exe);
		*slash = '\0';
	}
	if (strlen(exe) >= out_size)
		return ca_fail(d, CA_ERR_LIMIT, "install root path too long");
	memcpy(out, exe, strlen(exe) + 1);
	return 0;
}

int ca_python_dir(char *out, size_t out_size, const char *who, struct ca_diag *d)
{
	char root[PATH_MAX];
	int rc = ca_install_root(root, sizeof root, d);
	if (rc)
		return rc;
	if (ca_path_join(out, out_size, root, "python"))
		return ca_fail(d, CA_ERR_LIMIT, "install root path too long");
	if (who && !ca_is_dir(out))
		return ca_fail(d, CA_ERR_NOTFOUND,
			       "%s needs cuda-agent's python/ folder: %s is missing (set "
			       "CUDA_AGENT_ROOT)",
			       who, out);
	return 0;
}

void ca_file_tail(const char *path, int max_lines, char *out, size_t out_size)
{
	char buf[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t size;
	ssize_t n;
	int lines = 0;
	ssize_t start;

	out[0] = '\0';
	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)sizeof buf - 1)
		lseek(fd, size - (off_t)sizeof buf + 1, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	for (start = n - 1; start >= 0; start--)
		if (buf[start] == '\n' && ++lines >= max_lines)
			break;
	snprintf(out, out_size, "%s", buf + start + 1);
}

bool ca_find_in_path(const char *dirs, const char *name, char *out, size_t out_size)
{
	const char *path = dirs ? dirs : getenv("PATH");
	while (path && *path) {
		size_t n = strcspn(path, ":");
		if (n > 0 && snprintf(out, out_size, "%.*s/%s", (int)n, path, name) < (int)out_size &&
		    access(out, X_OK) == 0 && ca_is_file(out))
			return true;
		path += n;
		if (*path == ':')
			path++;
	}
	return false;
}
