/* ops6k: CUDA-Agent-Ops-6K rows (JSONL, or parquet through python -m cuda_agent_bridge.rows)
 * into the task store (import.h): one row's parser and the readers. */
#include "import/import_int.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/proc.h"
#include "util/str.h"
#include "util/pylaunch.h"

/* ---- one Ops-6K row ------------------------------------------------------------------- */

void ops6k_row_free(struct ops6k_row *row)
{
	free(row->code);
	row->code = NULL;
	row->code_len = 0;
}

static bool printable_text(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static int add_op(struct ops6k_row *row, const char *s, size_t len, struct ca_diag *d)
{
	while (len && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	if (row->n_ops == CA_TASK_MAX_OPS)
		return ca_fail(d, CA_ERR_LIMIT, "ops: more than %d names", CA_TASK_MAX_OPS);
	if (len == 0 || len >= CA_TASK_OP_MAX || !printable_text(s, len) || memchr(s, '\0', len))
		return ca_fail(d, CA_ERR_INVALID,
			       "ops: entry %zu is not a name of 1-%d printable bytes", row->n_ops + 1,
			       CA_TASK_OP_MAX - 1);
	memcpy(row->ops[row->n_ops], s, len);
	row->ops[row->n_ops][len] = '\0';
	row->n_ops++;
	return 0;
}

static int ops_from_array(struct ops6k_row *row, const json_t *a, struct ca_diag *d)
{
	size_t i;
	const json_t *v;
	json_array_foreach(a, i, v) {
		int rc;
		if (!json_is_string(v))
			return ca_fail(d, CA_ERR_INVALID, "ops: entry %zu is not a string", i + 1);
		rc = add_op(row, json_string_value(v), json_string_length(v), d);
		if (rc)
			return rc;
	}
	return 0;
}

/* Names separated by commas, each bare or quoted with ' or " (backslash escapes the next
 * byte): the inside of a Python list, or a plain "a, b" list. */
static int ops_from_list_text(struct ops6k_row *row, const char *p, const char *end,
			      struct ca_diag *d)
{
	char tok[CA_TASK_OP_MAX];
	for (;;) {
		size_t tl = 0;
		int rc;
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p == end)
			return 0;
		if (*p == '\'' || *p == '"') {
			char q = *p++;
			for (;;) {
				if (p == end)
					return ca_fail(d, CA_ERR_PARSE, "ops: unterminated quote");
				if (*p == q)
					break;
				if (*p == '\\' && p + 1 < end)
					p++;
				if (tl + 1 >= sizeof tok)
					return ca_fail(d, CA_ERR_INVALID,
						       "ops: entry %zu is longer than %d bytes",
						       row->n_ops + 1, CA_TASK_OP_MAX - 1);
				tok[tl++] = *p++;
			}
			p++; /* the closing quote */
		} else {
			while (p < end && *p != ',') {
				if (tl + 1 >= sizeof tok)
					return ca_fail(d, CA_ERR_INVALID,
						       "ops: entry %zu is longer than %d bytes",
						       row->n_ops + 1, CA_TASK_OP_MAX - 1);
				tok[tl++] = *p++;
			}
		}
		rc = add_op(row, tok, tl, d);
		if (rc)
			return rc;
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p == end)
			return 0;
		if (*p != ',')
			return ca_fail(d, CA_ERR_PARSE, "ops: expected ',' between names");
		p++;
	}
}

static int ops_from_string(struct ops6k_row *row, const char *s, size_t len, struct ca_diag *d)
{
	const char *end = s + len;
	while (s < end && isspace((unsigned char)*s))
		s++;
	while (end > s && isspace((unsigned char)end[-1]))
		end--;
	if (s == end)
		return 0;
	if (*s == '[') {
		json_t *a = json_loadb(s, (size_t)(end - s), 0, NULL);
		int rc;
		if (json_is_array(a)) {
			rc = ops_from_array(row, a, d);
			json_decref(a);
			return rc;
		}
		json_decref(a);
		if (end[-1] != ']' || end - s < 2)
			return ca_fail(d, CA_ERR_PARSE, "ops: a '[' list without its closing ']'");
		return ops_from_list_text(row, s + 1, end - 1, d);
	}
	return ops_from_list_text(row, s, end, d);
}

