#include "workspace/workspace.h"
#include "protocol/reasons.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bridge/bridge.h"
#include "task/task.h"
#include "tensor/spec.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

#define SKILL_MAX_BYTES (256u << 10)
#define GENERATED_MAX_BYTES (32u << 20) /* INTERFACE.md for CA_SPEC_MAX_TENSORS x 3 rows */
#define TEMPLATE_LIST_MAX 32            /* tensors per group named in kernel.cu's comment */
#define DESCRIBE_SEED 1                 /* shapes do not depend on it; fixed for a stable file */

/* ---- what the generated files say about a tensor ----------------------------------------- */

struct ctype {
	enum ca_dtype t;
	const char *c;  /* the C/CUDA element type */
	const char *dl; /* DLPack type code and bits */
};

static const struct ctype ctypes[] = {
	{CA_DTYPE_F64, "double", "kDLFloat, 64"},
	{CA_DTYPE_F32, "float", "kDLFloat, 32"},
	{CA_DTYPE_F16, "__half", "kDLFloat, 16"},
	{CA_DTYPE_BF16, "__nv_bfloat16", "kDLBfloat, 16"},
	{CA_DTYPE_I64, "int64_t", "kDLInt, 64"},
	{CA_DTYPE_I32, "int32_t", "kDLInt, 32"},
	{CA_DTYPE_I16, "int16_t", "kDLInt, 16"},
	{CA_DTYPE_I8, "int8_t", "kDLInt, 8"},
	{CA_DTYPE_U8, "uint8_t", "kDLUInt, 8"},
	{CA_DTYPE_BOOL, "bool", "CA_DLPACK_BOOL (6), 8"},
};

static const struct ctype *ctype_of(enum ca_dtype t)
{
	for (size_t i = 0; i < sizeof ctypes / sizeof ctypes[0]; i++)
		if (ctypes[i].t == t)
			return &ctypes[i];
	return NULL;
}

/* A name from the task (untrusted) for a Markdown table cell or a // comment: control
 * characters, '|' and '`' become '?'. */
static const char *safe_name(char *out, size_t size, const char *name)
{
	ca_printable(out, name, size);
	for (char *p = out; *p; p++)
		if (*p == '|' || *p == '`')
			*p = '?';
	return out;
}

static void shape_text(const struct tensor_spec *t, bool strides, char *out, size_t size)
{
	size_t off = 0;
	int64_t stride = 1, st[CA_MAX_DIMS];

	for (int i = t->ndim - 1; i >= 0; i--) {
		st[i] = stride;
		stride *= t->shape[i];
	}
	out[0] = '\0';
	ca_appendf(out, size, &off, "[");
	for (int i = 0; i < t->ndim; i++)
		ca_appendf(out, size, &off, "%s%lld", i ? ", " : "",
			   (long long)(strides ? st[i] : t->shape[i]));
	ca_appendf(out, size, &off, "]");
}

/* How ca_forward reaches the data: "(const float *)args[0].data". */
static void access_text(const struct tensor_spec *t, const char *array, int index, bool writable,
			char *out, size_t size)
{
	const struct ctype *c = ctype_of(t->dtype);
	const char *ct = c ? c->c : "void";
	if (t->on_cpu)
		snprintf(out, size, "*(const %s *)%s[%d].data", ct, array, index);
	else
		snprintf(out, size, "(%s%s *)%s[%d].data", writable ? "" : "const ", ct, array, index);
}

static void table(struct ca_buf *b, const char *title, const struct tensor_spec *t, int n,
		  const char *array, bool writable)
{
	ca_buf_printf(b, "## %s\n\n", title);
	if (n == 0) {
		ca_buf_printf(b, "(none: num_%s is 0)\n\n", array);
		return;
	}
	ca_buf_printf(b, "| index | name | dtype | shape | strides | device | in ca_forward |\n"
		     "| --- | --- | --- | --- | --- | --- | --- |\n");
	for (int i = 0; i < n; i++) {
		char name[CA_SPEC_NAME_MAX], shape[256], strides[256], access[128];
		shape_text(&t[i], false, shape, sizeof shape);
		shape_text(&t[i], true, strides, sizeof strides);
		access_text(&t[i], array, i, writable, access, sizeof access);
		ca_buf_printf(b, "| %d | `%s` | %s | %s | %s | %s | `%s`%s |\n", i,
			  safe_name(name, sizeof name, t[i].name), ca_dtype_torch_name(t[i].dtype),
			  shape, strides, t[i].on_cpu ? "cpu" : "cuda", access,
			  t[i].on_cpu ? " on the host" : "");
	}
	ca_buf_printf(b, "\n");
}

