/* clock: monotonic seconds for durations and deadlines. */
#ifndef CA_UTIL_CLOCK_H
#define CA_UTIL_CLOCK_H

double ca_now(void);      /* CLOCK_MONOTONIC, seconds */
double ca_wall_now(void); /* CLOCK_REALTIME, seconds since the epoch */

struct timespec;
/* *ts = now on `clock` (CLOCK_MONOTONIC, CLOCK_REALTIME, ...) plus `seconds` (>= 0): an absolute
 * time for pthread_cond_timedwait and the like. */
void ca_timespec_after(int clock, double seconds, struct timespec *ts);

#endif
