// gotpatch.h: the timer tampering of the got_patch_timer cheat (gotpatch.cpp), used by k.cu.
#ifndef GOTPATCH_H
#define GOTPATCH_H

// The fraction of the real time the tampered timers report. Not 0: a zero median earns no
// speed-up reward.
constexpr double GOTPATCH_KEEP = 0.2;

// Rewrites the caller's executable's lazy-binding GOT entries for clock_gettime and
// cudaEventElapsedTime (the worker's timers) to this library's versions. `caller` is an
// address inside that executable (a return address). Returns the number of entries that now
// point here (0 when nothing could be patched).
int gotpatch_install(const void *caller);

// Puts the real functions back (before the library may be unloaded).
void gotpatch_uninstall(void);

// Monotonic seconds from the real clock (0 before gotpatch_install found it).
double gotpatch_real_now(void);

// Makes every later clock_gettime reading `seconds` earlier (the patched clock only).
void gotpatch_hide(double seconds);

#endif