static int parse_row_object(const json_t *root, struct ops6k_row *row, struct ca_diag *d)
{
	const json_t *v = json_object_get(root, "_skip");
	char shown[256];

	if (json_is_string(v))
		return ca_fail(d, CA_ERR_INVALID, "%s",
			       ca_printable(shown, json_string_value(v), sizeof shown));
	v = json_object_get(root, "code");
	if (!v || json_is_null(v))
		return ca_fail(d, CA_ERR_INVALID, "no code");
	if (!json_is_string(v))
		return ca_fail(d, CA_ERR_INVALID, "code is not a string");
	if (json_string_length(v) == 0)
		return ca_fail(d, CA_ERR_INVALID, "code is empty");
	if (json_string_length(v) > CA_IMPORT_MAX_CODE)
		return ca_fail(d, CA_ERR_LIMIT, "code is %zu bytes, over the limit of %u",
			       json_string_length(v), CA_IMPORT_MAX_CODE);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return ca_fail(d, CA_ERR_INVALID, "code contains NUL bytes");

	v = json_object_get(root, "ops");
	if (json_is_array(v)) {
		int rc = ops_from_array(row, v, d);
		if (rc)
			return rc;
	} else if (json_is_string(v)) {
		int rc = ops_from_string(row, json_string_value(v), json_string_length(v), d);
		if (rc)
			return rc;
	} else if (v && !json_is_null(v)) {
		return ca_fail(d, CA_ERR_INVALID, "ops is neither a list nor a string");
	}

	v = json_object_get(root, "data_source");
	if (json_is_string(v)) {
		size_t n = json_string_length(v);
		if (n >= sizeof row->data_source || !printable_text(json_string_value(v), n) ||
		    strlen(json_string_value(v)) != n)
			return ca_fail(d, CA_ERR_INVALID,
				       "data_source is not a string of at most %zu printable bytes",
				       sizeof row->data_source - 1);
		memcpy(row->data_source, json_string_value(v), n + 1);
	} else if (v && !json_is_null(v)) {
		return ca_fail(d, CA_ERR_INVALID, "data_source is not a string");
	}

	v = json_object_get(root, "code");
	row->code_len = json_string_length(v);
	row->code = malloc(row->code_len + 1);
	if (!row->code)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	memcpy(row->code, json_string_value(v), row->code_len + 1);
	return 0;
}

int ops6k_parse_row(const char *text, size_t len, struct ops6k_row *row, struct ca_diag *d)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	memset(row, 0, sizeof *row);
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		char shown[sizeof jerr.text];
		return ca_fail(d, CA_ERR_PARSE, "invalid JSON at column %d: %s", jerr.column,
			       ca_printable(shown, jerr.text, sizeof shown));
	}
	if (!json_is_object(root))
		rc = ca_fail(d, CA_ERR_PARSE, "not a JSON object");
	else
		rc = parse_row_object(root, row, d);
	json_decref(root);
	if (rc)
		ops6k_row_free(row);
	return rc;
}

/* ---- Ops-6K --------------------------------------------------------------------------- */

static int import_row(struct import_ctx *c, size_t index, const char *text, size_t len,
		      const char *where, struct ca_diag *d)
{
	struct ops6k_row *row = malloc(sizeof *row);
	struct ca_diag rd;
	char shortname[CA_IMPORT_SHORT_OPS_MAX + 1], name[80], id[CA_TASK_ID_MAX];
	int rc = 0;

	if (!row)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	if (ops6k_parse_row(text, len, row, &rd) != 0) {
		import_skip(c, "%s: %s", where, rd.msg);
		free(row);
		return 0;
	}
	ops6k_short_name(row, shortname, sizeof shortname);
	snprintf(name, sizeof name, "%06zu_%s", index, shortname);
	const char *source = c->o->source ? c->o->source : "ops6k";
	snprintf(id, sizeof id, "%s/%s", source, name);
	struct new_task nt = {.id = id, .source = source, .name = name, .rel_dir = id,
			      .level = -1, .code = row->code, .code_len = row->code_len,
			      .row = row};
	rc = import_install(c, &nt, where, d);
	ops6k_row_free(row);
	free(row);
	return rc;
}

/* A bounded line reader: lines longer than max are reported (CA_ERR_LIMIT) and skipped whole. */
struct line_reader {
	int fd;
	char *buf;
	size_t cap, max;
	size_t beg, end;
	bool eof;
	size_t line_no; /* of the line last returned, from 1 */
};

