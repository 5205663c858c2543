/* tools_search: glob and grep inside the workspace (tools_int.h; the caps are in tools.h). */
#include "agent/tools_int.h"

#include <dirent.h>
#include <fnmatch.h>
#include <regex.h>
#include <string.h>
#include <sys/stat.h>

#include "util/clock.h"
#include "util/str.h"

/* ---- walking, glob patterns ---- */

struct names {
	char **v;
	size_t n, cap;
	size_t visited;
	bool truncated;
	bool nomem;
};

static void names_add(struct names *l, const char *s)
{
	if (l->nomem)
		return;
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 64;
		char **nv = realloc(l->v, ncap * sizeof *nv);
		if (!nv) {
			l->nomem = true;
			return;
		}
		l->v = nv;
		l->cap = ncap;
	}
	if (!(l->v[l->n] = strdup(s)))
		l->nomem = true;
	else
		l->n++;
}

static void names_free(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every entry that is not a directory under abs (shown as rel, "" for the workspace root),
 * recursively, not following symlinks, skipping .git; at most TOOLS_WALK_MAX entries. */
static void walk(const char *abs, const char *rel, int depth, struct names *out)
{
	DIR *dir;
	struct dirent *e;
	if (depth > 64 || out->nomem) {
		out->truncated = true;
		return;
	}
	if (!(dir = opendir(abs)))
		return;
	while ((e = readdir(dir))) {
		char a[PATH_MAX], rr[PATH_MAX];
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (++out->visited > TOOLS_WALK_MAX) {
			out->truncated = true;
			break;
		}
		if ((size_t)snprintf(a, sizeof a, "%s/%s", abs, e->d_name) >= sizeof a ||
		    (size_t)snprintf(rr, sizeof rr, "%s%s%s", rel, rel[0] ? "/" : "",
				     e->d_name) >= sizeof rr)
			continue;
		if (lstat(a, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (strcmp(e->d_name, ".git") != 0)
				walk(a, rr, depth + 1, out);
		} else {
			names_add(out, rr);
		}
	}
	closedir(dir);
}

/* pattern and path: '/'-separated, relative; `**` as a whole segment matches any number of
 * segments, other segments go through fnmatch(3). */
static bool match_path(const char *pat, const char *path, int budget)
{
	char ps[PATH_MAX], ss[PATH_MAX];
	if (budget <= 0)
		return false;
	if (!*pat)
		return !*path;
	const char *pe = strchr(pat, '/');
	size_t pl = pe ? (size_t)(pe - pat) : strlen(pat);
	const char *pnext = pe ? pe + 1 : pat + pl;
	if (pl == 2 && pat[0] == '*' && pat[1] == '*') {
		if (match_path(pnext, path, budget - 1))
			return true;
		if (!*path)
			return false;
		const char *se = strchr(path, '/');
		return se ? match_path(pat, se + 1, budget - 1) : !*pnext;
	}
	if (!*path)
		return false;
	const char *se = strchr(path, '/');
	size_t sl = se ? (size_t)(se - path) : strlen(path);
	if (pl >= sizeof ps || sl >= sizeof ss)
		return false;
	memcpy(ps, pat, pl);
	ps[pl] = '\0';
	memcpy(ss, path, sl);
	ss[sl] = '\0';
	if (fnmatch(ps, ss, 0) != 0)
		return false;
	if (!se)
		return match_path(pnext, "", budget - 1);
	return pe ? match_path(pnext, se + 1, budget - 1) : false;
}

/* A pattern relative to the workspace (an absolute one inside it is made relative); NULL with
 * why when it is outside or has "..". */
static const char *relative_pattern(const char *ws, const char *pat, char *why, size_t why_size)
{
	size_t wl = strlen(ws);
	char shown[256];
	if (strlen(pat) > PATTERN_MAX) {
		snprintf(why, why_size, "the pattern is longer than %d bytes", PATTERN_MAX);
		return NULL;
	}
	if (pat[0] == '/') {
		if (strncmp(pat, ws, wl) != 0 || pat[wl] != '/') {
			snprintf(why, why_size, "the pattern %s is outside the workspace",
				 ca_printable(shown, pat, sizeof shown));
			return NULL;
		}
		pat += wl + 1;
	}
	while (pat[0] == '.' && pat[1] == '/')
		pat += 2;
	for (const char *s = pat; *s;) {
		const char *e = strchr(s, '/');
		size_t cl = e ? (size_t)(e - s) : strlen(s);
		if (cl == 2 && s[0] == '.' && s[1] == '.') {
			snprintf(why, why_size, "the pattern must not contain '..'");
			return NULL;
		}
		s += cl + (e ? 1 : 0);
	}
	if (!pat[0]) {
		snprintf(why, why_size, "the pattern is empty");
		return NULL;
	}
	return pat;
}

int tools_glob(const char *ws, const json_t *args, struct tool_result *res, struct ca_diag *d)
{
	char why[512];
	const char *pat = relative_pattern(ws, json_string_value(json_object_get(args, "pattern")),
					   why, sizeof why);
	struct names all = {0}, hits = {0};
	struct ca_buf b = {0};
	if (!pat)
		return tools_refuse(res, d, "%s", why);
	walk(ws, "", 0, &all);
	for (size_t i = 0; i < all.n && !hits.nomem; i++)
		if (match_path(pat, all.v[i], 4096))
			names_add(&hits, all.v[i]);
	if (all.nomem || hits.nomem) {
		names_free(&all);
		names_free(&hits);
		return ca_fail(d, CA_ERR_NOMEM, "tools: glob: out of memory");
	}
	if (hits.n)
		qsort(hits.v, hits.n, sizeof *hits.v, cmp_str);
	for (size_t i = 0; i < hits.n && i < TOOLS_GLOB_MAX; i++) {
		ca_buf_add(&b, hits.v[i], strlen(hits.v[i]));
		ca_buf_add(&b, "\n", 1);
	}
	if (hits.n == 0)
		ca_buf_printf(&b, "no files match\n");
	if (hits.n > TOOLS_GLOB_MAX)
		ca_buf_printf(&b, "[%zu matches, the first %d shown]\n", hits.n, TOOLS_GLOB_MAX);
	if (all.truncated)
		ca_buf_printf(&b, "[stopped after %d directory entries: the list may be incomplete]\n",
			  TOOLS_WALK_MAX);
	names_free(&all);
	names_free(&hits);
	return tools_text_result(&b, res, true, d);
}

int tools_grep(const char *ws, const json_t *args, struct tool_result *res, struct ca_diag *d)
{
	const char *pattern = json_string_value(json_object_get(args, "pattern"));
	const json_t *jp = json_object_get(args, "path"), *jg = json_object_get(args, "glob"),
		     *jm = json_object_get(args, "max_results");
	bool icase = json_is_true(json_object_get(args, "ignore_case"));
	size_t max = jm ? (size_t)json_integer_value(jm) : TOOLS_GREP_DEFAULT;
	const char *glob = NULL;
	struct rpath r;
	struct names files = {0};
	struct ca_buf b = {0};
	struct stat st;
	regex_t re;
	char why[1024];
	size_t results = 0, skipped_big = 0, skipped_bin = 0;
	bool stopped = false, slow = false;
	double start = ca_now();
	int rc;

	if (max > TOOLS_GREP_MAX)
		max = TOOLS_GREP_MAX;
	if (jg && !(glob = relative_pattern(ws, json_string_value(jg), why, sizeof why)))
		return tools_refuse(res, d, "glob: %s", why);
	if ((rc = tools_resolve_path(ws, jp ? json_string_value(jp) : ".", &r, why, sizeof why)))
		return rc < 0 ? ca_fail(d, rc, "tools: grep") : tools_refuse(res, d, "%s", why);
	if (lstat(r.abs, &st) != 0)
		return tools_refuse(res, d, "%s does not exist", r.shown);
	if ((rc = regcomp(&re, pattern,
			  REG_EXTENDED | REG_NEWLINE | (icase ? REG_ICASE : 0))) != 0) {
		char msg[256];
		regerror(rc, &re, msg, sizeof msg);
		return tools_refuse(res, d, "bad regular expression: %s", msg);
	}
	if (S_ISDIR(st.st_mode))
		walk(r.abs, strcmp(r.rel, ".") ? r.rel : "", 0, &files);
	else
		names_add(&files, r.rel);
	if (files.nomem) {
		regfree(&re);
		names_free(&files);
		return ca_fail(d, CA_ERR_NOMEM, "tools: grep: out of memory");
	}
	if (files.n)
		qsort(files.v, files.n, sizeof *files.v, cmp_str);
	for (size_t f = 0; f < files.n && !stopped; f++) {
		const char *rel = files.v[f], *base = strrchr(rel, '/');
		struct rpath fr;
		char *text = NULL;
		size_t len = 0;
		base = base ? base + 1 : rel;
		if (glob && !(strchr(glob, '/') ? match_path(glob, rel, 4096)
						: fnmatch(glob, base, 0) == 0))
			continue;
		if (ca_now() - start > GREP_TIME_S) {
			slow = true;
			break;
		}
		if ((size_t)snprintf(fr.abs, sizeof fr.abs, "%s/%s", ws, rel) >= sizeof fr.abs)
			continue;
		ca_printable(fr.shown, rel, sizeof fr.shown);
		if (lstat(fr.abs, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if ((size_t)st.st_size > TOOLS_READ_MAX) {
			skipped_big++;
			continue;
		}
		rc = tools_slurp(&fr, TOOLS_READ_MAX, &text, &len, why, sizeof why);
		if (rc < 0) {
			b.err = CA_ERR_NOMEM;
			break;
		}
		if (rc)
			continue;
		if (memchr(text, '\0', len)) {
			skipped_bin++;
			free(text);
			continue;
		}
		size_t lineno = 1;
		for (char *s = text; s < text + len && !stopped; lineno++) {
			char *e = memchr(s, '\n', (size_t)(text + len - s));
			char saved = e ? *e : '\0';
			if (e)
				*e = '\0';
			if (regexec(&re, s, 0, NULL, 0) == 0) {
				if (results == max) {
					stopped = true;
				} else {
					size_t sl = strlen(s);
					ca_buf_printf(&b, "%s:%zu: ", rel, lineno);
					ca_buf_add(&b, s, sl < GREP_LINE_SHOWN ? sl : GREP_LINE_SHOWN);
					ca_buf_add(&b, sl > GREP_LINE_SHOWN ? " [...]\n" : "\n",
					       sl > GREP_LINE_SHOWN ? 7 : 1);
					results++;
				}
			}
			if (!e)
				break;
			*e = saved;
			s = e + 1;
		}
		free(text);
	}
	regfree(&re);
	if (results == 0 && !b.err)
		ca_buf_printf(&b, "no matches\n");
	if (stopped)
		ca_buf_printf(&b, "[stopped at max_results=%zu; narrow the pattern or path]\n", max);
	if (slow)
		ca_buf_printf(&b, "[stopped after %.0f s; narrow the pattern or path]\n", GREP_TIME_S);
	if (files.truncated)
		ca_buf_printf(&b, "[stopped after %d directory entries: results may be incomplete]\n",
			  TOOLS_WALK_MAX);
	if (skipped_big || skipped_bin)
		ca_buf_printf(&b, "[skipped: %zu binary file%s, %zu file%s over 1 MiB]\n", skipped_bin,
			  skipped_bin == 1 ? "" : "s", skipped_big, skipped_big == 1 ? "" : "s");
	names_free(&files);
	return tools_text_result(&b, res, true, d);
}
