/* tools_fs: read_file, write_file, edit, multi_edit inside the workspace (glob and grep:
 * tools_search.c). See tools.h for the path rules and caps. */
#include "agent/tools.h"
#include "agent/tools_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/str.h"

/* Hands b's text to res (ok as given). */
int tools_text_result(struct ca_buf *b, struct tool_result *res, bool ok, struct ca_diag *d)
{
	if (b->err) {
		ca_buf_free(b);
		return ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
	}
	if (!(res->output = ca_buf_take(b)))
		return ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
	res->ok = ok;
	return 0;
}

/* A tool-level failure: ok=false with a one-line message. */
int tools_refuse(struct tool_result *res, struct ca_diag *d, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	res->ok = false;
	res->output = strdup(msg);
	return res->output ? 0 : ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
}

/* Resolves `path` (relative to ws, or absolute): the longest existing prefix through
 * realpath(3), then the missing rest, which must be plain names. Returns 0 with r filled, 1
 * with a message in `why` (refused: outside, "..", too long), or a negative code. */
int tools_resolve_path(const char *ws, const char *path, struct rpath *r, char *why,
		       size_t why_size)
{
	char buf[PATH_MAX], real[PATH_MAX];
	const char *rest = NULL; /* the missing tail inside buf's original, after the prefix */
	size_t n, wl = strlen(ws);

	ca_printable(r->shown, path, sizeof r->shown);
	if (!path[0]) {
		snprintf(why, why_size, "the path is empty");
		return 1;
	}
	if (path[0] == '/')
		n = (size_t)snprintf(buf, sizeof buf, "%s", path);
	else
		n = (size_t)snprintf(buf, sizeof buf, "%s/%s", ws, path);
	if (n >= sizeof buf - 1) {
		snprintf(why, why_size, "the path is too long");
		return 1;
	}
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	char orig[PATH_MAX];
	memcpy(orig, buf, n + 1);
	for (;;) {
		if (realpath(buf, real))
			break;
		if (errno != ENOENT) {
			snprintf(why, why_size, "cannot resolve %s: %s", r->shown, strerror(errno));
			return 1;
		}
		char *slash = strrchr(buf, '/');
		if (!slash || slash == buf) {
			snprintf(why, why_size, "cannot resolve %s", r->shown);
			return 1;
		}
		*slash = '\0';
		rest = orig + (slash - buf) + 1;
	}
	if (rest) {
		/* the missing components: plain names only */
		const char *s = rest;
		while (*s) {
			const char *e = strchr(s, '/');
			size_t cl = e ? (size_t)(e - s) : strlen(s);
			if (cl == 0 || (cl == 1 && s[0] == '.') ||
			    (cl == 2 && s[0] == '.' && s[1] == '.')) {
				snprintf(why, why_size,
					 "%s has '.', '..' or an empty component after a directory "
					 "that does not exist",
					 r->shown);
				return 1;
			}
			s += cl + (e ? 1 : 0);
		}
		if ((size_t)snprintf(r->abs, sizeof r->abs, "%s/%s",
				     strcmp(real, "/") ? real : "", rest) >= sizeof r->abs) {
			snprintf(why, why_size, "the path is too long");
			return 1;
		}
	} else {
		memcpy(r->abs, real, strlen(real) + 1);
	}
	if (strcmp(r->abs, ws) == 0) {
		r->rel = ".";
		return 0;
	}
	if (strncmp(r->abs, ws, wl) != 0 || r->abs[wl] != '/') {
		snprintf(why, why_size,
			 "%s is outside the workspace (paths are relative to the workspace, "
			 "symlinks are followed)",
			 r->shown);
		return 1;
	}
	r->rel = r->abs + wl + 1;
	return 0;
}

static bool is_read_only(const struct tool_ctx *ctx, const char *rel)
{
	for (const char *const *n = ctx->read_only; n && *n; n++) {
		const char *name = *n;
		while (name[0] == '.' && name[1] == '/')
			name += 2;
		if (strcmp(name, rel) == 0)
			return true;
	}
	return false;
}

