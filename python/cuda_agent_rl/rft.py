"""Rejection fine-tuning data: `cuda-agent rft TRAJECTORIES... --out sft.parquet` (docs/rl.md).

Reads the trajectories `cuda-agent solve` writes (docs/agent.md, "The trajectory": JSONL objects
start, turn, tool, final, summary) and keeps those that:

- ended with a reward of at least --min-reward (default 1: a correct kernel; the reward is
  the evaluation's, from the summary);
- made no tool-schema violation (a malformed call, an unknown tool);
- have no redundant loop, either of:
  - a **repeat**: a call with the same tool and the same arguments as the call of that tool
    before it, with no call between them that can change the workspace (write_file, edit,
    multi_edit, bash): its answer cannot have changed (compiling again after an edit is no
    repeat);
  - an **undo**: an edit whose (old, new) strings are an earlier edit's (new, old) on the same
    file, or a write_file that puts back the content an earlier write_file of that file
    replaced.

Writes verl's multi-turn SFT format (parquet through pyarrow, columns `messages`, `tools`,
`extra_info`; verl reads it with data.multiturn.enable=true, messages_key=messages,
tools_key=tools) and the same rows as JSONL beside it (`--out X.parquet` -> `X.jsonl`), and
prints what it dropped and why. Exit status: 0 written (possibly nothing kept), 2 usage, 3 an
input that is not a trajectory, or a directory holding none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

Json = dict[str, Any]
CHANGES_WORKSPACE = {"write_file", "edit", "multi_edit", "bash"}
MAX_FILE = 256 << 20  # bytes of one trajectory file


class NotATrajectory(ValueError):
    pass


def read(path: Path) -> list[Json]:
    if path.stat().st_size > MAX_FILE:
        raise NotATrajectory(f"{path}: over {MAX_FILE >> 20} MiB")
    objs = []
    for k, line in enumerate(path.read_text(errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            o = json.loads(line)
        except ValueError as exc:
            raise NotATrajectory(f"{path}: line {k + 1} is not JSON ({exc})") from None
        if not isinstance(o, dict) or "type" not in o:
            raise NotATrajectory(f"{path}: line {k + 1} has no type")
        objs.append(o)
    if not objs or objs[0]["type"] != "start":
        raise NotATrajectory(f"{path}: does not begin with a start object")
    return objs


def _args(call: Json) -> Json:
    a = call.get("arguments")
    if isinstance(a, str):
        try:
            a = json.loads(a)
        except ValueError:
            return {}
    return a if isinstance(a, dict) else {}


def redundancy(tools: list[Json]) -> str | None:
    """Why the tool calls hold a redundant loop (module doc), or None."""
    last: dict[str, str] = {}  # tool -> its previous call's arguments, since the last change
    edits: list[tuple[str, str, str]] = []  # (path, old, new)
    writes: dict[str, list[str]] = {}  # path -> contents written, in order
    for t in tools:
        name, raw = str(t.get("name")), json.dumps(t.get("arguments"), sort_keys=True)
        if name in CHANGES_WORKSPACE:
            last = {}
        elif last.get(name) == raw:
            return f"repeat: {name} called again with the same arguments, nothing changed between"
        else:
            last[name] = raw
        a = _args(t)
        path = str(a.get("path", ""))
        pairs: list[tuple[str, str]] = []
        if name == "edit":
            pairs = [(str(a.get("old_string", "")), str(a.get("new_string", "")))]
        elif name == "multi_edit" and isinstance(a.get("edits"), list):
            pairs = [(str(e.get("old_string", "")), str(e.get("new_string", "")))
                     for e in a["edits"] if isinstance(e, dict)]
        for old, new in pairs:
            if (path, new, old) in edits:
                return f"undo: an edit of {path} reverts an earlier one"
            edits.append((path, old, new))
        if name == "write_file":
            content = str(a.get("content", ""))
            seen = writes.setdefault(path, [])
            if len(seen) >= 2 and content in seen[:-1] and content != seen[-1]:
                return f"undo: write_file puts back an earlier content of {path}"
            seen.append(content)
    return None


def messages(objs: list[Json]) -> list[Json]:
    """The conversation: the start's messages, then each turn's assistant message and its
    tool answers, in order."""
    start = objs[0]
    out = [dict(m) for m in start.get("messages", [])]
    tools_by_turn: dict[int, list[Json]] = {}
    for o in objs:
        if o["type"] == "tool":
            tools_by_turn.setdefault(int(o.get("turn", -1)), []).append(o)
    for o in objs:
        if o["type"] != "turn" or "message" not in o:
            continue
        m = dict(o["message"])
        for tc in m.get("tool_calls") or []:  # arguments as text, as the chat template wants
            f = tc.get("function", {})
            if not isinstance(f.get("arguments"), str):
                f["arguments"] = json.dumps(f.get("arguments"))
        out.append(m)
        for t in tools_by_turn.get(int(o.get("turn", -1)), []):
            out.append({"role": "tool", "tool_call_id": t.get("id"), "name": t.get("name"),
                        "content": str(t.get("output", ""))})
    return out


def judge(objs: list[Json], min_reward: float) -> tuple[Json | None, str]:
    """(an SFT row, "") for a trajectory kept, else (None, why it is dropped)."""
    summary = next((o for o in objs if o["type"] == "summary"), None)
    if summary is None:
        return None, "unfinished: no summary"
    reward = summary.get("reward")
    if reward is None:
        return None, "no reward (the evaluation could not judge)"
    if reward < min_reward:
        return None, f"reward {reward} below {min_reward:g}"
    if summary.get("schema_violations", 0):
        return None, "tool-schema violations"
    tools = [o for o in objs if o["type"] == "tool"]
    if any(t.get("violation") for t in tools):
        return None, "tool-schema violations"
    why = redundancy(tools)
    if why:
        return None, why.split(":")[0] + ": " + why.split(": ", 1)[1]
    start = objs[0]
    return {"messages": messages(objs), "tools": start.get("tools", []),
            "extra_info": {"task": start.get("task"), "reward": reward,
                           "turns": summary.get("turns"),
                           "tool_calls": summary.get("tool_calls")}}, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuda-agent rft", description=__doc__.split("\n\n")[0])
    ap.add_argument("trajectories", nargs="+", type=Path,
                    help="trajectory.jsonl files, or directories searched for them")
    ap.add_argument("--out", type=Path, required=True, help="sft.parquet (and sft.jsonl beside)")
    ap.add_argument("--min-reward", type=float, default=1.0)
    a = ap.parse_args(argv)
    files: list[Path] = []
    for p in a.trajectories:
        if p.is_dir():
            found = sorted(p.rglob("trajectory.jsonl"))
            if not found:
                print(f"cuda-agent rft: no trajectory.jsonl under {p}", file=sys.stderr)
                return 3
            files += found
        elif p.is_file():
            files.append(p)
        else:
            print(f"cuda-agent rft: {p} does not exist", file=sys.stderr)
            return 2
    if not a.out.name.endswith(".parquet"):
        print("cuda-agent rft: --out names a .parquet file", file=sys.stderr)
        return 2
    rows, dropped = [], Counter[str]()
    for f in files:
        try:
            row, why = judge(read(f), a.min_reward)
        except NotATrajectory as exc:
            print(f"cuda-agent rft: {exc}", file=sys.stderr)
            return 3
        if row:
            rows.append(row)
        else:
            dropped[why.split(":")[0]] += 1
    a.out.parent.mkdir(parents=True, exist_ok=True)
    twin = a.out.with_suffix(".jsonl")
    twin.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        # nested values as JSON text where their shape varies between rows (tool schemas)
        table = pa.Table.from_pylist([{"messages": r["messages"],
                                       "tools": json.dumps(r["tools"]),
                                       "extra_info": r["extra_info"]} for r in rows])
        pq.write_table(table, a.out)
        where = f"{a.out} and {twin}"
    except ImportError:
        where = f"{twin} (no pyarrow: no parquet)"
    print(f"rft: kept {len(rows)} of {len(files)} trajectories -> {where}")
    for why, n in dropped.most_common():
        print(f"  dropped {n}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
