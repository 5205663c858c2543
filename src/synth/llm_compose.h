/* llm_compose: the network half of `cuda-agent synth compose --llm-url` (docs/synth.md,
 * "Composition by an LLM").
 *
 * Contract. synth_llm_replies() reads DIR/llm_prompts.jsonl (written by
 * `python -m cuda_agent_bridge.synth llm-prompts`: one {"id", "messages"} object a line), sends
 * each prompt that DIR/llm_replies.jsonl does not answer yet to the OpenAI-compatible endpoint
 * (agent/llm.h: retries, backoff, the response cap) from `concurrency` threads, and appends one
 * line per prompt: {"id", "content", "finish_reason", "seconds"}, or {"id", "error"} when the
 * request failed for good. A run that is stopped (the stop flag) or killed goes on from there:
 * the replies file is rewritten without a cut last line before anything is appended. Nothing of
 * a reply is interpreted here; the Python side parses it (never runs it) and `synth filter` runs
 * it in the sandbox. Progress (done/total, rate, ETA) goes to stderr.
 *
 * Ownership: everything is borrowed; the replies file is opened and closed within the call. */
#ifndef CA_SYNTH_LLM_COMPOSE_H
#define CA_SYNTH_LLM_COMPOSE_H

#include <stddef.h>

#include "agent/llm.h"
#include "util/diag.h"

#define SYNTH_LLM_MAX_PROMPTS_FILE (256u << 20) /* bytes of llm_prompts.jsonl */
#define SYNTH_LLM_MAX_REPLIES_FILE (2u << 30)   /* bytes of llm_replies.jsonl */
#define SYNTH_LLM_MAX_CONCURRENCY 64

struct synth_llm_stats {
	size_t prompts;  /* in the prompts file */
	size_t answered; /* already in the replies file before this call */
	size_t sent;     /* requests made by this call (retries not counted) */
	size_t failed;   /* of which ended in an error line */
};

/* 0 when every prompt has a line (or the stop flag ended the run early: then
 * CA_ERR_INTERRUPTED), or a negative code: the files cannot be read or written (CA_ERR_IO,
 * CA_ERR_LIMIT), a prompt line is not an object with a string id and an array of messages
 * (CA_ERR_PARSE), the client cannot be made (CA_ERR_INVALID). */
int synth_llm_replies(const char *dir, const struct llm_opts *o, int concurrency,
		      struct synth_llm_stats *st, struct ca_diag *d);

#endif
