/* llm_compose: prompts to an OpenAI-compatible endpoint, replies appended to a JSONL file
 * (llm_compose.h). */
#include "synth/llm_compose.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/clock.h"
#include "util/fs.h"

struct job {
	const char *id;
	const json_t *messages;
};

struct pool {
	const struct llm_opts *o;
	struct job *jobs;
	size_t n_jobs, next, done, failed;
	FILE *out;
	pthread_mutex_t lock;
	double t0, last_progress;
	size_t total, before; /* for the progress line */
	int rc;               /* the first error that stops the run (not a failed request) */
	struct ca_diag d;
};

/* The lines of a JSONL text that parse as objects, up to the first that does not (a cut last
 * line); *clean_len: the bytes they span. */
static json_t *parse_lines(const char *text, size_t len, size_t *clean_len)
{
	json_t *arr = json_array();
	size_t pos = 0;
	*clean_len = 0;
	while (arr && pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		if (!nl)
			break; /* no newline: cut */
		size_t n = (size_t)(nl - (text + pos));
		if (n > 0) {
			json_t *v = json_loadb(text + pos, n, 0, NULL);
			if (!json_is_object(v)) {
				json_decref(v);
				break;
			}
			json_array_append_new(arr, v);
		}
		pos += n + 1;
		*clean_len = pos;
	}
	return arr;
}

static int read_optional(const char *path, size_t cap, char **text, size_t *len,
			 struct ca_diag *d)
{
	*text = NULL;
	*len = 0;
	if (!ca_is_file(path))
		return 0;
	return ca_read_file(path, cap, text, len, d);
}

static void progress(struct pool *p, bool last)
{
	double now = ca_now(), rate;
	size_t done = p->before + p->done;
	if (!last && now - p->last_progress < 1.0)
		return;
	p->last_progress = now;
	rate = (double)p->done / (now - p->t0 > 1e-9 ? now - p->t0 : 1e-9);
	if (rate > 0)
		fprintf(stderr, "\rllm: %zu/%zu (%.2f/s, ETA %.0f s, %zu failed)   %s", done,
			p->total, rate, (double)(p->total - done) / rate, p->failed,
			last ? "\n" : "");
	else
		fprintf(stderr, "\rllm: %zu/%zu (ETA ?)   %s", done, p->total, last ? "\n" : "");
	fflush(stderr);
}

/* One reply line, written whole under the lock (so lines never interleave). */
static void record(struct pool *p, const char *id, const struct llm_reply *r, int rc,
		   const struct ca_diag *rd)
{
	json_t *line;
	char *text;
	if (rc == 0) {
		const json_t *content = json_object_get(r->message, "content");
		line = json_pack("{s:s, s:s, s:s, s:f}", "id", id, "content",
				 json_is_string(content) ? json_string_value(content) : "",
				 "finish_reason", r->finish_reason, "seconds", r->seconds);
	} else {
		line = json_pack("{s:s, s:s, s:i}", "id", id, "error", rd->msg, "attempts",
				 r->attempts);
	}
	text = line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	json_decref(line);
	pthread_mutex_lock(&p->lock);
	if (!text) {
		if (!p->rc)
			p->rc = ca_fail(&p->d, CA_ERR_NOMEM, "out of memory");
	} else if (fprintf(p->out, "%s\n", text) < 0 || fflush(p->out) != 0) {
		if (!p->rc)
			p->rc = ca_fail(&p->d, CA_ERR_IO, "cannot append to llm_replies.jsonl: %s",
					strerror(errno));
	} else {
		p->done++;
		p->failed += rc != 0;
		progress(p, false);
	}
	pthread_mutex_unlock(&p->lock);
	free(text);
}

static void *worker(void *arg)
{
	struct pool *p = arg;
	struct llm_client c = {0};
	struct ca_diag d = {{0}};
	int rc = llm_client_init(&c, p->o, &d);

	if (rc) {
		pthread_mutex_lock(&p->lock);
		if (!p->rc) {
			p->rc = rc;
			p->d = d;
		}
		pthread_mutex_unlock(&p->lock);
		return NULL;
	}
	for (;;) {
		struct job *j = NULL;
		struct llm_reply r = {0};
		pthread_mutex_lock(&p->lock);
		if (!p->rc && p->next < p->n_jobs && !(p->o->stop && *p->o->stop))
			j = &p->jobs[p->next++];
		pthread_mutex_unlock(&p->lock);
		if (!j)
			break;
		memset(&d, 0, sizeof d);
		rc = llm_chat(&c, j->messages, NULL, &r, &d);
		if (rc == CA_ERR_INTERRUPTED) {
			llm_reply_free(&r);
			break; /* not answered: asked again next run */
		}
		record(p, j->id, &r, rc, &d);
		llm_reply_free(&r);
	}
	llm_client_free(&c);
	return NULL;
}

