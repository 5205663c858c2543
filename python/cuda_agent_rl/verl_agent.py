"""verl agent loop `cuda_agent` (verl 0.9.1, verl.experimental.agent_loop): one service session
per trajectory (docs/rl.md, "verl").

Selected per sample by the dataset's `agent_name` column (`cuda-agent tasks export --format
verl-rl` writes `cuda_agent`). Register it in the worker processes with
`actor_rollout_ref.rollout.agent.agent_loop_config_path` naming a YAML list holding
`{name: cuda_agent, _target_: cuda_agent_rl.verl_agent.CudaAgentLoop, service_url: URL}`
(recipes/cuda-agent/agent_loop.yaml); importing this module also registers it (@register).

One trajectory:
1. opens a session for the row's task (`extra_info.task_id`);
2. tokenizes the row's `raw_prompt` with its tools once (verl's Continuous Token builder);
3. generates token-in/token-out through `server_manager.generate`, appending the model's tokens
   as they came (response_mask 1);
4. parses the turn's Hermes tool calls (`<tool_call>{...}</tool_call>`), runs each through the
   session in order, and appends only the new tool messages, tokenized on their own by the
   builder's context merge (response_mask 0); a malformed call or one the service rejects
   (unknown tool, arguments outside its schema) is answered with the error as a tool message;
5. stops when a turn calls no tool, at `max_turns` assistant turns, or when the response
   reaches `response_length` tokens;
6. finalizes: `reward_score` is finalize's reward; when the service could not judge (reward
   null, an `env.*` reason, or the service failed mid-trajectory) it is 0.0 with
   `extra_fields["reward_valid"]` False, never -1 (docs/rl.md, "Reward semantics");
7. closes the session, whatever happened.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)
from verl.utils.profiler import simple_timer

from cuda_agent_rl.client import ServiceClient, ServiceError, Session
from cuda_agent_rl.reward import client_for, score_of_result
from cuda_agent_rl.toolcalls import ToolCall, assistant_message, parse_hermes

log = logging.getLogger(__name__)
AGENT_NAME = "cuda_agent"
REJECTED = ("unknown_tool", "bad_arguments")  # the model's fault: answered, not fatal


@dataclass
class Trace:
    """What extra_fields reports of one trajectory."""

    task_id: str = ""
    session_id: str = ""
    assistant_turns: int = 0
    user_turns: int = 0  # tool-answer turns
    tool_calls: int = 0
    tool_failures: int = 0  # calls answered ok: false
    schema_violations: int = 0  # malformed calls, unknown tools, bad arguments
    finish: str = ""  # answered | max_turns | length | service_error
    reason: str = ""  # finalize's reason code, or service.<code>
    reward_valid: bool = False
    speedup_eager: float | None = None
    speedup_compile: float | None = None


def tools_of(value: Any) -> list[dict[str, Any]]:
    """The row's `tools` column: JSON text (as export writes it) or a list of schemas."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return [dict(t) for t in value]


def task_of(extra_info: Mapping[str, Any] | None) -> dict[str, str]:
    info = extra_info or {}
    if info.get("task_id"):
        return {"id": str(info["task_id"])}
    if info.get("task_hash"):
        return {"hash": str(info["task_hash"])}
    raise ValueError("the row's extra_info names no task_id (cuda-agent tasks export writes it)")


def clip(text: str, limit: int, side: str) -> str:
    """verl's tool-response truncation (multi_turn.max_tool_response_length, in characters)."""
    if limit <= 0 or len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


