"""synth (docs/synth.md) on CPU torch: the crawl finds >= 300 operators, compose + filter give
valid tasks in the configured mix (within 5 points on 500 tasks), decontamination rejects a
renamed copy of a KernelBench task and keeps a new one, degenerate and stochastic tasks are
dropped, and the steps go on after an interruption."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cuda_agent_bridge.synth import catalog, compose, filters, similarity
from cuda_agent_bridge.synth.__main__ import main as synth_main
from cuda_agent_bridge.synth.__main__ import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
KB_MINI = ROOT / "tests/data/kernelbench_mini/KernelBench"


@pytest.fixture(scope="module")
def cat() -> dict[str, Any]:
    return catalog.crawl()


def test_crawl_finds_300_usable_operators(cat: dict[str, Any]) -> None:
    assert cat["usable"] >= 300, cat["counts"]
    ids = [e["id"] for e in cat["entries"]]
    assert len(ids) == len(set(ids))
    by_id = {e["id"]: e for e in cat["entries"]}
    # found, not listed: a module, a functional, a torch op, each with its probe's facts
    conv = by_id["nn.Conv2d"]
    assert conv["call"] == "module" and conv["init"]["in_channels"] == catalog.CHANNELS
    assert 4 in conv["batch_free_ranks"] and not conv["stochastic"]
    assert by_id["F.gelu"]["shapes"]["2"] == list(catalog.PROBE_SHAPES[2])
    assert "float32" in by_id["torch.tanh"]["dtypes"]
    assert by_id["F.dropout"]["stochastic"]  # training-mode dropout by default
    assert by_id["torch.sum"]["call"] == "unary_dim"  # the batch-free way is preferred
    # ops whose output does not depend on the input are found so and not usable
    for op in ("torch.ones_like", "torch.zeros_like", "torch.fill", "torch.full_like"):
        assert by_id[op]["constant"] and not catalog.is_usable(by_id[op]), op
    assert not by_id["torch.tanh"]["constant"] and not by_id["nn.Conv2d"]["constant"]
    # a way of calling that is constant (a Chebyshev polynomial of degree -1 is 0) is passed
    # over for the next one
    cheb = by_id["torch.special.chebyshev_polynomial_t"]
    assert cheb["call"] != "unary_dim" and not cheb["constant"]


def test_compose_and_filter_keep_the_mix(cat: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "catalog.json").write_text(json.dumps(cat))
    assert synth_main(["compose", "--dir", str(tmp_path), "-n", "500", "--seed", "7"]) == 0
    tasks = read_jsonl(tmp_path / "tasks.jsonl")
    assert len(tasks) == 500 and len({t["id"] for t in tasks}) == 500
    assert synth_main(["filter", "--dir", str(tmp_path), "--no-compile", "--jobs", "1",
                       "--kernelbench", str(KB_MINI)]) == 0
    verdicts = read_jsonl(tmp_path / "verdicts.jsonl")
    kept = [t for t, v in zip(tasks, verdicts, strict=True) if v["kept"]]
    assert len(kept) > 300
    mix = Counter(t["kind"] for t in kept)
    blocks = any(any(m in e["id"] for m in compose.BLOCK_MARKERS) for e in compose.usable(cat))
    want = dict(compose.MIX)
    if not blocks:
        want.pop("block")
    total = sum(want.values())
    for kind, p in want.items():
        got = 100 * mix.get(kind, 0) / len(kept)
        assert abs(got - 100 * p / total) <= 5, (kind, got, mix)
    # every kept task is a valid KernelBench-convention program that runs
    for t in kept[:25]:
        out, ns = compose.run_probe(t["code"], batch=catalog.PROBE_SHAPES[t["rank"]][0])
        assert set(ns) >= {"Model", "get_inputs", "get_init_inputs", "batch_size"}
        assert out.is_floating_point()
    assert synth_main(["export", "--dir", str(tmp_path)]) == 0
    rows = read_jsonl(tmp_path / "ops.jsonl")
    assert len(rows) == len(kept)
    assert rows[0]["data_source"] == "cuda-agent-synth" and rows[0]["ops"] == kept[0]["ops"]
    funnel = json.loads((tmp_path / "funnel.json").read_text())
    assert funnel["kept"] == len(kept) and funnel["stages"][-1]["left"] == len(kept)
    # compose's redraws (degenerate chains, draws that do not run) reach the funnel
    redrawn = json.loads((tmp_path / "compose_stats.json").read_text())["redrawn"]
    assert funnel["redrawn_at_compose"] == redrawn and sum(redrawn.values()) > 0, redrawn
    assert set(redrawn) <= {"chain", "runs", "degenerate"}
    assert "compose drew" in (tmp_path / "funnel.html").read_text()


def test_decontamination(tmp_path: Path) -> None:
    kb = similarity.corpus(KB_MINI)
    assert kb
    name = sorted(kb)[0]
    code = (KB_MINI / name).read_text()
    renamed = (code.replace("Model", "Net").replace("forward", "forward")
               .replace("x", "inp").replace("batch_size", "bs"))
    deco = filters.Decontaminator(kb)
    failed = deco.check({"id": "t1", "ops": ["copy"], "code": renamed})
    assert failed is not None and failed[0] == "decontaminated", failed
    new = compose.render([{"id": "torch.special.expit", "source": "special", "call": "unary",
                           "init": {}, "first": False},
                          {"id": "torch.cumsum", "source": "torch", "call": "unary_dim",
                           "init": {}, "first": False}], 3, 4)
    assert deco.check({"id": "t2", "ops": ["a", "b"], "code": new}) is None
    # the same operators again: a near-copy
    failed = deco.check({"id": "t3", "ops": ["a", "b"], "code": new})
    assert failed is not None and failed[0] == "unique"


def _task(body: str) -> dict[str, Any]:
    code = (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n"
        f"        return {body}\n\nbatch_size = 64\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, 32)]\n\n"
        "def get_init_inputs():\n    return []\n")
    return {"id": "t", "kind": "1", "ops": ["x"], "rank": 2, "batch": 64,
            "estimated_ms": 5.0, "code": code}


def test_degenerate_stochastic_and_broken_tasks_are_dropped() -> None:
    assert filters.verdict(_task("torch.zeros_like(x)"), False)["stage"] == "degenerate"
    assert filters.verdict(_task("x * 0 + 3.0"), False)["stage"] == "degenerate"
    assert filters.verdict(_task("F.dropout(x, 0.5, True)"), False)["stage"] == "stochastic"
    assert filters.verdict(_task("x + torch.rand_like(x)"), False)["stage"] == "stochastic"
    assert filters.verdict(_task("x.nope()"), False)["stage"] == "runs"
    v = filters.verdict(_task("torch.tanh(x) * 2"), False)
    assert v["stage"] is None and v["measured"] is False and v["runtime_ms"] == 5.0
    slow = _task("torch.tanh(x)")
    slow["estimated_ms"] = 500.0
    assert filters.verdict(slow, False)["stage"] == "runtime"


def test_a_task_past_its_limit_is_dropped_at_its_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose checks run past CHECK_LIMIT_S costs its own verdict only: dropped at the
    stage it was in, with the time it took, and the next task is checked as usual."""
    monkeypatch.setattr(filters, "CHECK_LIMIT_S", 0.5)
    slow = _task("(__import__('time').sleep(30), x)[1]")
    v = filters.cpu_verdict(slow, False)
    assert v["stage"] == "runs" and "more than 0.5 s" in v["why"], v
    assert 0.4 < v["seconds"]["checks"] < 10
    assert filters.cpu_verdict(_task("torch.tanh(x)"), False)["stage"] is None