/* Resolves a path the tool will write: inside, not read-only, not a directory. */
static int resolve_write(const struct tool_ctx *ctx, const char *ws, const char *path,
			 struct rpath *r, char *why, size_t why_size)
{
	struct stat st;
	int rc = tools_resolve_path(ws, path, r, why, why_size);
	if (rc)
		return rc;
	if (is_read_only(ctx, r->rel)) {
		snprintf(why, why_size, "%s is read-only (an infrastructure file of the workspace)",
			 r->rel);
		return 1;
	}
	if (strcmp(r->rel, ".") == 0 || (lstat(r->abs, &st) == 0 && S_ISDIR(st.st_mode))) {
		snprintf(why, why_size, "%s is a directory", r->shown);
		return 1;
	}
	return 0;
}

/* Opens a resolved regular file for reading (no symlink at the end, no FIFO or device). */
static int open_regular(const struct rpath *r, int *fd, size_t *size, char *why, size_t why_size)
{
	struct stat st;
	*fd = open(r->abs, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0) {
		snprintf(why, why_size, "cannot open %s: %s", r->shown,
			 errno == ENOENT ? "no such file" : strerror(errno));
		return 1;
	}
	if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, why_size, "%s is %s", r->shown,
			 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
		close(*fd);
		*fd = -1;
		return 1;
	}
	*size = (size_t)st.st_size;
	return 0;
}

/* Reads a whole resolved file of at most `cap` bytes. */
int tools_slurp(const struct rpath *r, size_t cap, char **out, size_t *len, char *why,
		 size_t why_size)
{
	int fd;
	size_t size, got = 0;
	*out = NULL;
	if (open_regular(r, &fd, &size, why, why_size))
		return 1;
	if (size > cap) {
		close(fd);
		snprintf(why, why_size, "%s is %zu bytes, more than the %zu this tool handles",
			 r->shown, size, cap);
		return 1;
	}
	char *buf = malloc(size + 1);
	if (!buf) {
		close(fd);
		return CA_ERR_NOMEM;
	}
	while (got < size) {
		ssize_t n = read(fd, buf + got, size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return 0;
}

static size_t count_lines(const char *s, size_t n)
{
	size_t lines = 0;
	for (size_t i = 0; i < n; i++)
		lines += s[i] == '\n';
	return lines + (n && s[n - 1] != '\n');
}

static int do_read(const char *ws, const json_t *args, struct tool_result *res, struct ca_diag *d)
{
	struct rpath r;
	char why[1024];
	const json_t *jo = json_object_get(args, "offset_line"),
		     *jl = json_object_get(args, "limit_lines");
	size_t first = jo ? (size_t)json_integer_value(jo) : 1;
	size_t limit = jl ? (size_t)json_integer_value(jl) : TOOLS_READ_LINES;
	size_t last = first + limit - 1; /* inclusive */
	int fd = -1, rc;
	size_t size, line = 1, col = 0, cut = 0, scanned = 0;
	bool more = false, stopped_cap = false, binary = false;
	struct ca_buf b = {0};
	char chunk[65536];

	if ((rc = tools_resolve_path(ws, json_string_value(json_object_get(args, "path")), &r, why,
			  sizeof why)) ||
	    (rc = open_regular(&r, &fd, &size, why, sizeof why)))
		return rc < 0 ? ca_fail(d, rc, "tools: read_file") : tools_refuse(res, d, "%s", why);
	if (size == 0) {
		close(fd);
		ca_buf_printf(&b, "(%s is empty)\n", r.rel);
		return tools_text_result(&b, res, true, d);
	}
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (scanned == 0 && memchr(chunk, '\0', (size_t)n)) {
			binary = true;
			break;
		}
		scanned += (size_t)n;
		for (ssize_t i = 0; i < n; i++) {
			char c = chunk[i];
			if (line > last) {
				more = true;
				break;
			}
			if (line >= first) {
				if (col == 0)
					ca_buf_printf(&b, "%6zu\t", line);
				if (c == '\n') {
					if (cut)
						ca_buf_printf(&b, " [... line cut, %zu more bytes]", cut);
					ca_buf_add(&b, "\n", 1);
				} else if (col < TOOLS_LINE_MAX) {
					ca_buf_add(&b, &c, 1);
				} else {
					cut++;
				}
			}
			if (c == '\n') {
				line++;
				col = 0;
				cut = 0;
				if (b.len >= TOOLS_READ_MAX && line <= last) {
					stopped_cap = true;
					more = true;
					break;
				}
			} else {
				col++;
			}
		}
		if (more || scanned >= SCAN_MAX)
			break;
	}
	close(fd);
	if (binary) {
		ca_buf_free(&b);
		return tools_refuse(res, d,
			      "%s is a binary file (%zu bytes); inspect it with bash (od, xxd, "
			      "file)",
			      r.rel, size);
	}
	if (col > 0 && line >= first && line <= last) { /* last line without a newline */
		if (cut)
			ca_buf_printf(&b, " [... line cut, %zu more bytes]", cut);
		ca_buf_add(&b, "\n", 1);
	}
	size_t total_lines = line - (col == 0 ? 1 : 0);
	if (first > total_lines && !more) {
		ca_buf_free(&b);
		return tools_refuse(res, d, "offset_line %zu is past the end of %s (%zu lines)", first,
			      r.rel, total_lines);
	}
	if (more)
		ca_buf_printf(&b, "[%s: the file goes on; read on with offset_line=%zu]\n",
			  stopped_cap ? "1 MiB shown" : "limit reached", line);
	else if (scanned >= SCAN_MAX && scanned < size)
		ca_buf_printf(&b, "[stopped after scanning %llu MiB of the file]\n", SCAN_MAX >> 20);
	return tools_text_result(&b, res, true, d);
}

/* Writes text to a resolved path atomically (missing parents made), keeping the mode of a file
 * it replaces. */
static int write_resolved(const struct rpath *r, const char *text, size_t len, char *why,
			  size_t why_size)
{
	struct stat st;
	bool existed = stat(r->abs, &st) == 0;
	char parent[PATH_MAX];
	struct ca_diag wd;
	memcpy(parent, r->abs, strlen(r->abs) + 1);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if (!ca_is_dir(parent) && ca_mkdirs(parent, 0755, &wd) != 0) {
			snprintf(why, why_size, "cannot create the directory of %s: %.600s", r->shown,
				 wd.msg);
			return 1;
		}
	}
	if (ca_write_file_atomic(r->abs, text, len, &wd) != 0) {
		snprintf(why, why_size, "cannot write %s: %.600s", r->shown, wd.msg);
		return 1;
	}
	if (existed)
		(void)chmod(r->abs, st.st_mode & 07777);
	return 0;
}

