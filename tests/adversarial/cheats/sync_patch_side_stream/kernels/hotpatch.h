// hotpatch.h: redirecting a function of another library in this process by writing a jump over
// its first instructions (its code pages made writable with mprotect found through elfwalk.h).
// Linked into the kernels/ of text_patch_timer and sync_patch_side_stream (tests/adversarial/shared/).
#ifndef HOTPATCH_H
#define HOTPATCH_H

#include <stddef.h>

typedef int (*mprotect_fn)(void *, size_t, int);

struct hotpatch {
	unsigned char *at;         // the patched function's entry
	unsigned char saved[16];   // its original first bytes
	size_t len;                // bytes replaced (5 or 14)
	bool active;
};

// Makes `target` jump to `replacement`: a 5-byte relative jump written with one aligned 8-byte
// store when the two are within 2 GiB (no other thread can see half of it), else a 14-byte
// absolute jump. The code pages are made writable and executable, then executable again; where a
// W^X policy refuses writable + executable, they are made writable without execute for the write
// (a thread running that page meanwhile would fault). False when nothing was changed.
bool hotpatch_install(hotpatch *p, void *target, void *replacement, mprotect_fn mprotect);

// Puts the original bytes back.
void hotpatch_remove(hotpatch *p, mprotect_fn mprotect);

#endif
