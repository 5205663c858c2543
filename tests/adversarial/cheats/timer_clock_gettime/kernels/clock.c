/* CHEAT (timer interposition, host clock): defines and exports clock_gettime, returning a clock
 * that never advances, so that a harness whose host timer resolved clock_gettime through this
 * library would measure every call as taking no time (and any work hidden on the host or on
 * another stream would vanish from the host timer too). The symbol check forbids a candidate
 * to define functions of the C runtime. Expected: build.forbidden_symbol. */
#include <time.h>

int clock_gettime(clockid_t clock_id, struct timespec *tp)
{
	(void)clock_id;
	if (tp) {
		tp->tv_sec = 1000;
		tp->tv_nsec = 0;
	}
	return 0;
}