static int do_write(const struct tool_ctx *ctx, const char *ws, const json_t *args,
		    struct tool_result *res, struct ca_diag *d)
{
	const json_t *jc = json_object_get(args, "content");
	size_t len = json_string_length(jc);
	struct rpath r;
	char why[1024];
	int rc;
	if (len > TOOLS_WRITE_MAX)
		return tools_refuse(res, d, "content is %zu bytes, more than the %u write_file writes",
			      len, TOOLS_WRITE_MAX);
	if ((rc = resolve_write(ctx, ws, json_string_value(json_object_get(args, "path")), &r,
				why, sizeof why)))
		return rc < 0 ? ca_fail(d, rc, "tools: write_file") : tools_refuse(res, d, "%s", why);
	bool existed = ca_is_file(r.abs);
	if ((rc = write_resolved(&r, json_string_value(jc), len, why, sizeof why)))
		return rc < 0 ? ca_fail(d, rc, "tools: write_file") : tools_refuse(res, d, "%s", why);
	res->ok = true;
	char msg[PATH_MAX + 128];
	snprintf(msg, sizeof msg, "%s %s: %zu bytes, %zu lines", existed ? "replaced" : "created",
		 r.rel, len, count_lines(json_string_value(jc), len));
	res->output = strdup(msg);
	return res->output ? 0 : ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
}

/* One edit of *text (heap, *len bytes): 0 done (*text replaced, *count replacements), 1
 * refused (why), negative: out of memory. */
