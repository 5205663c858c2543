"""The bandit learner (cuda_agent_rl/bandit.py): it converges on scripted rewards with noise and
service failures, and a short run goes through a live `cuda-agent serve` on CPU, whose protocol
(CUDA_AGENT_PROTOCOL_CPU=1) rewards the honest candidate and refuses the two cheats."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fixtures.rl.live import CLI, REPO, make_store, need, service

from cuda_agent_rl import bandit

CPU_DATA = REPO / "tests/data/protocol_cpu"


def scripted(fail_every: int = 7) -> Any:
    """fast 3 (sometimes 2), slow 1, cheats -1; every `fail_every`-th call an env failure."""
    calls = [0]
    noise = random.Random(3)

    def evaluate(task: dict[str, Any], cand: dict[str, Any], rules: str | None) -> dict[str, Any]:
        calls[0] += 1
        if calls[0] % fail_every == 0:
            return {"reward": None, "reason": {"code": "env.deadline"}}
        kind = cand["files"]["kind"]
        reward = {"fast": 3 if noise.random() < 0.8 else 2, "slow": 1, "cheat": -1}[kind]
        return {"reward": reward, "reason": {"code": "ok" if reward > 0 else "hack.x"}}

    return evaluate


def arms_task(name: str) -> bandit.Task:
    arms = [{"name": k, "kind": k.split("_")[0], "candidate": {"files": {"kind": k.split("_")[0]}}}
            for k in ("cheat_a", "slow", "cheat_b", "fast", "cheat_c")]
    return bandit.Task(name, {"files": {}}, arms, [0.0] * len(arms))


def test_converges_to_the_fast_arm_never_a_cheat(tmp_path: Path) -> None:
    tasks = [arms_task("t1"), arms_task("t2")]
    lines: list[str] = []
    curve = bandit.run(tasks, scripted(), steps=30, batch=4, lr=0.5, seed=1,
                       out=tmp_path / "c.jsonl", log=lines.append)
    assert bandit.converged(curve[-1]), curve[-1]
    assert curve[0][0]["p_fast"] == pytest.approx(0.2)  # uniform over 5 arms at the start
    assert max(r["p_cheat"] for step in curve[1:] for r in step) < 0.8
    recs = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(recs) == 30 and len(lines) == 30
    skipped = [s for r in recs for t in r["tasks"] for s in t["samples"] if s["reward"] is None]
    assert skipped and all(s["code"] == "env.deadline" for s in skipped)  # left out, not scored
    means = bandit.arm_means(curve)
    assert means["t1"]["slow"][0] == 1.0 and means["t1"]["fast"][0] > 2.0
    picture = bandit.svg(curve)
    assert picture.startswith("<svg") and picture.count("<polyline") == 4


def test_shaped_signal_tells_apart_two_arms_of_the_same_reward() -> None:
    """Two correct arms both rewarded 1 (neither beats torch.compile by 5 %): the discrete reward
    gives the learner nothing to go by; the shaped signal (reward + reward_continuous) does."""
    assert bandit.learning_signal({"reward": 1, "reward_continuous": 0.9}, True) == 1.9
    assert bandit.learning_signal({"reward": 1, "reward_continuous": 0.9}, False) == 1.0
    assert bandit.learning_signal({"reward": -1, "reward_continuous": 0.0}, True) == -1.0
    assert bandit.learning_signal({"reward": None, "reward_continuous": 1.0}, True) is None
    assert bandit.learning_signal({"reward": 1, "reward_continuous": None}, True) == 1.0
    noise = random.Random(5)

    def evaluate(task: dict[str, Any], cand: dict[str, Any], rules: str | None) -> dict[str, Any]:
        kind = cand["files"]["kind"]
        if kind == "cheat":
            return {"reward": -1, "reward_continuous": None}
        speed = {"fast": 0.95, "slow": 0.75}[kind] * (1 + noise.gauss(0, 0.03))
        return {"reward": 1, "reward_continuous": speed}

    shaped = bandit.run([arms_task("t")], evaluate, steps=30, batch=4, lr=1.0, seed=2,
                        log=lambda _: None)
    assert bandit.converged(shaped[-1]), shaped[-1]
    plain = bandit.run([arms_task("t")], evaluate, steps=30, batch=4, lr=1.0, seed=2,
                       log=lambda _: None, shaped=False)
    assert plain[-1][0]["p_cheat"] <= 0.05 and not bandit.converged(plain[-1])


def test_usage_errors(tmp_path: Path) -> None:
    assert bandit.main(["--url", "http://127.0.0.1:9", "--arms", str(tmp_path / "none.json")]) == 2
    spec = tmp_path / "arms.json"
    spec.write_text(json.dumps({"tasks": [{"name": "t", "task_dir": str(CPU_DATA / "task"),
                                           "arms": [{"name": "h", "kind": "slow",
                                                     "path": str(CPU_DATA / "honest.py"),
                                                     "format": "kernelbench"}]}]}))
    assert bandit.main(["--url", "http://x", "--arms", str(spec)]) == 2  # no fast arm
    assert bandit.main(["--url", "http://x", "--arms", str(spec), "--batch", "1"]) == 2


def test_live_cpu_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two steps of 3 evaluations through the service: every sample scored (the honest one ok,
    the cheats -1), and the policy moved toward the honest arm."""
    monkeypatch.setenv("CUDA_AGENT_PROTOCOL_CPU", "1")
    spec = tmp_path / "arms.json"
    arms = [("honest", "fast", "honest.py"), ("skip_after", "cheat", "skip_after.py"),
            ("operator", "cheat", "operator.py")]
    spec.write_text(json.dumps({"tasks": [{
        "name": "relu_scale_bias", "task_dir": str(CPU_DATA / "task"),
        "arms": [{"name": n, "kind": k, "path": str(CPU_DATA / f), "format": "kernelbench",
                  "rules": "cuda-agent"} for n, k, f in arms]}]}))
    with service(tmp_path, make_store(tmp_path)) as url:
        code = bandit.main(["--url", url, "--arms", str(spec), "--steps", "2", "--batch", "3",
                            "--lr", "1.0", "--out", str(tmp_path / "c.jsonl"),
                            "--svg", str(tmp_path / "c.svg")])
    assert code in (0, 1)
    recs = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    samples = [s for r in recs for t in r["tasks"] for s in t["samples"]]
    assert len(samples) == 6 and all(s["reward"] is not None for s in samples), samples
    for s in samples:
        assert (s["reward"] >= 1) == (s["arm"] == "honest"), s
    assert recs[-1]["tasks"][0]["p_fast"] > 1 / 3
    assert (tmp_path / "c.svg").read_text().startswith("<svg")


