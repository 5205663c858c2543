/* build: the build driver (see build.h). Layout of the cache (<cache_dir> = opts->cache_dir, else
 * ca_cache_dir()/build):
 *   obj/<key>.o, obj/<key>.info    one translation unit and its ptxas lines
 *   obj/<key>.hostasm              the verdict of its host assembly check (build/hostasm.h):
 *                                  "ca-hostasm-1 clean", or "ca-hostasm-1 refused" and the
 *                                  findings. Written before the object is moved into place; a
 *                                  refused unit has a verdict and no object. A unit is taken from
 *                                  the cache only with a verdict, so none is accepted unchecked
 *   lib/<key>.so, lib/<key>.info   one linked candidate and the ptxas lines of all its units
 *   nvcc/<hash of nvcc path, mtime, size, inode>.txt   `nvcc --version`, so that a full cache
 *                                  hit runs no child process at all
 * Every file is written under a temporary name and renamed into place, so concurrent builds of
 * the same candidate are safe (the last rename wins with identical content).
 *
 * Parts: the toolchain (toolchain.c), compiling (compile.c), the driver (this file); what they
 * share is in build_int.h. */
#include "build/build.h"
#include "build/build_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/host_link.h"
#include "build/nvcc_split.h"
#include "build/rules.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

_Static_assert(BUILD_EXEC_MAX_EXTRA >= CA_BUILD_MAX_SOURCES, "a link binds every object");

const char *build_status_code(enum build_status s)
{
	switch (s) {
	case BUILD_OK: return "ok";
	case BUILD_COMPILE_ERROR: return "build.error";
	case BUILD_RULE_VIOLATION: return "build.forbidden_source";
	case BUILD_SYMBOL_VIOLATION: return "build.forbidden_symbol";
	case BUILD_NO_SOURCES: return "build.no_sources";
	case BUILD_TIMEOUT: return "build.timeout";
	}
	return "internal"; /* not reached: every status is above */
}

/* Appends one line (a '\n' is added) if it fits whole; returns false when it does not. */
bool build_buf_add_line(char *buf, size_t size, const char *line, size_t line_len)
{
	size_t len = strlen(buf);
	if (len + line_len + 2 > size)
		return false;
	memcpy(buf + len, line, line_len);
	buf[len + line_len] = '\n';
	buf[len + line_len + 1] = '\0';
	return true;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n > k && strcmp(s + n - k, suffix) == 0;
}

/* Replaces every occurrence of `from` in s (in place, bounded by size) by `to`. */
void build_replace_all(char *s, size_t size, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	char *p = s;

	if (fl == 0)
		return;
	while ((p = strstr(p, from)) != NULL) {
		size_t rest = strlen(p + fl);
		if ((size_t)(p - s) + tl + rest + 1 > size)
			return;
		memmove(p + tl, p + fl, rest + 1);
		memcpy(p, to, tl);
		p += tl;
	}
}

/* A temporary name next to path, unique across processes and across threads of this one. */
static atomic_ulong tmp_counter;

void build_temp_name(char *out, size_t size, const char *path, const char *suffix)
{
	unsigned long n = atomic_fetch_add(&tmp_counter, 1);
	snprintf(out, size, "%s.tmp.%ld.%lu%s", path, (long)getpid(), n, suffix);
}