def test_verdicts_come_in_the_order_they_finish(tmp_path: Path) -> None:
    """With a pool, a slow task holds up no other: the fast one's verdict comes first, and the
    filter's file holds both, whatever the order (a resumed run skips them by id)."""
    slow = dict(_task("(__import__('time').sleep(1), torch.tanh(x))[1]"), id="slow")
    fast = dict(_task("torch.tanh(x) * 3"), id="fast")
    got = [(t["id"], v["id"], v["stage"])
           for t, v in filters.run_parallel([slow, fast], False, 2)]
    assert got == [("fast", "fast", None), ("slow", "slow", None)]


def test_a_slow_timing_holds_up_no_dropped_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timing has a thread of its own: a task dropped by its checks is given out while another
    is being timed (on the H100 a timing can take seconds, up to its limit)."""
    real = filters.timed_verdict

    def slow_timing(task: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        if task["id"] == "slowtime":
            time.sleep(3)
        return real(task, out)

    monkeypatch.setattr(filters, "timed_verdict", slow_timing)
    slow = dict(_task("torch.tanh(x) * 3"), id="slowtime")
    broken = dict(_task("(__import__('time').sleep(0.5), x.nope())[1]"), id="broken")
    got = [(t["id"], v["id"], v["stage"])
           for t, v in filters.run_parallel([slow, broken], False, 2)]
    assert got == [("broken", "broken", "runs"), ("slowtime", "slowtime", None)]


def test_steps_resume(cat: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "catalog.json").write_text(json.dumps(cat))
    assert synth_main(["compose", "--dir", str(tmp_path), "-n", "10", "--seed", "3"]) == 0
    first = (tmp_path / "tasks.jsonl").read_text()
    with (tmp_path / "tasks.jsonl").open("a") as f:
        f.write('{"cut in the mid')  # an interrupted write
    assert synth_main(["compose", "--dir", str(tmp_path), "-n", "20", "--seed", "3"]) == 0
    both = (tmp_path / "tasks.jsonl").read_text()
    assert both.startswith(first) and len(read_jsonl(tmp_path / "tasks.jsonl")) == 20
    assert synth_main(["filter", "--dir", str(tmp_path), "--no-compile", "--jobs", "1"]) == 0
    assert len(read_jsonl(tmp_path / "verdicts.jsonl")) == 20
    assert synth_main(["filter", "--dir", str(tmp_path), "--no-compile", "--jobs", "1"]) == 0
    assert len(read_jsonl(tmp_path / "verdicts.jsonl")) == 20  # nothing redone
    missing = tmp_path / "none"
    assert synth_main(["export", "--dir", str(missing)]) == 2 and not missing.exists()


def test_timer_kills_a_call_that_does_not_return() -> None:
    """A timing stuck where time_limit cannot reach (a CUDA call that never returns; here a
    sleep) is given up after its limit: the process is killed and replaced, the next call runs."""
    timer = filters.Timer()
    assert timer.run(abs, -1, limit_s=120) == 1  # started: torch imported
    first = timer.ex
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        timer.run(time.sleep, 60, limit_s=1.0)
    assert time.monotonic() - t0 < 20 and timer.ex is not None and timer.ex is not first
    assert timer.run(abs, -2, limit_s=120) == 2
    timer.close()
    assert timer.ex is None and timer.spare is None


def test_compose_draws_a_degenerate_chain_again(cat: dict[str, Any]) -> None:
    """A chain of usable operators can still be degenerate (tanh -> Linear -> prod: about
    1e-15): the composer judges each task with the evaluation's detector and draws again."""
    by_id = {e["id"]: e for e in cat["entries"]}
    code = compose.render([by_id["F.tanh"], by_id["nn.Linear"], by_id["torch.prod"]], 2, 4)
    assert (compose.degenerate_why(code, 4) or "").startswith("the task is degenerate")
    redrawn: Counter[str] = Counter()
    tasks = [compose.compose_one(cat, random.Random(i), i, "3", redrawn) for i in range(40)]
    made = [t for t in tasks if t is not None]
    assert len(made) > 20
    for t in made:
        assert compose.degenerate_why(t["code"], catalog.PROBE_SHAPES[t["rank"]][0]) is None
    assert sum(redrawn.values()) == len(tasks) - len(made)


