/* host_pch: the toolkit's part of nvcc's host translation unit precompiled once (the header
 * says why the output is nvcc's). */
#include "build/host_pch.h"

#include "build/box.h"

#include <dirent.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/log.h"

#define MAX_DEPTH 256 /* nested conditionals in a prefix */
#define DEPS_MAX (4u << 20)
#define STALE_TMP_S 600

bool host_pch_enabled(void)
{
	const char *v = getenv("CUDA_AGENT_HOST_PCH");
	return !v || strcmp(v, "0") != 0;
}

void host_pch_prefix_free(struct host_pch_prefix *p)
{
	free(p->replay);
	memset(p, 0, sizeof *p);
}

/* gcc's blanks within a line */
static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r';
}

static bool starts_word(const char *p, const char *end, const char *w)
{
	size_t n = strlen(w);
	return (size_t)(end - p) >= n && memcmp(p, w, n) == 0 &&
	       ((size_t)(end - p) == n || blank(p[n]) || p[n] == '(');
}

static const char *skip_blanks(const char *p, const char *end)
{
	while (p < end && blank(*p))
		p++;
	return p;
}

/* A line marker's file name (`N "name" flags`, p after the number) names the candidate's
 * directory or a relative path. */
static bool marker_is_local(const char *p, const char *end, const char *local, size_t local_len)
{
	p = skip_blanks(p, end);
	if (p >= end || *p != '"')
		return false; /* `# N` alone: the file does not change */
	p++;
	if (p >= end || *p == '<' || *p == '"')
		return false; /* <built-in>, <command-line>, no name */
	if (*p != '/')
		return true;
	return (size_t)(end - p) > local_len && memcmp(p, local, local_len) == 0 &&
	       p[local_len] == '/';
}

/* Whether the line ends with a backslash, blanks after it allowed (gcc splices it, warning). */
static bool continued(const char *line, const char *eol)
{
	while (eol > line && blank(eol[-1]))
		eol--;
	return eol > line && eol[-1] == '\\';
}

/* The length of the text's first line, newline included, when it is a line marker naming a
 * file (cudafe++'s `# 1 "<source>"`), else 0. */
static size_t first_marker(const char *text, const char *end)
{
	const char *eol = memchr(text, '\n', (size_t)(end - text));
	const char *p = skip_blanks(text, eol ? eol : end);
	if (!eol || p >= eol || *p != '#')
		return 0;
	p = skip_blanks(p + 1, eol);
	if (starts_word(p, eol, "line"))
		p = skip_blanks(p + 4, eol);
	if (p >= eol || *p < '0' || *p > '9')
		return 0;
	while (p < eol && *p >= '0' && *p <= '9')
		p++;
	p = skip_blanks(p, eol);
	return p < eol && *p == '"' ? (size_t)(eol + 1 - text) : 0;
}

static int append(struct host_pch_prefix *out, size_t *cap, const char *s, size_t n)
{
	if (out->replay_len + n + 2 > *cap) {
		size_t c = (*cap ? *cap * 2 : 4096) + n;
		char *r = realloc(out->replay, c);
		if (!r)
			return CA_ERR_NOMEM;
		out->replay = r;
		*cap = c;
	}
	memcpy(out->replay + out->replay_len, s, n);
	out->replay_len += n;
	out->replay[out->replay_len++] = '\n';
	out->replay[out->replay_len] = '\0';
	return 0;
}

