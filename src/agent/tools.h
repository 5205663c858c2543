/* tools: the agent's tools, with OpenAI function-calling schemas (docs/agent-tools.md).
 *
 *   bash        /bin/bash -c COMMAND in the sandbox (no network, no GPU, only the workspace
 *               writable, /tmp a per-session scratch directory), cwd the workspace, stdout and
 *               stderr merged, a wall-clock limit (the whole sandbox is killed at it), output
 *               capped while it is read
 *   read_file   numbered lines (like cat -n) of a text file, offset/limit in lines, <= 1 MiB
 *   write_file  creates or replaces a file (<= 4 MiB, atomic: temp + rename; missing parent
 *               directories inside the workspace are created)
 *   edit        exact, unique string replacement (or every occurrence with replace_all)
 *   multi_edit  several edits applied in order; written only if all succeed (atomic)
 *   glob        fnmatch(3) patterns with `**`, relative to the workspace, sorted, <= 1000
 *   grep        POSIX extended regex over the workspace's text files, "path:line: text"
 *
 * Paths. Every path the agent gives is relative to the workspace (or absolute inside it). The
 * longest existing prefix is resolved with realpath (symlinks followed) and what is left must be
 * plain names; anything that lands outside the workspace is refused (ok=false), and so are
 * writes and edits to the read_only names. glob and grep never follow symlinks to directories
 * and skip `.git` directories.
 *
 * Output. res->output is valid UTF-8 without NUL bytes (other bytes become '?'), at most
 * output_cap bytes of tool output plus a "[... N bytes omitted ...]" note (head and tail kept)
 * and a short status line.
 *
 * Ownership: ctx is borrowed; res->output belongs to the caller (tool_result_free). Calls are
 * independent and may run from any thread, one bash at a time per workspace. */
#ifndef CA_AGENT_TOOLS_H
#define CA_AGENT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "util/diag.h"

#define TOOLS_READ_MAX      (1u << 20) /* bytes of a file read_file returns per call, grep reads */
#define TOOLS_WRITE_MAX     (4u << 20) /* bytes write_file writes, edit reads and writes */
#define TOOLS_GLOB_MAX      1000       /* results of glob */
#define TOOLS_GREP_DEFAULT  200        /* grep's max_results when not given */
#define TOOLS_GREP_MAX      1000       /* grep's max_results at most */
#define TOOLS_WALK_MAX      100000     /* directory entries glob and grep look at */
#define TOOLS_READ_LINES    2000       /* read_file's limit_lines when not given */
#define TOOLS_LINE_MAX      2000       /* bytes of one line read_file and grep show */
#define TOOLS_DEFAULT_TIMEOUT 120.0
#define TOOLS_DEFAULT_CAP   30000

struct tool_ctx {
	const char *workspace;          /* absolute, existing: every path the agent gives is relative to it (or absolute inside it) */
	const char *const *read_only;   /* NULL-terminated names relative to the workspace the agent may read but not write/edit/delete through the file tools (model.py, task.json, SKILL.md, INTERFACE.md) */
	double bash_timeout_s;          /* 0: 120 */
	size_t output_cap;              /* bytes of a tool's output given back to the model; 0: 30000; longer output keeps head and tail with a "[... N bytes omitted ...]" note */
	bool sandbox;                   /* bash runs in the sandbox (default true; false only for tests on machines without namespaces) */
	const char *scratch_dir;        /* per-session host dir the sandbox's /tmp is bound to (caller creates and removes it) */
	/* `cuda-agent` inside bash: when agent_cmd is set, shim_dir (written by tools_bash_write_shim, bound read-only,
	 * first on PATH) holds a `cuda-agent` program that sends its command line over a socket (fd 3) and prints
	 * the answer; agent_cmd runs it outside the sandbox while the command waits (its time is not counted
	 * against the bash limit) and returns what to print (malloc'd) and the exit code. NULL: not available. */
	int (*agent_cmd)(void *arg, const char *command_line, char **output, int *exit_code);
	void *agent_cmd_arg;
	const char *shim_dir;
};

/* Writes the `cuda-agent` shim (a POSIX shell script, 0755) into dir. */
int tools_bash_write_shim(const char *dir, struct ca_diag *d);

/* The OpenAI "tools" array: [{"type": "function", "function": {"name", "description", "parameters": JSON Schema}}, ...] for
 * bash {command, timeout_s?}, read_file {path, offset_line?, limit_lines?}, write_file {path, content},
 * edit {path, old_string, new_string, replace_all?}, multi_edit {path, edits: [{old_string, new_string, replace_all?}]},
 * glob {pattern}, grep {pattern, path?, glob?, ignore_case?, max_results?}. New reference, owned by the caller. */
json_t *tools_schemas(void);

struct tool_result {
	char *output;     /* text for the model (malloc'd, NUL-terminated, capped), never NULL after tools_run returns 0 */
	bool ok;          /* the tool did what was asked (false: output explains what went wrong, e.g. "old_string not found") */
	int exit_code;    /* bash: the command's exit code (-1 when killed or timed out); others 0 */
	bool timed_out;   /* bash hit its limit */
	double seconds;
	size_t bytes_omitted; /* by the output cap */
};

/* Runs tool `name` with `args` (a JSON object already parsed by the caller). Returns 0 when it ran (success or a
 * tool-level failure, see res->ok); CA_ERR_NOTFOUND for an unknown tool name and CA_ERR_INVALID for arguments that do
 * not match the schema (missing/extra/wrong-typed fields) — both with a one-line message in d meant for the model;
 * other negative codes for internal failures. res is zeroed first; tool_result_free is safe after any return. */
int tools_run(const struct tool_ctx *ctx, const char *name, const json_t *args, struct tool_result *res, struct ca_diag *d);
void tool_result_free(struct tool_result *res);

/* ---- internal to src/agent (tools.c, tools_fs.c, tools_bash.c); not for the agent loop ---- */

/* Output kept while it is produced: at most `cap` bytes (head and tail halves), the rest
 * counted. */
struct tool_capture {
	char *head, *tail;    /* tail: a ring of tail_cap bytes */
	size_t cap, head_cap, tail_cap;
	size_t head_len, tail_len, tail_pos; /* tail_pos: where the next byte goes */
	size_t total;
};
int tool_capture_init(struct tool_capture *c, size_t cap);
void tool_capture_add(struct tool_capture *c, const char *buf, size_t len);
/* Moves the kept text into a heap string: head, "\n[... N bytes omitted ...]\n", tail, then
 * `trailer` (may be NULL); *omitted = N. Frees the capture's buffers. NULL: out of memory. */
char *tool_capture_finish(struct tool_capture *c, const char *trailer, size_t *omitted);
void tool_capture_free(struct tool_capture *c);

/* The file tools (tools_fs.c) and bash (tools_bash.c): args already validated; `ws` is the
 * workspace's realpath; `cap` the effective output cap. */
int tools_fs_run(const struct tool_ctx *ctx, const char *ws, size_t cap, const char *name,
		 const json_t *args, struct tool_result *res, struct ca_diag *d);
int tools_bash_run(const struct tool_ctx *ctx, const char *ws, size_t cap, const json_t *args,
		   struct tool_result *res, struct ca_diag *d);

#endif