int synth_llm_replies(const char *dir, const struct llm_opts *o, int concurrency,
		      struct synth_llm_stats *st, struct ca_diag *d)
{
	char ppath[4096], rpath[4096];
	char *ptext = NULL, *rtext = NULL;
	size_t plen = 0, rlen = 0, pclean = 0, rclean = 0, n_threads;
	json_t *prompts = NULL, *replies = NULL, *answered = json_object();
	struct pool p;
	pthread_t threads[SYNTH_LLM_MAX_CONCURRENCY];
	size_t started = 0, i;
	int rc;

	memset(st, 0, sizeof *st);
	memset(&p, 0, sizeof p);
	pthread_mutex_init(&p.lock, NULL);
	if (!answered) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = ca_path_join(ppath, sizeof ppath, dir, "llm_prompts.jsonl")) ||
	    (rc = ca_path_join(rpath, sizeof rpath, dir, "llm_replies.jsonl"))) {
		rc = ca_fail(d, rc, "--dir is too long");
		goto out;
	}
	if ((rc = ca_read_file(ppath, SYNTH_LLM_MAX_PROMPTS_FILE, &ptext, &plen, d)) ||
	    (rc = read_optional(rpath, SYNTH_LLM_MAX_REPLIES_FILE, &rtext, &rlen, d)))
		goto out;
	prompts = parse_lines(ptext, plen, &pclean);
	replies = parse_lines(rtext ? rtext : "", rlen, &rclean);
	if (!prompts || !replies) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (pclean != plen) {
		rc = ca_fail(d, CA_ERR_PARSE, "%s: line %zu is not a JSON object", ppath,
			     json_array_size(prompts) + 1);
		goto out;
	}
	/* a cut last line (an interrupted run) is dropped before anything is appended */
	if (rclean != rlen && (rc = ca_write_file_atomic(rpath, rtext, rclean, d)))
		goto out;
	for (i = 0; i < json_array_size(replies); i++) {
		const char *id = json_string_value(json_object_get(json_array_get(replies, i), "id"));
		if (id)
			json_object_set_new(answered, id, json_true());
	}
	st->prompts = json_array_size(prompts);
	p.jobs = calloc(st->prompts ? st->prompts : 1, sizeof *p.jobs);
	if (!p.jobs) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < st->prompts; i++) {
		const json_t *pr = json_array_get(prompts, i);
		const char *id = json_string_value(json_object_get(pr, "id"));
		const json_t *msgs = json_object_get(pr, "messages");
		if (!id || !json_is_array(msgs)) {
			rc = ca_fail(d, CA_ERR_PARSE, "%s: line %zu has no string id or no messages "
				     "array", ppath, i + 1);
			goto out;
		}
		if (json_object_get(answered, id)) {
			st->answered++;
			continue;
		}
		p.jobs[p.n_jobs++] = (struct job){id, msgs};
	}
	if (p.n_jobs == 0) {
		rc = 0;
		goto out;
	}
	p.out = fopen(rpath, "a");
	if (!p.out) {
		rc = ca_fail(d, CA_ERR_IO, "cannot open %s: %s", rpath, strerror(errno));
		goto out;
	}
	p.o = o;
	p.t0 = ca_now();
	p.total = st->prompts;
	p.before = st->answered;
	n_threads = concurrency < 1 ? 1 : (size_t)concurrency;
	if (n_threads > SYNTH_LLM_MAX_CONCURRENCY)
		n_threads = SYNTH_LLM_MAX_CONCURRENCY;
	if (n_threads > p.n_jobs)
		n_threads = p.n_jobs;
	for (started = 0; started < n_threads; started++)
		if (pthread_create(&threads[started], NULL, worker, &p) != 0)
			break;
	if (started == 0) {
		rc = ca_fail(d, CA_ERR_NOMEM, "cannot start a thread");
		goto out;
	}
	for (i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	progress(&p, true);
	st->sent = p.done;
	st->failed = p.failed;
	if (p.rc) {
		rc = p.rc;
		*d = p.d;
	} else if (p.done < p.n_jobs) {
		rc = ca_fail(d, CA_ERR_INTERRUPTED, "stopped: %zu of %zu prompts answered",
			     st->answered + p.done, st->prompts);
	} else {
		rc = 0;
	}
out:
	if (p.out && fclose(p.out) != 0 && !rc)
		rc = ca_fail(d, CA_ERR_IO, "cannot write %s: %s", rpath, strerror(errno));
	pthread_mutex_destroy(&p.lock);
	free(p.jobs);
	json_decref(prompts);
	json_decref(replies);
	json_decref(answered);
	free(ptext);
	free(rtext);
	return rc;
}
