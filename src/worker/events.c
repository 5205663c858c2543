#include "worker/events.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int event_fd = -1;

int events_open(struct ca_diag *d)
{
	int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return ca_fail(d, CA_ERR_IO, "cannot duplicate stdout: %s", strerror(errno));
	if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
		int e = errno;
		close(fd);
		return ca_fail(d, CA_ERR_IO, "cannot point stdout at stderr: %s", strerror(e));
	}
	event_fd = fd;
	return 0;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return CA_ERR_IO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int events_emit(const char *name, json_t *obj)
{
	json_t *line = json_object();
	const char *key;
	json_t *value;
	char *text;
	size_t len;
	int rc;

	if (!line || !obj) {
		/* json_pack returns NULL on a format mistake too: say so rather than go quiet. */
		fprintf(stderr, "cuda-agent-worker: cannot build the '%s' event (out of memory?)\n",
			name);
		json_decref(line);
		json_decref(obj);
		return CA_ERR_NOMEM;
	}
	/* "event" first for readers that look at the start of the line. */
	json_object_set_new(line, "event", json_string(name));
	json_object_foreach(obj, key, value) json_object_set(line, key, value);
	json_decref(obj);
	text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
	json_decref(line);
	if (!text)
		return CA_ERR_NOMEM;
	len = strlen(text);
	{
		/* one write() for the whole line, newline included */
		char *buf = realloc(text, len + 2);
		if (!buf) {
			free(text);
			return CA_ERR_NOMEM;
		}
		buf[len] = '\n';
		buf[len + 1] = '\0';
		rc = write_all(event_fd >= 0 ? event_fd : STDOUT_FILENO, buf, len + 1);
		free(buf);
	}
	return rc;
}

void events_error(const char *code, const char *message)
{
	events_emit("error", json_pack("{s:s, s:o}", "code", code, "message",
				       json_str(message, 4096)));
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s)
{
	unsigned c = s[0];
	size_t n;
	unsigned min;
	unsigned cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		min = 0x80;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		min = 0x800;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		min = 0x10000;
		cp = c & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

json_t *json_str(const char *s, size_t max_len)
{
	size_t len, out = 0;
	char *buf;
	json_t *j;

	if (!s)
		return json_null();
	len = strlen(s);
	if (max_len && len > max_len)
		len = max_len;
	buf = malloc(len + 4);
	if (!buf)
		return json_string("(out of memory)");
	for (size_t i = 0; i < len;) {
		size_t n = utf8_seq((const unsigned char *)s + i);
		if (n == 0 || i + n > len) {
			buf[out++] = '?';
			i++;
			continue;
		}
		memcpy(buf + out, s + i, n);
		out += n;
		i += n;
	}
	if (len < strlen(s)) {
		memcpy(buf + out, "...", 3);
		out += 3;
	}
	j = json_stringn(buf, out);
	free(buf);
	return j ? j : json_string("?");
}

json_t *json_num(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}
