/* nvcc_split: nvcc's steps from its dry run, the host and device branches at once (the header
 * says why the output is nvcc's own). */
#include "build/nvcc_split.h"

#include "build/box.h"
#include "build/host_pch.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gnutls/crypto.h>
#include <zlib.h>

#include "util/clock.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"

#define MAX_STEPS 24
#define MAX_ENV 24
#define DRYRUN_MAX (256u << 10)
#define MODULE_ID_MAX 512
#define TAG_MAX 256 /* a mangled name can be long; a longer tag is not learned */

enum step_kind { STEP_HOST_CPP, STEP_CUDAFE, STEP_DEVICE_CPP, STEP_CICC, STEP_PTXAS,
		 STEP_FATBINARY, STEP_RM, STEP_HOST_COMPILE };

struct step {
	char *line; /* the shell command line, as nvcc's dry run prints it (owned) */
	char *predicted_line; /* cicc's, reading the predicted module id (owned; cicc only) */
	enum step_kind kind;
	bool ran, started, ok;
	struct ca_run_result rr;
};

struct split {
	struct step steps[MAX_STEPS];
	size_t n;
	char *env[MAX_ENV + 2]; /* "K=V" (owned), then TMPDIR, NULL */
	size_t nenv;
	char tmpdir_env[PATH_MAX + 8];
	char module_id_file[PATH_MAX];
	char predicted_id[MODULE_ID_MAX]; /* step 2's, when there is a tag */
	double deadline;
	/* set by either branch's thread, read after both have joined */
	_Atomic bool timed_out, start_failed;
	/* the host compile's precompiled header (build/host_pch.h), begun when cudafe++ is done */
	const char *nvcc, *scratch, *tag_dir, *local_dir;
	struct host_pch pch;
	bool pch_begun;
	const struct build_box *box; /* the build's sandbox (build_int.h), or NULL */
	struct sandbox_bind scratch_bind; /* the private directory, writable inside */
};

bool nvcc_split_enabled(const char *nvcc_version)
{
	const char *env = getenv("CUDA_AGENT_NVCC_SPLIT");
	if (env && strcmp(env, "0") == 0)
		return false;
	if (env && strcmp(env, "1") == 0)
		return true;
	return nvcc_version && strstr(nvcc_version, "release 13.0,") != NULL;
}

static bool safe_arg(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("_./+=,:-", *s)))
			return false;
	return true;
}

/* A dry-run line holds nothing the shell would read as more than words, quotes and variables
 * (its arguments passed safe_arg; this guards against what nvcc adds). */
static bool safe_line(const char *s)
{
	return strpbrk(s, "`;|&<>\\()*?!'#~{}[]\n\r") == NULL;
}

