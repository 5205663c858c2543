/* log: progress and diagnostics on stderr. Results go to stdout; logs never do.
 * Level is set once at start (CLI flags -q/-v or $CUDA_AGENT_LOG=quiet|info|debug). */
#ifndef CA_UTIL_LOG_H
#define CA_UTIL_LOG_H

enum ca_log_level { CA_LOG_QUIET = 0, CA_LOG_INFO = 1, CA_LOG_DEBUG = 2 };

void ca_log_set_level(enum ca_log_level level);
enum ca_log_level ca_log_get_level(void);
void ca_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ca_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ca_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
