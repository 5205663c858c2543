/* summary: the short human-readable summary of a result JSON (what `cuda-agent eval` prints
 * without --json). Returns a heap string the caller frees, or NULL on allocation failure. */
#ifndef CA_EVAL_SUMMARY_H
#define CA_EVAL_SUMMARY_H

#include <jansson.h>

char *eval_summary_text(const json_t *result);

#endif
