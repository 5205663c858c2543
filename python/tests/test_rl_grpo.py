"""The GRPO smoke run (cuda_agent_rl/grpo_smoke.py) on CPU against a live `cuda-agent serve`:
TRL's GRPOTrainer with the service's environment, a tiny random model and the local byte-level
tokenizer, three steps. On a CPU service every finalize is `env.no_gpu` (reward null, left out),
so this proves the wiring and the records, not rewards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.rl.live import make_store, need, service

need("trl")
from cuda_agent_rl import grpo_smoke  # noqa: E402


def test_three_steps_through_the_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "smoke"
    with service(tmp_path, make_store(tmp_path)) as url:
        code = grpo_smoke.main(["--url", url, "--steps", "3", "--out", str(out),
                                "--completion-tokens", "16"])
    assert code == 0
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len([s for s in steps if "loss" in s]) == 3
    recs = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(recs) == 6  # 2 rollouts (one prompt, 2 generations) a step
    assert all(r["session"] and r["reward"] is None and r["code"] == "env.no_gpu" for r in recs)


def test_usage() -> None:
    assert grpo_smoke.main(["--url", "http://127.0.0.1:9", "--steps", "0"]) == 2
