"""`cuda-agent tasks export --format verl-rl|verl-single` (src/cli/cmd_tasks.c,
cuda_agent_rl/export.py): the parquet read back with pyarrow, its prompt and tools equal to a
live session's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fixtures.rl.live import CLI, RELU, env, make_store, service

from cuda_agent_rl.client import ServiceClient


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("rl-export"))


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), "tasks", "export", *args], env=env(), capture_output=True,
                          text=True, timeout=300)


def rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def test_verl_rl_with_its_own_service(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    p = export("--format", "verl-rl", "--store", str(store), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "exported 5 tasks" in p.stdout
    rs = rows(out)
    listed = subprocess.run([str(CLI), "tasks", "list", "--json", "--store", str(store)],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert [r["extra_info"]["task_id"] for r in rs] == [json.loads(x)["id"] for x in listed]
    assert [r["extra_info"]["index"] for r in rs] == list(range(5))
    r = next(r for r in rs if r["extra_info"]["task_id"] == RELU)
    assert r["agent_name"] == "cuda_agent" and r["data_source"] == "cuda-agent/kernelbench"
    assert r["reward_model"] == {"style": "rule", "ground_truth": RELU}
    assert r["extra_info"]["level"] == 1 and len(r["extra_info"]["task_hash"]) == 32
    assert [m["role"] for m in r["prompt"]] == ["system", "user"]
    assert "torch.relu(x)" in r["prompt"][1]["content"]
    # the single source: a live session answers the same prompt and tools
    with service(tmp_path, store) as url:
        s = ServiceClient(url).open_session({"id": RELU})
        s.close()
    assert r["prompt"] == s.messages and s.prompt.startswith(s.messages[0]["content"])
    assert json.loads(r["tools"]) == s.tools


def test_verl_single_and_limit(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    p = export("--format", "verl-single", "--store", str(store), "--out", str(out),
               "--level", "1", "--limit", "2", "-q")
    assert p.returncode == 0, p.stderr
    rs = rows(out)
    assert len(rs) == 2 and all(r["agent_name"] == "single_turn_agent" for r in rs)
    assert all(json.loads(r["tools"]) == [] for r in rs)
    assert "```cuda" in rs[0]["prompt"][1]["content"]


def test_exit_codes(store: Path, tmp_path: Path) -> None:
    assert export("--out", str(tmp_path / "x")).returncode == 2
    assert export("--format", "jsonl", "--out", str(tmp_path / "x")).returncode == 2
    p = export("--format", "verl-rl", "--store", str(store), "--source", "nosuch",
               "--out", str(tmp_path / "x"))
    assert p.returncode == 3 and "no task selected" in p.stderr
    p = export("--format", "verl-rl", "--store", str(store), "--url", "http://127.0.0.1:9",
               "--out", str(tmp_path / "x"))
    assert p.returncode == 4
    h = export("--help")
    assert h.returncode == 0 and "verl-rl" in h.stdout