static void dtype_legend(struct ca_buf *b, const struct task_spec *s)
{
	bool used[CA_DTYPE_COUNT] = {false};
	for (int i = 0; i < s->num_args; i++)
		used[s->args[i].dtype] = true;
	for (int i = 0; i < s->num_params; i++)
		used[s->params[i].dtype] = true;
	for (int i = 0; i < s->num_outputs; i++)
		used[s->outputs[i].dtype] = true;
	ca_buf_printf(b, "| dtype | DLTensor.dtype (code, bits), lanes 1 | C/CUDA element type |\n"
		     "| --- | --- | --- |\n");
	for (size_t i = 0; i < sizeof ctypes / sizeof ctypes[0]; i++)
		if (used[ctypes[i].t])
			ca_buf_printf(b, "| %s | %s | `%s`%s |\n", ca_dtype_torch_name(ctypes[i].t),
				  ctypes[i].dl, ctypes[i].c,
				  ctypes[i].t == CA_DTYPE_F16	 ? " (cuda_fp16.h)"
				  : ctypes[i].t == CA_DTYPE_BF16 ? " (cuda_bf16.h)"
				  : ctypes[i].t == CA_DTYPE_BOOL ? " (1 byte, 0 or 1)"
								 : "");
	ca_buf_printf(b, "\n");
}

