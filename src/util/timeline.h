/* timeline: a diagnostic record of spans of time that several processes append to one file.
 *
 * With CUDA_AGENT_TIMELINE=FILE, ca_timeline_span appends "PID WHAT BEGIN END" (CLOCK_MONOTONIC
 * seconds, ca_now: the same clock in every process of the host) to FILE, one write per line, so
 * that the evaluations of a service's workers can be laid side by side (bench/timeline.py,
 * docs/protocol.md). Without the variable it does nothing. Thread-safe; the file is opened once
 * per process and stays open. */
#ifndef CA_UTIL_TIMELINE_H
#define CA_UTIL_TIMELINE_H

#include <stdio.h>

void ca_timeline_span(const char *what, double since, double until);

/* The diagnostics file named by the environment variable `var`, opened for appending and line
 * buffered (one write per line, so several processes may append), or NULL when the variable is
 * unset or empty or the file cannot be opened. The caller keeps it for the process's life. */
FILE *ca_diag_append_open(const char *var);

#endif
