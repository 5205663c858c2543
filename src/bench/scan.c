/* scan: the tasks under a bench's task tree with their candidates (bench.h), and the
 * fingerprints that make a stored result reusable (bench_int.h). */
#include "bench/bench_int.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/kb_runs.h"
#include "util/fs.h"
#include "util/str.h"

/* ---- finding the tasks ------------------------------------------------------------------- */

static int add_item(struct run *r, const char *key, const char *dir, struct ca_diag *d)
{
	if (r->n == BENCH_MAX_TASKS)
		return ca_fail(d, CA_ERR_LIMIT, "more than %d tasks under %s", BENCH_MAX_TASKS,
			       r->o->tasks_dir);
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		struct item *p = realloc(r->items, cap * sizeof *p);
		if (!p)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory listing tasks");
		r->items = p;
		r->cap = cap;
	}
	struct item *it = &r->items[r->n];
	memset(it, 0, sizeof *it);
	it->key = strdup(key);
	it->task_dir = strdup(dir);
	if (!it->key || !it->task_dir) {
		free(it->key);
		free(it->task_dir);
		return ca_fail(d, CA_ERR_NOMEM, "out of memory listing tasks");
	}
	r->n++;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir, except "." and "..", sorted; with skip_hidden also those starting with '.'.
 * *names is owned by the caller (ca_free_names). */
static int list_sorted(const char *dir, bool skip_hidden, char ***names, size_t *count,
		       struct ca_diag *d)
{
	DIR *dh = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	*names = NULL;
	*count = 0;
	if (!dh)
		return ca_fail(d, CA_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
	while (!rc && (e = readdir(dh)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    (skip_hidden && e->d_name[0] == '.'))
			continue;
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 32;
			char **p = realloc(v, ncap * sizeof *p);
			if (!p) {
				rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing %s", dir);
				break;
			}
			v = p;
			cap = ncap;
		}
		if (!(v[n] = strdup(e->d_name)))
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing %s", dir);
		else
			n++;
	}
	closedir(dh);
	if (rc) {
		ca_free_names(v, n);
		return rc;
	}
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_names);
	*names = v;
	*count = n;
	return 0;
}

/* Every directory holding a model.py, depth-first; a task directory is not searched further.
 * Hidden entries and symbolic links are skipped. */
int bench_scan(struct run *r, const char *dir, const char *key, int depth, struct ca_diag *d)
{
	char path[PATH_MAX];
	char **names = NULL;
	size_t n = 0;
	int rc;

	if (ca_path_join(path, sizeof path, dir, "model.py"))
		return ca_fail(d, CA_ERR_LIMIT, "path too long: %s", dir);
	if (ca_is_file(path))
		return add_item(r, key[0] ? key : ".", dir, d);
	if (depth >= BENCH_MAX_DEPTH)
		return 0;
	if ((rc = list_sorted(dir, true, &names, &n, d)))
		return rc;
	for (size_t i = 0; i < n && !rc; i++) {
		char sub[PATH_MAX], subkey[PATH_MAX];
		struct stat st;
		if (ca_path_join(sub, sizeof sub, dir, names[i]) ||
		    (key[0] ? ca_path_join(subkey, sizeof subkey, key, names[i])
			    : ca_strlcpy(subkey, names[i], sizeof subkey)))
			rc = ca_fail(d, CA_ERR_LIMIT, "path too long under %s", dir);
		else if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
			rc = bench_scan(r, sub, subkey, depth + 1, d);
	}
	ca_free_names(names, n);
	return rc;
}

int bench_list_tasks(const char *tasks_dir, char ***keys, char ***dirs, size_t *n,
		     struct ca_diag *d)
{
	struct bench_opts bo = {.tasks_dir = tasks_dir};
	struct run r = {.o = &bo};
	int rc = bench_scan(&r, tasks_dir, "", 0, d);
	char **k = rc ? NULL : calloc(r.n + 1, sizeof *k);
	char **t = rc ? NULL : calloc(r.n + 1, sizeof *t);

	*keys = *dirs = NULL;
	*n = 0;
	if (!rc && (!k || !t))
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory listing tasks");
	for (size_t i = 0; i < r.n; i++) {
		if (!rc) {
			k[i] = r.items[i].key;
			t[i] = r.items[i].task_dir;
		} else {
			free(r.items[i].key);
			free(r.items[i].task_dir);
		}
	}
	free(r.items);
	if (rc) {
		free(k);
		free(t);
		return rc;
	}
	*keys = k;
	*dirs = t;
	*n = r.n;
	return 0;
}

