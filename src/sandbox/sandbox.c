/* sandbox: namespaces, a fresh root, no_new_privs, capabilities, rlimits, cgroup v2, seccomp and
 * the W^X layers (seccomp_wx, mdwe, noexec, landlock: wx.c, landlock.c) around one child
 * program. See sandbox.h for the contract.
 *
 * Shape. The supervisor (parent) prepares everything (mount plan, environment, seccomp BPF),
 * then starts the child with a raw clone() carrying the namespace flags, so the child is PID 1
 * of its PID namespace. Parent and child talk over a SOCK_SEQPACKET socketpair: the parent
 * writes the user namespace's id maps and moves the child into its cgroup, then sends "go"; the
 * child sets itself up and sends one record (its half of the report, or an error), then execs.
 * The child's end is close-on-exec, so EOF after a report means the exec succeeded.
 *
 * Parts: the plan (plan.c), the child (child.c), the cgroup leaf (cgroup.c), the parent (this
 * file); what they share is in sandbox_int.h. */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "sandbox/sandbox_int.h"
#include "sandbox/wx.h"
#include "util/clock.h"
#include "util/str.h"

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

static int write_id_maps(pid_t pid, const struct plan *p, bool root, char *why, size_t why_size)
{
	char path[64], map[64];
	if (!root) {
		snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
		if (sandbox_write_str(path, "deny") != 0 && errno != ENOENT) {
			snprintf(why, why_size, "cannot write %s: %s", path, strerror(errno));
			return -1;
		}
	}
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", p->uid, p->uid);
	if (sandbox_write_str(path, map) != 0) {
		snprintf(why, why_size, "cannot write uid_map: %s", strerror(errno));
		return -1;
	}
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", p->gid, p->gid);
	if (sandbox_write_str(path, map) != 0) {
		snprintf(why, why_size, "cannot write gid_map: %s", strerror(errno));
		return -1;
	}
	return 0;
}

enum attempt_rc { ATT_OK, ATT_CLONE, ATT_MAPS, ATT_SETUP, ATT_FATAL };

/* One clone + setup. On ATT_OK the child has exec'ed (or is about to: its record was a report
 * and the channel closed). *why explains any other outcome. */