@register(AGENT_NAME)
class CudaAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, service_url: str | None = None, max_turns: int | None = None,
                 tools: Any = None, **kwargs: Any) -> None:
        del tools  # verl's own tool list (rollout.multi_turn.tool_config_path): not ours
        super().__init__(*args, **kwargs)
        mt = self.rollout_config.multi_turn
        fmt = mt.get("format", "hermes") if hasattr(mt, "get") else getattr(mt, "format", "")
        if fmt and fmt != "hermes":
            raise ValueError(f"cuda_agent parses Hermes tool calls; multi_turn.format is {fmt}")
        self.max_turns = int(max_turns or mt.max_assistant_turns or 150)
        self.tool_limit = int(mt.max_tool_response_length or 0)
        self.tool_side = str(mt.tool_response_truncate_side or "middle")
        self.response_length = int(self.rollout_config.response_length)
        self.client: ServiceClient = client_for(service_url)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages: list[dict[str, Any]] = [dict(m) for m in kwargs["raw_prompt"]]
        tools = tools_of(kwargs.get("tools"))
        task = task_of(kwargs.get("extra_info"))
        tr = Trace(task_id=next(iter(task.values())))
        metrics: dict[str, Any] = {}
        request_id = uuid4().hex

        ids = await self.ct_build_initial_tokens(messages, tools=tools)
        mask: list[int] = []
        logprobs: list[float] = []
        reward: float | None = None
        session: Session | None = None
        try:
            session = await asyncio.to_thread(self.client.open_session, task)
            tr.session_id = session.session_id
            while True:
                with simple_timer("generate_sequences", metrics):
                    out = await self.server_manager.generate(
                        request_id=request_id, prompt_ids=ids, sampling_params=sampling_params)
                merged, mask, lp = await self.ct_merge_assistant_token(
                    ids, list(out.token_ids), mask,
                    logprobs if (logprobs or out.log_probs) else None,
                    assistant_logprobs=out.log_probs or None)
                ids, logprobs = merged.token_ids, lp or []
                tr.assistant_turns += 1
                tok: Any = self.tokenizer
                text = tok.decode(out.token_ids, skip_special_tokens=True)
                parsed = parse_hermes(text, f"call_{tr.assistant_turns}")
                messages.append(assistant_message(parsed))
                if not parsed.calls and not parsed.errors:
                    tr.finish = "answered"
                    break
                if len(mask) >= self.response_length:
                    tr.finish = "length"
                    break
                if tr.assistant_turns >= self.max_turns:
                    tr.finish = "max_turns"
                    break
                before = list(messages)
                with simple_timer("tool_calls", metrics):
                    messages += await self._answers(session, parsed.calls, parsed.errors, tr)
                merged, new_mask, lp = await self.ct_merge_context_msg(
                    before, messages, ids, mask, logprobs or None, tools=tools)
                if len(new_mask) >= self.response_length:
                    tr.finish = "length"  # the answers do not fit: the trajectory ends here
                    break
                ids, mask, logprobs = merged.token_ids, new_mask, lp or []
                tr.user_turns += 1
            fin = await asyncio.to_thread(session.finalize)
            score = score_of_result(fin.get("result") or {})
            r = fin.get("reward")
            reward = float(r) if isinstance(r, (int, float)) else None
            tr.reason, tr.reward_valid = score.reason, reward is not None
            tr.speedup_eager, tr.speedup_compile = score.speedup_eager, score.speedup_compile
        except ServiceError as exc:
            log.warning("cuda_agent: task %s: the service failed: %s", tr.task_id, exc)
            tr.finish, tr.reason, tr.reward_valid = "service_error", f"service.{exc.code}", False
            reward = None
        finally:
            if session is not None:
                try:
                    await asyncio.to_thread(session.close)
                except ServiceError as exc:
                    log.warning("cuda_agent: closing %s: %s", session.session_id, exc)

        n = len(mask)
        prompt_ids, response_ids = ids[: len(ids) - n], ids[len(ids) - n :]
        rl = self.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:rl],
            response_mask=mask[:rl],
            response_logprobs=logprobs[:rl] if logprobs else None,
            reward_score=reward if reward is not None else 0.0,
            num_turns=tr.assistant_turns + tr.user_turns + 1,
            metrics=AgentLoopMetrics(**metrics),
            extra_fields=asdict(tr),
        )

    async def _answers(self, session: Session, calls: list[ToolCall], errors: list[str],
                       tr: Trace) -> list[dict[str, Any]]:
        """The tool messages of one turn: an error per malformed call, then each call's answer,
        run in order (the session runs one bash at a time; edits depend on order)."""
        msgs: list[dict[str, Any]] = []
        for err in errors:
            tr.schema_violations += 1
            msgs.append({"role": "tool", "content": f"error: {err}"})
        for call in calls:
            tr.tool_calls += 1
            try:
                ans = await asyncio.to_thread(session.tool, call.name, call.arguments)
                out = str(ans.get("output", ""))
                if not ans.get("ok", False):
                    tr.tool_failures += 1
            except ServiceError as exc:
                if exc.code not in REJECTED:
                    raise  # the session or the service is gone
                tr.schema_violations += 1
                out = f"error: {exc.message}"
            msgs.append({"role": "tool", "tool_call_id": call.call_id, "name": call.name,
                         "content": clip(out, self.tool_limit, self.tool_side)})
        return msgs