/* The candidate's kernels/ files (names relative to it, and bytes), recursively, sorted. */
static int hash_tree(struct ca_hasher *h, const char *dir, const char *rel, int depth,
		     size_t *files, size_t *bytes, struct ca_diag *d)
{
	char **names = NULL;
	size_t n = 0;
	int rc;

	if ((rc = list_sorted(dir, false, &names, &n, d)))
		return rc;
	for (size_t i = 0; i < n && !rc; i++) {
		char path[PATH_MAX], sub[PATH_MAX];
		struct stat st;
		if (ca_path_join(path, sizeof path, dir, names[i]) ||
		    ca_path_join(sub, sizeof sub, rel, names[i])) {
			rc = ca_fail(d, CA_ERR_LIMIT, "path too long under %s", dir);
			break;
		}
		if (lstat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < BENCH_MAX_DEPTH) {
			rc = hash_tree(h, path, sub, depth + 1, files, bytes, d);
		} else if (S_ISREG(st.st_mode)) {
			char *data = NULL;
			size_t len = 0;
			if (++*files > CANDIDATE_MAX_FILES)
				rc = ca_fail(d, CA_ERR_LIMIT, "more than %d files in %s",
					     CANDIDATE_MAX_FILES, dir);
			else if (!(rc = ca_read_file(path, CANDIDATE_MAX_BYTES, &data, &len, d))) {
				*bytes += len;
				if (*bytes > CANDIDATE_MAX_BYTES)
					rc = ca_fail(d, CA_ERR_LIMIT, "more than %u bytes in %s",
						     CANDIDATE_MAX_BYTES, dir);
				ca_hasher_update_str(h, sub);
				ca_hasher_update(h, data, len);
				free(data);
			}
		}
	}
	ca_free_names(names, n);
	return rc;
}

/* The candidate is what its format builds from (torch_candidate.h): a native candidate's
 * kernels/ tree, a workdir's whole tree, a KernelBench file's bytes. For a task key K the
 * candidate is candidates_dir/K, or candidates_dir/K.py, or the file of KernelBench's runs layout
 * (kb_run_candidate). */
int bench_candidate_fingerprint(const struct run *r, struct item *it, struct ca_diag *d)
{
	char path[PATH_MAX], resolved[PATH_MAX], py[PATH_MAX];
	enum candidate_format fmt = r->o->eval.format;
	struct ca_diag dd = {{0}};
	struct ca_hasher h;
	size_t files = 0, bytes = 0;
	int rc;

	if (!ca_is_dir(it->cand_dir) &&
	    ((snprintf(py, sizeof py, "%s.py", it->cand_dir) < (int)sizeof py && ca_is_file(py)) ||
	     kb_run_candidate(r->o->candidates_dir, it->key, r->o->sample, py, sizeof py) == 0)) {
		char *dup = strdup(py);
		if (!dup)
			return ca_fail(d, CA_ERR_NOMEM, "out of memory");
		free(it->cand_dir);
		it->cand_dir = dup;
	}
	it->has_candidate = candidate_format_detect(it->cand_dir, &fmt, resolved, sizeof resolved,
						    &dd) == 0;
	if (!it->has_candidate) {
		ca_strlcpy(it->cand_fp, "missing", sizeof it->cand_fp);
		return 0;
	}
	if (ca_hasher_init(&h))
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	ca_hasher_update_str(&h, candidate_format_name(fmt));
	if (fmt == CANDIDATE_KERNELBENCH) {
		char *data = NULL;
		size_t len = 0;
		rc = ca_read_file(resolved, CANDIDATE_MAX_BYTES, &data, &len, d);
		if (!rc)
			ca_hasher_update(&h, data, len);
		free(data);
	} else if (fmt == CANDIDATE_WORKDIR) {
		rc = hash_tree(&h, resolved, "", 0, &files, &bytes, d);
	} else {
		rc = ca_path_join(path, sizeof path, it->cand_dir, "kernels")
			     ? ca_fail(d, CA_ERR_LIMIT, "path too long")
			     : hash_tree(&h, path, "", 0, &files, &bytes, d);
	}
	ca_hasher_final_hex(&h, it->cand_fp);
	ca_hasher_free(&h);
	return rc;
}

/* Everything in the settings that changes what an evaluation measures. */
void bench_settings_fingerprint(const struct bench_opts *o, char out[CA_HASH_HEX_LEN + 1])
{
	char text[1024];
	const struct eval_protocol *p = &o->eval.protocol;
	snprintf(text, sizeof text,
		 "protocol=%d;trials=%d;rotation=%d;budget=%.6g;rse=%.6g;min=%d;max=%d;checks=%d;"
		 "flush=%.6g;perturb=%.6g;arch=%s;sandbox=%d;device=%s;rules=%s;interleave=%d",
		 CA_PROTOCOL_VERSION, p->trials, p->rotation_sets, p->timing.budget_s,
		 p->timing.target_rse, p->timing.min_samples, p->timing.max_samples,
		 p->timing.checks, p->timing.l2_flush_factor, p->timing.perturb_scale,
		 o->eval.arch ? o->eval.arch : "", (int)o->eval.sandbox,
		 o->device ? o->device : "auto",
		 o->eval.rules_by_format ? "by-format" : torch_profile_name(o->eval.rules),
		 (int)o->eval.interleave);
	ca_hash_hex(text, strlen(text), out);
}