static int apply_edit(char **text, size_t *len, const json_t *e, size_t *count, char *why,
		      size_t why_size)
{
	const json_t *jo = json_object_get(e, "old_string"), *jn = json_object_get(e, "new_string");
	const char *old = json_string_value(jo), *nw = json_string_value(jn);
	size_t ol = json_string_length(jo), nl = json_string_length(jn), n = 0;
	bool all = json_is_true(json_object_get(e, "replace_all"));
	const char *p = *text, *end = *text + *len, *hit;

	if (ol == 0) {
		snprintf(why, why_size, "old_string is empty (use write_file to create a file)");
		return 1;
	}
	if (ol == nl && memcmp(old, nw, ol) == 0) {
		snprintf(why, why_size, "old_string and new_string are the same");
		return 1;
	}
	while ((hit = memmem(p, (size_t)(end - p), old, ol))) {
		n++;
		p = hit + ol;
	}
	if (n == 0) {
		snprintf(why, why_size, "old_string not found");
		return 1;
	}
	if (n > 1 && !all) {
		snprintf(why, why_size,
			 "old_string occurs %zu times; include more context to make it unique, or "
			 "set replace_all",
			 n);
		return 1;
	}
	size_t out_len = *len - n * ol + n * nl;
	if (nl > ol && (out_len > TOOLS_WRITE_MAX || out_len < *len)) {
		snprintf(why, why_size, "the result would exceed %u bytes", TOOLS_WRITE_MAX);
		return 1;
	}
	char *out = malloc(out_len + 1), *q = out;
	if (!out)
		return CA_ERR_NOMEM;
	p = *text;
	while ((hit = memmem(p, (size_t)(end - p), old, ol))) {
		memcpy(q, p, (size_t)(hit - p));
		q += hit - p;
		memcpy(q, nw, nl);
		q += nl;
		p = hit + ol;
	}
	memcpy(q, p, (size_t)(end - p));
	q += end - p;
	*q = '\0';
	free(*text);
	*text = out;
	*len = out_len;
	*count = n;
	return 0;
}

static int do_edit(const struct tool_ctx *ctx, const char *ws, const char *name,
		   const json_t *args, struct tool_result *res, struct ca_diag *d)
{
	bool multi = strcmp(name, "multi_edit") == 0;
	const json_t *edits = multi ? json_object_get(args, "edits") : NULL, *e;
	size_t n_edits = multi ? json_array_size(edits) : 1, len = 0, total = 0, i;
	struct rpath r;
	char why[1024], *text = NULL;
	int rc;

	if ((rc = resolve_write(ctx, ws, json_string_value(json_object_get(args, "path")), &r,
				why, sizeof why)) ||
	    (rc = tools_slurp(&r, TOOLS_WRITE_MAX, &text, &len, why, sizeof why)))
		return rc < 0 ? ca_fail(d, rc, "tools: %s: out of memory", name)
			      : tools_refuse(res, d, "%s", why);
	for (i = 0; i < n_edits; i++) {
		size_t count = 0;
		e = multi ? json_array_get(edits, i) : args;
		rc = apply_edit(&text, &len, e, &count, why, sizeof why);
		if (rc) {
			free(text);
			if (rc < 0)
				return ca_fail(d, rc, "tools: %s: out of memory", name);
			if (multi)
				return tools_refuse(res, d, "%s: edit %zu of %zu: %s; nothing was written",
					      r.rel, i + 1, n_edits, why);
			return tools_refuse(res, d, "%s: %s", r.rel, why);
		}
		total += count;
	}
	rc = write_resolved(&r, text, len, why, sizeof why);
	free(text);
	if (rc)
		return tools_refuse(res, d, "%s", why);
	char msg[PATH_MAX + 128];
	snprintf(msg, sizeof msg, "edited %s: %zu replacement%s%s", r.rel, total,
		 total == 1 ? "" : "s", multi ? " by all edits" : "");
	res->ok = true;
	res->output = strdup(msg);
	return res->output ? 0 : ca_fail(d, CA_ERR_NOMEM, "tools: out of memory");
}

int tools_fs_run(const struct tool_ctx *ctx, const char *ws, size_t cap, const char *name,
		 const json_t *args, struct tool_result *res, struct ca_diag *d)
{
	(void)cap;
	if (strcmp(name, "read_file") == 0)
		return do_read(ws, args, res, d);
	if (strcmp(name, "write_file") == 0)
		return do_write(ctx, ws, args, res, d);
	if (strcmp(name, "edit") == 0 || strcmp(name, "multi_edit") == 0)
		return do_edit(ctx, ws, name, args, res, d);
	if (strcmp(name, "glob") == 0)
		return tools_glob(ws, args, res, d);
	if (strcmp(name, "grep") == 0)
		return tools_grep(ws, args, res, d);
	return ca_fail(d, CA_ERR_NOTFOUND, "unknown tool '%s'", name);
}