static int lr_fill(struct line_reader *lr, struct ca_diag *d)
{
	ssize_t n;
	if (lr->beg) {
		memmove(lr->buf, lr->buf + lr->beg, lr->end - lr->beg);
		lr->end -= lr->beg;
		lr->beg = 0;
	}
	do
		n = read(lr->fd, lr->buf + lr->end, lr->cap - lr->end);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return ca_fail(d, CA_ERR_IO, "read failed: %s", strerror(errno));
	if (n == 0)
		lr->eof = true;
	lr->end += (size_t)n;
	return 0;
}

/* 1: a line in line and len (valid until the next call); 0: end of file; CA_ERR_LIMIT: the line
 * lr->line_no was too long (skipped); other negative codes: read errors. */
static int lr_next(struct line_reader *lr, const char **line, size_t *len, struct ca_diag *d)
{
	bool too_long = false;
	size_t scanned = 0;
	for (;;) {
		char *start = lr->buf + lr->beg;
		char *nl = memchr(start + scanned, '\n', lr->end - lr->beg - scanned);
		if (nl) {
			size_t n = (size_t)(nl - start);
			lr->line_no++;
			lr->beg += n + 1;
			if (too_long || n > lr->max)
				return CA_ERR_LIMIT;
			*line = start;
			*len = n;
			return 1;
		}
		scanned = lr->end - lr->beg;
		if (scanned > lr->max) {
			too_long = true;
			lr->beg = lr->end;
			scanned = 0;
		}
		if (lr->eof) {
			if (lr->end == lr->beg && !too_long)
				return 0;
			lr->line_no++;
			*line = lr->buf + lr->beg;
			*len = lr->end - lr->beg;
			lr->beg = lr->end;
			return too_long || *len > lr->max ? CA_ERR_LIMIT : 1;
		}
		int rc = lr_fill(lr, d);
		if (rc)
			return rc;
	}
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!isspace((unsigned char)s[i]))
			return false;
	return true;
}

static int count_row(struct import_ctx *c, struct ca_diag *d)
{
	if (++c->st->rows <= CA_IMPORT_MAX_ROWS)
		return 0;
	c->st->input_bad = true;
	return ca_fail(d, CA_ERR_LIMIT, "more than %u rows (split the file)", CA_IMPORT_MAX_ROWS);
}

static int import_jsonl(struct import_ctx *c, int fd, const char *file, struct ca_diag *d)
{
	struct line_reader lr = {.fd = fd, .max = CA_IMPORT_MAX_LINE};
	int rc = 0;

	lr.cap = lr.max + 65536;
	lr.buf = malloc(lr.cap);
	if (!lr.buf)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	for (;;) {
		const char *line = NULL;
		size_t len = 0;
		char where[64];
		int got = lr_next(&lr, &line, &len, d);
		if (got == 0)
			break;
		if (got < 0 && got != CA_ERR_LIMIT) {
			c->st->input_bad = true;
			rc = ca_fail_prefix(d, got, "%s", file);
			break;
		}
		snprintf(where, sizeof where, "row %zu (line %zu)", lr.line_no - 1, lr.line_no);
		if (got == CA_ERR_LIMIT) {
			rc = count_row(c, d);
			if (rc)
				break;
			import_skip(c, "%s: longer than %u bytes", where, CA_IMPORT_MAX_LINE);
			continue;
		}
		if (len && line[len - 1] == '\r')
			len--;
		if (blank(line, len))
			continue;
		rc = count_row(c, d);
		if (!rc)
			rc = import_row(c, lr.line_no - 1, line, len, where, d);
		if (rc)
			break;
		import_progress(c);
	}
	free(lr.buf);
	if (!rc && c->st->rows == 0) {
		c->st->input_bad = true;
		rc = ca_fail(d, CA_ERR_INVALID, "%s holds no rows", file);
	}
	return rc;
}

