/* host_link: nvcc's host link line without its device link (the header says why). */
#include "build/host_link.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/str.h"
#include "util/proc.h"

#define OBJ_MARK "/nonexistent-cuda-agent-host-link/object.o"
#define OUT_MARK "/nonexistent-cuda-agent-host-link/library.so"
#define MAX_TOKENS 256
#define KEY_MAX 16384

struct learned {
	char *key;
	char **tokens; /* the line's arguments, OBJ_MARK and OUT_MARK among them once each */
	size_t n;
};

static pthread_mutex_t learned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct learned learned[HOST_LINK_KEYS];
static size_t n_learned;

void host_link_argv_free(char **argv)
{
	if (!argv)
		return;
	for (size_t i = 0; argv[i]; i++)
		free(argv[i]);
	free(argv);
}

static void tokens_free(char **t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		free(t[i]);
	free(t);
}

/* One dry-run line's arguments: separated by spaces, each either bare or wholly in double
 * quotes. A quote or backslash anywhere else: -1 (nothing this module could carry safely). */
static int tokenize(const char *line, char ***out, size_t *count)
{
	char **t = calloc(MAX_TOKENS, sizeof *t);
	size_t n = 0;
	const char *p = line;
	if (!t)
		return -1;
	while (*p) {
		const char *start, *end;
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		if (*p == '"') {
			start = ++p;
			end = strchr(p, '"');
			if (!end || (end[1] && end[1] != ' '))
				goto fail;
			p = end + 1;
		} else {
			start = p;
			end = p + strcspn(p, " ");
			p = end;
		}
		if (memchr(start, '"', (size_t)(end - start)) ||
		    memchr(start, '\\', (size_t)(end - start)) ||
		    memchr(start, '\'', (size_t)(end - start)) || n + 1 >= MAX_TOKENS ||
		    !(t[n] = strndup(start, (size_t)(end - start))))
			goto fail;
		n++;
	}
	*out = t;
	*count = n;
	return 0;
fail:
	tokens_free(t, n);
	return -1;
}

static size_t count_equal(char **t, size_t n, const char *s)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += strcmp(t[i], s) == 0;
	return k;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* From the dry run's text: the one host link line (it names the objects and has -shared; the
 * device link's nvlink has --shared), less the device link's object. */
static int parse_dryrun(const char *text, struct learned *L)
{
	const char *p = text;
	int found = 0;
	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char *line = strndup(p, len), **t = NULL;
		size_t n = 0;
		p = nl ? nl + 1 : NULL;
		if (!line)
			return -1;
		if (strncmp(line, "#$ ", 3) == 0 && strstr(line, OBJ_MARK) &&
		    tokenize(line + 3, &t, &n) == 0) {
			if (count_equal(t, n, "-shared") == 1 && count_equal(t, n, OBJ_MARK) == 1 &&
			    count_equal(t, n, OUT_MARK) == 1) {
				size_t w = 0, dlink = 0;
				for (size_t i = 0; i < n; i++) {
					if (ends_with(t[i], "_dlink.o")) {
						free(t[i]);
						dlink++;
						continue;
					}
					t[w++] = t[i];
				}
				if (dlink == 1 && found == 0) {
					L->tokens = t;
					L->n = w;
					t = NULL;
				}
				found++;
				n = w;
			}
			tokens_free(t, n);
		}
		free(line);
	}
	if (found == 1 && L->tokens)
		return 0;
	tokens_free(L->tokens, L->n);
	L->tokens = NULL;
	return -1;
}

/* nvcc's dry run of a link of placeholder names: no candidate input, so it runs outside the
 * build's sandbox (build/box.h); the link itself runs inside. */
static int learn(const char *nvcc, const char *arch, const char *const *link_flags, size_t nlink,
		 struct learned *L, struct ca_diag *d)
{
	const char **argv = calloc(nlink + 1 + HOST_LINK_NVCC_ARGS, sizeof *argv);
	const char *obj = OBJ_MARK;
	char arch_flag[48];
	struct ca_run_opts ro = {.timeout_s = 30, .stdout_cap = 64u << 10, .stderr_cap = 256u << 10};
	struct ca_run_result rr;
	int rc = -1;

	if (!argv)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	host_link_nvcc_argv(argv, nvcc, true, arch, arch_flag, OUT_MARK, &obj, 1, link_flags, nlink);
	if (ca_run(argv, &ro, &rr, d) == 0) {
		if (!rr.timed_out && !rr.term_signal && rr.exit_code == 0 && !rr.err_dropped &&
		    rr.err)
			rc = parse_dryrun(rr.err, L);
		ca_run_result_free(&rr);
		if (rc)
			ca_fail(d, CA_ERR_UNSUPPORTED,
				"nvcc's dry run of the link did not show one host link line");
	}
	free(argv);
	return rc;
}

size_t host_link_nvcc_argv(const char **argv, const char *nvcc, bool dryrun, const char *arch,
			   char arch_flag[48], const char *out, const char *const *objs,
			   size_t nobjs, const char *const *flags, size_t nflags)
{
	size_t n = 0;
	snprintf(arch_flag, 48, "-arch=%s", arch);
	argv[n++] = nvcc;
	if (dryrun)
		argv[n++] = "-dryrun";
	argv[n++] = "-shared";
	argv[n++] = "-cudart";
	argv[n++] = "shared";
	argv[n++] = arch_flag;
	argv[n++] = "-o";
	argv[n++] = out;
	for (size_t i = 0; i < nobjs; i++)
		argv[n++] = objs[i];
	for (size_t i = 0; i < nflags; i++)
		argv[n++] = flags[i];
	argv[n] = NULL;
	return n;
}

