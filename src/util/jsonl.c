#include "util/jsonl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/str.h"

/* Reads one line (without its '\n') into *buf; 1 when a line was read, 0 at end of file, or a
 * negative error for a line over max bytes or a read error. */
static int read_line(FILE *f, size_t max, char **buf, size_t *cap, size_t *len)
{
	int c;
	*len = 0;
	while ((c = getc_unlocked(f)) != EOF && c != '\n') {
		if (*len + 1 >= *cap) {
			size_t n;
			char *p;
			if (*cap > max)
				return CA_ERR_LIMIT;
			n = *cap ? *cap * 2 : 4096;
			if (n > max + 2)
				n = max + 2;
			p = realloc(*buf, n);
			if (!p)
				return CA_ERR_NOMEM;
			*buf = p;
			*cap = n;
		}
		(*buf)[(*len)++] = (char)c;
	}
	if (ferror(f))
		return CA_ERR_IO;
	if (*len > max)
		return CA_ERR_LIMIT;
	if (*buf)
		(*buf)[*len] = '\0';
	return c == EOF && *len == 0 ? 0 : 1;
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

int ca_jsonl_each(const char *path, size_t max_line, ca_jsonl_fn each, void *ctx,
		  struct ca_diag *d)
{
	char shown[512], *line = NULL;
	size_t cap = 0, len = 0, size, lineno = 0;
	FILE *f = NULL;
	int fd, rc;

	ca_printable(shown, path, sizeof shown);
	rc = ca_open_regular(path, &fd, &size, d);
	if (rc)
		return rc;
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return ca_fail(d, CA_ERR_IO, "cannot read %s: %s", shown, strerror(errno));
	}
	for (;;) {
		json_error_t err;
		json_t *obj;
		int got = read_line(f, max_line, &line, &cap, &len);
		if (got == 0)
			break;
		lineno++;
		if (got < 0) {
			rc = got == CA_ERR_LIMIT
				     ? ca_fail(d, got, "%s:%zu: the line is longer than %zu bytes",
					       shown, lineno, max_line)
			     : got == CA_ERR_NOMEM
				     ? ca_fail(d, got, "%s:%zu: out of memory", shown, lineno)
				     : ca_fail(d, got, "cannot read %s: %s", shown, strerror(errno));
			break;
		}
		if (blank(line, len))
			continue;
		obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
		if (!obj) {
			char text[200];
			rc = ca_fail(d, CA_ERR_PARSE, "%s:%zu: not JSON: %s (column %d)", shown, lineno,
				     ca_printable(text, err.text, sizeof text), err.column);
			break;
		}
		rc = each(ctx, obj, d);
		json_decref(obj);
		if (rc) {
			ca_fail_prefix(d, rc, "%s:%zu", shown, lineno);
			break;
		}
	}
	free(line);
	fclose(f);
	return rc;
}