static const char *plural(int n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

static void interface_text(struct ca_buf *b, const struct task *t, const struct task_spec *s)
{
	char id[CA_TASK_ID_MAX];
	safe_name(id, sizeof id, t->id);
	ca_buf_printf(b, "# Interface of task %s\n\n", id);
	ca_buf_printf(b,
		  "Generated by `cuda-agent workspace new` from this task's model.py (one run of "
		  "forward() by the\ntorch bridge). Read-only, like model.py, task.json and SKILL.md: "
		  "the candidate is only what is\nin `kernels/`.\n\n");
	ca_buf_printf(b, "- task `%s`\n- task hash `%s`\n  (`cuda-agent compile --json` in this "
		     "workspace reports it as `task.hash`; another\n  value means model.py or "
		     "task.json was changed)\n",
		  id, t->hash);
	ca_buf_printf(b, "- precision %s; an output element is correct when `|out - ref| <= atol + "
		     "rtol * |ref|` with\n  atol %g and rtol %g, on every verification trial\n",
		  task_precision_name(t->precision), t->atol, t->rtol);
	ca_buf_printf(b, "- %d %s, %d %s, %d %s\n\n", s->num_args, plural(s->num_args, "arg", "args"),
		  s->num_params, plural(s->num_params, "param", "params"), s->num_outputs,
		  plural(s->num_outputs, "output", "outputs"));

	ca_buf_printf(b, "## The function to implement\n\n"
		     "In `kernels/` (any number of .cu/.cpp files, one library), with C linkage, "
		     "from\n`<cuda_agent/abi.h>`:\n\n```c\n"
		     "int ca_forward(const DLTensor *args, int num_args,     /* num_args == %d */\n"
		     "               const DLTensor *params, int num_params, /* num_params == %d */\n"
		     "               DLTensor *outputs, int num_outputs,     /* num_outputs == %d */\n"
		     "               cudaStream_t stream);\n"
		     "int  ca_setup(const DLTensor *params, int num_params, cudaStream_t stream); "
		     "/* optional */\n"
		     "void ca_teardown(void);                                                     "
		     "/* optional */\n```\n\n",
		  s->num_args, s->num_params, s->num_outputs);
	ca_buf_printf(b, "Enqueue all work on `stream` and return 0; any nonzero return fails the "
		     "evaluation\n(`abi.forward_failed`). `ca_setup` runs untimed whenever the params "
		     "change (handles,\nworkspaces, repacked weights in buffers of your own).\n\n");

	ca_buf_printf(b, "## Reading a tensor\n\n"
		     "Each entry below is one `DLTensor`. Every tensor is compact row-major with "
		     "`byte_offset` 0:\nelement `(i0, i1, ..., ik)` is `data[i0*strides[0] + i1*strides[1] "
		     "+ ... + ik*strides[k]]`,\nstrides in elements as listed (the DLTensor carries "
		     "`shape` and `strides` too). A `cuda` tensor's\n`data` is device memory: touch it in "
		     "kernels only. A `cpu` tensor is a Python number as a 0-d\ntensor in host memory: "
		     "read it in `ca_forward` and pass the value to the kernels.\n"
		     "Args and params are read-only (checksummed after every call). Outputs are "
		     "filled with NaN\n(0xFF bytes for integer types) before every call: write every "
		     "element on every call.\nThe shapes are those of one call of `get_inputs()`; "
		     "checking them in `ca_forward` is cheap.\n\n");
	dtype_legend(b, s);
	table(b, "args: forward()'s arguments, in order", s->args, s->num_args, "args", false);
	table(b, "params: parameters, then buffers, in state_dict() order", s->params,
	      s->num_params, "params", false);
	table(b, "outputs: forward()'s return value, flattened depth-first", s->outputs,
	      s->num_outputs, "outputs", true);
}

static void template_list(struct ca_buf *b, const char *title, const struct tensor_spec *t, int n,
			  const char *array, bool writable)
{
	ca_buf_printf(b, "// %s:%s\n", title, n ? "" : " none");
	for (int i = 0; i < n && i < TEMPLATE_LIST_MAX; i++) {
		char name[CA_SPEC_NAME_MAX], spec[384], access[128];
		tensor_spec_format(&t[i], spec, sizeof spec);
		access_text(&t[i], array, i, writable, access, sizeof access);
		ca_buf_printf(b, "//   [%d] %-16s %-28s %-4s %s%s\n", i, safe_name(name, 64, t[i].name),
			  spec, t[i].on_cpu ? "cpu" : "cuda", access, t[i].on_cpu ? " (host)" : "");
	}
	if (n > TEMPLATE_LIST_MAX)
		ca_buf_printf(b, "//   ... %d more (INTERFACE.md lists all)\n", n - TEMPLATE_LIST_MAX);
}

static void template_text(struct ca_buf *b, const struct task *t, const struct task_spec *s)
{
	char id[CA_TASK_ID_MAX];
	ca_buf_printf(b, "// kernels/kernel.cu: the candidate for task %s.\n",
		  safe_name(id, sizeof id, t->id));
	ca_buf_printf(b,
		  "//\n"
		  "// A template from `cuda-agent workspace new`: it compiles, and ca_forward returns\n"
		  "// \"not implemented\" until the TODO is done, so `cuda-agent verify` fails with\n"
		  "// abi.forward_failed. The interface is ../INTERFACE.md, the rules and the workflow\n"
		  "// ../SKILL.md. Every .cu/.cpp/.c file in kernels/ is built into one library; add\n"
		  "// files and headers as you like.\n//\n");
	template_list(b, "args", s->args, s->num_args, "args", false);
	template_list(b, "params", s->params, s->num_params, "params", false);
	template_list(b, "outputs", s->outputs, s->num_outputs, "outputs", true);
	ca_buf_printf(b,
		  "#include <cuda_runtime.h>\n"
		  "#include <cuda_agent/abi.h>\n"
		  "\n"
		  "#include <stdint.h>\n"
		  "\n"
		  "// Nonzero returns fail the evaluation with abi.forward_failed.\n"
		  "constexpr int CA_BAD_INTERFACE = 1;   // not the tensor counts of INTERFACE.md\n"
		  "constexpr int CA_NOT_IMPLEMENTED = 2; // the template's placeholder: remove it\n"
		  "\n"
		  "extern \"C\" int ca_forward(const DLTensor *args, int num_args, const DLTensor "
		  "*params, int num_params,\n"
		  "                          DLTensor *outputs, int num_outputs, cudaStream_t "
		  "stream)\n"
		  "{\n"
		  "\tif (num_args != %d || num_params != %d || num_outputs != %d)\n"
		  "\t\treturn CA_BAD_INTERFACE;\n"
		  "\t(void)args;\n"
		  "\t(void)params;\n"
		  "\t(void)outputs;\n"
		  "\t(void)stream;\n"
		  "\t// TODO: launch kernels on `stream` that compute every element of every output\n"
		  "\t// from args and params, then return 0 (or nonzero when cudaGetLastError() reports\n"
		  "\t// a failed launch).\n"
		  "\treturn CA_NOT_IMPLEMENTED;\n"
		  "}\n",
		  s->num_args, s->num_params, s->num_outputs);
}

/* ---- the file system --------------------------------------------------------------------- */

enum { F_MODEL, F_TASK_JSON, F_SKILL, F_INTERFACE, F_KERNEL, F_COUNT };
static const char *const file_names[F_COUNT] = {"model.py", "task.json", "SKILL.md",
						 "INTERFACE.md", "kernels/kernel.cu"};

/* What this call created, so that a failure removes exactly that. */
struct layout {
	char dir[PATH_MAX];   /* absolute, single slashes, no trailing slash */
	size_t created_from;  /* length of the first prefix of dir this call created; 0: none */
	bool kernels_made;
	bool made[F_COUNT];
};

static void layout_undo(struct layout *l)
{
	char path[PATH_MAX];
	for (int i = F_COUNT - 1; i >= 0; i--)
		if (l->made[i] && ca_path_join(path, sizeof path, l->dir, file_names[i]) == 0)
			unlink(path);
	if (l->kernels_made && ca_path_join(path, sizeof path, l->dir, "kernels") == 0)
		rmdir(path);
	if (!l->created_from)
		return;
	/* dir and the parents it needed, deepest first; rmdir never removes a non-empty one */
	ca_strlcpy(path, l->dir, sizeof path);
	while (strlen(path) >= l->created_from) {
		rmdir(path);
		char *slash = strrchr(path, '/');
		if (!slash || slash == path)
			break;
		*slash = '\0';
	}
}

/* DIR as an absolute path with single slashes and no trailing slash. */
static int absolute_dir(const char *dir, char *out, size_t size, struct ca_diag *d)
{
	char cwd[PATH_MAX], joined[PATH_MAX];
	size_t o = 0;

	if (dir[0] != '/') {
		if (!getcwd(cwd, sizeof cwd))
			return ca_fail(d, CA_ERR_IO, "cannot get the current directory: %s",
				       strerror(errno));
		if (ca_path_join(joined, sizeof joined, cwd, dir))
			return ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
	} else if (ca_strlcpy(joined, dir, sizeof joined)) {
		return ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
	}
	for (const char *p = joined; *p; p++) {
		if (*p == '/' && o > 0 && out[o - 1] == '/')
			continue;
		if (o + 1 >= size)
			return ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
		out[o++] = *p;
	}
	while (o > 1 && out[o - 1] == '/')
		o--;
	out[o] = '\0';
	return 0;
}

/* 0 when path does not exist or is an empty directory; CA_ERR_INVALID (usage) otherwise. */
static int check_target(const char *shown, const char *path, struct ca_diag *d)
{
	struct stat st;
	DIR *dp;
	struct dirent *ent;
	bool empty = true;

	if (lstat(path, &st) != 0) {
		if (errno == ENOENT)
			return 0;
		return ca_fail(d, CA_ERR_IO, "cannot look at %s: %s", shown, strerror(errno));
	}
	if (!S_ISDIR(st.st_mode))
		return ca_fail(d, CA_ERR_INVALID, "%s exists and is not a directory", shown);
	dp = opendir(path);
	if (!dp)
		return ca_fail(d, CA_ERR_IO, "cannot read %s: %s", shown, strerror(errno));
	while ((ent = readdir(dp)) != NULL)
		if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, ".."))
			empty = false;
	closedir(dp);
	if (!empty)
		return ca_fail(d, CA_ERR_INVALID,
			       "%s exists and is not empty (give a new or an empty directory)", shown);
	return 0;
}

