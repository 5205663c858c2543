/* source_rules: the source side of build/rules.h: comments and strings stripped, includes and
 * identifiers a native candidate may not use, the host-side scope checks, and the listing of a
 * candidate's tree. */
#include "build/rules.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "build/rules_int.h"
#include "util/fs.h"

static bool is_ident(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '$';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* Whether the quote at text[i] is a C++14 digit separator (1'000'000, 0xFF'FF). */
static bool digit_separator(const char *t, size_t i, size_t len)
{
	size_t j = i;
	if (i == 0 || i + 1 >= len || !is_ident(t[i - 1]) || !is_ident(t[i + 1]))
		return false;
	while (j > 0 && (is_ident(t[j - 1]) || t[j - 1] == '\'' || t[j - 1] == '.'))
		j--;
	return is_digit(t[j]);
}

/* Start of a raw string literal R"delim( at text[i] == '"'? Stores the delimiter. */
static bool raw_string_start(const char *t, size_t i, size_t len, char *delim, size_t *dlen)
{
	if (i == 0 || t[i - 1] != 'R')
		return false;
	if (i >= 2 && is_ident(t[i - 2])) {
		/* allowed prefixes: u8R, uR, UR, LR */
		char p = t[i - 2];
		size_t start = i - 2;
		if (p == '8' && i >= 3 && t[i - 3] == 'u')
			start = i - 3;
		else if (p != 'u' && p != 'U' && p != 'L')
			return false;
		if (start > 0 && is_ident(t[start - 1]))
			return false;
	}
	size_t k = i + 1, n = 0;
	while (k < len && t[k] != '(') {
		char c = t[k];
		if (n >= 16 || c == ')' || c == '\\' || c == '"' || is_space(c) || c == '\n')
			return false;
		delim[n++] = c;
		k++;
	}
	if (k >= len)
		return false;
	*dlen = n;
	return true;
}

/* Fills code (comments blanked) and bare (comments and literal contents blanked); both have
 * len bytes plus a NUL, newlines kept so that line numbers survive. */
static void strip_source(const char *t, size_t len, char *code, char *bare)
{
	enum { NORMAL, LINE_COMMENT, BLOCK_COMMENT, STRING, CHARLIT, RAW } st = NORMAL;
	char delim[17];
	size_t dlen = 0;

	for (size_t i = 0; i < len; i++) {
		char c = t[i] ? t[i] : ' ';
		char next = i + 1 < len ? t[i + 1] : '\0';
		code[i] = bare[i] = c;
		switch (st) {
		case NORMAL:
			if (c == '/' && next == '/') {
				st = LINE_COMMENT;
				code[i] = bare[i] = ' ';
			} else if (c == '/' && next == '*') {
				st = BLOCK_COMMENT;
				code[i] = bare[i] = code[i + 1] = bare[i + 1] = ' ';
				i++;
			} else if (c == '"') {
				st = raw_string_start(t, i, len, delim, &dlen) ? RAW : STRING;
			} else if (c == '\'' && !digit_separator(t, i, len)) {
				st = CHARLIT;
			}
			break;
		case LINE_COMMENT:
			if (c == '\n') {
				st = NORMAL;
			} else {
				code[i] = bare[i] = ' ';
				if (c == '\\' && next == '\n') { /* continued comment */
					code[i + 1] = bare[i + 1] = '\n';
					i++;
				}
			}
			break;
		case BLOCK_COMMENT:
			if (c != '\n')
				code[i] = bare[i] = ' ';
			if (c == '*' && next == '/') {
				code[i + 1] = bare[i + 1] = ' ';
				i++;
				st = NORMAL;
			}
			break;
		case STRING:
		case CHARLIT:
			if (c == '\n') {
				st = NORMAL; /* unterminated: stop at the line end */
			} else if (c == '\\' && i + 1 < len) {
				bare[i] = ' ';
				i++;
				code[i] = t[i] ? t[i] : ' ';
				bare[i] = t[i] == '\n' ? '\n' : ' ';
			} else if (c == (st == STRING ? '"' : '\'')) {
				st = NORMAL;
			} else {
				bare[i] = ' ';
			}
			break;
		case RAW:
			if (c == ')' && i + 1 + dlen < len && memcmp(t + i + 1, delim, dlen) == 0 &&
			    t[i + 1 + dlen] == '"') {
				for (size_t k = 0; k <= dlen; k++) {
					code[i + k] = t[i + k];
					bare[i + k] = ' ';
				}
				i += dlen + 1;
				code[i] = bare[i] = '"';
				st = NORMAL;
			} else if (c != '\n') {
				bare[i] = ' ';
			}
			break;
		}
	}
	code[len] = bare[len] = '\0';
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static const char *include_violation(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (starts_with(path, "torch/") || starts_with(path, "ATen/") ||
	    starts_with(path, "c10/") || starts_with(path, "caffe2/") ||
	    starts_with(path, "THC/") || starts_with(path, "TH/") || strcmp(path, "torch.h") == 0)
		return "PyTorch headers are not allowed in a native candidate";
	if (starts_with(path, "pybind11"))
		return "pybind11 is not allowed in a native candidate";
	if (strcmp(base, "Python.h") == 0 || starts_with(path, "python3"))
		return "Python headers are not allowed in a native candidate";
	if (strcmp(base, "dlfcn.h") == 0)
		return "dynamic loading (dlfcn.h) is not allowed";
	if (path[0] == '/')
		return "includes must name files in kernels/ or system headers (no absolute paths)";
	for (const char *p = path; (p = strstr(p, "..")) != NULL; p += 2)
		if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return "includes must name files in kernels/ or system headers (no '..')";
	return NULL;
}

struct ident_rule {
	const char *name;
	bool call_only; /* only when called as a free function: name ( */
	const char *reason;
};

static const struct ident_rule ident_rules[] = {
	{"dlopen", false, D_DL}, {"dlmopen", false, D_DL}, {"dlsym", false, D_DL},
	{"dlvsym", false, D_DL}, {"system", true, D_PROC}, {"popen", true, D_PROC},
	{"fork", true, D_PROC}, {"vfork", true, D_PROC}, {"execv", true, D_PROC},
	{"execve", true, D_PROC}, {"execvp", true, D_PROC}, {"execvpe", true, D_PROC},
	{"execl", true, D_PROC}, {"execle", true, D_PROC}, {"execlp", true, D_PROC},
	{"fexecve", true, D_PROC}, {"posix_spawn", true, D_PROC}, {"posix_spawnp", true, D_PROC},
};

/* Whether the identifier at bare[s, e) is called as a free function. */
static bool called_free(const char *bare, size_t len, size_t s, size_t e)
{
	size_t k = e;
	while (k < len && (is_space(bare[k]) || bare[k] == '\n'))
		k++;
	if (k >= len || bare[k] != '(')
		return false;
	k = s;
	while (k > 0 && (is_space(bare[k - 1]) || bare[k - 1] == '\n'))
		k--;
	if (k > 0 && bare[k - 1] == '.')
		return false;
	if (k > 1 && bare[k - 1] == '>' && bare[k - 2] == '-')
		return false;
	return true;
}

static void scan_include(const char *name, unsigned line, const char *code, size_t p, size_t eol,
			 struct rules_report *r)
{
	char path[512];
	char close;
	size_t n = 0;

	while (p < eol && is_space(code[p]))
		p++;
	if (p >= eol || (code[p] != '<' && code[p] != '"'))
		return; /* computed include: nothing to check */
	close = code[p] == '<' ? '>' : '"';
	p++;
	while (p < eol && code[p] != close && n + 1 < sizeof path)
		path[n++] = code[p++];
	path[n] = '\0';
	const char *why = include_violation(path);
	if (why)
		rules_report_add(r, "%s:%u: #include %c%s%c: %s", name, line,
				 close == '>' ? '<' : '"', path, close, why);
}

int rules_scan_source(const char *display_name, const char *text, size_t len,
		      struct rules_report *r)
{
	int before = r->count;
	char *code = malloc(len + 1), *bare = malloc(len + 1);
	unsigned line = 1;

	if (!code || !bare) {
		free(code);
		free(bare);
		rules_report_add(r, "%s: out of memory scanning the file", display_name);
		return r->count - before;
	}
	strip_source(text, len, code, bare);
	for (size_t ls = 0; ls < len; line++) {
		size_t eol = ls;
		while (eol < len && bare[eol] != '\n')
			eol++;
		/* preprocessor directive? */
		size_t p = ls;
		while (p < eol && is_space(bare[p]))
			p++;
		if (p < eol && bare[p] == '#') {
			p++;
			while (p < eol && is_space(bare[p]))
				p++;
			size_t ws = p;
			while (p < eol && is_ident(bare[p]))
				p++;
			size_t wl = p - ws;
			if ((wl == 7 && memcmp(bare + ws, "include", 7) == 0) ||
			    (wl == 12 && memcmp(bare + ws, "include_next", 12) == 0) ||
			    (wl == 6 && memcmp(bare + ws, "import", 6) == 0))
				scan_include(display_name, line, code, p, eol, r);
		}
		/* identifiers */
		for (size_t i = ls; i < eol;) {
			if (!is_ident(bare[i]) || is_digit(bare[i])) {
				i++;
				continue;
			}
			size_t s = i;
			while (i < eol && is_ident(bare[i]))
				i++;
			if (s > 0 && is_ident(bare[s - 1]))
				continue;
			if (!strchr("dspfve", bare[s])) /* first letters of ident_rules */
				continue;
			for (size_t k = 0; k < NRULES(ident_rules); k++) {
				const struct ident_rule *ir = &ident_rules[k];
				if (strlen(ir->name) != i - s || memcmp(ir->name, bare + s, i - s) != 0)
					continue;
				if (ir->call_only && !called_free(bare, len, s, i))
					continue;
				rules_report_add(r, "%s:%u: %s: %s", display_name, line, ir->name,
						 ir->reason);
			}
		}
		ls = eol + 1;
	}
	free(code);
	free(bare);
	return r->count - before;
}

/* The identifier ending just before position end of bare (spaces skipped): [*s, end). */
static size_t ident_before(const char *bare, size_t end, size_t *s)
{
	size_t e = end;
	while (e > 0 && (is_space(bare[e - 1]) || bare[e - 1] == '\n'))
		e--;
	size_t b = e;
	while (b > 0 && is_ident(bare[b - 1]))
		b--;
	*s = b;
	return e - b;
}

/* Whether the '{' at bare[i] opens a block whose contents are still at file scope: a namespace
 * or an extern "C" block. */
static bool scope_block(const char *bare, size_t i)
{
	size_t s, n, e = i;

	while (e > 0 && (is_space(bare[e - 1]) || bare[e - 1] == '\n'))
		e--;
	if (e > 0 && bare[e - 1] == '"') { /* extern "C" { */
		size_t q = e - 1;
		while (q > 0 && bare[q - 1] != '"' && bare[q - 1] != '\n')
			q--;
		if (q == 0 || bare[q - 1] != '"')
			return false;
		n = ident_before(bare, q - 1, &s);
		return n == 6 && memcmp(bare + s, "extern", 6) == 0;
	}
	n = ident_before(bare, e, &s);
	if (n == 9 && memcmp(bare + s, "namespace", 9) == 0)
		return true; /* anonymous namespace */
	while (n > 0) { /* namespace a::b { */
		e = s;
		while (e > 0 && (is_space(bare[e - 1]) || bare[e - 1] == '\n'))
			e--;
		if (e >= 2 && bare[e - 1] == ':' && bare[e - 2] == ':') {
			n = ident_before(bare, e - 2, &s);
			continue;
		}
		n = ident_before(bare, e, &s);
		return n == 9 && memcmp(bare + s, "namespace", 9) == 0;
	}
	return false;
}

unsigned rules_file_scope_asm_line(const char *text, size_t len)
{
	char *code = malloc(len + 1), *bare = malloc(len + 1);
	unsigned line = 1, found = 0;
	unsigned char block_kind[256]; /* 1: a namespace or extern "C" block */
	size_t depth = 0, opaque = 0;
	char prev = ';';
	bool line_start = true, directive = false;

	if (!code || !bare)
		goto out;
	strip_source(text, len, code, bare);
	for (size_t i = 0; i < len; i++) {
		char c = bare[i];
		if (c == '\n') {
			if (!(i > 0 && bare[i - 1] == '\\'))
				directive = false;
			line_start = true;
			line++;
			continue;
		}
		if (is_space(c))
			continue;
		if (line_start && c == '#')
			directive = true;
		line_start = false;
		if (directive)
			continue;
		if (c == '{' || c == '}') {
			if (c == '{') {
				unsigned char k = scope_block(bare, i) ? 1 : 0;
				if (depth < sizeof block_kind)
					block_kind[depth] = k;
				depth++;
				opaque += !k;
			} else if (depth > 0) {
				depth--;
				if (depth >= sizeof block_kind || !block_kind[depth])
					opaque--;
			}
			prev = c;
			continue;
		}
		if (is_ident(c) && !is_digit(c) && (i == 0 || !is_ident(bare[i - 1]))) {
			size_t e = i;
			while (e < len && is_ident(bare[e]))
				e++;
			size_t n = e - i;
			if (opaque == 0 && (prev == ';' || prev == '{' || prev == '}') &&
			    ((n == 3 && memcmp(bare + i, "asm", 3) == 0) ||
			     (n == 5 && memcmp(bare + i, "__asm", 5) == 0) ||
			     (n == 7 && memcmp(bare + i, "__asm__", 7) == 0))) {
				found = line;
				break;
			}
			prev = 'a';
			i = e - 1;
			continue;
		}
		prev = c;
	}
out:
	free(code);
	free(bare);
	return found;
}

static bool source_suffix(const char *name)
{
	static const char *const suffixes[] = {".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c",
					       ".h", ".hpp", ".hh", ".inl"};
	size_t len = strlen(name);
	for (size_t i = 0; i < NRULES(suffixes); i++) {
		size_t sl = strlen(suffixes[i]);
		if (len > sl && strcmp(name + len - sl, suffixes[i]) == 0)
			return true;
	}
	return false;
}

int rules_check_sources(const char *dir, char *report, size_t report_size, struct ca_diag *d)
{
	struct rules_report r;
	char **names = NULL;
	size_t count = 0;
	char label[256], first[512];
	int rc;

	rules_report_init(&r, report, report_size);
	rc = rules_list_tree(dir, RULES_MAX_TREE_FILES, &names, &count, d);
	if (rc)
		return rc;
	{
		size_t dl = strlen(dir);
		while (dl > 1 && dir[dl - 1] == '/')
			dl--;
		size_t s = dl;
		while (s > 0 && dir[s - 1] != '/')
			s--;
		snprintf(label, sizeof label, "%.*s", (int)(dl - s), dir + s);
	}
	for (size_t i = 0; i < count; i++) {
		char path[PATH_MAX], shown[PATH_MAX + 256];
		char *text = NULL;
		size_t len = 0;
		struct ca_diag rd;

		if (!source_suffix(names[i]))
			continue;
		snprintf(shown, sizeof shown, "%s/%s", label, names[i]);
		if (ca_path_join(path, sizeof path, dir, names[i]) != 0) {
			rc = ca_fail(d, CA_ERR_LIMIT, "path too long under %s", dir);
			goto out;
		}
		rc = ca_read_file(path, RULES_MAX_SOURCE_BYTES, &text, &len, &rd);
		if (rc == CA_ERR_LIMIT) {
			rules_report_add(&r, "%s: larger than the limit of %u bytes", shown,
					 RULES_MAX_SOURCE_BYTES);
			rc = 0;
			continue;
		}
		if (rc) {
			rc = ca_fail(d, rc, "%s", rd.msg);
			goto out;
		}
		rules_scan_source(shown, text, len, &r);
		free(text);
	}
	rules_report_finish(&r);
	if (r.count) {
		rules_first_line(report ? report : "", first, sizeof first);
		rc = ca_fail(d, CA_ERR_REJECTED, "%d source rule violation%s: %s", r.count,
			     r.count == 1 ? "" : "s", first);
	}
out:
	ca_free_names(names, count);
	return rc;
}

/* ---- tree listing ---------------------------------------------------------------------------- */

struct tree {
	char **names;
	size_t count, max;
};

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether path resolves to a place under root (both resolved). */
static bool inside(const char *root, const char *path)
{
	char r[PATH_MAX], p[PATH_MAX];
	size_t n;
	if (!realpath(root, r) || !realpath(path, p))
		return false;
	n = strlen(r);
	return strncmp(p, r, n) == 0 && p[n] == '/';
}

static int walk(const char *root, const char *rel, int depth, struct tree *t, struct ca_diag *d)
{
	char dir[PATH_MAX];
	DIR *dp;
	struct dirent *ent;
	int rc = 0;

	if (rel[0] ? snprintf(dir, sizeof dir, "%s/%s", root, rel) >= (int)sizeof dir
		   : snprintf(dir, sizeof dir, "%s", root) >= (int)sizeof dir)
		return ca_fail(d, CA_ERR_LIMIT, "path too long under %s", root);
	dp = opendir(dir);
	if (!dp)
		return ca_fail(d, errno == ENOENT ? CA_ERR_NOTFOUND : CA_ERR_IO, "cannot open %s: %s",
			       dir, strerror(errno));
	while ((ent = readdir(dp)) != NULL) {
		char full[PATH_MAX], sub[PATH_MAX];
		struct stat st;
		if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
			continue;
		if ((rel[0] ? snprintf(sub, sizeof sub, "%s/%s", rel, ent->d_name)
			    : snprintf(sub, sizeof sub, "%s", ent->d_name)) >= (int)sizeof sub ||
		    snprintf(full, sizeof full, "%s/%s", dir, ent->d_name) >= (int)sizeof full) {
			rc = ca_fail(d, CA_ERR_LIMIT, "path too long under %s", root);
			goto out;
		}
		if (lstat(full, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (depth >= RULES_MAX_TREE_DEPTH)
				continue;
			rc = walk(root, sub, depth + 1, t, d);
			if (rc)
				goto out;
			continue;
		}
		/* A symbolic link is a file of the tree only where it stays inside it: the build's
		 * sandbox shows the compilers the tree alone, and the trusted side reads no file
		 * outside it on the candidate's word (a link to a host file). */
		if (S_ISLNK(st.st_mode) && (stat(full, &st) != 0 || !inside(root, full)))
			continue;
		if (!S_ISREG(st.st_mode))
			continue;
		if (t->count == t->max) {
			rc = ca_fail(d, CA_ERR_LIMIT, "%s holds more than %zu files", root, t->max);
			goto out;
		}
		t->names[t->count] = strdup(sub);
		if (!t->names[t->count]) {
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing %s", root);
			goto out;
		}
		t->count++;
	}
out:
	closedir(dp);
	return rc;
}

int rules_list_tree(const char *dir, size_t max_files, char ***relpaths, size_t *count,
		    struct ca_diag *d)
{
	struct tree t = {.max = max_files};
	int rc;

	*relpaths = NULL;
	*count = 0;
	t.names = calloc(max_files ? max_files : 1, sizeof *t.names);
	if (!t.names)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory listing %s", dir);
	rc = walk(dir, "", 0, &t, d);
	if (rc) {
		ca_free_names(t.names, t.count);
		return rc;
	}
	qsort(t.names, t.count, sizeof *t.names, name_cmp);
	*relpaths = t.names;
	*count = t.count;
	return 0;
}
