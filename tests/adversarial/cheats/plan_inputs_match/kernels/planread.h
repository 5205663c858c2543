// planread.h: the inputs the worker's plan names, read with libc functions found by elfwalk.h
// (open, read, lseek, close: none of them imported).
#ifndef PLANREAD_H
#define PLANREAD_H

#include <stddef.h>

constexpr size_t PLAN_PRINT_BYTES = 64; // bytes of args.0 that identify an input set

// Reads /proc/self/cmdline for the worker's plan (its first argument ending in .json), takes
// every "inputs" path in it (verification trials, checked calls, the final call, the profile)
// and keeps the first PLAN_PRINT_BYTES bytes of each file's args.0. Returns how many it kept
// (0 when anything is missing: no libc functions, no plan, no paths).
int planread_load(void);

// Whether `head` (the first PLAN_PRINT_BYTES bytes of a call's args.0) is one of them.
bool planread_known(const unsigned char *head);

#endif
