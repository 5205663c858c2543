/* timeline: spans appended to $CUDA_AGENT_TIMELINE (timeline.h). */
#include "util/timeline.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static FILE *timeline_out;

FILE *ca_diag_append_open(const char *var)
{
	const char *path = getenv(var);
	FILE *f = path && path[0] ? fopen(path, "ae") : NULL;
	if (f)
		setvbuf(f, NULL, _IOLBF, 0); /* a line per write(): appends do not mix */
	return f;
}

static void timeline_open(void)
{
	timeline_out = ca_diag_append_open("CUDA_AGENT_TIMELINE");
}

void ca_timeline_span(const char *what, double since, double until)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	(void)pthread_once(&once, timeline_open);
	if (timeline_out)
		fprintf(timeline_out, "%ld %s %.6f %.6f\n", (long)getpid(), what, since, until);
}
