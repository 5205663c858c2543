"""cuda-agent rft (python/cuda_agent_rl/rft.py) on trajectory fixtures made here, in the format
src/agent/loop.c writes (docs/agent.md, "The trajectory")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cuda_agent_rl import rft

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("write_file", "edit", "compile", "read_file")]


def traj(calls: list[tuple[str, dict[str, Any]]], reward: Any = 2,
         violations: int = 0) -> list[dict[str, Any]]:
    """A trajectory: one turn per call, then final and summary."""
    objs: list[dict[str, Any]] = [{
        "type": "start", "task": "rowsum", "tools": TOOLS,
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}]
    for k, (name, args) in enumerate(calls):
        objs.append({"type": "turn", "turn": k, "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": f"c{k}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}})
        objs.append({"type": "tool", "turn": k, "id": f"c{k}", "name": name,
                     "arguments": args, "output": f"out{k}", "ok": True,
                     "violation": False, "repeated": False})
    objs.append({"type": "turn", "turn": len(calls),
                 "message": {"role": "assistant", "content": "done"}})
    objs.append({"type": "final", "result": {"reward": reward}})
    objs.append({"type": "summary", "reward": reward, "turns": len(calls) + 1,
                 "tool_calls": len(calls), "schema_violations": violations})
    return objs


W = ("write_file", {"path": "kernels/k.cu", "content": "A"})
C = ("compile", {})


def test_kept_and_converted() -> None:
    row, why = rft.judge(traj([W, C, ("edit", {"path": "kernels/k.cu", "old_string": "A",
                                                "new_string": "B"}), C]), 1)
    assert row and not why
    m = row["messages"]
    assert [x["role"] for x in m] == ["system", "user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert m[3]["tool_call_id"] == "c0" and m[3]["content"] == "out0"
    assert isinstance(m[2]["tool_calls"][0]["function"]["arguments"], str)
    assert row["tools"] == TOOLS and row["extra_info"]["reward"] == 2


@pytest.mark.parametrize("objs,why", [
    (traj([W, C], reward=-1), "reward -1"),
    (traj([W, C], reward=None), "no reward"),
    (traj([W, C], violations=1), "tool-schema violations"),
    (traj([W, C, C]), "repeat"),
    (traj([W, ("read_file", {"path": "a"}), ("read_file", {"path": "a"})]), "repeat"),
    (traj([("edit", {"path": "k", "old_string": "A", "new_string": "B"}), C,
           ("edit", {"path": "k", "old_string": "B", "new_string": "A"})]), "undo"),
    (traj([W, C, ("write_file", {"path": "kernels/k.cu", "content": "B"}), C, W]), "undo"),
    (traj([W])[:-1], "unfinished"),
])
def test_dropped(objs: list[dict[str, Any]], why: str) -> None:
    row, got = rft.judge(objs, 1)
    assert row is None and got.startswith(why), got


def test_not_repeats() -> None:
    """Compiling again after an edit, or reading another file, is progress, not a loop."""
    calls = [W, C, ("write_file", {"path": "kernels/k.cu", "content": "B"}), C,
             ("read_file", {"path": "a"}), ("read_file", {"path": "b"})]
    assert rft.judge(traj(calls), 1)[0] is not None


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, objs in (("good", traj([W, C])), ("bad", traj([W, C, C])),
                       ("low", traj([W, C], reward=-1))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trajectory.jsonl").write_text(
            "".join(json.dumps(o) + "\n" for o in objs))
    out = tmp_path / "out" / "sft.parquet"
    assert rft.main([str(tmp_path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kept 1 of 3" in text and "dropped 1: repeat" in text and "dropped 1: reward" in text
    rows = [json.loads(x) for x in out.with_suffix(".jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["extra_info"]["task"] == "rowsum"
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out).to_pylist()
    assert len(table) == 1 and table[0]["messages"][0]["role"] == "system"
    (tmp_path / "junk.jsonl").write_text("not json\n")
    assert rft.main([str(tmp_path / "junk.jsonl"), "--out", str(out)]) == 3
    assert rft.main([str(tmp_path / "none"), "--out", str(out)]) == 2
    (tmp_path / "empty").mkdir()
    assert rft.main([str(tmp_path / "empty"), "--out", str(out)]) == 3
    assert rft.main([str(tmp_path), "--out", str(tmp_path / "x.txt")]) == 2
