"""Tool calls in a model's chat format: Hermes (Qwen2.5, Qwen3 and NousResearch templates).

A call is `<tool_call>{"name": NAME, "arguments": {...}}</tool_call>` in the assistant's text;
`arguments` may also be JSON text holding an object. The assistant's content is the text with
the calls removed. A block that is not such an object (bad JSON, no name, arguments not an
object), and a `<tool_call>` left open, is a malformed call: it is reported, not dropped, so
that the model can be told (and an RL run can count it as a schema violation).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    call_id: str


@dataclass(frozen=True)
class Parsed:
    content: str
    calls: list[ToolCall]
    errors: list[str]  # one line per malformed call


def parse_hermes(text: str, id_prefix: str = "call") -> Parsed:
    calls: list[ToolCall] = []
    errors: list[str] = []
    for block in _BLOCK.findall(text):
        call, err = _one(block.strip(), f"{id_prefix}_{len(calls)}")
        if call:
            calls.append(call)
        else:
            errors.append(err)
    rest = _BLOCK.sub("", text)
    if OPEN in rest:
        errors.append("a <tool_call> without </tool_call>")
        rest = rest[: rest.index(OPEN)]
    return Parsed(rest.strip(), calls, errors)


def _one(block: str, call_id: str) -> tuple[ToolCall | None, str]:
    try:
        obj = json.loads(block)
    except ValueError as exc:
        return None, f"the tool call is not JSON ({exc})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None, 'a tool call must be an object {"name": ..., "arguments": {...}}'
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            return None, f"{obj['name']}: the arguments are not JSON ({exc})"
    if not isinstance(args, dict):
        return None, f"{obj['name']}: the arguments must be a JSON object"
    return ToolCall(obj["name"], args, call_id), ""


def assistant_message(parsed: Parsed) -> dict[str, Any]:
    """The OpenAI-style assistant message of a parsed turn (arguments as objects, as chat
    templates render them)."""
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.calls:
        msg["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in parsed.calls]
    return msg