/* Writes a small cache file atomically (temporary name, then rename); best effort. */
void build_write_cache_file(const char *path, const char *text)
{
	char tmp[PATH_MAX + 64];
	size_t len = strlen(text), done = 0;
	int fd;

	build_temp_name(tmp, sizeof tmp, path, "");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	while (done < len) {
		ssize_t n = write(fd, text + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	if (close(fd) != 0 || done != len || rename(tmp, path) != 0)
		unlink(tmp);
}

static void candidate_free(struct candidate *c)
{
	for (size_t i = 0; i < c->num_units; i++) {
		free(c->units[i].log);
		free(c->units[i].info);
		free(c->units[i].findings);
	}
	free(c->units);
	for (size_t i = 0; c->texts && i < c->count; i++)
		free(c->texts[i]);
	free(c->texts);
	free(c->lens);
	ca_free_names(c->names, c->count);
	memset(c, 0, sizeof *c);
}

static bool is_unit_name(const char *name)
{
	return !strchr(name, '/') &&
	       (has_suffix(name, ".cu") || has_suffix(name, ".cpp") || has_suffix(name, ".c"));
}

static int set_verdict(struct build_result *res, enum build_status s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int set_verdict(struct build_result *res, enum build_status s, const char *fmt, ...)
{
	va_list ap;
	res->status = s;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(res->errors, sizeof res->errors, fmt, ap);
		va_end(ap);
	}
	return 0;
}

static int read_candidate(const char *kdir, struct candidate *c, struct build_result *res,
			  bool *verdict, struct ca_diag *d)
{
	size_t total = 0;
	int rc = rules_list_tree(kdir, RULES_MAX_TREE_FILES, &c->names, &c->count, d);

	*verdict = false;
	if (rc == CA_ERR_LIMIT) {
		*verdict = true;
		return set_verdict(res, BUILD_RULE_VIOLATION, "kernels/ holds more than %d files",
				   RULES_MAX_TREE_FILES);
	}
	if (rc)
		return rc;
	c->texts = calloc(c->count ? c->count : 1, sizeof *c->texts);
	c->lens = calloc(c->count ? c->count : 1, sizeof *c->lens);
	c->units = calloc(c->count ? c->count : 1, sizeof *c->units);
	if (!c->texts || !c->lens || !c->units)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory reading the candidate");
	for (size_t i = 0; i < c->count; i++)
		if (is_unit_name(c->names[i]))
			c->num_units++;
	if (c->num_units == 0) {
		*verdict = true;
		return set_verdict(res, BUILD_NO_SOURCES, "kernels/ holds no .cu, .cpp or .c files");
	}
	if (c->num_units > CA_BUILD_MAX_SOURCES) {
		*verdict = true;
		return set_verdict(res, BUILD_RULE_VIOLATION,
				   "kernels/ holds %zu source files, over the limit of %d",
				   c->num_units, CA_BUILD_MAX_SOURCES);
	}
	c->num_units = 0;
	for (size_t i = 0; i < c->count; i++) {
		char path[PATH_MAX];
		struct ca_diag rd;
		if (ca_path_join(path, sizeof path, kdir, c->names[i]) != 0)
			return ca_fail(d, CA_ERR_LIMIT, "path too long under %s", kdir);
		rc = ca_read_file(path, CA_BUILD_MAX_SOURCE_BYTES, &c->texts[i], &c->lens[i], &rd);
		if (rc == CA_ERR_LIMIT) {
			*verdict = true;
			return set_verdict(res, BUILD_RULE_VIOLATION,
					   "kernels/%s is larger than the limit of %u bytes",
					   c->names[i], CA_BUILD_MAX_SOURCE_BYTES);
		}
		if (rc)
			return ca_fail(d, rc, "%s", rd.msg);
		total += c->lens[i];
		if (total > MAX_TREE_BYTES) {
			*verdict = true;
			return set_verdict(res, BUILD_RULE_VIOLATION,
					   "kernels/ holds more than %u bytes", MAX_TREE_BYTES);
		}
		if (strstr(c->texts[i], "cublas"))
			c->uses_cublas = true;
		if (strstr(c->texts[i], "cudnn"))
			c->uses_cudnn = true;
		if (is_unit_name(c->names[i])) {
			struct unit *u = &c->units[c->num_units++];
			u->name = c->names[i];
			u->text = c->texts[i];
			u->len = c->lens[i];
		}
	}
	return 0;
}

/* Hash of the files of include_dir the candidate compiles against. */
static void hash_include_dir(struct ca_hasher *h, const char *include_dir)
{
	static const char *const files[] = {"dlpack/dlpack.h", "cuda_agent/abi.h"};
	ca_hasher_update_str(h, include_dir ? include_dir : "");
	for (size_t i = 0; include_dir && i < sizeof files / sizeof files[0]; i++) {
		char path[PATH_MAX], *text = NULL;
		size_t len = 0;
		if (ca_path_join(path, sizeof path, include_dir, files[i]) == 0 &&
		    ca_read_file(path, 16u << 20, &text, &len, NULL) == 0) {
			ca_hasher_update_str(h, files[i]);
			ca_hasher_update(h, text, len);
		}
		free(text);
	}
}

static int compute_keys(struct candidate *c, const char *nvcc_ver, const char *arch,
			const char *include_dir, const char *const *link_flags, size_t nlink,
			const char *cache, char lib_key[CA_HASH_HEX_LEN + 1], struct ca_diag *d)
{
	struct ca_hasher common, h;
	char common_hex[CA_HASH_HEX_LEN + 1];
	int rc;

	/* What every unit sees: compiler, flags, arch, include dir, every non-unit file. */
	if ((rc = ca_hasher_init(&common)))
		return ca_fail(d, rc, "out of memory hashing");
	ca_hasher_update_str(&common, KEY_VERSION);
	ca_hasher_update_str(&common, nvcc_ver);
	for (size_t i = 0; i < build_compile_flags_count; i++)
		ca_hasher_update_str(&common, build_compile_flags[i]);
	ca_hasher_update_str(&common, arch);
	hash_include_dir(&common, include_dir);
	for (size_t i = 0; i < c->count; i++) {
		if (is_unit_name(c->names[i]))
			continue;
		ca_hasher_update_str(&common, c->names[i]);
		ca_hasher_update(&common, &c->lens[i], sizeof c->lens[i]);
		ca_hasher_update(&common, c->texts[i], c->lens[i]);
	}
	ca_hasher_final_hex(&common, common_hex);
	ca_hasher_free(&common);

	for (size_t i = 0; i < c->num_units; i++) {
		struct unit *u = &c->units[i];
		if ((rc = ca_hasher_init(&h)))
			return ca_fail(d, rc, "out of memory hashing");
		ca_hasher_update_str(&h, common_hex);
		ca_hasher_update_str(&h, u->name);
		ca_hasher_update(&h, &u->len, sizeof u->len);
		ca_hasher_update(&h, u->text, u->len);
		/* a unit that names another unit may #include it */
		for (size_t k = 0; k < c->num_units; k++) {
			if (k == i || !strstr(u->text, c->units[k].name))
				continue;
			ca_hasher_update_str(&h, c->units[k].name);
			ca_hasher_update(&h, &c->units[k].len, sizeof c->units[k].len);
			ca_hasher_update(&h, c->units[k].text, c->units[k].len);
		}
		ca_hasher_final_hex(&h, u->key);
		ca_hasher_free(&h);
		if (snprintf(u->obj, sizeof u->obj, "%s/obj/%s.o", cache, u->key) >=
			    (int)sizeof u->obj ||
		    snprintf(u->info_path, sizeof u->info_path, "%s/obj/%s.info", cache, u->key) >=
			    (int)sizeof u->info_path ||
		    snprintf(u->verdict_path, sizeof u->verdict_path, "%s/obj/%s.hostasm", cache,
			     u->key) >= (int)sizeof u->verdict_path)
			return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	}

	if ((rc = ca_hasher_init(&h)))
		return ca_fail(d, rc, "out of memory hashing");
	ca_hasher_update_str(&h, KEY_VERSION);
	ca_hasher_update_str(&h, "lib");
	ca_hasher_update_str(&h, arch);
	for (size_t i = 0; i < nlink; i++)
		ca_hasher_update_str(&h, link_flags[i]);
	for (size_t i = 0; i < c->num_units; i++)
		ca_hasher_update_str(&h, c->units[i].key);
	ca_hasher_final_hex(&h, lib_key);
	ca_hasher_free(&h);
	return 0;
}

/* Appends text (whole lines) to a CA_BUILD_LOG_MAX buffer. */
static void append_lines(char *buf, size_t size, const char *text)
{
	for (const char *p = text; p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		if (n && !build_buf_add_line(buf, size, p, n))
			return;
		p = eol ? eol + 1 : p + n;
	}
}

static void load_info(const char *path, char *buf, size_t size)
{
	char *text = NULL;
	if (ca_read_file(path, 1u << 20, &text, NULL, NULL) == 0)
		append_lines(buf, size, text);
	free(text);
}

/* Links the objects into lib (via a temporary name): with nvcc's host link line alone when
 * host (build/host_link.h), else with `nvcc -shared`. */
static int link_library(const struct build_box *box, const char *nvcc,
			const char *nvcc_version, const char *cache, const char *arch,
			struct candidate *c,
			const char *const *link_flags, size_t nlink, const char *lib, bool host,
			double timeout_s, const struct rewrite *rw, size_t nrw,
			struct build_result *res, struct ca_diag *d)
{
	char tmp[PATH_MAX + 64], arch_flag[48];
	const char **objs = calloc(c->num_units + 1, sizeof *objs);
	const char **argv = calloc(c->num_units + nlink + HOST_LINK_NVCC_ARGS, sizeof *argv);
	char **host_argv = NULL;
	struct sandbox_bind *obj_binds = calloc(c->num_units + 1, sizeof *obj_binds);
	struct ca_run_opts ro = {.timeout_s = timeout_s, .stdout_cap = 256u << 10,
				 .stderr_cap = 1u << 20};
	struct ca_run_result rr;
	int rc, lines = 0;

	if (!argv || !objs || !obj_binds) {
		free(argv);
		free(objs);
		free(obj_binds);
		return ca_fail(d, CA_ERR_NOMEM, "out of memory linking");
	}
	/* the library is written in the staging directory; the linker sees the objects it
	 * links (read-only), no other entry of the cache */
	snprintf(tmp, sizeof tmp, "%s/%s.so", box->staging, res->hash);
	for (size_t i = 0; i < c->num_units; i++) {
		objs[i] = c->units[i].obj;
		obj_binds[i] = (struct sandbox_bind){.src = c->units[i].obj};
	}
	if (host) {
		struct ca_diag hd = {{0}};
		if (host_link_argv(nvcc, nvcc_version, cache, arch, link_flags, nlink, objs,
				   c->num_units, tmp, &host_argv, &hd) != 0) {
			ca_log_debug("host link: %s; nvcc links", hd.msg);
			host_argv = NULL;
		}
	}
	host_link_nvcc_argv(argv, nvcc, false, arch, arch_flag, tmp, objs, c->num_units,
			    link_flags, nlink);

	rc = build_exec(box, host_argv ? (const char *const *)host_argv : argv, &ro, obj_binds,
			c->num_units, &rr, d);
	res->host_linked = host_argv != NULL;
	host_link_argv_free(host_argv);
	free(argv);
	free(objs);
	free(obj_binds);
	if (rc)
		return rc;
	if (rr.timed_out) {
		set_verdict(res, BUILD_TIMEOUT, "linking took longer than %.0f s", timeout_s);
	} else if (rr.term_signal || rr.exit_code != 0 || !ca_is_file(tmp)) {
		char *log = build_filter_log(box, build_concat_logs(&rr));
		res->status = BUILD_COMPILE_ERROR;
		res->errors[0] = '\0';
		if (log && build_add_errors(log, NULL, rw, nrw, res->errors, sizeof res->errors, &lines) == 0)
			build_add_tail(log, rw, nrw, res->errors, sizeof res->errors, &lines);
		if (!res->errors[0]) {
			char how[128];
			ca_run_describe(&rr, how, sizeof how);
			snprintf(res->errors, sizeof res->errors, "linking failed: %s\n", how);
		}
		free(log);
	} else if (build_adopt(tmp), rename(tmp, lib) != 0) {
		rc = ca_fail(d, CA_ERR_IO, "cannot move %s into the build cache: %s", lib,
			     strerror(errno));
	} else {
		res->status = BUILD_OK;
	}
	unlink(tmp);
	ca_run_result_free(&rr);
	return rc;
}

/* The findings of every refused unit: build.forbidden_source. */
static void report_refused(const struct candidate *c, struct build_result *res)
{
	struct rules_report r;

	res->status = BUILD_RULE_VIOLATION;
	rules_report_init(&r, res->errors, sizeof res->errors);
	for (size_t i = 0; i < c->num_units; i++) {
		const char *p = c->units[i].findings;
		while (c->units[i].refused && p && *p) {
			size_t n = strcspn(p, "\n");
			if (n)
				rules_report_add(&r, "%.*s", (int)(n < 1000 ? n : 1000), p);
			p += n + (p[n] == '\n');
		}
	}
	rules_report_finish(&r);
}

/* Symbol and library rules on the built library, and the ABI's ca_forward. */
static void check_library(const char *lib, struct build_result *res)
{
	struct elf_dynamic e;
	struct rules_report r;
	struct ca_diag ed;

	if (elf_dynamic_read_file(lib, &e, &ed) != 0) {
		set_verdict(res, BUILD_SYMBOL_VIOLATION,
			    "cannot read the library's dynamic symbols: %s\n", ed.msg);
		return;
	}
	res->errors[0] = '\0';
	rules_report_init(&r, res->errors, sizeof res->errors);
	if (rules_check_elf(&e, &r) > 0) {
		rules_report_finish(&r);
		res->status = BUILD_SYMBOL_VIOLATION;
	} else if (!elf_dynamic_find_defined(&e, "ca_forward")) {
		set_verdict(res, BUILD_COMPILE_ERROR,
			    "the library does not export ca_forward with C linkage (define it "
			    "extern \"C\" and include <cuda_agent/abi.h>)\n");
	} else {
		res->status = BUILD_OK;
		snprintf(res->library, sizeof res->library, "%s", lib);
	}
	elf_dynamic_free(&e);
}

/* The build cache's root (opts->cache_dir, else <cache>/build), with obj/ and lib/ made, as an
 * absolute path so that result->library works from any working directory. */
static int cache_root(const struct build_opts *opts, char *cache, size_t size, struct ca_diag *d)
{
	char dir[PATH_MAX + 8], abs[PATH_MAX];
	int rc;
	if (opts->cache_dir && opts->cache_dir[0]) {
		if (ca_strlcpy(cache, opts->cache_dir, size))
			return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	} else {
		char root[PATH_MAX];
		if ((rc = ca_cache_dir(root, sizeof root, d)))
			return rc;
		if (ca_path_join(cache, size, root, "build") != 0)
			return ca_fail(d, CA_ERR_LIMIT, "cache path too long");
	}
	snprintf(dir, sizeof dir, "%s/obj", cache);
	if ((rc = ca_mkdirs(dir, 0755, d)))
		return rc;
	snprintf(dir, sizeof dir, "%s/lib", cache);
	if ((rc = ca_mkdirs(dir, 0755, d)))
		return rc;
	if ((rc = ca_realpath(cache, abs, sizeof abs, d)))
		return rc;
	return ca_strlcpy(cache, abs, size) ? ca_fail(d, CA_ERR_LIMIT, "cache path too long") : 0;
}

/* Link flags: the allowed libraries the sources mention, and an rpath to libcudart's
 * directories (flags has room for 16). Returns how many. */
static size_t link_flags_for(const struct candidate *c, const char *nvcc,
			     char libdirs[3][PATH_MAX], const char **flags)
{
	size_t n = 0;
	int nlibdirs;
	if (c->uses_cublas) {
		flags[n++] = "-lcublas";
		flags[n++] = "-lcublasLt";
	}
	if (c->uses_cudnn)
		flags[n++] = "-lcudnn";
	nlibdirs = build_cuda_lib_dirs(nvcc, libdirs);
	for (int i = 0; i < nlibdirs; i++) {
		flags[n++] = "-Xlinker";
		flags[n++] = "-rpath";
		flags[n++] = "-Xlinker";
		flags[n++] = libdirs[i];
	}
	return n;
}

/* Compiles, in parallel, every unit whose object and clean verdict the cache lacks. */
static int compile_missing(const struct build_opts *opts, const struct build_box *box,
			   struct candidate *c, const char *nvcc,
			   const char *nvcc_version, const char *kdir, const char *cache,
			   double timeout_s,
			   struct build_result *res, struct ca_diag *d)
{
	size_t to_compile = 0;
	int jobs;
	for (size_t i = 0; i < c->num_units; i++) {
		struct unit *u = &c->units[i];
		u->cached = !opts->no_cache && build_load_verdict(u) == 1 && ca_is_file(u->obj);
		if (u->cached)
			res->objects_cached++;
		else
			to_compile++;
	}
	if (!to_compile)
		return 0;
	jobs = opts->jobs > 0 ? opts->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (jobs < 1)
		jobs = 1;
	if (jobs > MAX_JOBS)
		jobs = MAX_JOBS;
	if ((size_t)jobs > to_compile)
		jobs = (int)to_compile;
	char split_dir[PATH_MAX + 16];
	bool split = nvcc_split_enabled(nvcc_version) &&
		     snprintf(split_dir, sizeof split_dir, "%s/nvcc-split", cache) <
			     (int)sizeof split_dir;
	struct job j = {.units = c->units, .num_units = c->num_units, .nvcc = nvcc,
			.arch = res->arch, .kdir = kdir,
			.include_dir = box->include_dir[0] ? box->include_dir : NULL,
			.timeout_s = timeout_s, .nvcc_threads = build_nvcc_threads(nvcc_version),
			.split_dir = split ? split_dir : NULL, .box = box};
	ca_log_debug("build: compiling %zu of %zu units (%d jobs, %s)", to_compile, c->num_units,
		     jobs, res->arch);
	return build_compile_all(&j, jobs, d);
}

/* The compiler's verdict on the units it failed: timeouts (which replace other errors), or the
 * first error lines of each log, paths rewritten by rw. Negative when nvcc could not run. */
static int unit_errors(struct candidate *c, double timeout_s, const struct rewrite *rw,
		       size_t nrw, struct build_result *res, struct ca_diag *d)
{
	int lines = 0;
	for (size_t i = 0; i < c->num_units; i++) {
		struct unit *u = &c->units[i];
		char line[PATH_MAX + 64];
		if (u->cached || !u->failed)
			continue;
		if (u->run_rc && !u->timed_out) /* could not run nvcc at all */
			return ca_fail(d, u->run_rc, "cannot compile kernels/%s: %s", u->name,
				       u->log ? u->log : "");
		if (u->timed_out) {
			int m = snprintf(line, sizeof line, "kernels/%s: nvcc took longer than %.0f s",
					 u->name, timeout_s);
			if (res->status != BUILD_TIMEOUT) {
				res->errors[0] = '\0';
				lines = 0;
			}
			res->status = BUILD_TIMEOUT;
			if (m > 0)
				build_buf_add_line(res->errors, sizeof res->errors, line, strlen(line));
			continue;
		}
		if (res->status == BUILD_TIMEOUT)
			continue;
		res->objects_compiled++;
		if (build_add_errors(u->log, u->name, rw, nrw, res->errors, sizeof res->errors,
				     &lines) == 0) {
			snprintf(line, sizeof line, "kernels/%s: nvcc failed:", u->name);
			build_buf_add_line(res->errors, sizeof res->errors, line, strlen(line));
			build_add_tail(u->log, rw, nrw, res->errors, sizeof res->errors, &lines);
		}
	}
	return 0;
}

/* (2) of build_candidate: the cached verdicts. A refused unit ends the build without nvcc; the
 * whole library comes from the cache only when every unit has a clean verdict. True when the
 * build is decided. */
static bool decided_by_cache(const struct build_opts *opts, struct candidate *c, const char *lib,
			     const char *lib_info, struct build_result *res)
{
	size_t clean = 0, refused = 0;
	for (size_t i = 0; i < c->num_units; i++) {
		int v = opts->no_cache ? -1 : build_load_verdict(&c->units[i]);
		if (v == 1)
			clean++;
		else if (v == 0)
			refused++;
	}
	if (refused) {
		res->objects_cached = (int)refused;
		report_refused(c, res);
		return true;
	}
	if (!opts->no_cache && clean == c->num_units && ca_is_file(lib)) {
		res->cached = true;
		res->objects_cached = (int)c->num_units;
		load_info(lib_info, res->ptxas_info, sizeof res->ptxas_info);
		check_library(lib, res);
		return true;
	}
	return false;
}

/* After compiling: every unit's ptxas lines into the result, objects counted. Returns how many
 * units' host assembly was refused. */
static size_t collect_units(const struct candidate *c, struct build_result *res)
{
	size_t refused = 0;
	for (size_t i = 0; i < c->num_units; i++) {
		const struct unit *u = &c->units[i];
		if (u->cached)
			load_info(u->info_path, res->ptxas_info, sizeof res->ptxas_info);
		else if (!u->failed) {
			res->objects_compiled++;
			append_lines(res->ptxas_info, sizeof res->ptxas_info, u->info);
		}
		refused += u->refused;
	}
	return refused;
}

int build_candidate(const struct build_opts *opts, struct build_result *res, struct ca_diag *d)
{
	double t0 = ca_now();
	struct candidate c = {0};
	char nvcc[PATH_MAX], cache[PATH_MAX], kdir[PATH_MAX], lib[PATH_MAX], lib_info[PATH_MAX],
		version[BUILD_NVCC_VERSION_MAX];
	char libdirs[3][PATH_MAX];
	const char *link_flags[17];
	size_t nlink = 0;
	bool host_link;
	struct rewrite rw[2];
	char kprefix[PATH_MAX + 1];
	double timeout_s;
	int rc;
	bool verdict = false;
	struct build_box *box = NULL;

	memset(res, 0, sizeof *res);
	res->status = BUILD_COMPILE_ERROR;
	if (!opts || !opts->kernels_dir || !opts->kernels_dir[0])
		return ca_fail(d, CA_ERR_INVALID, "no kernels directory given");
	timeout_s = opts->timeout_s > 0 ? opts->timeout_s : DEFAULT_TIMEOUT_S;

	if ((rc = build_pick_arch(opts, res->arch, sizeof res->arch, d)) ||
	    (rc = build_resolve_nvcc(opts, nvcc, sizeof nvcc, d)))
		goto out;
	if ((rc = cache_root(opts, cache, sizeof cache, d)))
		goto out;

	if (!ca_is_dir(opts->kernels_dir)) {
		set_verdict(res, BUILD_NO_SOURCES, "kernels/ does not exist (%s)\n",
			    opts->kernels_dir);
		goto out;
	}
	if ((rc = ca_realpath(opts->kernels_dir, kdir, sizeof kdir, d)))
		goto out;

	/* (1) source rules, before anything is compiled */
	rc = rules_check_sources(kdir, res->errors, sizeof res->errors, d);
	if (rc == CA_ERR_REJECTED) {
		rc = 0;
		res->status = BUILD_RULE_VIOLATION;
		goto out;
	}
	if (rc == CA_ERR_LIMIT) {
		rc = 0;
		set_verdict(res, BUILD_RULE_VIOLATION, "%s\n", d ? d->msg : "too many files");
		goto out;
	}
	if (rc)
		goto out;
	res->errors[0] = '\0';

	if ((rc = read_candidate(kdir, &c, res, &verdict, d)) || verdict)
		goto out;
	if ((rc = build_nvcc_version(nvcc, cache, version, sizeof version, d)))
		goto out;

	nlink = link_flags_for(&c, nvcc, libdirs, link_flags);
	/* nvcc's host link line alone where the split is on (the same tested releases); the
	 * library's key says which link made it */
	host_link = nvcc_split_enabled(version);
	link_flags[nlink] = host_link ? "(host link)" : "(nvcc link)";

	if ((rc = compute_keys(&c, version, res->arch, opts->include_dir, link_flags, nlink + 1,
			       cache, res->hash, d)))
		goto out;
	if (snprintf(lib, sizeof lib, "%s/lib/%s.so", cache, res->hash) >= (int)sizeof lib ||
	    snprintf(lib_info, sizeof lib_info, "%s/lib/%s.info", cache, res->hash) >=
		    (int)sizeof lib_info) {
		rc = ca_fail(d, CA_ERR_LIMIT, "cache path too long");
		goto out;
	}

	/* (2) the cached verdicts: a refused unit ends the build without nvcc; the whole library
	 * comes from the cache only when every unit has a clean verdict */
	if (decided_by_cache(opts, &c, lib, lib_info, res))
		goto out;

	/* (3) compile what the cache lacks, in parallel, in the sandbox (build_int.h) */
	if (!(box = malloc(sizeof *box))) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = build_box_open(box, cache, kdir, opts->include_dir, nvcc, d))) {
		free(box);
		box = NULL;
		goto out;
	}
	res->sandboxed = box->sandboxed;
	box->as_bytes = opts->as_bytes;
	if ((rc = compile_missing(opts, box, &c, nvcc, version, kdir, cache, timeout_s, res, d)))
		goto out;
	snprintf(kprefix, sizeof kprefix, "%s/", kdir);
	rw[0] = (struct rewrite){.from = kprefix, .to = "kernels/"};
	rw[1] = (struct rewrite){.from = cache, .to = "<cache>"};
	if ((rc = unit_errors(&c, timeout_s, rw, 2, res, d)))
		goto out;
	if (collect_units(&c, res)) { /* host assembly refused: the verdict, before compile errors */
		report_refused(&c, res);
		goto out;
	}
	if (res->errors[0]) { /* compile errors or timeouts: the verdict */
		if (res->status != BUILD_TIMEOUT)
			res->status = BUILD_COMPILE_ERROR;
		goto out;
	}

	/* (4) link, then the library rules */
	build_write_cache_file(lib_info, res->ptxas_info);
	if ((rc = link_library(box, nvcc, version, cache, res->arch, &c, link_flags, nlink, lib,
			       host_link, timeout_s, rw, 2, res, d)))
		goto out;
	if (res->status != BUILD_OK)
		goto out;
	check_library(lib, res);
out:
	if (rc && d)
		snprintf(res->errors, sizeof res->errors, "%s\n", d->msg);
	res->seconds = ca_now() - t0;
	if (box)
		build_box_close(box);
	free(box);
	candidate_free(&c);
	return rc;
}
