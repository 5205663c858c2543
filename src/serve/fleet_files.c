/* fleet_files: a job's task and candidate carried inline through Redis (fleet.h). */
#include "serve/fleet.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/request.h"
#include "util/fs.h"
#include "util/str.h"

struct pack {
	json_t *files;
	json_t *skipped; /* binary or too large: not sent (an evaluation reads only text) */
	size_t n, bytes;
};

/* One file's text, or NULL (skipped) when it is not UTF-8 or over the per-file cap. */
static int pack_file(struct pack *p, const char *path, const char *rel, struct ca_diag *d)
{
	char *data = NULL;
	size_t len = 0;
	json_t *s;
	int rc;
	if (++p->n > FLEET_FILES_MAX)
		return ca_fail(d, CA_ERR_LIMIT, "more than %d files to send", FLEET_FILES_MAX);
	rc = ca_read_file(path, SERVE_MAX_FILE_BYTES, &data, &len, d);
	if (rc == CA_ERR_LIMIT) {
		json_array_append_new(p->skipped, json_string(rel));
		return 0;
	}
	if (rc)
		return rc;
	s = json_stringn(data, len); /* NULL when not UTF-8 */
	free(data);
	if (!s) {
		json_array_append_new(p->skipped, json_string(rel));
		return 0;
	}
	p->bytes += len;
	if (p->bytes > FLEET_BYTES_MAX) {
		json_decref(s);
		return ca_fail(d, CA_ERR_LIMIT, "more than %u bytes of files to send",
			       FLEET_BYTES_MAX);
	}
	json_object_set_new(p->files, rel, s);
	return 0;
}

static int pack_dir(struct pack *p, const char *dir, const char *rel, int depth,
		    struct ca_diag *d)
{
	DIR *dh;
	struct dirent *e;
	int rc = 0;
	if (depth > SERVE_MAX_DEPTH)
		return 0;
	if (!(dh = opendir(dir)))
		return ca_fail(d, CA_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
	while (!rc && (e = readdir(dh))) {
		char path[PATH_MAX], sub[PATH_MAX];
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		if (ca_format(path, sizeof path, "%s/%s", dir, e->d_name) ||
		    ca_format(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) ||
		    lstat(path, &st) != 0 || strlen(sub) > SERVE_MAX_PATH)
			continue;
		if (S_ISDIR(st.st_mode))
			rc = pack_dir(p, path, sub, depth + 1, d);
		else if (S_ISREG(st.st_mode) && serve_path_ok(sub))
			rc = pack_file(p, path, sub, d);
	}
	closedir(dh);
	return rc;
}

int fleet_pack_path(const char *path, json_t **out, struct ca_diag *d)
{
	struct pack p = {json_object(), json_array(), 0, 0};
	int rc;
	*out = NULL;
	if (ca_is_dir(path)) {
		rc = pack_dir(&p, path, "", 1, d);
		if (!rc)
			*out = json_pack("{s:O, s:O}", "files", p.files, "skipped", p.skipped);
	} else {
		const char *base = strrchr(path, '/');
		base = base ? base + 1 : path;
		rc = pack_file(&p, path, base, d);
		if (!rc && json_object_size(p.files) != 1)
			rc = ca_fail(d, CA_ERR_INVALID, "%s is not a text file", path);
		if (!rc)
			*out = json_pack("{s:s, s:O}", "file", base,
					 "text", json_object_get(p.files, base));
	}
	json_decref(p.files);
	json_decref(p.skipped);
	if (!rc && !*out)
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
	return rc;
}

/* Writes one text to dir/rel (a checked path). */
static int put(const char *dir, const char *rel, const json_t *text, struct ca_diag *d)
{
	struct serve_file f;
	if (!json_is_string(text) || !serve_path_ok(rel))
		return ca_fail(d, CA_ERR_INVALID, "a packed file is malformed (%s)", rel);
	f.path = (char *)rel;
	f.data = (char *)json_string_value(text);
	f.len = json_string_length(text);
	return serve_files_write(dir, &f, 1, d);
}

int fleet_unpack_path(const json_t *packed, const char *dir, char *written, size_t size,
		      struct ca_diag *d)
{
	const json_t *files = json_object_get(packed, "files");
	const char *file = json_string_value(json_object_get(packed, "file"));
	int rc;
	if ((rc = ca_mkdirs(dir, 0755, d)))
		return rc;
	if (file) {
		if ((rc = put(dir, file, json_object_get(packed, "text"), d)))
			return rc;
		return ca_format(written, size, "%s/%s", dir, file)
			       ? ca_fail(d, CA_ERR_LIMIT, "path too long")
			       : 0;
	}
	if (!json_is_object(files) || json_object_size(files) > FLEET_FILES_MAX)
		return ca_fail(d, CA_ERR_INVALID, "a packed directory is malformed");
	const char *rel;
	json_t *text;
	json_object_foreach((json_t *)files, rel, text)
		if ((rc = put(dir, rel, text, d)))
			return rc;
	return ca_strlcpy(written, dir, size) ? ca_fail(d, CA_ERR_LIMIT, "path too long") : 0;
}