/* A learned line kept in the build cache: its arguments one per line. */
static int load_line(const char *path, struct learned *L)
{
	char *text = NULL, *p, **t;
	size_t len = 0, n = 0;
	if (ca_read_file(path, 64u << 10, &text, &len, NULL) != 0)
		return -1;
	if (!(t = calloc(MAX_TOKENS, sizeof *t))) {
		free(text);
		return -1;
	}
	for (p = text; *p && n + 1 < MAX_TOKENS;) {
		size_t k = strcspn(p, "\n");
		if (!(t[n++] = strndup(p, k)))
			break;
		p += k + (p[k] == '\n');
	}
	bool ok = !*p && n > 0 && t[n - 1] && count_equal(t, n, "-shared") == 1 &&
		  count_equal(t, n, OBJ_MARK) == 1 && count_equal(t, n, OUT_MARK) == 1;
	free(text);
	if (!ok) {
		tokens_free(t, n);
		return -1;
	}
	L->tokens = t;
	L->n = n;
	return 0;
}

static void save_line(const char *path, const struct learned *L)
{
	size_t len = 0;
	char *text;
	for (size_t i = 0; i < L->n; i++)
		len += strlen(L->tokens[i]) + 1;
	if (!(text = malloc(len + 1)))
		return;
	len = 0;
	for (size_t i = 0; i < L->n; i++)
		len += (size_t)sprintf(text + len, "%s\n", L->tokens[i]);
	(void)ca_write_file_atomic(path, text, len, NULL);
	free(text);
}

static int make_key(char *key, size_t size, const char *nvcc, const char *nvcc_version,
		    const char *arch, const char *const *link_flags, size_t nlink)
{
	size_t used = 0;
	int w = snprintf(key, size, "%s\n%s\n%s\n", nvcc, nvcc_version, arch);
	if (w < 0 || (size_t)w >= size)
		return -1;
	used = (size_t)w;
	for (size_t i = 0; i < nlink; i++) {
		w = snprintf(key + used, size - used, "%s\n", link_flags[i]);
		if (w < 0 || (size_t)w >= size - used)
			return -1;
		used += (size_t)w;
	}
	return 0;
}

int host_link_argv(const char *nvcc, const char *nvcc_version, const char *cache,
		   const char *arch, const char *const *link_flags, size_t nlink,
		   const char *const *objs, size_t nobjs, const char *out, char ***argv_out,
		   struct ca_diag *d)
{
	char key[KEY_MAX], dir[PATH_MAX], path[PATH_MAX + CA_HASH_HEX_LEN + 8],
		hex[CA_HASH_HEX_LEN + 1];
	struct learned *L = NULL;
	char **argv = NULL;
	size_t n = 0;
	int rc = 0;

	*argv_out = NULL;
	if (make_key(key, sizeof key, nvcc, nvcc_version, arch, link_flags, nlink) ||
	    ca_format(dir, sizeof dir, "%s/host-link", cache))
		return ca_fail(d, CA_ERR_LIMIT, "link flags too long");
	ca_hash_hex(key, strlen(key), hex);
	snprintf(path, sizeof path, "%s/%s", dir, hex);
	pthread_mutex_lock(&learned_mu);
	for (size_t i = 0; i < n_learned && !L; i++)
		if (strcmp(learned[i].key, key) == 0)
			L = &learned[i];
	if (!L) {
		struct learned fresh = {0};
		if (n_learned >= HOST_LINK_KEYS) {
			rc = ca_fail(d, CA_ERR_LIMIT, "more link lines than kept");
			goto out;
		}
		if (load_line(path, &fresh) != 0) {
			if ((rc = learn(nvcc, arch, link_flags, nlink, &fresh, d)))
				goto out;
			if (ca_mkdirs(dir, 0755, NULL) == 0)
				save_line(path, &fresh);
		}
		if (!(fresh.key = strdup(key))) {
			tokens_free(fresh.tokens, fresh.n);
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
			goto out;
		}
		learned[n_learned] = fresh;
		L = &learned[n_learned++];
		ca_log_debug("host link: learned nvcc's host link line (%zu arguments)", L->n);
	}
	if (!(argv = calloc(L->n + nobjs + 1, sizeof *argv))) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < L->n; i++) {
		if (strcmp(L->tokens[i], OBJ_MARK) == 0) {
			for (size_t k = 0; k < nobjs; k++)
				if (!(argv[n++] = strdup(objs[k])))
					goto nomem;
		} else if (!(argv[n++] = strdup(strcmp(L->tokens[i], OUT_MARK) == 0
							? out
							: L->tokens[i]))) {
			goto nomem;
		}
	}
	*argv_out = argv;
	argv = NULL;
	goto out;
nomem:
	rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
out:
	pthread_mutex_unlock(&learned_mu);
	host_link_argv_free(argv);
	return rc;
}