int nvcc_split_module_id(const char *src_abs, const char *tag, char *out, size_t out_size)
{
	const char *name = strrchr(src_abs, '/');
	char mangled[PATH_MAX];
	size_t k = 0;
	unsigned long crc = crc32(0L, (const Bytef *)src_abs, (uInt)strlen(src_abs));

	name = name ? name + 1 : src_abs;
	for (; name[k] && k + 1 < sizeof mangled; k++) {
		char c = name[k];
		mangled[k] = (char)(((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				     (c >= '0' && c <= '9')) ? c : '_');
	}
	mangled[k] = '\0';
	int m = snprintf(out, out_size, "_%08lx_%zu_%s_%s", crc, strlen(name), mangled, tag);
	return m < 0 || (size_t)m >= out_size ? CA_ERR_LIMIT : 0;
}

/* The program a line runs, classified; -1 for one the split does not know. */
static int classify(const char *line)
{
	char prog[PATH_MAX];
	const char *p = line, *base;
	size_t n;
	if (*p == '"') {
		p++;
		n = strcspn(p, "\"");
	} else {
		n = strcspn(p, " ");
	}
	if (n == 0 || n >= sizeof prog)
		return -1;
	memcpy(prog, p, n);
	prog[n] = '\0';
	base = strrchr(prog, '/');
	base = base ? base + 1 : prog;
	if (strcmp(base, "cudafe++") == 0)
		return STEP_CUDAFE;
	if (strcmp(base, "cicc") == 0)
		return STEP_CICC;
	if (strcmp(base, "ptxas") == 0)
		return STEP_PTXAS;
	if (strcmp(base, "fatbinary") == 0)
		return STEP_FATBINARY;
	if (strcmp(base, "rm") == 0)
		return STEP_RM;
	if (strcmp(base, "nvlink") == 0 || strncmp(base, "cudafe", 6) == 0 || strchr(base, '$'))
		return -1;
	if (!strstr(line, " -E "))
		return STEP_HOST_COMPILE;
	return strstr(line, "-D__CUDA_ARCH__=") ? STEP_DEVICE_CPP : STEP_HOST_CPP;
}

/* The quoted path after `flag "` in line, into out. */
static bool quoted_after(const char *line, const char *flag, char *out, size_t size)
{
	const char *p = strstr(line, flag);
	size_t n;
	if (!p)
		return false;
	p += strlen(flag);
	n = strcspn(p, "\"");
	if (p[n] != '"' || n == 0 || n >= size)
		return false;
	memcpy(out, p, n);
	out[n] = '\0';
	return true;
}

static void split_free(struct split *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->steps[i].line);
		free(s->steps[i].predicted_line);
		if (s->steps[i].ran)
			ca_run_result_free(&s->steps[i].rr);
	}
	for (size_t i = 0; i < s->nenv; i++)
		free(s->env[i]);
}

/* Keeps an environment line of the dry run when its value is one shell word ("_SPACE_= " is
 * a space); the others (INCLUDES="-I..." "-I...") name what the steps already spell out. */
static int add_env(struct split *s, const char *line, size_t len)
{
	const char *eq = memchr(line, '=', len);
	if (!eq || s->nenv >= MAX_ENV)
		return s->nenv >= MAX_ENV ? -1 : 0;
	bool simple = true;
	for (const char *p = eq + 1; p < line + len; p++)
		if (*p == ' ' || *p == '"' || *p == '\t')
			simple = false;
	if (!simple && !(eq - line == 7 && strncmp(line, "_SPACE_", 7) == 0))
		return 0;
	for (size_t i = 0; i < s->nenv; i++) { /* a later line replaces an earlier one */
		if (strncmp(s->env[i], line, (size_t)(eq - line) + 1) == 0) {
			free(s->env[i]);
			s->env[i] = s->env[--s->nenv];
		}
	}
	if (!(s->env[s->nenv] = strndup(line, len)))
		return -1;
	s->nenv++;
	return 0;
}

/* The dry run's lines into s: environment and steps, in the expected shape (host preprocessing,
 * cudafe++ writing the module id, the device steps with cicc reading it, the host compile). */