/* Moves the child into the sandbox's cgroup; when that fails the cgroup layer is off. */
static int read_records(int fd, struct plan *p, struct sandbox *sb, struct child_msg *msg,
			double deadline, bool *got_report, bool *got_error, int *stage, char *why,
			size_t why_size)
{
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		double left = deadline - ca_now();
		if (left <= 0)
			return -1;
		int pr = poll(&pf, 1, (int)(left * 1000) + 1);
		if (pr <= 0)
			continue;
		ssize_t n = recv(fd, msg, sizeof *msg, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0; /* EOF: exec'ed, or died */
		if ((size_t)n != sizeof *msg)
			continue;
		if (msg->kind == MSG_REPORT) {
			*got_report = true;
			p->seccomp_alt = msg->seccomp_alt;
			for (int l = 0; l < SANDBOX_N_LAYERS; l++)
				if (msg->decided[l])
					sb->report.layer[l] = msg->layer[l];
		} else if (msg->kind == MSG_ERROR) {
			*got_error = true;
			*stage = msg->stage;
			msg->text[sizeof msg->text - 1] = '\0';
			snprintf(why, why_size, "%s", msg->text);
		}
	}
}

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
	p->ns = ns;
	p->set_ids = user || root;
	p->can_setgroups = root;
	p->uts = (ns & CLONE_NEWUTS) != 0;

	pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD | ns | (user ? CLONE_NEWUSER : 0),
			     NULL, NULL, NULL, NULL);
	if (pid == 0) {
		close(sv[0]);
		sandbox_child_main(p);
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
	sandbox_cgroup_join(sb, pid);
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
	if (read_records(sv[0], p, sb, msg, deadline, &got_report, &got_error, &stage, why,
			 why_size) != 0) {
		snprintf(why, why_size, "sandbox: the setup did not finish within %.0f s", timeout_s);
		*err_code = CA_ERR_TIMEOUT;
		rc = ATT_FATAL;
		goto kill_child;
	}
	if (got_error) {
		rc = stage == STAGE_SETUP ? ATT_SETUP : ATT_FATAL;
		if (stage == STAGE_REQUIRE)
			*err_code = CA_ERR_UNSUPPORTED;
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
				sandbox_set_layer(rep, SANDBOX_USER_NS, true,
					  "uid %u and gid %u mapped to themselves, nothing else "
					  "mapped",
					  p->uid, p->gid);
			for (int l = SANDBOX_MOUNT_NS; l <= SANDBOX_UTS_NS; l++)
				if (tr->ns & ns_flag[l])
					sandbox_set_layer(rep, (enum sandbox_layer)l, true, "%s",
						  ns_detail[l]);
			return 0;
		case ATT_CLONE:
		case ATT_MAPS:
			if (tr->user) {
				sandbox_set_layer(rep, SANDBOX_USER_NS, false, "%s", why);
			} else if (tr->ns) {
				for (int l = SANDBOX_MOUNT_NS; l <= SANDBOX_UTS_NS; l++)
					if (!(dis & SANDBOX_BIT(l)))
						sandbox_set_layer(rep, (enum sandbox_layer)l, false,
							  "%s without a user namespace", why);
			}
			break;
		case ATT_SETUP:
			/* A step that works as root may be refused inside a user namespace (a
			 * /proc mount, ...): then go on without one. */
			if (tr->user && root) {
				sandbox_set_layer(rep, SANDBOX_USER_NS, false,
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
		sandbox_set_layer(rep, SANDBOX_SECCOMP_WX, false, "no seccomp filter: %s",
			  rep->layer[SANDBOX_SECCOMP].detail);
		return;
	}
	sandbox_set_layer(rep, SANDBOX_SECCOMP_WX, true,
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
		sandbox_set_layer(rep, SANDBOX_SECCOMP_WX, false, "%s", sd.msg);
		p->wx_seccomp = spec.wx = false;
		rc = sandbox_seccomp_build_spec(&spec, &p->filter, &p->filter_len, &p->rules,
						&p->wx_rules, &sd);
	}
	if (rc == CA_ERR_NOMEM)
		return ca_fail(d, rc, "sandbox: %s", sd.msg);
	if (rc != 0) {
		sandbox_set_layer(rep, SANDBOX_SECCOMP, false, "%s", sd.msg);
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

/* Every layer starts "disabled by the caller" or "not attempted"; layers that go with another
 * choice count as disabled by the caller (strict ignores them): the W^X layers a shell does
 * without, and seccomp_wx without seccomp. Returns the disabled set. */
static unsigned disabled_layers(struct sandbox_report *rep, const struct sandbox_opts *o)
{
	unsigned dis = o->disable & DISABLEABLE;
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (dis & SANDBOX_BIT(l))
			sandbox_set_layer(rep, (enum sandbox_layer)l, false, "disabled by the caller");
		else
			sandbox_set_layer(rep, (enum sandbox_layer)l, false, "not attempted");
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (o->allow_processes && (SHELL_OFF & SANDBOX_BIT(l)) && !(dis & SANDBOX_BIT(l))) {
			dis |= SANDBOX_BIT(l);
			sandbox_set_layer(rep, (enum sandbox_layer)l, false, SHELL_OFF_WHY);
		}
	if ((dis & SANDBOX_BIT(SANDBOX_SECCOMP)) && !(dis & SANDBOX_BIT(SANDBOX_SECCOMP_WX))) {
		dis |= SANDBOX_BIT(SANDBOX_SECCOMP_WX);
		sandbox_set_layer(rep, SANDBOX_SECCOMP_WX, false, "disabled with the seccomp layer");
	}
	return dis;
}

/* The plan's limits, ids and layer switches from the options (defaults where 0). */
static void plan_settings(struct plan *p, const struct sandbox_opts *o, unsigned dis, bool root)
{
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
	p->rl_as = o->as_bytes ? o->as_bytes : SANDBOX_UNLIMITED;
	p->rlimits = !(dis & SANDBOX_BIT(SANDBOX_RLIMITS));
	p->uid = root ? (o->uid ? o->uid : DEFAULT_RUN_ID) : (unsigned)geteuid();
	p->gid = root ? (o->gid ? o->gid : DEFAULT_RUN_ID) : (unsigned)getegid();
	p->cgroup_ns = !(dis & SANDBOX_BIT(SANDBOX_CGROUP_NS));
	p->tmp_dir = o->tmp_dir;
	p->shm_dir = o->shm_dir;
	p->no_gpu = o->no_gpu;
	p->minimal_etc = o->minimal_etc;
	p->kill_with_parent = o->kill_with_parent;
	p->wx_seccomp = !(dis & SANDBOX_BIT(SANDBOX_SECCOMP_WX));
	p->mdwe = !(dis & SANDBOX_BIT(SANDBOX_MDWE));
	p->noexec = !(dis & SANDBOX_BIT(SANDBOX_NOEXEC));
	p->landlock = !(dis & SANDBOX_BIT(SANDBOX_LANDLOCK));
	p->in_fd = p->out_fd = p->err_fd = p->sock = -1;
	p->require = o->require & ~dis;
}

/* Mounts, environment, Landlock paths and the seccomp filter: everything the child applies. */
static int plan_everything(struct sandbox *sb, struct plan *p, const struct sandbox_opts *o,
			   unsigned dis, bool root, struct ca_diag *d)
{
	struct sandbox_report *rep = &sb->report;
	int rc;
	if ((rc = sandbox_plan_scratch(p, p->tmp_dir, "tmp", root, d)) != 0 ||
	    (rc = sandbox_plan_scratch(p, p->shm_dir, "shm", root, d)) != 0)
		return rc;
	if ((rc = sandbox_plan_system(p)) != 0)
		return ca_fail(d, rc, "sandbox: out of memory");
	if ((rc = sandbox_plan_binds(sb, p, o, root, d)) != 0 ||
	    (rc = sandbox_plan_env(p, o, d)) != 0)
		return rc;
	if (p->landlock && (rc = sandbox_plan_landlock(p)) != 0)
		return ca_fail(d, rc, "sandbox: out of memory");
	if (!(dis & SANDBOX_BIT(SANDBOX_SECCOMP))) {
		/* with allow_processes execve is not pinned: the child execs argv[0] itself */
		if (!o->allow_processes && sandbox_map_exec_path(p, p->argv[0]) != 0)
			return ca_fail(d, CA_ERR_NOMEM, "sandbox: mmap: %s", strerror(errno));
		if ((rc = plan_seccomp(p, o, rep, d)) != 0)
			return rc;
		if (p->seccomp)
			rep->seccomp_rules = p->rules;
	}
	return 0;
}

/* --strict: a layer that was wanted and did not come on stops the program. */
static int strict_or_stop(struct sandbox *sb, unsigned dis, struct ca_diag *d)
{
	struct sandbox_report *rep = &sb->report;
	char off[1900] = "";
	size_t n = 0;
	for (int l = 0; l < SANDBOX_N_LAYERS; l++)
		if (!rep->layer[l].on && !(dis & SANDBOX_BIT(l)))
			ca_appendf(off, sizeof off, &n, "%s%s (%s)", n ? "; " : "", layer_names[l],
				   rep->layer[l].detail);
	if (n) {
		struct ca_run_result r;
		sandbox_finish(sb, 0, &r);
		return ca_fail(d, CA_ERR_UNSUPPORTED, "sandbox: layers unavailable: %s", off);
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
	unsigned dis;
	unsigned long ns_all = CLONE_NEWNS | CLONE_NEWPID;
	pid_t pid = -1;
	char shown[256];

	memset(sb, 0, sizeof *sb);
	sb->err_from_child = -1;
	sb->child.pid = -1;
	sb->child.to_child = sb->child.from_child = -1;
	dis = disabled_layers(rep, o);
	if (!argv || !argv[0] || argv[0][0] != '/')
		return ca_fail(d, CA_ERR_INVALID,
			       "sandbox: the program must be an absolute path: %s",
			       argv && argv[0] ? ca_printable(shown, argv[0], sizeof shown) : "");

	p = calloc(1, sizeof *p);
	if (!p)
		return ca_fail(d, CA_ERR_NOMEM, "sandbox: out of memory");
	p->argv = argv;
	plan_settings(p, o, dis, root);
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

	if ((rc = plan_everything(sb, p, o, dis, root, d)) != 0)
		goto fail;

	if (o->capture_stderr) {
		int ep[2];
		if (pipe2(ep, O_CLOEXEC) != 0) {
			rc = ca_fail(d, CA_ERR_IO, "sandbox: pipe: %s", strerror(errno));
			goto fail;
		}
		sb->err_from_child = ep[0];
		err_fd = ep[1];
	} else if (stderr_path) {
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
	sandbox_cgroup_prepare(sb, o, o->memory_max ? o->memory_max : DEFAULT_MEMORY_MAX,
		       o->pids_max ? o->pids_max : DEFAULT_PIDS_MAX);

	double timeout = o->setup_timeout_s > 0 ? o->setup_timeout_s : 30.0;
	if ((rc = start_child(sb, p, ns_all, dis, root, timeout, &pid, d)) != 0)
		goto fail;
	if (p->seccomp && rep->layer[SANDBOX_SECCOMP].on) {
		rep->seccomp_rules = p->seccomp_alt ? p->rules_alt : p->rules;
		sandbox_set_layer(rep, SANDBOX_SECCOMP, true, "on (%d rules)", rep->seccomp_rules);
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
	sandbox_plan_free(p);

	return o->strict ? strict_or_stop(sb, dis, d) : 0;

fail:
	for (int i = 0; i < 2; i++) {
		if (in_pipe[i] >= 0)
			close(in_pipe[i]);
		if (out_pipe[i] >= 0)
			close(out_pipe[i]);
	}
	if (err_fd >= 0)
		close(err_fd);
	if (sb->err_from_child >= 0) {
		close(sb->err_from_child);
		sb->err_from_child = -1;
	}
	sandbox_cgroup_remove(sb);
	if (p)
		sandbox_plan_free(p);
	return rc ? rc : CA_ERR_CHILD;
}

void sandbox_finish(struct sandbox *sb, double grace_s, struct ca_run_result *r)
{
	if (sb->err_from_child >= 0) {
		close(sb->err_from_child);
		sb->err_from_child = -1;
	}
	ca_child_finish(&sb->child, grace_s, r);
	sandbox_cgroup_remove(sb);
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