static int import_parquet(struct import_ctx *c, const char *file, struct ca_diag *d)
{
	char errpath[PATH_MAX], tail[512];
	const char *python = c->o->python ? c->o->python : getenv("CUDA_AGENT_PYTHON");
	struct ca_child child = {.pid = -1, .to_child = -1, .from_child = -1};
	struct ca_run_result how = {0};
	char pp_env[PYLAUNCH_ENV_MAX];
	bool spawned = false;
	size_t index = 0;
	int rc;

	if (!python || !python[0])
		python = "python3";
	if (ca_path_join(errpath, sizeof errpath, c->staging, "rows.stderr"))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	if ((rc = ca_pythonpath_env(pp_env, sizeof pp_env, NULL, PYTHONPATH_INHERIT, "parquet", d)))
		return rc;
	const char *env_add[] = {pp_env, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", NULL};
	const char *argv[] = {python, "-m", "cuda_agent_bridge.rows", file, NULL};
	struct ca_run_opts ro = {.env_add = env_add};
	rc = ca_child_spawn(&child, argv, &ro, errpath, d);
	if (rc) {
		rc = ca_fail_prefix(d, CA_ERR_UNSUPPORTED, "parquet: cannot run %s", python);
		goto out;
	}
	spawned = true;
	for (;;) {
		char *line = NULL;
		char where[64];
		struct ca_diag ld;
		int got = ca_child_read_line(&child, CA_IMPORT_MAX_LINE, ROWS_LINE_TIMEOUT_S, &line,
					     &ld);
		if (got == CA_ERR_CHILD)
			break; /* end of output: how it ended is below */
		if (got) {
			rc = ca_fail(d, got, "parquet: reading rows from %s: %s", python, ld.msg);
			goto out;
		}
		snprintf(where, sizeof where, "row %zu", index);
		rc = count_row(c, d);
		if (!rc && !blank(line, strlen(line)))
			rc = import_row(c, index, line, strlen(line), where, d);
		free(line);
		index++;
		if (rc)
			goto out;
		import_progress(c);
	}
	ca_child_finish(&child, 10.0, &how);
	spawned = false;
	ca_file_tail(errpath, 1, tail, sizeof tail);
	for (char *p = tail; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	if (!how.timed_out && !how.term_signal && how.exit_code == 0) {
		if (c->st->rows == 0) {
			c->st->input_bad = true;
			rc = ca_fail(d, CA_ERR_INVALID, "%s holds no rows", file);
		}
	} else if (!how.term_signal && !how.timed_out && how.exit_code == ROWS_EXIT_NO_PYARROW) {
		rc = ca_fail(d, CA_ERR_UNSUPPORTED, "%s",
			     tail[0] ? tail : "parquet needs pyarrow: pip install pyarrow, or "
					      "convert to JSONL");
	} else if (!how.term_signal && !how.timed_out && how.exit_code == 127) {
		rc = ca_fail(d, CA_ERR_UNSUPPORTED,
			     "parquet: cannot run %s (set --python or $CUDA_AGENT_PYTHON)", python);
	} else if (!how.term_signal && !how.timed_out && how.exit_code == 2) {
		c->st->input_bad = true;
		rc = ca_fail(d, CA_ERR_PARSE, "%s", tail[0] ? tail : "cannot read the parquet file");
	} else {
		char desc[128];
		ca_run_describe(&how, desc, sizeof desc);
		rc = ca_fail(d, CA_ERR_CHILD, "parquet: %s -m cuda_agent_bridge.rows failed (%s)%s%s",
			     python, desc, tail[0] ? ": " : "", tail);
	}
out:
	if (spawned)
		ca_child_close(&child, 1.0);
	return rc;
}

int import_ops6k(struct task_store *s, const char *file, const struct import_opts *o,
		 struct import_stats *st, struct ca_diag *d)
{
	struct import_ctx c;
	char magic[4] = {0};
	size_t size = 0;
	ssize_t got;
	int fd = -1, rc;

	memset(st, 0, sizeof *st);
	rc = ca_open_regular(file, &fd, &size, d);
	if (rc) {
		st->input_bad = true;
		return rc;
	}
	do
		got = pread(fd, magic, sizeof magic, 0);
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		rc = ca_fail(d, CA_ERR_IO, "cannot read %s: %s", file, strerror(errno));
		st->input_bad = true;
		close(fd);
		return rc;
	}
	rc = import_ctx_begin(&c, s, o, st, "ops6k", d);
	if (rc) {
		close(fd);
		return rc;
	}
	if (got == 4 && memcmp(magic, "PAR1", 4) == 0) {
		close(fd);
		fd = -1;
		rc = import_parquet(&c, file, d);
	} else {
		rc = import_jsonl(&c, fd, file, d);
	}
	if (fd >= 0)
		close(fd);
	return import_ctx_end(&c, rc, d);
}