def test_compose_is_reproducible(cat: dict[str, Any]) -> None:
    a = compose.compose_one(cat, random.Random(5), 0, "2")
    b = compose.compose_one(cat, random.Random(5), 0, "2")
    assert a == b


def test_timer_replaces_its_process_after_a_fault() -> None:
    """A task whose timing raises (on a GPU: a sticky CUDA error) is dropped at `runtime`, and the
    timing process is replaced, so that the next task is timed in a fresh one."""
    timer = filters.Timer()
    timer.start()
    first, spare = timer.ex, timer.spare
    assert spare is not None and spare is not first
    bad = _task("torch.tanh(x)")
    bad["estimated_ms"] = "not a number"  # runtime_ms raises inside the timing process
    out = timer(bad, {"id": "bad", "stage": None, "why": ""})
    assert out["stage"] == "runtime" and "ValueError" in out["why"] and "gpu_fault" not in out
    assert timer.ex is spare  # replaced at once by the spare, started beforehand
    assert timer.spare is not None and timer.spare not in (first, spare)  # a new spare
    second = timer.ex
    good = timer(_task("torch.tanh(x)"), {"id": "good", "stage": None, "why": ""})
    assert good["stage"] is None and good["runtime_ms"] == 5.0 and timer.ex is second
    failed = {"id": "f", "stage": "runs", "why": "x"}
    assert timer(bad, failed) is failed  # a task dropped before is not timed
    timer.close()
    assert timer.ex is None