/* mkdir -p of l->dir, recording the first component it created. */
static int make_dirs(struct layout *l, const char *shown, struct ca_diag *d)
{
	char path[PATH_MAX];
	size_t n = strlen(l->dir);

	for (size_t i = 1; i <= n; i++) {
		if (i < n && l->dir[i] != '/')
			continue;
		memcpy(path, l->dir, i);
		path[i] = '\0';
		if (mkdir(path, 0755) == 0) {
			if (!l->created_from)
				l->created_from = i;
		} else if (errno != EEXIST || (i == n && l->created_from)) {
			return ca_fail(d, CA_ERR_IO, "cannot create %s: %s", path, strerror(errno));
		} else if (i == n) {
			/* it appeared since it was checked: check it again */
			int rc = check_target(shown, path, d);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Creates dir/name (never overwriting) with the given bytes; mode 0444 when read_only. */
static int write_new(struct layout *l, int which, const char *data, size_t len, bool read_only,
		     struct ca_diag *d)
{
	char path[PATH_MAX];
	int fd;
	size_t done = 0;

	if (ca_path_join(path, sizeof path, l->dir, file_names[which]))
		return ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return ca_fail(d, CA_ERR_IO, "cannot create %s: %s", path, strerror(errno));
	l->made[which] = true;
	while (done < len) {
		ssize_t w = write(fd, data + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			close(fd);
			return ca_fail(d, CA_ERR_IO, "cannot write %s: %s", path, strerror(e));
		}
		done += (size_t)w;
	}
	if ((read_only && fchmod(fd, 0444) != 0) || close(fd) != 0)
		return ca_fail(d, CA_ERR_IO, "cannot finish %s: %s", path, strerror(errno));
	return 0;
}

/* ---- describe ---------------------------------------------------------------------------- */

static int describe(const struct workspace_opts *o, const struct task *t, struct task_spec *spec,
		    struct workspace_report *rep, struct ca_diag *d)
{
	struct bridge own, *bp = o->bridge ? o->bridge : &own;
	char cache[PATH_MAX], log[PATH_MAX];
	struct bridge_opts bo = {.python = o->python, .device = o->device ? o->device : "auto"};
	json_t *req = NULL, *res = NULL;
	char code[64] = "";
	bool started = false;
	int rc;

	/* One describe call: the bridge alone (its log beside the evaluations' in the cache). */
	if (ca_log_get_level() < CA_LOG_DEBUG && ca_cache_dir(cache, sizeof cache, NULL) == 0 &&
	    ca_path_join(log, sizeof log, cache, "bridge.log") == 0)
		bo.stderr_path = log;
	rc = o->bridge ? 0 : bridge_start(&own, &bo, d);
	started = rc == 0 && !o->bridge;
	if (!rc)
		rc = bridge_wait_ready(bp, 180.0, d);
	if (rc) {
		ca_strlcpy(rep->code, "env.bridge", sizeof rep->code);
		rc = ca_fail_prefix(d, rc, "cannot start the torch bridge");
		goto out;
	}
	ca_log_info("describing %s with the torch bridge (torch %s on %s)", t->dir,
		    bp->torch_version, bp->device);
	req = json_pack("{s:s, s:I}", "task_dir", t->dir, "seed", (json_int_t)DESCRIBE_SEED);
	if (!req) {
		ca_strlcpy(rep->code, "internal", sizeof rep->code);
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	rc = bridge_call(bp, "describe", req, 600.0, &res, code, sizeof code, d);
	if (rc == CA_ERR_INVALID && reason_class_of(code) == REASON_TASK) {
		ca_strlcpy(rep->code, code, sizeof rep->code);
		goto out;
	}
	if (rc) {
		ca_strlcpy(rep->code, "env.bridge", sizeof rep->code);
		rc = ca_fail_prefix(d, rc, "torch bridge (describe)%s%s", code[0] ? ", " : "",
				    code);
		goto out;
	}
	rc = task_spec_from_json(spec, res, d);
	if (rc)
		ca_strlcpy(rep->code, "task.unsupported", sizeof rep->code);
out:
	json_decref(req);
	json_decref(res);
	if (started)
		bridge_stop(&own);
	return rc;
}

/* ---- workspace_create -------------------------------------------------------------------- */

int workspace_create(const struct workspace_opts *o, struct workspace_report *rep,
		     struct ca_diag *d)
{
	struct layout *l = NULL;
	struct task task;
	bool task_loaded = false, spec_loaded = false;
	struct task_spec spec = {0};
	struct ca_buf iface = {.max = GENERATED_MAX_BYTES - 1};
	struct ca_buf tmpl = {.max = GENERATED_MAX_BYTES - 1};
	char root[PATH_MAX], skill_path[PATH_MAX], tj_path[PATH_MAX];
	char *skill = NULL, *task_json = NULL;
	size_t skill_len = 0, task_json_len = 0;
	int rc;

	memset(rep, 0, sizeof *rep);
	ca_strlcpy(rep->code, "usage", sizeof rep->code);
	if (!o->task_dir || !o->task_dir[0] || !o->dir || !o->dir[0]) {
		rc = ca_fail(d, CA_ERR_INVALID, "a task directory and a workspace directory are "
						"required");
		goto out;
	}
	l = calloc(1, sizeof *l);
	if (!l) {
		ca_strlcpy(rep->code, "internal", sizeof rep->code);
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	rc = absolute_dir(o->dir, l->dir, sizeof l->dir, d);
	if (!rc)
		rc = check_target(o->dir, l->dir, d);
	if (rc) {
		if (rc != CA_ERR_INVALID && rc != CA_ERR_LIMIT)
			ca_strlcpy(rep->code, "env.io", sizeof rep->code);
		goto out;
	}
	ca_strlcpy(rep->dir, l->dir, sizeof rep->dir);

	/* Everything that can fail without touching the file system comes first. */
	rc = task_load(&task, o->task_dir, d);
	if (rc) {
		ca_strlcpy(rep->code, rc == CA_ERR_NOMEM ? "internal" : "task.invalid",
			   sizeof rep->code);
		goto out;
	}
	task_loaded = true;
	if (ca_path_join(tj_path, sizeof tj_path, task.dir, "task.json") == 0 &&
	    ca_is_file(tj_path)) {
		rc = ca_read_file(tj_path, CA_TASK_MAX_JSON_BYTES, &task_json, &task_json_len, d);
		if (rc) {
			ca_strlcpy(rep->code, "task.invalid", sizeof rep->code);
			goto out;
		}
	}
	rc = ca_install_root(root, sizeof root, d);
	if (!rc && ca_path_join(skill_path, sizeof skill_path, root, CA_WORKSPACE_SKILL_PATH))
		rc = ca_fail(d, CA_ERR_LIMIT, "install root path too long");
	if (!rc)
		rc = ca_read_file(skill_path, SKILL_MAX_BYTES, &skill, &skill_len, d);
	if (rc) {
		ca_strlcpy(rep->code, "env.install", sizeof rep->code);
		rc = ca_fail_prefix(d, rc, "the agent's SKILL.md is missing from the installation "
					   "(CUDA_AGENT_ROOT)");
		goto out;
	}
	rc = describe(o, &task, &spec, rep, d);
	if (rc)
		goto out;
	spec_loaded = true;
	interface_text(&iface, &task, &spec);
	template_text(&tmpl, &task, &spec);
	if (iface.err || tmpl.err) {
		ca_strlcpy(rep->code, "internal", sizeof rep->code);
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory writing INTERFACE.md");
		goto out;
	}

	/* Now the files; a failure from here on removes what was made. */
	ca_strlcpy(rep->code, "env.io", sizeof rep->code);
	rc = make_dirs(l, o->dir, d);
	if (!rc) {
		char kernels[PATH_MAX];
		if (ca_path_join(kernels, sizeof kernels, l->dir, "kernels"))
			rc = ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
		else if (mkdir(kernels, 0755) != 0)
			rc = ca_fail(d, CA_ERR_IO, "cannot create %s: %s", kernels, strerror(errno));
		else
			l->kernels_made = true;
	}
	if (!rc)
		rc = write_new(l, F_MODEL, task.model_py, task.model_py_len, true, d);
	if (!rc && task_json)
		rc = write_new(l, F_TASK_JSON, task_json, task_json_len, true, d);
	if (!rc)
		rc = write_new(l, F_SKILL, skill, skill_len, true, d);
	if (!rc)
		rc = write_new(l, F_INTERFACE, iface.p, iface.len, true, d);
	if (!rc)
		rc = write_new(l, F_KERNEL, tmpl.p, tmpl.len, false, d);
	if (rc) {
		if (rc == CA_ERR_INVALID) /* DIR was filled since it was checked */
			ca_strlcpy(rep->code, "usage", sizeof rep->code);
		layout_undo(l);
		goto out;
	}
	ca_strlcpy(rep->code, "ok", sizeof rep->code);
	rep->num_args = spec.num_args;
	rep->num_params = spec.num_params;
	rep->num_outputs = spec.num_outputs;
	rep->task_json = task_json != NULL;
out:
	if (spec_loaded)
		task_spec_free(&spec);
	if (task_loaded)
		task_free(&task);
	ca_buf_free(&iface);
	ca_buf_free(&tmpl);
	free(skill);
	free(task_json);
	free(l);
	return rc;
}