def test_the_recipe_arms_load() -> None:
    """recipes/cuda-agent/bandit_arms.json (the H200 run's arms) names files that exist."""
    tasks = bandit.load_arms(REPO / "recipes/cuda-agent/bandit_arms.json")
    assert tasks and all(any(a["kind"] == "fast" for a in t.arms) for t in tasks)
    assert all(a["candidate"]["files"] for t in tasks for a in t.arms)
    assert all("model.py" in t.task["files"] for t in tasks)


def test_learning_runs_script(tmp_path: Path) -> None:
    """recipes/cuda-agent/learning_runs.sh end to end on this machine (one bandit step over the
    recipe's three tasks, one GRPO step): the service starts, both runs write their files. On a
    CPU host evaluations end at env.no_gpu (null rewards) or a build refusal, so the bandit does
    not converge: exit 1."""
    need("trl")
    out = tmp_path / "out"
    env = dict(os.environ, CA_BUILD=str(CLI.parent), PYTHON=sys.executable, STEPS="1",
               BATCH="2", GRPO_STEPS="1", PORT=str(_free_port()),
               CUDA_AGENT_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(["bash", str(REPO / "recipes/cuda-agent/learning_runs.sh"), str(out)],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = [json.loads(x) for x in (out / "bandit.jsonl").read_text().splitlines()]
    assert len(steps) == 1
    assert [t["task"] for t in steps[0]["tasks"]] == ["scale_add", "gemm", "rowsum"]
    assert all(len(t["samples"]) == 2 for t in steps[0]["tasks"])
    assert (out / "bandit.svg").read_text().startswith("<svg")
    assert (out / "grpo" / "metrics.jsonl").exists() and (out / "grpo" / "rollouts.jsonl").exists()
    assert "GRPO smoke exit 0" in proc.stdout
    assert "cuda_agent_" in (out / "metrics.txt").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