def test_llm_replies_are_parsed_never_run() -> None:
    from cuda_agent_bridge.synth import llm

    good = _task("torch.tanh(x)")["code"]
    assert llm.extract("Sure:\n```python\n" + good + "```\nDone.") == good
    assert llm.extract(good) == good  # no fence: the whole reply
    assert llm.static_check(good) is None
    assert "not Python" in (llm.static_check("I cannot.") or "")
    assert "not Python" in (llm.static_check(good + "\x00") or "")
    assert "Model" in (llm.static_check(good.replace("class Model", "class M")) or "")
    assert "batch_size" in (llm.static_check(good.replace("batch_size = 64", "n = 64")) or "")
    for hostile in ("import os\n", "import subprocess\n", "from pathlib import Path\n",
                    "x = open('/etc/passwd')\n", "y = ().__class__.__bases__\n",
                    "z = __import__('os')\n", "w = getattr(torch, 'load')\n"):
        assert llm.static_check(hostile + good) is not None, hostile
    assert llm.static_check("x = 1\n" * 20000) == f"code over {llm.MAX_CODE} bytes"
    task, why = llm.ingest({"id": "llm-000001", "kind": "2", "ops": ["a", "b"]},
                           {"id": "llm-000001", "content": good})
    assert task and task["source"] == "llm" and task["estimated_ms"] is None and not why
    task, why = llm.ingest({"id": "x", "kind": "2", "ops": []}, {"id": "x", "error": "HTTP 400"})
    assert task is None and "request failed" in why


def test_llm_static_check_never_raises() -> None:
    """Mutated replies (cut, spliced, bytes flipped) get a verdict, never an exception."""
    from cuda_agent_bridge.synth import llm

    base = _task("torch.tanh(x)")["code"]
    rng = random.Random(0)
    for _ in range(300):
        s = list(base)
        for _ in range(rng.randint(1, 8)):
            k = rng.randrange(len(s))
            op = rng.random()
            if op < 0.4:
                s[k] = chr(rng.randrange(0, 0x250))
            elif op < 0.7:
                del s[k:k + rng.randint(1, 20)]
            else:
                s.insert(k, rng.choice(["(", ")", ":", "\n", "__", "import os", "'", '"""']))
        v = llm.static_check("".join(s))
        assert v is None or isinstance(v, str)


