/* clock: monotonic seconds for durations and deadlines. */
#ifndef CA_UTIL_CLOCK_H
#define CA_UTIL_CLOCK_H

double ca_now(void);      /* CLOCK_MONOTONIC, seconds */
double ca_wall_now(void); /* CLOCK_REALTIME, seconds since the epoch */

#endif
