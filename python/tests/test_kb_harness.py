"""cuda_agent_bridge.kb_harness (KernelBench's own harness beside ours) against a stand-in
KernelBench checkout (fixtures/fake_kernelbench): its arguments, the candidate tree as bench finds
it, one process per candidate (a crash, a hang with a helper, an exception, a lock-file None),
KernelBench's result shape and reasons, resuming, interrupting, and the stand-ins for packages
KernelBench imports but its eval does not use."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cuda_agent_bridge import kb_harness as kh

PYTHON_DIR = Path(__file__).resolve().parent.parent
FAKE = PYTHON_DIR / "tests" / "fixtures" / "fake_kernelbench"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    return subprocess.run([sys.executable, "-m", "cuda_agent_bridge.kb_harness", *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def candidate(path: Path, what: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"import torch\n# FAKE: {what}\nclass ModelNew:\n    pass\n")
    return path


def records(out: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(out.read_text())
    return {k: v[0] for k, v in data.items() if k != kh.META_KEY}


def missing(name: str) -> bool:
    return importlib.util.find_spec(name) is None


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ---- arguments ----------------------------------------------------------------------------


def test_usage_errors(tmp_path: Path) -> None:
    cands = tmp_path / "c"
    cands.mkdir()
    out = str(tmp_path / "o.json")
    assert kh.main([]) == kh.EXIT_USAGE
    assert kh.main(["run", "--candidates", str(cands), "--out", out]) == kh.EXIT_USAGE
    assert kh.main(["run", "--kernelbench", str(tmp_path), "--candidates", str(cands),
                    "--out", out]) == kh.EXIT_USAGE  # no KernelBench/ folder
    assert kh.main(["run", "--kernelbench", str(FAKE), "--candidates", str(tmp_path / "none"),
                    "--out", out]) == kh.EXIT_USAGE
    assert kh.main(["run", "--kernelbench", str(FAKE), "--candidates", str(cands),
                    "--tasks", str(tmp_path / "none"), "--out", out]) == kh.EXIT_USAGE
    for bad in (["--timeout", "0"], ["--timeout", "x"], ["--num-perf-trials", "-1"]):
        assert kh.main(["run", "--kernelbench", str(FAKE), "--candidates", str(cands),
                        "--out", out, *bad]) == kh.EXIT_USAGE
    assert not Path(out).exists()
    half = tmp_path / "half"
    (half / "KernelBench").mkdir(parents=True)
    with pytest.raises(kh.UsageError, match="neither src/kernelbench/eval.py nor src/eval.py"):
        kh.layout_of(half)


def test_layouts(tmp_path: Path) -> None:
    lay = kh.layout_of(FAKE)
    assert lay.module == "kernelbench.eval" and lay.path_entry == FAKE / "src"
    old = tmp_path / "old"
    (old / "KernelBench").mkdir(parents=True)
    (old / "src").mkdir()
    (old / "src" / "eval.py").write_text("")
    lay = kh.layout_of(old)
    assert lay.module == "src.eval" and lay.path_entry == old.resolve()


def test_keys_and_candidates(tmp_path: Path) -> None:
    assert kh.key_parts("level1/19_ReLU") == (1, 19)
    assert kh.key_parts("kernelbench/level2/23_Conv3d") == (2, 23)
    assert kh.key_parts("level3/7") == (3, 7)
    for bad in ("19_ReLU", "levelx/19_ReLU", "level1/ReLU", "level1/19ReLU", "level/1_A"):
        assert kh.key_parts(bad) is None, bad
    c = tmp_path / "c"
    candidate(c / "level1" / "1_Add.py", "correct")
    (c / "level1" / "2_Mul").mkdir(parents=True)
    (c / "level1" / "2_Mul" / "model_new.py").write_text("class ModelNew: pass\n")
    (c / "level_1_problem_3_sample_2_kernel.py").write_text("class ModelNew: pass\n")
    assert kh.candidate_file(c, "level1/1_Add", 0) == c / "level1" / "1_Add.py"
    assert kh.candidate_file(c, "level1/2_Mul", 0) == c / "level1" / "2_Mul" / "model_new.py"
    assert kh.candidate_file(c, "level1/3_Sub", 2) == c / "level_1_problem_3_sample_2_kernel.py"
    assert kh.candidate_file(c, "level1/3_Sub", 0) is None
    assert kh.candidate_file(c, "level1/4_Div", 0) is None
    # the task tree as bench walks it: hidden entries and symbolic links skipped
    t = tmp_path / "t"
    for k in ("level1/1_Add", "level1/9_Exp", ".hidden/level1/2_Mul", "level2/1_Fused"):
        (t / k).mkdir(parents=True)
        (t / k / "model.py").write_text("")
    (t / "level1" / "5_Neg").symlink_to(t / "level1" / "1_Add")
    assert kh.task_keys(t) == ["level1/1_Add", "level1/9_Exp", "level2/1_Fused"]
    its = kh.items(kh.layout_of(FAKE), c, None, 0)
    assert [(i.key, i.level, i.problem) for i in its] == [("level1/1_Add", 1, 1),
                                                           ("level1/2_Mul", 1, 2)]


def test_reasons() -> None:
    assert kh.reason_of({"correctness": True, "metadata": {}}) == ""
    assert kh.reason_of({"correctness": True, "metadata": {"excessive_speedup": True}}) \
        == "excessive speed-up flagged"
    assert kh.reason_of({"compiled": True, "correctness": False, "metadata": {
        "correctness_issue": "Output mismatch", "correctness_trials": "(1 / 5)"}}) \
        == "Output mismatch: (1 / 5)"
    assert kh.reason_of({"compiled": False, "correctness": False, "metadata": {
        "compilation_error_name": "RuntimeError", "compilation_error": "Error\n building"}}) \
        == "RuntimeError: Error building"
    assert kh.reason_of({"compiled": False, "correctness": False, "metadata": {}}) \
        == "not compiled"
    assert len(kh.reason_of({"correctness": False, "metadata": {"other_error": "x" * 999}})) \
        == kh.REASON_MAX


# ---- stand-ins --------------------------------------------------------------------------------


def test_stand_ins() -> None:
    mod = kh._stub_module("somepkg")
    thing = mod.Client
    with pytest.raises(kh.HarnessError, match="somepkg.Client is a stand-in"):
        thing()
    with pytest.raises(kh.HarnessError):
        mod.deep.er.call(1)

    class Sub(mod.Base):
        pass

    assert Sub() is not None
    assert kh._stub_module("dotenv").load_dotenv() is None
    shim = kh._pydantic_shim()

    class R(shim.BaseModel):
        compiled: bool = False
        metadata: dict[str, Any] = {}
        runtime: float = -1.0

    a, b = R(compiled=True), R()
    a.metadata["x"] = 1
    assert b.metadata == {} and a.model_dump() == {"compiled": True, "metadata": {"x": 1},
                                                   "runtime": -1.0}
    assert b.dict() == {"compiled": False, "metadata": {}, "runtime": -1.0}


def test_check_imports_with_stand_ins() -> None:
    r = cli("check", "--kernelbench", str(FAKE))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["module"] == "kernelbench.eval"
    assert set(info["stubbed"]) == {m for m in ("dotenv", "litellm", "openai") if missing(m)}
    assert "backend" not in info["parameters"] and "build_dir" in info["parameters"]


def test_check_without_pydantic() -> None:
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'pydantic':\n"
            "            raise ModuleNotFoundError(\"No module named 'pydantic'\", name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from cuda_agent_bridge import kb_harness\n"
            f"sys.exit(kb_harness.main(['check', '--kernelbench', {str(FAKE)!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(PYTHON_DIR)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pydantic (a minimal BaseModel)" in json.loads(r.stdout)["stubbed"]


def test_check_needs_what_eval_uses(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    (kb / "src" / "kernelbench").mkdir(parents=True)
    (kb / "src" / "kernelbench" / "__init__.py").write_text("")
    (kb / "src" / "kernelbench" / "eval.py").write_text(
        "import cuda_agent_no_such_package_xyz\n\ndef eval_kernel_against_ref(): pass\n")
    r = cli("check", "--kernelbench", str(kb))
    assert r.returncode == kh.EXIT_ENV
    assert "pip install cuda_agent_no_such_package_xyz" in r.stderr
    # run stops at the first candidate, keeping what it wrote
    candidate(tmp_path / "c" / "level1" / "1_Add.py", "correct")
    (kb / "KernelBench" / "level1" / "1_Add.py").write_text("class Model: pass\n")
    r = cli("run", "--kernelbench", str(kb), "--candidates", str(tmp_path / "c"), "--out",
            str(tmp_path / "o.json"))
    assert r.returncode == kh.EXIT_ENV and "cuda_agent_no_such_package_xyz" in r.stderr
    rec = records(tmp_path / "o.json")["L1P1"]
    assert rec["correctness"] is None and rec["harness"]["status"] == "harness_error"


# ---- a tree, one process per candidate ---------------------------------------------------------


def test_run_isolates_each_candidate(tmp_path: Path) -> None:
    c = tmp_path / "c"
    behaviours = {"1_Add": "correct", "2_Mul": "wrong", "3_Sub": "crash", "4_Div": "hang",
                  "5_Neg": "none", "6_Abs": "raise-cuda", "7_ReluScaleBias": "nocompile",
                  "8_ReluScaleBias": "fast"}
    for name, what in behaviours.items():
        candidate(c / "level1" / f"{name}.py", what)
    candidate(c / "level2" / "1_Fused.py", "correct")
    candidate(c / "level1" / "42_NotInCheckout.py", "correct")
    tasks = tmp_path / "t"
    for key in [f"level1/{n}" for n in behaviours] + ["level2/1_Fused", "level1/42_NotInCheckout",
                                                      "level1/9_Exp"]:
        (tasks / key).mkdir(parents=True)
        (tasks / key / "model.py").write_text("")
    out = tmp_path / "o" / "kb.json"
    t0 = time.monotonic()
    r = cli("run", "--kernelbench", str(FAKE), "--candidates", str(c), "--tasks", str(tasks),
            "--out", str(out), "--timeout", "5", "--num-correct-trials", "3",
            "--num-perf-trials", "7", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 240
    lines = r.stdout.splitlines()
    assert len(lines) == 11 and "fake eval" not in r.stdout  # progress only; output to the log
    assert lines[-1].startswith("KernelBench's harness: 10 candidates, 10 evaluated now")
    recs = records(out)
    assert set(recs) == {f"L1P{i}" for i in range(1, 9)} | {"L2P1", "L1P42"}
    ok = recs["L1P1"]
    assert ok["compiled"] is True and ok["correctness"] is True and ok["reason"] == ""
    assert ok["runtime"] == 1.25 and ok["ref_runtime"] == 2.5 and ok["sample_id"] == 0
    assert ok["task"] == "level1/1_Add" and ok["problem"] == "level1/1_Add.py"
    assert ok["metadata"]["num_correct_trials"] == "3" and ok["metadata"]["num_perf_trials"] == "7"
    assert ok["metadata"]["measure_performance"] == "True" and ok["metadata"]["device"] == "cpu"
    assert Path(ok["metadata"]["build_dir"]).parent == out.parent / "kb.build"
    assert "backend" not in ok["harness"]["kwargs"]  # only what this eval's signature takes
    assert ok["harness"]["status"] == "ok"
    assert recs["L1P2"]["correctness"] is False and recs["L1P2"]["reason"] \
        == "Output mismatch: (0 / 5)"
    crash = recs["L1P3"]
    assert (crash["compiled"], crash["correctness"]) == (False, False)
    assert crash["harness"]["status"] == "crashed" and "SIGABRT" in crash["reason"]
    hang = recs["L1P4"]
    assert hang["harness"]["status"] == "timeout" and hang["reason"] == \
        "Evaluation timed out after 5 s" and hang["correctness"] is False
    helper = int(next((out.parent / "kb.build").glob("L1P4_*/helper.pid")).read_text())
    assert not alive(helper)  # the hung evaluation's helper died with it
    none = recs["L1P5"]
    assert none["correctness"] is None and none["harness"]["status"] == "retry_failed"
    cuda = recs["L1P6"]
    assert (cuda["compiled"], cuda["correctness"]) == (False, False)
    assert cuda["metadata"]["cuda_error_name"] == "RuntimeError"
    assert recs["L1P7"]["reason"] == "RuntimeError: Error building extension 'fake'"
    assert recs["L1P8"]["correctness"] is True
    assert recs["L1P8"]["reason"] == "excessive speed-up flagged"
    assert recs["L2P1"]["correctness"] is True
    assert recs["L1P42"]["harness"]["status"] == "no_problem"
    assert recs["L1P42"]["correctness"] is None
    meta = json.loads(out.read_text())[kh.META_KEY]
    assert meta["schema"] == kh.SCHEMA and meta["settings"]["timeout_s"] == 5
    log = (out.parent / "kb.log").read_text()
    assert "fake eval: correct" in log and "==== " in log

    # again: everything kept but what changed and what had no verdict
    (c / "level1" / "2_Mul.py").write_text((c / "level1" / "2_Mul.py").read_text() + "# x\n")
    r = cli("run", "--kernelbench", str(FAKE), "--candidates", str(c), "--tasks", str(tasks),
            "--out", str(out), "--timeout", "5", "--num-correct-trials", "3",
            "--num-perf-trials", "7", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "10 candidates, 2 evaluated now" in r.stdout
    assert sum(line.endswith("(kept)") for line in r.stdout.splitlines()) == 8


def test_runs_layout_and_settings(tmp_path: Path) -> None:
    # the runs layout of KernelBench's scripts, sample 3
    runs = tmp_path / "runs"
    candidate(runs / "level_1_problem_1_sample_3_kernel.py", "wrong")
    candidate(runs / "level_1_problem_1_sample_0_kernel.py", "correct")
    out = tmp_path / "kb.json"
    r = cli("run", "--kernelbench", str(FAKE), "--candidates", str(runs), "--out", str(out),
            "--sample", "3", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())["L1P1"][0]
    assert rec["sample_id"] == 3 and rec["correctness"] is False
    # other settings: nothing kept
    r = cli("run", "--kernelbench", str(FAKE), "--candidates", str(runs), "--out", str(out),
            "--sample", "3", "--device", "cpu", "--num-perf-trials", "9")
    assert r.returncode == 0 and "1 candidates, 1 evaluated now" in r.stdout


def test_interrupt_keeps_what_was_done(tmp_path: Path) -> None:
    c = tmp_path / "c"
    candidate(c / "level1" / "1_Add.py", "correct")
    candidate(c / "level1" / "2_Mul.py", "hang")
    out = tmp_path / "kb.json"
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    p = subprocess.Popen([sys.executable, "-m", "cuda_agent_bridge.kb_harness", "run",
                          "--kernelbench", str(FAKE), "--candidates", str(c), "--out", str(out),
                          "--timeout", "300", "--device", "cpu"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    pid_files: list[Path] = []
    deadline = time.monotonic() + 120
    while not pid_files and time.monotonic() < deadline:
        time.sleep(0.2)
        pid_files = list((tmp_path / "kb.build").glob("L1P2_*/helper.pid"))
    assert pid_files, "the hanging candidate never started"
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=30)
    assert p.returncode == kh.EXIT_INTERRUPTED, stderr
    assert "interrupted" in stderr
    helper = int(pid_files[0].read_text())
    time.sleep(0.2)
    assert not alive(helper)
    recs = records(out)
    assert set(recs) == {"L1P1"} and recs["L1P1"]["correctness"] is True