int host_pch_scan(const char *text, size_t len, const char *local_dir, struct host_pch_prefix *out)
{
	bool if0[MAX_DEPTH];
	size_t depth = 0, in_if0 = 0, cap = 0, local_len = strlen(local_dir);
	long visibility = 0;
	int rc = CA_ERR_REJECTED;
	const char *end = text + len;

	memset(out, 0, sizeof *out);
	if (memchr(text, '\0', len)) /* not cudafe++'s output; gcc would warn of it */
		return CA_ERR_REJECTED;
	for (const char *line = text; line < end;) {
		const char *eol = memchr(line, '\n', (size_t)(end - line));
		const char *next = eol ? eol + 1 : end;
		eol = eol ? eol : end;
		const char *p = skip_blanks(line, eol);
		if (p >= eol || *p != '#')
			goto next_line;
		p = skip_blanks(p + 1, eol);
		bool marker = p < eol && *p >= '0' && *p <= '9';
		if (!marker && starts_word(p, eol, "line")) {
			p = skip_blanks(p + 4, eol);
			marker = true;
		}
		if (marker) {
			while (p < eol && *p >= '0' && *p <= '9')
				p++;
			if (line > text && marker_is_local(p, eol, local_dir, local_len)) {
				if (depth != 0 || visibility != 0)
					goto fail;
				out->len = (size_t)(line - text);
				if (out->len < HOST_PCH_MIN_PREFIX)
					goto fail;
				out->head = first_marker(text, end);
				return 0;
			}
		} else if (starts_word(p, eol, "if") || starts_word(p, eol, "ifdef") ||
			   starts_word(p, eol, "ifndef")) {
			if (depth >= MAX_DEPTH)
				goto fail;
			const char *q = skip_blanks(p + 2, eol);
			bool zero = starts_word(p, eol, "if") && q < eol && *q == '0' &&
				    skip_blanks(q + 1, eol) == eol;
			if0[depth++] = zero;
			in_if0 += zero;
		} else if (starts_word(p, eol, "else") || starts_word(p, eol, "elif")) {
			if (depth == 0)
				goto fail;
			in_if0 -= if0[depth - 1];
			if0[depth - 1] = false; /* a live branch, as far as the scan can tell */
		} else if (starts_word(p, eol, "endif")) {
			if (depth == 0)
				goto fail;
			in_if0 -= if0[--depth];
		} else if (in_if0) {
			/* text gcc never reads */
		} else if (starts_word(p, eol, "define") || starts_word(p, eol, "undef") || p == eol) {
			/* macros are kept in a precompiled header */
		} else if (starts_word(p, eol, "include")) {
			const char *q = skip_blanks(p + 7, eol);
			const char *want = "\"crt/host_runtime.h\"";
			if ((size_t)(eol - q) < strlen(want) || memcmp(q, want, strlen(want)) != 0 ||
			    skip_blanks(q + strlen(want), eol) != eol)
				goto fail;
		} else if (starts_word(p, eol, "pragma")) {
			const char *q = skip_blanks(p + 6, eol);
			if (starts_word(q, eol, "GCC")) {
				const char *g = skip_blanks(q + 3, eol);
				if (starts_word(g, eol, "diagnostic")) {
					if (depth != 0)
						goto fail;
					const char *from = skip_blanks(line, eol);
					if ((rc = append(out, &cap, from, (size_t)(eol - from))))
						goto fail;
					rc = CA_ERR_REJECTED;
				} else if (starts_word(g, eol, "visibility")) {
					const char *v = skip_blanks(g + 10, eol);
					if (depth != 0)
						goto fail;
					if (starts_word(v, eol, "push"))
						visibility++;
					else if (starts_word(v, eol, "pop") && visibility > 0)
						visibility--;
					else
						goto fail;
				} else if (!starts_word(g, eol, "unroll") && !starts_word(g, eol, "ivdep")) {
					goto fail;
				}
			} else if (!starts_word(q, eol, "unroll") && !starts_word(q, eol, "nounroll")) {
				goto fail;
			}
		} else {
			goto fail; /* #include of another file, #error, #ident, #assert, ... */
		}
next_line: /* a line continued on the next ones: those start no directive */
		while (continued(line, eol) && next < end) {
			line = next;
			eol = memchr(line, '\n', (size_t)(end - line));
			next = eol ? eol + 1 : end;
			eol = eol ? eol : end;
		}
		line = next;
	}
fail: /* no line of the candidate's own, or a directive the scan does not vouch for */
	host_pch_prefix_free(out);
	return rc;
}

/* line with the one occurrence of from replaced by to (owned), or NULL when from occurs not
 * exactly once. */
static char *replace_once(const char *line, const char *from, const char *to)
{
	const char *at = strstr(line, from);
	if (!at || strstr(at + 1, from))
		return NULL;
	size_t head = (size_t)(at - line), n = strlen(line) - strlen(from) + strlen(to) + 1;
	char *r = malloc(n);
	if (r)
		snprintf(r, n, "%.*s%s%s", (int)head, line, to, at + strlen(from));
	return r;
}

/* The quoted path after ` -o "` (once), replaced by to (owned), else NULL. */
static char *replace_output(const char *line, const char *to)
{
	const char *at = strstr(line, " -o \"");
	if (!at || strstr(at + 1, " -o \""))
		return NULL;
	const char *q = at + 5, *close = strchr(q, '"');
	if (!close)
		return NULL;
	size_t head = (size_t)(q - line), n = strlen(line) + strlen(to) + 1;
	char *r = malloc(n);
	if (r)
		snprintf(r, n, "%.*s%s%s", (int)head, line, to, close);
	return r;
}

