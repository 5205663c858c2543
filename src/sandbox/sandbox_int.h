/* sandbox_int: what the sandbox's parts share (not for other subsystems): the plan the parent
 * prepares before clone (plan.c), the child that applies it between clone and execve (child.c),
 * the cgroup leaf (cgroup.c), and the parent that starts and watches it (sandbox.c). */
#ifndef CA_SANDBOX_SANDBOX_INT_H
#define CA_SANDBOX_SANDBOX_INT_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"

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
enum { STAGE_SETUP = 1, STAGE_EXEC = 2, STAGE_REQUIRE = 3 };

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
	bool minimal_etc;              /* opts->minimal_etc: only SANDBOX_MINIMAL_ETC of /etc */
	bool kill_with_parent;         /* opts->kill_with_parent */
	char *exec_path;               /* argv[0] in a page of its own (see seccomp.c); or NULL */
	size_t exec_map_len;
	const char *cwd;
	uint64_t tmp_bytes;
	uint64_t rl_cpu, rl_fsize, rl_nofile, rl_nproc, rl_as;
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
	unsigned require; /* opts->require: SANDBOX_BIT()s the child checks before execve */
	/* per attempt */
	bool mount_ns;
	unsigned long ns; /* the CLONE_NEW* flags of this attempt (user excluded) */
	int in_fd, out_fd, err_fd, sock;
	const int *pass_fds;
	size_t n_pass_fds;
	struct child_msg msg; /* the child's record (the child writes its copy) */
};

_Noreturn void sandbox_child_main(struct plan *p);
void sandbox_fmt_bytes(char *out, size_t size, uint64_t n);
int sandbox_map_exec_path(struct plan *p, const char *path);
int sandbox_plan_binds(struct sandbox *sb, struct plan *p, const struct sandbox_opts *o, bool root,
		       struct ca_diag *d);
int sandbox_plan_env(struct plan *p, const struct sandbox_opts *o, struct ca_diag *d);
void sandbox_plan_free(struct plan *p);
int sandbox_plan_landlock(struct plan *p);
int sandbox_plan_scratch(const struct plan *p, const char *dir, const char *what, bool root,
			 struct ca_diag *d);
int sandbox_plan_system(struct plan *p);
void sandbox_set_layer(struct sandbox_report *rep, enum sandbox_layer l, bool on, const char *fmt,
		       ...) __attribute__((format(printf, 4, 5)));

/* The cgroup v2 leaf of one child (cgroup.c). */
/* Makes the leaf under the supervisor's own cgroup with the limits (the cgroup layer of the
 * report says what happened); nothing when cgroup v2 is not writable. */
void sandbox_cgroup_prepare(struct sandbox *sb, const struct sandbox_opts *o, uint64_t memory_max,
			    uint64_t pids_max);
/* Removes the leaf (after its processes ended). */
void sandbox_cgroup_remove(struct sandbox *sb);
/* Moves pid into the leaf; when that fails the cgroup layer is off. */
void sandbox_cgroup_join(struct sandbox *sb, pid_t pid);
/* Writes s to a control file: 0, or -1 with errno. */
int sandbox_write_str(const char *path, const char *s);

#endif
