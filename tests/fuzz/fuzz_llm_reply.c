/* libFuzzer target: a chat completion response body as llm_chat() parses it (llm_parse_reply),
 * and the error summary quoted from failed responses (llm_error_summary). Bodies come from a
 * server over the network: untrusted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/llm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One line of valid UTF-8 without control characters. */
static void check_line(const char *s)
{
	json_t *j;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			__builtin_trap();
	j = json_string(s); /* NULL if not valid UTF-8 */
	if (!j)
		__builtin_trap();
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct llm_reply r;
	struct ca_diag d;
	char summary[LLM_ERROR_QUOTE * 4 + 1];
	size_t chars = 0;

	if (llm_parse_reply((const char *)data, size, &r, &d) == 0) {
		if (!json_is_object(r.message) ||
		    !json_is_string(json_object_get(r.message, "role")) ||
		    memchr(r.finish_reason, '\0', sizeof r.finish_reason) == NULL || r.prompt_tokens < -1 ||
		    r.completion_tokens < -1 || r.total_tokens < -1)
			__builtin_trap();
		check_line(r.finish_reason);
		llm_reply_free(&r);
		if (r.message)
			__builtin_trap();
	} else {
		if (r.message)
			__builtin_trap();
		check_line(d.msg);
	}
	llm_error_summary((const char *)data, size, summary, sizeof summary);
	check_line(summary);
	for (const unsigned char *p = (const unsigned char *)summary; *p; p++)
		chars += (*p & 0xc0) != 0x80;
	if (chars > LLM_ERROR_QUOTE)
		__builtin_trap();
	return 0;
}