def test_llm_prompts_are_reproducible(cat: dict[str, Any]) -> None:
    from cuda_agent_bridge.synth import llm

    a = llm.prompts(cat, 5, seed=1)
    b = llm.prompts(cat, 3, seed=1) + llm.prompts(cat, 2, seed=1, first=3)  # a resumed run
    assert a == b and len({p["id"] for p in a}) == 5
    assert all(p["messages"][1]["content"].count(op) for p in a for op in p["ops"])


def test_a_task_that_fails_on_another_draw_fails_runs() -> None:
    """Raises only on the degeneracy stage's draws (seeds 1000+): dropped at `runs`, not a crash
    of the whole filter."""
    t = _task("x if float(x.sum()) != 0 else x")
    t["code"] = t["code"].replace(
        "def get_inputs():\n    return [torch.randn(batch_size, 32)]",
        "_n = [0]\n\ndef get_inputs():\n    _n[0] += 1\n"
        "    if _n[0] > 2:\n        raise RuntimeError('singular')\n"
        "    return [torch.randn(batch_size, 32)]")
    v = filters.verdict(t, False)
    assert v["stage"] == "runs" and "another input draw" in v["why"], v


def test_median_call_ms_stops_early_far_above_the_range() -> None:
    """A task far slower than the range is timed twice, not eight times; others get 3 warm-up
    calls and the median of 5."""
    slow = iter([900.0, 850.0] + [1.0] * 10)
    calls = []

    def slow_call() -> float:
        calls.append(1)
        return next(slow)

    assert filters.median_call_ms(slow_call) == 850.0 and len(calls) == 2
    times = iter([50.0, 9.0, 8.0, 5.0, 7.0, 6.0, 100.0, 4.0])
    assert filters.median_call_ms(lambda: next(times)) == 6.0


def test_vec_isa_verdicts_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """synth/vec_isa.py: a pool process answers inductor's ISA probe from the run's recorded
    verdicts (by class, compiler flags and test program) and probes for itself otherwise."""
    from torch._inductor import cpu_vec_isa as m

    from cuda_agent_bridge.synth import vec_isa

    real_calls: list[str] = []

    def real(self: Any, code: str) -> bool:
        real_calls.append(code)
        return code == "builds"

    # stand-ins for the probe and for inductor's list (its real one caches what it finds)
    monkeypatch.setattr(m.VecISA, "check_build", real)  # both restored after the test
    avx2, avx512 = m.VecAVX2(), m.VecAVX512()
    monkeypatch.setattr(m, "valid_vec_isa_list", lambda: [
        i for i, c in ((avx2, "builds"), (avx512, "fails")) if m.VecISA.check_build(i, c)])
    seen = vec_isa.probe()  # every verdict recorded under its inputs, the probe put back
    assert seen == {vec_isa._key(avx2, "builds"): True, vec_isa._key(avx512, "fails"): False}
    assert m.VecISA.check_build is real
    recorded = {vec_isa._key(avx2, "builds"): True, vec_isa._key(avx2, "fails"): False}
    real_calls.clear()
    vec_isa.install(recorded)
    assert m.VecISA.check_build(avx2, "builds") is True
    assert m.VecISA.check_build(avx2, "fails") is False
    assert real_calls == []  # both answered from the record
    assert m.VecISA.check_build(avx512, "builds") is True  # another class: probed for real
    assert m.VecISA.check_build(avx2, "other") is False  # another program: probed for real
    assert real_calls == ["builds", "other"]
    vec_isa.install(None)  # nothing recorded: nothing replaced
    assert m.VecISA.check_build(avx2, "builds") is True and len(real_calls) == 2


