/* kernelbench: a KernelBench checkout's levelN/ files into the task store (import.h). */
#include "import/import_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/str.h"

/* ---- KernelBench ---------------------------------------------------------------------- */

/* "level<N>" with N 0..99 -> N; else -1. */
static int level_number(const char *name)
{
	int n = 0;
	if (strncmp(name, "level", 5) != 0 || !name[5])
		return -1;
	for (const char *p = name + 5; *p; p++) {
		if (!isdigit((unsigned char)*p) || p - name > 7)
			return -1;
		n = n * 10 + (*p - '0');
	}
	return n <= CA_TASK_LEVEL_MAX ? n : -1;
}

struct kb_level {
	int level;
	char dir[PATH_MAX];
};

static int level_cmp(const void *a, const void *b)
{
	const struct kb_level *x = a, *y = b;
	return (x->level > y->level) - (x->level < y->level);
}

/* The levelN folders directly under base (at most 100, sorted by N). */
static int find_levels(const char *base, struct kb_level *levels, size_t *count,
		       struct ca_diag *d)
{
	DIR *dp = opendir(base);
	struct dirent *ent;
	*count = 0;
	if (!dp)
		return ca_fail(d, CA_ERR_IO, "cannot read %s: %s", base, strerror(errno));
	while ((ent = readdir(dp)) != NULL && *count <= CA_TASK_LEVEL_MAX) {
		int n = level_number(ent->d_name);
		struct kb_level *l = &levels[*count];
		if (n < 0 || ca_path_join(l->dir, sizeof l->dir, base, ent->d_name) ||
		    !ca_is_dir(l->dir))
			continue;
		l->level = n;
		(*count)++;
	}
	closedir(dp);
	qsort(levels, *count, sizeof *levels, level_cmp);
	return 0;
}

/* "<N>_<Name>.py" (N 1-6 digits, Name not empty) -> the stem "<N>_<Name>"; else false. */
static bool kb_file_name(const char *file, char *stem, size_t size)
{
	size_t n = strlen(file), digits = 0;
	while (isdigit((unsigned char)file[digits]))
		digits++;
	if (digits == 0 || digits > 6 || file[digits] != '_' || n < digits + 5 ||
	    strcmp(file + n - 3, ".py") != 0 || n - 3 >= size)
		return false;
	memcpy(stem, file, n - 3);
	stem[n - 3] = '\0';
	return true;
}

static int import_level(struct import_ctx *c, const struct kb_level *l, struct ca_diag *d)
{
	static const char *const py[] = {".py", NULL};
	char **files = NULL;
	size_t n = 0;
	int rc = ca_list_files(l->dir, py, KB_MAX_LEVEL_FILES, &files, &n, d);

	if (rc) {
		c->st->input_bad = true;
		return rc;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		char stem[PATH_MAX], name[CA_IMPORT_NAME_MAX + 1], shown[160];
		char id[CA_TASK_ID_MAX], path[PATH_MAX], where[256];
		char *code = NULL;
		size_t code_len = 0;
		struct ca_diag fd;

		if (++c->st->rows > CA_IMPORT_MAX_ROWS) {
			c->st->input_bad = true;
			rc = ca_fail(d, CA_ERR_LIMIT, "more than %u files", CA_IMPORT_MAX_ROWS);
			break;
		}
		ca_printable(shown, files[i], sizeof shown);
		snprintf(where, sizeof where, "level%d/%s", l->level, shown);
		if (!kb_file_name(files[i], stem, sizeof stem)) {
			import_skip(c, "%s: not named <N>_<Name>.py", where);
			continue;
		}
		if (import_sanitize_name(stem, name, sizeof name) != 0) {
			import_skip(c, "%s: no usable name", where);
			continue;
		}
		if (ca_path_join(path, sizeof path, l->dir, files[i]) ||
		    ca_read_file(path, CA_IMPORT_MAX_CODE, &code, &code_len, &fd) != 0) {
			import_skip(c, "%s: %s", where, fd.msg);
			continue;
		}
		snprintf(id, sizeof id, "kernelbench/level%d/%s", l->level, name);
		struct new_task nt = {.id = id, .source = "kernelbench", .name = name,
				      .rel_dir = id, .level = l->level, .code = code,
				      .code_len = code_len};
		rc = import_install(c, &nt, where, d);
		free(code);
		import_progress(c);
	}
	ca_free_names(files, n);
	return rc;
}

int import_kernelbench(struct task_store *s, const char *dir, const struct import_opts *o,
		       struct import_stats *st, struct ca_diag *d)
{
	struct import_ctx c;
	struct kb_level *levels = NULL;
	char root[PATH_MAX], sub[PATH_MAX];
	const char *base;
	size_t count = 0;
	int rc;

	memset(st, 0, sizeof *st);
	if (!ca_is_dir(dir)) {
		st->input_bad = true;
		return ca_fail(d, CA_ERR_NOTFOUND, "KernelBench directory %s does not exist", dir);
	}
	rc = ca_realpath(dir, root, sizeof root, d);
	if (rc) {
		st->input_bad = true;
		return rc;
	}
	levels = calloc(CA_TASK_LEVEL_MAX + 1, sizeof *levels);
	if (!levels)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	base = strrchr(root, '/');
	base = base ? base + 1 : root;
	if (level_number(base) >= 0) {
		levels[0].level = level_number(base);
		ca_strlcpy(levels[0].dir, root, sizeof levels[0].dir);
		count = 1;
	} else {
		if (ca_path_join(sub, sizeof sub, root, "KernelBench") == 0 && ca_is_dir(sub))
			rc = find_levels(sub, levels, &count, d);
		if (!rc && count == 0)
			rc = find_levels(root, levels, &count, d);
		if (!rc && count == 0)
			rc = ca_fail(d, CA_ERR_INVALID,
				     "%s holds no KernelBench levels (expected KernelBench/level1.."
				     "level4, level1..level4, or one levelN folder)",
				     root);
		if (rc) {
			st->input_bad = true;
			free(levels);
			return rc;
		}
	}
	rc = import_ctx_begin(&c, s, o, st, "kernelbench", d);
	if (rc) {
		free(levels);
		return rc;
	}
	for (size_t i = 0; i < count && !rc; i++)
		rc = import_level(&c, &levels[i], d);
	if (!rc && st->rows == 0) {
		st->input_bad = true;
		rc = ca_fail(d, CA_ERR_INVALID, "%s holds no .py files in its level folders", root);
	}
	free(levels);
	return import_ctx_end(&c, rc, d);
}
