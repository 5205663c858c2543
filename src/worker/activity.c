#include "worker/activity.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static activity_sink_fn cur_sink;
static void *cur_ctx;
static CUpti_ActivityKind cur_kinds[ACTIVITY_MAX_KINDS];
static size_t cur_n;
static int callbacks_registered;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(8, ACTIVITY_BUFFER_BYTES);
	*size = *buffer ? ACTIVITY_BUFFER_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
				      size_t size, size_t valid)
{
	CUpti_Activity *rec = NULL;
	(void)ctx;
	(void)stream_id;
	(void)size;
	pthread_mutex_lock(&sink_lock);
	while (buffer && cur_sink &&
	       cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
		cur_sink(rec, cur_ctx);
	pthread_mutex_unlock(&sink_lock);
	free(buffer);
}

static int cupti_fail(struct worker_error *e, const char *code, CUptiResult res,
		      const char *what)
{
	const char *s = NULL;
	if (cuptiGetResultString(res, &s) != CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	return werr(e, code, false, CA_ERR_UNSUPPORTED, "CUPTI %s failed (%d: %s)", what,
		    (int)res, s);
}

static void disable_all(void)
{
	for (size_t i = 0; i < cur_n; i++)
		cuptiActivityDisable(cur_kinds[i]);
	cur_n = 0;
}

static void set_sink(activity_sink_fn sink, void *ctx)
{
	pthread_mutex_lock(&sink_lock);
	cur_sink = sink;
	cur_ctx = ctx;
	pthread_mutex_unlock(&sink_lock);
}

int activity_begin(const CUpti_ActivityKind *kinds, size_t n, activity_sink_fn sink, void *ctx,
		   const char *code, struct worker_error *e)
{
	CUptiResult res;
	if (n > ACTIVITY_MAX_KINDS || cur_n)
		return werr(e, code, false, CA_ERR_INVALID, "activity: bad use (%zu kinds, %zu on)",
			    n, cur_n);
	if (!callbacks_registered) {
		res = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
		if (res != CUPTI_SUCCESS)
			return cupti_fail(e, code, res, "cuptiActivityRegisterCallbacks");
		callbacks_registered = 1;
	}
	set_sink(sink, ctx);
	for (size_t i = 0; i < n; i++) {
		res = cuptiActivityEnable(kinds[i]);
		if (res != CUPTI_SUCCESS) {
			disable_all();
			set_sink(NULL, NULL);
			return cupti_fail(e, code, res, "cuptiActivityEnable");
		}
		cur_kinds[cur_n++] = kinds[i];
	}
	return 0;
}

int activity_end(uint64_t *dropped, const char *code, struct worker_error *e)
{
	size_t n = 0;
	CUptiResult res = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	disable_all();
	set_sink(NULL, NULL);
	if (res != CUPTI_SUCCESS)
		return cupti_fail(e, code, res, "cuptiActivityFlushAll");
	if (dropped)
		*dropped = cuptiActivityGetNumDroppedRecords(NULL, 0, &n) == CUPTI_SUCCESS ? n : 0;
	return 0;
}

void activity_abort(void)
{
	disable_all();
	set_sink(NULL, NULL);
}