def test_pilot_bound_is_a_lower_bound_where_time_grows_with_the_batch() -> None:
    """pilot_bound_ms: exact for a time linear in the batch, under the truth for one flat then
    linear (the GPU filling up), over it by at most 1.7x for b^0.8, and one pilot call pair
    when the first is already above the drop line."""
    full = 1 << 20

    def linear(b: int) -> float:
        return 1e-3 * b

    def flat_then_linear(b: int) -> float:
        return max(0.05, 1e-3 * b - 40.0)

    assert filters.pilot_bound_ms(linear, full) == pytest.approx(linear(full))
    assert filters.pilot_bound_ms(flat_then_linear, full) <= flat_then_linear(full)  # type: ignore[operator]
    bound = filters.pilot_bound_ms(lambda b: 1e-3 * b ** 0.8, full)
    assert bound is not None and bound <= 1.7 * 1e-3 * full ** 0.8
    asked: list[int] = []

    def hopeless(b: int) -> float:
        asked.append(b)
        return 5000.0

    assert filters.pilot_bound_ms(hopeless, full) == 5000.0 and asked == [full // 128]
    assert filters.pilot_bound_ms(linear, 100) is None  # too small for a pilot


def test_timing_pilot_drops_a_task_far_above_the_range_untimed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The timing's steps on the CPU clock (timed_ms: the GPU path's code, device "cpu"): a
    task is timed at its size after a pilot whose bound is recorded; with the drop line below
    that bound, it is dropped at `runtime` without being timed at its size, and says so."""
    t = _task("torch.tanh(x) * 2.0")
    t["code"] = t["code"].replace("batch_size = 64", "batch_size = 262144")
    split: dict[str, float] = {}
    ms = filters.timed_ms(t, "cpu", split)
    assert ms > 0 and split["pilot_bound_ms"] > 0 and "timing_calls" in split
    assert "pilot_only" not in split
    monkeypatch.setattr(filters, "PILOT_DROP_MS", split["pilot_bound_ms"] / 10)
    split2: dict[str, float] = {}
    assert filters.timed_ms(t, "cpu", split2) == pytest.approx(split2["pilot_bound_ms"], abs=1e-3)
    assert split2["pilot_only"] == 1.0 and "timing_calls" not in split2
    monkeypatch.setattr(filters, "runtime_ms",
                        lambda task, sp: (filters.timed_ms(task, "cpu", sp), True))
    v = filters.timed_verdict(t, {"id": "t", "stage": None, "why": ""})
    assert v["stage"] == "runtime" and "not timed at its size" in v["why"], v


def test_a_pilot_that_fails_at_its_small_sizes_leaves_the_task_to_its_own() -> None:
    """A task that raises only at the pilot's smaller batches is timed at its own size, as
    without the pilot, and the split says the pilot failed."""
    t = _task("torch.tanh(x) if x.shape[0] >= 262144 else x.nope()")
    t["code"] = t["code"].replace("batch_size = 64", "batch_size = 262144")
    split: dict[str, float] = {}
    assert filters.timed_ms(t, "cpu", split) > 0
    assert split["pilot_failed"] == 1.0 and "timing_calls" in split
    assert "pilot_bound_ms" not in split


def test_crawl_goes_on_from_the_next_source(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """An interrupted crawl keeps each finished source in DIR/crawl_parts/: the next run
    probes only the sources without a whole part (a cut one is crawled again), and the parts
    are gone once catalog.json is written."""
    probed: list[str] = []

    def source(name: str) -> catalog.Source:
        def probe(c: Any) -> Any:
            probed.append(f"{name}:{c}")
            e = catalog.Entry(id=f"{name}.{c}", source=name, call="unary", batch_free=True,
                              batch_free_ranks=[2])
            return iter([e])
        return catalog.Source(lambda: ["a", "b"], probe)

    monkeypatch.setattr(catalog, "SOURCES", {"one": source("one"), "two": source("two"),
                                             "three": source("three")})
    parts = tmp_path / "crawl_parts"
    parts.mkdir()
    kept = [dict(e, id="one.kept") for e in catalog.crawl_source("one")]
    probed.clear()
    (parts / "one.json").write_text(json.dumps(kept))
    (parts / "two.json").write_text(json.dumps(kept)[:10])  # cut by the interruption
    assert synth_main(["crawl", "--dir", str(tmp_path)]) == 0
    assert probed == ["two:a", "two:b", "three:a", "three:b"]
    cat = json.loads((tmp_path / "catalog.json").read_text())
    assert [e["id"] for e in cat["entries"]] == ["one.kept", "two.a", "two.b", "three.a",
                                                 "three.b"]  # an id twice: kept once
    assert cat["counts"] == {"one": 1, "two": 2, "three": 2} and cat["usable"] == 5
    assert not parts.exists()


def _run_dir(d: Path, tasks: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> Path:
    d.mkdir()
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (d / "verdicts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    return d


def test_slowdowns_come_from_gpu_measurements_only(tmp_path: Path) -> None:
    tasks = [{"id": "a", "ops": ["P", "Q"], "estimated_ms": 2.0},
             {"id": "b", "ops": ["Q", "R"], "estimated_ms": 4.0},
             {"id": "c", "ops": ["S"], "estimated_ms": 2.0},
             {"id": "d", "ops": ["T"], "estimated_ms": 2.0},
             {"id": "e", "ops": ["U"], "estimated_ms": 2.0, "roofline_ms": 1.0}]
    verdicts = [{"id": "a", "runtime_ms": 200.0, "measured": True},   # 100x: P and Q
                {"id": "b", "runtime_ms": 6.0, "measured": True},     # 1.5x: clears Q to 1.5
                {"id": "c", "runtime_ms": 50.0, "measured": False},   # a CPU estimate: nothing
                {"id": "d", "runtime_ms": None, "measured": None},    # failed: nothing
                {"id": "e", "runtime_ms": 30.0, "measured": True}]    # against its roofline
    slow = compose.slowdowns([(tasks, verdicts)])
    assert slow == {"P": 100.0, "Q": 1.5, "R": 1.5, "U": 30.0}
    # the step reads them from a run's directory
    run = _run_dir(tmp_path / "run", tasks, verdicts)
    assert compose.slowdowns([(read_jsonl(run / "tasks.jsonl"),
                               read_jsonl(run / "verdicts.jsonl"))]) == slow


def test_compose_draws_slow_operators_smaller(cat: dict[str, Any], tmp_path: Path) -> None:
    # a task drawn well above the probe batch, so that a slowdown has room to shrink it
    seed, plain = next((s, t) for s, t in ((s, compose.compose_one(cat, random.Random(s), 0, "2"))
                                           for s in range(50))
                       if t is not None and t["batch"] > 4 * catalog.PROBE_SHAPES[t["rank"]][0])
    factors = {op: 1000.0 for op in plain["ops"]}
    slowed = compose.compose_one(cat, random.Random(seed), 0, "2", None, factors)
    assert slowed is not None and slowed["ops"] == plain["ops"]
    assert slowed["batch"] < plain["batch"] and slowed["slowdown"] == 1000.0
    assert slowed["roofline_ms"] < slowed["estimated_ms"]
    assert "slowdown" not in plain and "roofline_ms" not in plain
    # through the step: the factors come from a run directory; a wrong one is a usage error
    (tmp_path / "catalog.json").write_text(json.dumps(cat))
    run = _run_dir(tmp_path / "run", [dict(plain, id="x")],
                   [{"id": "x", "runtime_ms": 1000.0 * plain["estimated_ms"], "measured": True}])
    out = tmp_path / "out"
    out.mkdir()
    (out / "catalog.json").write_text(json.dumps(cat))
    assert synth_main(["compose", "--dir", str(out), "-n", "3", "--measured", str(run)]) == 0
    stats = json.loads((out / "compose_stats.json").read_text())
    assert stats["measured"] == [str(run)] and stats["slowed_operators"] == len(set(plain["ops"]))
    assert synth_main(["compose", "--dir", str(out), "-n", "4", "--measured",
                       str(tmp_path / "nothing")]) == 2
    assert synth_main(["filter", "--dir", str(out), "--measured", str(run)]) == 2
