/* openenv: OpenEnv's HTTP endpoints on the service (docs/service.md, "OpenEnv"): an episode is
 * one evaluation. */
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

/* POST /step {"action": <an evaluate request>, "timeout_s"?, "request_id"?, ...}: one evaluation,
 * an episode of one step: {"observation": {"result"}, "reward", "done": true, "metadata"}. */
static enum MHD_Result openenv_step(struct serve *S, struct MHD_Connection *c, struct conn *cc,
				    unsigned *status)
{
	struct ca_diag d = {{0}};
	json_error_t je;
	json_t *body = cc->too_big ? NULL : json_loadb(cc->body.p ? cc->body.p : "", cc->body.len,
						       JSON_REJECT_DUPLICATES, &je);
	const json_t *action = json_object_get(body, "action");
	const json_t *rid = json_object_get(body, "request_id");
	const char *code;
	char *text;
	json_t *res, *job;

	if (cc->too_big) {
		*status = 413;
		return respond_error(c, 413, "too_large", "the body is larger than 16 MiB", NULL);
	}
	if (!json_is_object(action) || (rid && !json_is_string(rid))) {
		json_decref(body);
		*status = 400;
		return respond_error(c, 400, "bad_request",
				     "expected {\"action\": {\"task\": ..., \"candidate\": ...}} "
				     "(/schema has the action's schema); request_id is a string",
				     NULL);
	}
	text = json_dumps(action, JSON_COMPACT);
	res = text ? run_evaluate(S, text, strlen(text), rid ? json_string_value(rid) : NULL, status,
				  &code, &d)
		   : NULL;
	free(text);
	json_decref(body);
	if (!res)
		return respond_error(c, *status, code, d.msg,
				     *status == 429 || *status == 503 ? SERVE_RETRY_AFTER_S : NULL);
	job = json_incref(json_object_get(res, "job"));
	json_object_del(res, "job");
	*status = 200;
	return respond_json(c, 200,
			    json_pack("{s:{s:o}, s:O?, s:b, s:{s:o}}", "observation", "result", res,
				      "reward", json_object_get(res, "reward"), "done", 1, "metadata",
				      "job", job),
			    NULL);
}

enum MHD_Result openenv(struct serve *S, struct MHD_Connection *c, const char *url,
			       bool get, bool post, struct conn *cc, unsigned *status)
{
	if (strcmp(url, "/step") == 0) {
		if (!post)
			return *status = 405, respond_error(c, 405, "method", "POST only", "POST");
		return openenv_step(S, c, cc, status);
	}
	if (strcmp(url, "/reset") == 0 && !post)
		return *status = 405, respond_error(c, 405, "method", "POST only", "POST");
	if (strcmp(url, "/reset") != 0 && !get)
		return *status = 405, respond_error(c, 405, "method", "GET only", "GET");
	*status = 200;
	if (strcmp(url, "/reset") == 0)
		return respond_json(
			c, 200,
			json_pack("{s:{s:s}, s:n, s:b}", "observation", "prompt",
				  "Each episode is one evaluation: send /step with an action "
				  "{\"task\": {\"id\" | \"hash\" | \"files\"}, \"candidate\": "
				  "{\"format\", \"files\"}} (the body of POST /v1/evaluate); the "
				  "observation is the result and the reward the result's reward. "
				  "Multi-turn agents use the sessions of /v1/sessions.",
				  "reward", "done", 0),
			NULL);
	if (strcmp(url, "/state") == 0)
		return respond_json(c, 200, json_pack("{s:n, s:i}", "episode_id", "step_count", 0),
				    NULL);
	if (strcmp(url, "/health") == 0)
		return respond_json(c, 200, json_pack("{s:s}", "status", "healthy"), NULL);
	{ /* /schema: the action is an evaluate request (from the OpenAPI document) */
		json_t *api = json_loads(serve_openapi_json, 0, NULL);
		json_t *req = json_deep_copy(json_object_get(
			json_object_get(json_object_get(api, "components"), "schemas"),
			"EvaluateRequest"));
		json_decref(api);
		return respond_json(
			c, 200,
			json_pack("{s:o?, s:{s:s, s:{s:{s:s}, s:{s:[ss]}, s:{s:s}}}, s:{s:s}}",
				  "action", req, "observation", "type", "object", "properties",
				  "result", "type", "object", "reward", "type", "number", "null",
				  "done", "type", "boolean", "state", "type", "object"),
			NULL);
	}
}
