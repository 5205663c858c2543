#include "util/clock.h"

#include <time.h>

double ca_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ca_wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ca_timespec_after(int clock, double seconds, struct timespec *ts)
{
	long ns;
	clock_gettime((clockid_t)clock, ts);
	if (!(seconds > 0))
		return;
	ts->tv_sec += (time_t)seconds;
	ns = ts->tv_nsec + (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (ns >= 1000000000L) {
		ts->tv_sec++;
		ns -= 1000000000L;
	}
	ts->tv_nsec = ns;
}
