/* timeline: a diagnostic record of spans of time that several processes append to one file.
 *
 * With CUDA_AGENT_TIMELINE=FILE, ca_timeline_span appends "PID WHAT BEGIN END" (CLOCK_MONOTONIC
 * seconds, ca_now: the same clock in every process of the host) to FILE, one write per line, so
 * that the evaluations of a service's workers can be laid side by side (bench/timeline.py,
 * docs/protocol.md). Without the variable it does nothing. Thread-safe; the file is opened once
 * per process and stays open. */
#ifndef CA_UTIL_TIMELINE_H
#define CA_UTIL_TIMELINE_H

void ca_timeline_span(const char *what, double since, double until);

#endif
