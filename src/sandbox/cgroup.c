/* cgroup: the sandbox's cgroup v2 leaf (memory.max, pids.max, no swap) made for one child and
 * removed after it (sandbox_int.h). */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>

#include "util/log.h"
#include "util/str.h"

int sandbox_write_str(const char *path, const char *s)
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
void sandbox_cgroup_prepare(struct sandbox *sb, const struct sandbox_opts *o, uint64_t memory_max,
			    uint64_t pids_max)
{
	static unsigned counter;
	const char *root = o->cgroup_root ? o->cgroup_root : "/sys/fs/cgroup";
	struct sandbox_report *rep = &sb->report;
	struct statfs sf;
	char path[PATH_MAX], ctl[1024], file[PATH_MAX + 32], mem[32], detail[SANDBOX_DETAIL_MAX];
	size_t off = 0;

	if (o->disable & SANDBOX_BIT(SANDBOX_CGROUP)) {
		sandbox_set_layer(rep, SANDBOX_CGROUP, false, "disabled by the caller");
		return;
	}
	if (statfs(root, &sf) != 0) {
		sandbox_set_layer(rep, SANDBOX_CGROUP, false, "cgroup v2 not available: %s: %s", root,
			  strerror(errno));
		return;
	}
	if (sf.f_type != CGROUP2_SUPER_MAGIC) {
		sandbox_set_layer(
			rep, SANDBOX_CGROUP, false,
			"cgroup v2 not available: %s is not a cgroup2 mount (cgroup v1 or hybrid)",
			root);
		return;
	}
	if (access(root, W_OK) != 0) {
		sandbox_set_layer(rep, SANDBOX_CGROUP, false,
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
		(void)sandbox_write_str(file, "+memory");
		(void)sandbox_write_str(file, "+pids");
		if (!read_small(file, ctl, sizeof ctl))
			ctl[0] = '\0';
	}
	if (!has_word(ctl, "memory")) {
		sandbox_set_layer(rep, SANDBOX_CGROUP, false,
			  "cgroup v2 not available: the memory controller is not enabled in %s",
			  root);
		return;
	}
	snprintf(path, sizeof path, "%s/cuda-agent-%d-%u", root, (int)getpid(),
		 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
	if (mkdir(path, 0755) != 0) {
		sandbox_set_layer(rep, SANDBOX_CGROUP, false,
			  "cgroup v2 not available: cannot create %s: %s", path, strerror(errno));
		return;
	}
	if (memory_max != SANDBOX_UNLIMITED) {
		char v[32];
		snprintf(v, sizeof v, "%llu", (unsigned long long)memory_max);
		snprintf(file, sizeof file, "%s/memory.max", path);
		if (sandbox_write_str(file, v) != 0) {
			sandbox_set_layer(rep, SANDBOX_CGROUP, false, "cannot write %s: %s", file,
				  strerror(errno));
			(void)rmdir(path);
			return;
		}
		snprintf(file, sizeof file, "%s/memory.swap.max", path);
		(void)sandbox_write_str(file, "0");
		sandbox_fmt_bytes(mem, sizeof mem, memory_max);
		ca_appendf(detail, sizeof detail, &off, "memory.max %s", mem);
	} else {
		ca_appendf(detail, sizeof detail, &off, "memory.max not set");
	}
	if (pids_max != SANDBOX_UNLIMITED && has_word(ctl, "pids")) {
		char v[32];
		snprintf(v, sizeof v, "%llu", (unsigned long long)pids_max);
		snprintf(file, sizeof file, "%s/pids.max", path);
		if (sandbox_write_str(file, v) == 0)
			ca_appendf(detail, sizeof detail, &off, ", pids.max %s", v);
	}
	ca_appendf(detail, sizeof detail, &off, " in %s", path);
	ca_strlcpy(sb->cgroup, path, sizeof sb->cgroup);
	sandbox_set_layer(rep, SANDBOX_CGROUP, true, "%s", detail);
}

void sandbox_cgroup_remove(struct sandbox *sb)
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
	(void)sandbox_write_str(file, "1");
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

void sandbox_cgroup_join(struct sandbox *sb, pid_t pid)
{
	char procs[PATH_MAX + 32], v[32];
	if (!sb->cgroup[0])
		return;
	snprintf(procs, sizeof procs, "%s/cgroup.procs", sb->cgroup);
	snprintf(v, sizeof v, "%d", (int)pid);
	if (sandbox_write_str(procs, v) != 0) {
		sandbox_set_layer(&sb->report, SANDBOX_CGROUP, false, "cannot move the child into %s: %s",
				  sb->cgroup, strerror(errno));
		sandbox_cgroup_remove(sb);
	}
}

/* Reads the child's records until end of file (it exec'ed, or died): its report (the layers it
 * decided, into sb->report) or its error (into why, and the stage it failed at). -1 when the
 * deadline passed first. */