void host_pch_hash_stat(gnutls_hash_hd_t h, const char *path)
{
	struct stat st;
	char buf[PATH_MAX + 128];
	int n;
	if (stat(path, &st) != 0)
		n = snprintf(buf, sizeof buf, "%s:none", path);
	else
		n = snprintf(buf, sizeof buf, "%s:%llu:%llu:%lld:%lld.%09ld", path,
			     (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
			     (long long)st.st_size, (long long)st.st_mtim.tv_sec,
			     st.st_mtim.tv_nsec);
	if (n < 0 || (size_t)n >= sizeof buf)
		n = (int)sizeof buf - 1; /* truncated: the first bytes still tell binaries apart */
	gnutls_hash(h, buf, (size_t)n + 1);
}

/* The compiler the line runs: its first word, found on the steps' PATH. */
bool host_pch_find_compiler(const char *line, const char *const *env, char *out, size_t size)
{
	size_t n = line[0] == '"' ? strcspn(line + 1, "\"") : strcspn(line, " ");
	const char *w = line[0] == '"' ? line + 1 : line, *path = NULL;
	char name[PATH_MAX];
	if (n == 0 || n >= sizeof name || n >= size)
		return false;
	snprintf(name, sizeof name, "%.*s", (int)n, w);
	if (strchr(name, '/')) {
		snprintf(out, size, "%s", name);
		return access(out, X_OK) == 0;
	}
	for (size_t i = 0; env && env[i]; i++)
		if (strncmp(env[i], "PATH=", 5) == 0)
			path = env[i] + 5;
	return ca_find_in_path(path, name, out, size);
}

/* Step 2 of the header: the key, from the binaries, the masked line and the prefix. */
static int make_key(const struct host_pch_job *job, const char *masked, const char *text,
		    size_t prefix_len, char key[HOST_PCH_KEY_LEN + 1])
{
	static const char tag[] = "cuda-agent host pch 1";
	unsigned char digest[32];
	char gcc[PATH_MAX];
	gnutls_hash_hd_t h;

	if (!host_pch_find_compiler(job->line, job->env, gcc, sizeof gcc) ||
	    gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0)
		return CA_ERR_REJECTED;
	gnutls_hash(h, tag, sizeof tag);
	host_pch_hash_stat(h, job->nvcc);
	host_pch_hash_stat(h, gcc);
	gnutls_hash(h, masked, strlen(masked) + 1);
	gnutls_hash(h, text, prefix_len);
	gnutls_hash_deinit(h, digest);
	for (size_t i = 0; i < sizeof digest; i++)
		snprintf(key + 2 * i, 3, "%02x", digest[i]);
	return 0;
}

/* Whether a file of dir has the relative name of one of the paths in list (one per line): with
 * -I dir first, gcc would have read it instead. Every suffix after a '/' is looked up. */
static bool shadowed(const char *list, const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool found = dfd < 0;
	for (const char *l = list; !found && *l;) {
		size_t n = strcspn(l, "\n");
		char path[PATH_MAX];
		if (n > 0 && n < sizeof path) {
			memcpy(path, l, n);
			path[n] = '\0';
			for (char *s = strchr(path + 1, '/'); s && !found; s = strchr(s + 1, '/'))
				found = s[1] && faccessat(dfd, s + 1, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
		}
		l += n + (l[n] == '\n');
	}
	if (dfd >= 0)
		close(dfd);
	return found;
}

/* The files of a make rule (`target: a b \` ...), one per line (owned), or NULL. */
static char *deps_list(const char *rule)
{
	const char *p = strchr(rule, ':');
	char *out = p ? malloc(strlen(rule) + 2) : NULL;
	size_t n = 0;
	bool word = false;
	if (!out)
		return NULL;
	for (p++; *p; p++) {
		if (p[0] == '\\' && (p[1] == '\n' || p[1] == ' ')) {
			if (p[1] == ' ') {
				out[n++] = ' ';
				word = true;
			}
			p++;
			continue;
		}
		if (*p == ' ' || *p == '\t' || *p == '\n') {
			if (word)
				out[n++] = '\n';
			word = false;
			if (*p == '\n')
				break; /* one rule: -MD without -MP writes no other */
			continue;
		}
		out[n++] = *p;
		word = true;
	}
	if (word)
		out[n++] = '\n';
	out[n] = '\0';
	return out;
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(path, dir, n) == 0 && path[n] == '/';
}

struct entry {
	time_t used;
	char name[HOST_PCH_KEY_LEN + 8];
};

static int by_use(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	return (x->used > y->used) - (x->used < y->used);
}

/* Removes the least recently used of n entries beyond keep, each with the files of exts. */
static void remove_oldest(const char *dir, struct entry *e, size_t n, size_t keep,
			  const char *const *exts, size_t n_exts)
{
	char path[PATH_MAX];
	if (n <= keep)
		return;
	qsort(e, n, sizeof e[0], by_use);
	for (size_t i = 0; i + keep < n; i++)
		for (size_t k = 0; k < n_exts; k++)
			if (snprintf(path, sizeof path, "%s/%s%s", dir, e[i].name, exts[k]) <
			    (int)sizeof path)
				unlink(path);
}

/* Whether name is <key><ext>; the key into e. */
static bool keyed(const char *name, const char *ext, struct entry *e, time_t used)
{
	if (strlen(name) != HOST_PCH_KEY_LEN + strlen(ext) ||
	    strcmp(name + HOST_PCH_KEY_LEN, ext) != 0)
		return false;
	memcpy(e->name, name, HOST_PCH_KEY_LEN);
	e->name[HOST_PCH_KEY_LEN] = '\0';
	e->used = used;
	return true;
}

/* At most HOST_PCH_MAX_ENTRIES headers and HOST_PCH_MAX_SEEN first sightings, the least
 * recently used removed; stale temporaries go. */
static void evict(const char *dir)
{
	static const char *const header_exts[] = {".h.gch", ".deps", ".h"}, *const seen_exts[] = {
		".seen", ".nopch"};
	struct entry *h = calloc(HOST_PCH_MAX_ENTRIES * 4, sizeof *h),
		     *sn = calloc(HOST_PCH_MAX_SEEN * 2, sizeof *sn);
	size_t nh = 0, ns = 0;
	DIR *dp = h && sn ? opendir(dir) : NULL;
	struct dirent *de;
	time_t now = time(NULL);
	char path[PATH_MAX];

	while (dp && (de = readdir(dp))) {
		struct stat st;
		if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path ||
		    stat(path, &st) != 0)
			continue;
		if (strstr(de->d_name, ".tmp.")) {
			if (now - st.st_mtime > STALE_TMP_S)
				unlink(path);
		} else if (nh < HOST_PCH_MAX_ENTRIES * 4 &&
			   keyed(de->d_name, ".h.gch", &h[nh], st.st_mtime)) {
			nh++;
		} else if (ns < HOST_PCH_MAX_SEEN * 2 &&
			   keyed(de->d_name, ".seen", &sn[ns], st.st_mtime)) {
			ns++;
		}
	}
	if (dp)
		closedir(dp);
	if (h && sn) {
		remove_oldest(dir, h, nh, HOST_PCH_MAX_ENTRIES, header_exts, 3);
		remove_oldest(dir, sn, ns, HOST_PCH_MAX_SEEN, seen_exts, 2);
	}
	free(h);
	free(sn);
}

static void *build_header(void *arg)
{
	struct host_pch *p = arg;
	const char *argv[] = {"/bin/sh", "-c", p->line, NULL};
	struct ca_run_opts ro = {.env_add = p->env, .timeout_s = p->deadline - ca_now(),
				 .stdout_cap = 64u << 10, .stderr_cap = 64u << 10};
	struct ca_diag d;
	if (ro.timeout_s > 0)
		p->ran = build_exec(p->box, argv, &ro, &p->scratch_bind, 1, &p->rr, &d) == 0;
	return NULL;
}

/* The header's build: nvcc's host compile line as a header, without -S and the candidate's -I,
 * writing the temporary .gch and the dependency list. */
static char *header_line(const struct host_pch_job *job, const struct host_pch *p)
{
	char from[PATH_MAX + 8], to[PATH_MAX + 8];
	char *a = replace_once(job->line, " -c -x c++ ", " -x c++-header "), *b = NULL, *c = NULL,
	     *d = NULL, *e = NULL, *out = NULL;
	if (!a)
		return NULL;
	b = strstr(a, " -S ") ? replace_once(a, " -S ", " ") : strdup(a);
	snprintf(from, sizeof from, "\"%s\"", job->unit);
	snprintf(to, sizeof to, "\"%s\"", p->header);
	if (b)
		c = replace_once(b, from, to);
	snprintf(from, sizeof from, " -I\"%s\"", job->local_dir);
	if (c)
		d = replace_once(c, from, "");
	if (d)
		e = replace_output(d, p->tmp_gch);
	if (e && asprintf(&out, "%s -MD -MF \"%s\"", e, p->dep_file) < 0)
		out = NULL;
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
	return out;
}

/* The key's line: the unit, its output and the candidate's directory masked. */
static char *masked_line(const struct host_pch_job *job)
{
	char from[PATH_MAX + 8];
	char *a, *b = NULL, *c = NULL;
	snprintf(from, sizeof from, "\"%s\"", job->unit);
	a = replace_once(job->line, from, "\"<unit>\"");
	snprintf(from, sizeof from, " -I\"%s\"", job->local_dir);
	if (a)
		b = replace_once(a, from, " -I\"<local>\"");
	if (b)
		c = replace_output(b, "<out>");
	free(a);
	free(b);
	return c;
}

/* dir/key ext (owned), NULL when out of memory */
static char *path_of(const char *dir, const char *key, const char *ext)
{
	char *r;
	return asprintf(&r, "%s/%s%s", dir, key, ext) < 0 ? NULL : r;
}

static void release(struct host_pch *p)
{
	free(p->header);
	free(p->gch);
	free(p->tmp_gch);
	free(p->deps);
	free(p->dep_file);
	free(p->line);
	free(p->seen);
	free(p->nopch);
	p->header = p->gch = p->tmp_gch = p->deps = p->dep_file = p->line = p->seen = p->nopch =
		NULL;
}

/* Step 3: the unit rewritten to include the header. */
static int use_header(struct host_pch *p, const struct host_pch_job *job, const char *text,
		      size_t len, const struct host_pch_prefix *pre)
{
	char inc[PATH_MAX + 32];
	int in = snprintf(inc, sizeof inc, "#include \"%s\"\n", p->header);
	size_t n = pre->head + (size_t)in + pre->replay_len + (len - pre->len), at = 0;
	char *unit = malloc(n + 1);
	int rc;
	if (in < 0 || (size_t)in >= sizeof inc || !unit) {
		free(unit);
		return CA_ERR_NOMEM;
	}
	memcpy(unit, text, pre->head); /* the unit's own first line marker */
	at += pre->head;
	memcpy(unit + at, inc, (size_t)in);
	at += (size_t)in;
	if (pre->replay_len)
		memcpy(unit + at, pre->replay, pre->replay_len);
	at += pre->replay_len;
	memcpy(unit + at, text + pre->len, len - pre->len);
	rc = ca_write_file_atomic(job->unit, unit, n, NULL);
	free(unit);
	if (rc == 0)
		(void)utimensat(AT_FDCWD, p->gch, NULL, 0); /* used: last to be evicted */
	return rc;
}

void host_pch_begin(struct host_pch *p, const struct host_pch_job *job)
{
	struct host_pch_prefix pre = {0};
	char *text = NULL, *masked = NULL, *list = NULL;
	size_t len = 0, list_len = 0;
	const char *why = "the unit has no prefix it can use";

	memset(p, 0, sizeof *p);
	p->env = job->env;
	p->local_dir = job->local_dir;
	p->deadline = job->deadline;
	p->box = job->box;
	p->scratch_bind = (struct sandbox_bind){.src = job->scratch, .writable = true};
	if (ca_read_file(job->unit, HOST_PCH_MAX_UNIT, &text, &len, NULL) != 0) {
		why = "the unit cannot be read (or is too big)";
		goto out;
	}
	if (host_pch_scan(text, len, job->local_dir, &pre) != 0)
		goto out;
	why = "the command line is not of the expected shape";
	if (!(masked = masked_line(job)) ||
	    make_key(job, masked, text + pre.head, pre.len - pre.head, p->key) != 0)
		goto out;
	why = "out of memory";
	if (!(p->header = path_of(job->dir, p->key, ".h")) ||
	    !(p->gch = path_of(job->dir, p->key, ".h.gch")) ||
	    !(p->deps = path_of(job->dir, p->key, ".deps")))
		goto out;
	if (ca_is_file(p->gch) && ca_is_file(p->header) &&
	    ca_read_file(p->deps, DEPS_MAX, &list, &list_len, NULL) == 0) {
		why = "a file of the candidate's directory has the name of one the header read";
		if (shadowed(list, job->local_dir))
			goto out;
		why = "the unit cannot be rewritten";
		if (use_header(p, job, text, len, &pre) != 0)
			goto out;
		p->state = HOST_PCH_HIT;
		ca_log_debug("host pch: hit %s", p->key);
		goto out;
	}
	/* step 4: a miss; the first sighting of a key only marks it */
	char suffix[96];
	static _Atomic unsigned counter;
	why = "the first sighting cannot be marked";
	if (!(p->seen = path_of(job->dir, p->key, ".seen")) || ca_mkdirs(job->dir, 0755, NULL) != 0)
		goto out;
	why = "the header could not be built before (a message, or it read the candidate's files)";
	if (!(p->nopch = path_of(job->dir, p->key, ".nopch")) || ca_is_file(p->nopch))
		goto out;
	if (!ca_is_file(p->seen)) {
		if (ca_write_file_atomic(p->seen, "", 0, NULL) == 0)
			why = "the first sighting of these headers (built if they come again)";
		evict(job->dir);
		goto out;
	}
	snprintf(suffix, sizeof suffix, ".h.gch.tmp.%ld.%u", (long)getpid(), counter++);
	why = "the header cannot be written";
	if (!(p->tmp_gch = path_of(job->box ? job->scratch : job->dir, p->key, suffix)) ||
	    !(p->dep_file = path_of(job->scratch, "host-pch", ".d")) ||
	    ca_write_file_atomic(p->header, text + pre.head, pre.len - pre.head, NULL) != 0)
		goto out;
	why = "the command line is not of the expected shape";
	if (!(p->line = header_line(job, p)))
		goto out;
	why = "a thread cannot be started";
	if (pthread_create(&p->thread, NULL, build_header, p) != 0)
		goto out;
	p->state = HOST_PCH_BUILDING;
	ca_log_debug("host pch: miss %s, building it beside the compile", p->key);
out:
	if (p->state == HOST_PCH_OFF) {
		ca_log_debug("host pch: not used: %s", why);
		release(p);
	}
	host_pch_prefix_free(&pre);
	free(text);
	free(masked);
	free(list);
}

/* Step 4's end: the header kept when gcc succeeded quietly and read nothing of the candidate's. */
static bool keep_header(struct host_pch *p)
{
	char *rule = NULL, *list = NULL;
	size_t len = 0;
	bool ok = false;

	if (!p->ran || p->rr.timed_out || p->rr.term_signal || p->rr.exit_code != 0 ||
	    p->rr.err_len || p->rr.out_len) {
		ca_log_debug("host pch: the header %s was not built cleanly; not kept", p->key);
		return false;
	}
	if (ca_read_file(p->dep_file, DEPS_MAX, &rule, &len, NULL) != 0 || !(list = deps_list(rule)))
		goto out;
	for (const char *l = list; *l; l += strcspn(l, "\n") + 1) {
		char path[PATH_MAX];
		size_t n = strcspn(l, "\n");
		snprintf(path, sizeof path, "%.*s", (int)n, l);
		if (under(path, p->local_dir))
			goto out;
	}
	build_adopt(p->tmp_gch);
	ok = ca_write_file_atomic(p->deps, list, strlen(list), NULL) == 0 &&
	     rename(p->tmp_gch, p->gch) == 0;
out:
	free(rule);
	free(list);
	return ok;
}

void host_pch_end(struct host_pch *p)
{
	if (p->state == HOST_PCH_BUILDING) { /* only set once the thread runs */
		pthread_join(p->thread, NULL);
		bool kept = keep_header(p);
		if (!kept) { /* not tried again for this key */
			unlink(p->tmp_gch);
			unlink(p->header);
			(void)ca_write_file_atomic(p->nopch, "", 0, NULL);
		} else
			ca_log_debug("host pch: kept %s", p->key);
		if (p->ran)
			ca_run_result_free(&p->rr);
		char dir[PATH_MAX];
		const char *slash = strrchr(p->header, '/');
		if (slash && (size_t)(slash - p->header) < sizeof dir) {
			snprintf(dir, sizeof dir, "%.*s", (int)(slash - p->header), p->header);
			evict(dir);
		}
	}
	release(p);
	p->state = HOST_PCH_OFF;
}
