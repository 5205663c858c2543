/* landlock: the sandbox's Landlock layer (see wx.h for sandbox_landlock_apply's contract and
 * sandbox.h, "landlock", for what callers see).
 *
 * Runs in the child between clone and execve: raw system calls, no allocation. The ruleset
 * handles write rights only; what the program may read or execute is already decided by the
 * mount view (read-only binds, noexec). Its point beyond the read-only mounts: /proc is a live
 * filesystem the sandbox needs (CUDA reads it), and /proc/self/mem (also
 * /proc/<pid>/task/<tid>/mem) writes into any page, executable or not, with FOLL_FORCE:
 * opening it for writing is EACCES here. <linux/landlock.h> of Debian 12 stops at ABI 1: the
 * later rights are defined below. */
#include "sandbox/wx.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/str.h"

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13) /* ABI 2 */
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif

/* Every ABI-1 right that writes (EXECUTE, READ_FILE and READ_DIR are not handled). */
#define LL_WRITE_ABI1                                                                \
	(LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |            \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |            \
	 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |                \
	 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |              \
	 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM)

static const char *errname(int e)
{
	const char *s = strerrordesc_np(e);
	return s ? s : "unknown error";
}

/* Allows `rights` beneath the object `fd` refers to. */
static int add_rule(int ruleset, int fd, uint64_t rights)
{
	struct landlock_path_beneath_attr pb = {.allowed_access = rights, .parent_fd = fd};
	return syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) == 0
		       ? 0
		       : -errno;
}

int sandbox_landlock_apply(const struct sandbox_landlock_path *paths, size_t n, char *detail,
			   size_t size)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	uint64_t dir_rights = LL_WRITE_ABI1, file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE;
	struct landlock_ruleset_attr attr;
	int ruleset = -1, rc = 0, e;
	size_t dirs = 0, files = 0, off = 0;

	detail[0] = '\0';

	if (abi < 0) {
		e = errno;
		snprintf(detail, size, "Landlock not available: %s",
			 e == ENOSYS	   ? "not in this kernel (CONFIG_SECURITY_LANDLOCK)"
			 : e == EOPNOTSUPP ? "disabled at boot (not in lsm=)"
					   : errname(e));
		return -e;
	}
	if (abi >= 2)
		dir_rights |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3) {
		dir_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
		file_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
	}
	memset(&attr, 0, sizeof attr);
	attr.handled_access_fs = dir_rights;
	ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0U);
	if (ruleset < 0) {
		rc = -errno;
		snprintf(detail, size, "landlock_create_ruleset: %s", errname(-rc));
		return rc;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		struct stat st;
		int fd = open(paths[i].path, O_PATH | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT)
				continue; /* an optional bind that was missing */
			rc = -errno;
			snprintf(detail, size, "open %s: %s", paths[i].path, errname(-rc));
			break;
		}
		if (fstat(fd, &st) != 0) {
			rc = -errno;
		} else {
			bool dir = S_ISDIR(st.st_mode);
			rc = add_rule(ruleset, fd, dir && !paths[i].files_only ? dir_rights
									 : file_rights);
			if (!rc && paths[i].files_only)
				files++;
			else if (!rc)
				dirs++; /* a directory, or a writable file bind */
		}
		if (rc)
			snprintf(detail, size, "allow writes under %s: %s", paths[i].path,
				 errname(-rc));
		close(fd);
	}
	/* stdin/stdout/stderr when they are files or devices (pipes, sockets and memfds are not
	 * paths: their reopening is not checked, or cannot be allowed; skipped) */
	for (int fd = 0; fd <= 2 && !rc; fd++) {
		struct stat st;
		if (fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)))
			(void)add_rule(ruleset, fd, file_rights);
	}
	if (!rc && syscall(SYS_landlock_restrict_self, ruleset, 0U) != 0) {
		rc = -errno;
		snprintf(detail, size, "landlock_restrict_self: %s%s", errname(-rc),
			 rc == -EPERM ? " (needs no_new_privs)" : "");
	}
	close(ruleset);
	if (rc)
		return rc;
	/* "ABI 7: writes only beneath /tmp, /dev/shm and 1 more writable bind, to files beneath
	 * /dev and to stdio files; /proc/self/mem is not writable" */
	ca_appendf(detail, size, &off, "ABI %ld: writes only beneath", abi);
	size_t named = 0;
	bool proc = false;
	for (size_t i = 0; i < n && named < 2; i++)
		if (!paths[i].files_only)
			ca_appendf(detail, size, &off, "%s %s", named++ ? "," : "", paths[i].path);
	if (dirs > named)
		ca_appendf(detail, size, &off, " and %zu more writable bind%s", dirs - named,
			   dirs - named == 1 ? "" : "s");
	if (files)
		ca_appendf(detail, size, &off, ", to files beneath");
	for (size_t i = 0, k = 0; i < n; i++)
		if (paths[i].files_only) {
			ca_appendf(detail, size, &off, "%s %s", k++ ? " and" : "", paths[i].path);
			proc = proc || strcmp(paths[i].path, "/proc") == 0;
		}
	if (proc)
		ca_appendf(detail, size, &off,
			   " (CUDA writes /proc/self/task/*/comm): /proc/self/mem stays writable");
	else
		ca_appendf(detail, size, &off,
			   " and to stdio files; /proc/self/mem is not writable");
	return 0;
}