static int parse_dryrun(struct split *s, const char *text)
{
	for (const char *p = text; p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		const char *l = p;
		p = eol ? eol + 1 : p + len;
		if (len < 3 || strncmp(l, "#$ ", 3) != 0)
			continue;
		l += 3;
		len -= 3;
		size_t name = strspn(l, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789");
		if (name > 0 && name < len && l[name] == '=') {
			if (add_env(s, l, len))
				return -1;
			continue;
		}
		if (s->n >= MAX_STEPS || !(s->steps[s->n].line = strndup(l, len)))
			return -1;
		char *line = s->steps[s->n].line;
		while (len > 0 && line[len - 1] == ' ') /* nvcc ends some lines with a space */
			line[--len] = '\0';
		int kind = classify(line);
		if (kind < 0 || !safe_line(line))
			return -1;
		s->steps[s->n++].kind = (enum step_kind)kind;
	}
	if (s->n < 5 || s->steps[0].kind != STEP_HOST_CPP || s->steps[1].kind != STEP_CUDAFE ||
	    s->steps[s->n - 1].kind != STEP_HOST_COMPILE ||
	    !strstr(s->steps[1].line, "--gen_module_id_file ") ||
	    !quoted_after(s->steps[1].line, "--module_id_file_name \"", s->module_id_file,
			  sizeof s->module_id_file))
		return -1;
	size_t cicc = 0;
	for (size_t i = 2; i + 1 < s->n; i++) {
		char mid[PATH_MAX];
		enum step_kind k = s->steps[i].kind;
		if (k == STEP_HOST_CPP || k == STEP_CUDAFE || k == STEP_HOST_COMPILE)
			return -1;
		if (k != STEP_CICC)
			continue;
		if (!quoted_after(s->steps[i].line, "--module_id_file_name \"", mid, sizeof mid) ||
		    strcmp(mid, s->module_id_file) != 0)
			return -1;
		cicc++;
	}
	return cicc ? 0 : -1;
}

/* Runs step i (its predicted line when asked). False when it did not succeed. */
static bool run_step(struct split *s, size_t i, bool predicted)
{
	struct step *st = &s->steps[i];
	const char *argv[] = {"/bin/sh", "-c",
			      predicted && st->predicted_line ? st->predicted_line : st->line, NULL};
	struct ca_run_opts ro = {.env_add = (const char *const *)s->env, .stdout_cap = 256u << 10,
				 .stderr_cap = 1u << 20};
	struct ca_diag d;
	double left = s->deadline - ca_now();

	if (st->kind == STEP_RM) /* nvcc's removal of a file it did not make: our directory goes */
		return true;
	if (st->ran) {
		ca_run_result_free(&st->rr);
		st->ran = false;
	}
	st->started = true;
	if (left <= 0) {
		s->timed_out = true;
		return false;
	}
	ro.timeout_s = left;
	if (build_exec(s->box, argv, &ro, &s->scratch_bind, 1, &st->rr, &d) != 0) {
		s->start_failed = true;
		return false;
	}
	st->ran = true;
	if (st->rr.timed_out)
		s->timed_out = true;
	st->ok = !st->rr.timed_out && !st->rr.term_signal && st->rr.exit_code == 0;
	return st->ok;
}

struct branch {
	struct split *s;
	size_t from, to; /* steps [from, to) */
	bool predicted, ok;
	bool pch; /* the host branch: its end begins the precompiled header */
};

/* The host compile's precompiled header begun (build/host_pch.h): a hit rewrites the unit, a
 * miss starts building the header, while the device branch runs. */
static void pch_begin(struct split *s)
{
	char unit[PATH_MAX], pch_dir[PATH_MAX];
	if (!s->local_dir || !host_pch_enabled() || !safe_arg(s->local_dir) ||
	    snprintf(pch_dir, sizeof pch_dir, "%s/pch", s->tag_dir) >= (int)sizeof pch_dir ||
	    !safe_arg(pch_dir) ||
	    !quoted_after(s->steps[1].line, "--gen_c_file_name \"", unit, sizeof unit))
		return;
	struct host_pch_job job = {.line = s->steps[s->n - 1].line, .unit = unit, .dir = pch_dir,
				   .scratch = s->scratch, .local_dir = s->local_dir,
				   .nvcc = s->nvcc, .env = (const char *const *)s->env,
				   .deadline = s->deadline, .box = s->box};
	host_pch_begin(&s->pch, &job);
	s->pch_begun = true;
}

/* Steps [from, to) as one shell line, each started only when the one before succeeded: one
 * sandbox (and one shell) for the branch instead of one per step. Their output, and whether
 * they all succeeded, are recorded on the first; the others are left not started, so that
 * finish() reports the branch as nvcc would its steps (the output in order, up to the first
 * failure, and that failure's exit status). A step that is not run (STEP_RM) is left out. */
static bool run_chain(struct split *s, size_t from, size_t to, bool predicted)
{
	size_t len = 1, first = to;
	for (size_t i = from; i < to; i++) {
		struct step *st = &s->steps[i];
		if (st->ran) {
			ca_run_result_free(&st->rr);
			st->ran = false;
		}
		st->started = st->ok = false;
		if (st->kind == STEP_RM)
			continue;
		if (first == to)
			first = i;
		len += strlen(predicted && st->predicted_line ? st->predicted_line : st->line) + 4;
	}
	if (first == to)
		return true;
	char *line = malloc(len), *w = line;
	if (!line) {
		s->start_failed = true;
		return false;
	}
	*w = '\0';
	for (size_t i = first; i < to; i++) {
		struct step *st = &s->steps[i];
		if (st->kind == STEP_RM)
			continue;
		const char *l = predicted && st->predicted_line ? st->predicted_line : st->line;
		w += sprintf(w, "%s%s", w == line ? "" : " && ", l);
	}
	char *keep = s->steps[first].line, *keep_pred = s->steps[first].predicted_line;
	s->steps[first].line = line; /* run_step runs steps[first] with the chain's line */
	s->steps[first].predicted_line = NULL;
	bool ok = run_step(s, first, false);
	s->steps[first].line = keep;
	s->steps[first].predicted_line = keep_pred;
	free(line);
	return ok;
}

static void *run_branch(void *arg)
{
	struct branch *b = arg;
	b->ok = run_chain(b->s, b->from, b->to, b->predicted);
	if (b->pch && b->ok)
		pch_begin(b->s);
	return NULL;
}

/* The steps' output in nvcc's order up to the first that failed, as nvcc's run into rr. */
static int finish(struct split *s, struct ca_run_result *rr)
{
	size_t len = 0, at = 0;
	memset(rr, 0, sizeof *rr);
	for (size_t i = 0; i < s->n; i++)
		if (s->steps[i].ran)
			len += s->steps[i].rr.err_len + s->steps[i].rr.out_len;
	if (!(rr->err = malloc(len + 1)) || !(rr->out = calloc(1, 1))) {
		free(rr->err);
		rr->err = NULL;
		return -1;
	}
	for (size_t i = 0; i < s->n; i++) {
		struct step *st = &s->steps[i];
		if (!st->started)
			continue;
		if (st->ran) {
			memcpy(rr->err + at, st->rr.err ? st->rr.err : "", st->rr.err_len);
			at += st->rr.err_len;
			memcpy(rr->err + at, st->rr.out ? st->rr.out : "", st->rr.out_len);
			at += st->rr.out_len;
			rr->seconds += st->rr.seconds;
		}
		if (st->kind != STEP_RM && !st->ok) {
			rr->timed_out = s->timed_out;
			rr->term_signal = st->ran ? st->rr.term_signal : 0;
			rr->exit_code = st->ran && st->rr.exit_code ? st->rr.exit_code : 1;
			break;
		}
	}
	rr->err[at] = '\0';
	rr->err_len = at;
	return 0;
}

static void tag_path(const char *const *argv, const char *src_abs, const char *tag_dir,
		     char *out, size_t size)
{
	struct ca_hasher h;
	char hex[CA_HASH_HEX_LEN + 1] = "none";
	if (ca_hasher_init(&h) == 0) {
		for (size_t i = 0; argv[i]; i++) {
			bool out_arg = i > 0 && strcmp(argv[i - 1], "-o") == 0;
			ca_hasher_update_str(&h, strcmp(argv[i], src_abs) == 0 ? "<src>" :
						 out_arg ? "<out>" : argv[i]);
		}
		ca_hasher_final_hex(&h, hex);
		ca_hasher_free(&h);
	}
	snprintf(out, size, "%s/%s.tag", tag_dir, hex);
}

/* The tag of the module id cudafe++ wrote (`_<crc>_<len>_<name>_<tag>`), kept for the next
 * compile with these flags; nothing is kept when the id is not of that form. */
static void learn_tag(const char *id, const char *src_abs, const char *path)
{
	char prefix[MODULE_ID_MAX];
	if (nvcc_split_module_id(src_abs, "", prefix, sizeof prefix) != 0 ||
	    strncmp(id, prefix, strlen(prefix)) != 0)
		return;
	const char *tag = id + strlen(prefix);
	if (!tag[0] || strlen(tag) >= TAG_MAX || strspn(tag, "abcdefghijklmnopqrstuvwxyz"
			"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(tag))
		return;
	(void)ca_write_file_atomic(path, tag, strlen(tag), NULL);
}

/* The dry run's steps into s, in a private temporary directory (dir). */
/* ---- the dry run, cached ----------------------------------------------------------------------
 * nvcc's dry run is a function of its command line, its environment and the installed binaries
 * (nvcc, and the gcc it finds: --gnu_version is on the lines). Two builds of one source differ
 * only in the private directory (TMPDIR) and the output path, and in the process id nvcc puts in
 * its temporary names (tmpxft_<pid>_...), which only need to be unique in the private directory.
 * So the text is kept under <tag_dir>/dryrun/<key>.txt with those two paths as tokens, the key
 * hashing the tokenized command line, the environment the dry run saw and the binaries'
 * identities; a later build with the same key reads it back with its own paths put in, which
 * spares one sandbox start and one nvcc start on the build's critical path. The file is written
 * and read by this side only (the sandbox cannot see tag_dir), the text goes through
 * parse_dryrun's checks either way, and a text that would name anything else of the build that
 * made it (its staging directory) is not kept. $CUDA_AGENT_NVCC_DRYRUN_CACHE=0: always asked. */
#define TOK_DIR "@@CA_SCRATCH@@"
#define TOK_OUT "@@CA_OUTPUT@@"

/* text with every `from` replaced by `to` (owned), NULL when out of memory or too long */
static char *subst(const char *text, const char *from, const char *to)
{
	size_t nf = strlen(from), nt = strlen(to), count = 0, len = strlen(text);
	if (nf == 0)
		return strdup(text);
	for (const char *p = strstr(text, from); p; p = strstr(p + nf, from))
		count++;
	if (nt > nf && count > (DRYRUN_MAX * 4) / (nt - nf + 1))
		return NULL;
	char *out = malloc(len + count * (nt > nf ? nt - nf : 0) + 1), *w = out;
	if (!out)
		return NULL;
	for (const char *p = text, *q; *p; p = q + nf) {
		if (!(q = strstr(p, from))) {
			memcpy(w, p, strlen(p) + 1);
			return out;
		}
		memcpy(w, p, (size_t)(q - p));
		w += q - p;
		memcpy(w, to, nt);
		w += nt;
	}
	*w = '\0';
	return out;
}

static bool dryrun_cache_on(void)
{
	const char *env = getenv("CUDA_AGENT_NVCC_DRYRUN_CACHE");
	return !(env && strcmp(env, "0") == 0);
}

/* The output path argv names (after -o), or NULL. */
static const char *output_of(const char *const *argv)
{
	for (size_t i = 1; argv[i]; i++)
		if (strcmp(argv[i], "-o") == 0 && argv[i + 1])
			return argv[i + 1];
	return NULL;
}

/* <tag_dir>/dryrun/<key>.txt for argv into path; false when no key can be made. */
static bool dryrun_path(const struct split *s, const char *const *argv, const char *out_arg,
			char *path, size_t size)
{
	static const char tag[] = "cuda-agent nvcc dry run 1";
	unsigned char digest[32];
	char key[2 * sizeof digest + 1], gcc[PATH_MAX];
	const char *env_box[8], *const *env = env_box;
	const char *path_env = s->box ? s->box->path_env : NULL;
	static const char *const outside[] = {"PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",
					      "NVCC_CCBIN"};
	char outside_env[sizeof outside / sizeof outside[0]][PATH_MAX + 32];
	size_t ne = 0;
	gnutls_hash_hd_t h;

	if (s->box) {
		env_box[ne++] = path_env;
		for (size_t i = 0; i < s->box->n_pass_env && ne + 1 < sizeof env_box / sizeof *env_box;
		     i++)
			env_box[ne++] = s->box->pass_env[i];
	} else {
		for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
			const char *v = getenv(outside[i]);
			snprintf(outside_env[i], sizeof outside_env[i], "%s=%s", outside[i],
				 v ? v : "(unset)");
			env_box[ne++] = outside_env[i];
		}
	}
	env_box[ne] = NULL;
	if (!host_pch_find_compiler("gcc", env, gcc, sizeof gcc))
		snprintf(gcc, sizeof gcc, "(no gcc)");
	if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0)
		return false;
	gnutls_hash(h, tag, sizeof tag);
	host_pch_hash_stat(h, argv[0]);
	host_pch_hash_stat(h, gcc);
	for (size_t i = 0; env[i]; i++)
		gnutls_hash(h, env[i], strlen(env[i]) + 1);
	gnutls_hash(h, "--", 3);
	for (size_t i = 1; argv[i]; i++) {
		const char *a = argv[i] == out_arg ? TOK_OUT : argv[i];
		gnutls_hash(h, a, strlen(a) + 1);
	}
	gnutls_hash_deinit(h, digest);
	for (size_t i = 0; i < sizeof digest; i++)
		snprintf(key + 2 * i, 3, "%02x", digest[i]);
	return snprintf(path, size, "%s/dryrun/%s.txt", s->tag_dir, key) < (int)size;
}

/* The cached text with this build's paths put in (owned), or NULL. */
static char *dryrun_load(const char *path, const char *dir, const char *out_arg)
{
	char *text = NULL, *a = NULL, *b = NULL;
	size_t len = 0;
	if (ca_read_file(path, DRYRUN_MAX, &text, &len, NULL) != 0)
		return NULL;
	if (strlen(text) == len && (a = subst(text, TOK_OUT, out_arg)))
		b = subst(a, TOK_DIR, dir);
	free(text);
	free(a);
	return b;
}

/* Keeps raw (nvcc's text for this build) with this build's paths as tokens. */
static void dryrun_store(const struct split *s, const char *path, const char *raw,
			 const char *dir, const char *out_arg)
{
	char *a = NULL, *b = NULL, parent[PATH_MAX];
	if (strstr(raw, "@@") || !(a = subst(raw, out_arg, TOK_OUT)) ||
	    !(b = subst(a, dir, TOK_DIR)) || (s->box && strstr(b, s->box->staging)) ||
	    strstr(b, "/ca-nvcc-") ||
	    snprintf(parent, sizeof parent, "%s/dryrun", s->tag_dir) >= (int)sizeof parent ||
	    ca_mkdirs(parent, 0755, NULL) != 0 ||
	    ca_write_file_atomic(path, b, strlen(b), NULL) != 0)
		ca_log_debug("nvcc split: the dry run is not kept");
	free(a);
	free(b);
}

static int dry_run(const char *const *argv, struct split *s, const char *dir)
{
	const char *dargv[64];
	const char *env[] = {s->tmpdir_env, NULL};
	struct ca_run_opts ro = {.env_add = env, .timeout_s = 30, .stdout_cap = 64u << 10,
				 .stderr_cap = DRYRUN_MAX};
	struct ca_run_result rr;
	struct ca_diag d;
	size_t n = 0;
	int rc = -1;
	char cpath[PATH_MAX];
	const char *out_arg = output_of(argv);
	bool cache = dryrun_cache_on() && out_arg && out_arg[0] == '/' && safe_arg(out_arg) &&
		     dryrun_path(s, argv, out_arg, cpath, sizeof cpath);

	snprintf(s->tmpdir_env, sizeof s->tmpdir_env, "TMPDIR=%s", dir);
	if (cache) {
		char *text = dryrun_load(cpath, dir, out_arg);
		if (text) {
			rc = parse_dryrun(s, text);
			free(text);
			if (rc == 0)
				goto parsed;
			split_free(s); /* a text that does not parse: asked again */
			memset(s->steps, 0, sizeof s->steps);
			s->n = s->nenv = 0;
		}
	}
	dargv[n++] = argv[0];
	dargv[n++] = "-dryrun";
	for (size_t i = 1; argv[i]; i++) {
		if (n + 1 >= sizeof dargv / sizeof dargv[0] || !safe_arg(argv[i]))
			return -1;
		dargv[n++] = argv[i];
	}
	dargv[n] = NULL;
	if (build_exec(s->box, dargv, &ro, &s->scratch_bind, 1, &rr, &d) != 0)
		return -1;
	if (!rr.timed_out && !rr.term_signal && rr.exit_code == 0 && !rr.err_dropped && rr.err)
		rc = parse_dryrun(s, rr.err);
	if (rc == 0 && cache)
		dryrun_store(s, cpath, rr.err, dir, out_arg);
	ca_log_debug("nvcc split: dry run asked%s", cache ? " (and kept)" : "");
	ca_run_result_free(&rr);
parsed:
	if (rc == 0) {
		s->env[s->nenv] = s->tmpdir_env; /* not owned: split_free stops at nenv */
		s->env[s->nenv + 1] = NULL;
	}
	return rc;
}

static bool read_module_id(const struct split *s, char *out, size_t size)
{
	char *text = NULL;
	size_t len = 0;
	if (ca_read_file(s->module_id_file, MODULE_ID_MAX, &text, &len, NULL) != 0)
		return false;
	bool ok = len > 0 && len < size;
	if (ok)
		memcpy(out, text, len + 1);
	free(text);
	return ok;
}

/* Step 2 of the header: the predicted id written beside the real one's file, and cicc's lines
 * pointed at it. False when there is no tag yet (or the id cannot be written). */
static bool predict(struct split *s, const char *src_abs, const char *tag_file)
{
	char *tag = NULL, *id = s->predicted_id, pred[PATH_MAX + 8];
	size_t len = 0;
	bool ok = false;

	if (ca_read_file(tag_file, TAG_MAX, &tag, &len, NULL) != 0)
		return false;
	if (snprintf(pred, sizeof pred, "%s.pred", s->module_id_file) >= (int)sizeof pred ||
	    nvcc_split_module_id(src_abs, tag, id, sizeof s->predicted_id) != 0 ||
	    ca_write_file_atomic(pred, id, strlen(id), NULL) != 0)
		goto out;
	for (size_t i = 0; i < s->n; i++) {
		struct step *st = &s->steps[i];
		if (st->kind != STEP_CICC)
			continue;
		char from[PATH_MAX + 32];
		snprintf(from, sizeof from, "--module_id_file_name \"%s\"", s->module_id_file);
		const char *at = strstr(st->line, from); /* there: parse_dryrun checked */
		size_t cap = strlen(st->line) + sizeof ".pred";
		if (!at || !(st->predicted_line = malloc(cap)))
			goto out;
		/* the line up to the id file's closing quote, ".pred", then the rest */
		size_t head = (size_t)(at - st->line) + strlen(from) - 1;
		snprintf(st->predicted_line, cap, "%.*s.pred%s", (int)head, st->line,
			 st->line + head);
	}
	ok = true;
out:
	free(tag);
	return ok;
}

int nvcc_split_run(const char *const *argv, const char *src_abs, const char *local_dir,
		   const char *tag_dir, double timeout_s, struct ca_run_result *rr, bool *predicted,
		   const struct build_box *box)
{
	struct split *s = calloc(1, sizeof *s);
	char dir[PATH_MAX], tag_file[PATH_MAX], real_id[MODULE_ID_MAX];
	int out = NVCC_SPLIT_FALLBACK;
	bool pred = false, made_dir = false;
	const char *tmp = getenv("TMPDIR");

	if (predicted)
		*predicted = false;
	if (!s || src_abs[0] != '/' || !safe_arg(src_abs) || !argv[0] || !safe_arg(argv[0]))
		goto done;
	s->deadline = ca_now() + (timeout_s > 0 ? timeout_s : 1e9);
	s->nvcc = argv[0];
	s->scratch = dir;
	s->tag_dir = tag_dir;
	s->local_dir = local_dir;
	s->box = box;
	/* in the sandbox's staging directory: the steps see it, and nothing else writable */
	if (ca_make_temp_dir(box ? box->staging : tmp && tmp[0] == '/' ? tmp : "/tmp", "ca-nvcc-",
			     dir, sizeof dir, NULL) != 0)
		goto done;
	made_dir = true;
	s->scratch_bind = (struct sandbox_bind){.src = dir, .writable = true};
	if (!safe_arg(dir))
		goto done;
	if (dry_run(argv, s, dir) != 0 || ca_mkdirs(tag_dir, 0755, NULL) != 0)
		goto done;
	tag_path(argv, src_abs, tag_dir, tag_file, sizeof tag_file);
	size_t last = s->n - 1; /* the host compile */
	pred = predict(s, src_abs, tag_file);
	if (pred) { /* step 3: the branches at once */
		pthread_t th;
		struct branch host = {.s = s, .from = 0, .to = 2, .pch = true};
		struct branch dev = {.s = s, .from = 2, .to = last, .predicted = true};
		if (pthread_create(&th, NULL, run_branch, &host) != 0)
			goto done;
		run_branch(&dev);
		pthread_join(th, NULL);
		if (s->start_failed)
			goto done;
		if (!host.ok)
			goto report;
		/* step 4: the id cudafe++ wrote against the prediction */
		if (!read_module_id(s, real_id, sizeof real_id))
			goto done;
		bool held = strcmp(s->predicted_id, real_id) == 0;
		if (!held) { /* the device branch again, on the id cudafe++ wrote */
			ca_log_debug("nvcc split: module id %s, not the predicted %s", real_id,
				     s->predicted_id);
			pred = false;
			learn_tag(real_id, src_abs, tag_file);
			struct branch again = {.s = s, .from = 2, .to = last};
			for (size_t i = 2; i < last; i++)
				s->steps[i].ok = s->steps[i].started = false;
			run_branch(&again);
			if (s->start_failed)
				goto done;
		}
		for (size_t i = 2; i < last; i++)
			if (s->steps[i].started && !s->steps[i].ok && s->steps[i].kind != STEP_RM)
				goto report;
	} else { /* no tag yet: nvcc's order, and the tag learned */
		struct branch host = {.s = s, .from = 0, .to = 2, .pch = true};
		struct branch dev = {.s = s, .from = 2, .to = last};
		run_branch(&host);
		if (host.ok)
			run_branch(&dev);
		if (s->start_failed)
			goto done;
		if (!host.ok || !dev.ok)
			goto report;
		if (read_module_id(s, real_id, sizeof real_id))
			learn_tag(real_id, src_abs, tag_file);
	}
	run_step(s, last, false); /* step 5 */
	if (s->start_failed)
		goto done;
report:
	if (finish(s, rr) == 0) {
		out = NVCC_SPLIT_DONE;
		if (predicted)
			*predicted = pred && rr->exit_code == 0 && !rr->timed_out;
		ca_log_debug("nvcc split: %s: %s", src_abs, pred ? "the branches ran at once" :
			     "the steps ran one after the other (the module id's tag learned)");
	}
done:
	if (s && s->pch_begun) /* the header's build joined before its directory goes */
		host_pch_end(&s->pch);
	if (made_dir)
		ca_remove_tree(dir, NULL);
	if (s) {
		split_free(s);
		free(s);
	}
	return out;
}
