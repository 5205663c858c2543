"""bench/kernelbench_public: the corpus manifest (its schema and size: at least 80 entries from
at least 5 repositories, levels 1-3, unique files, commits pinned), its sets, the fetch from a
local git copy, and the corpus-wide agreement table on synthetic runs."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS_PY = ROOT / "bench" / "kernelbench_public" / "corpus.py"


def load_corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kb_corpus", CORPUS_PY)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kb_corpus"] = mod
    spec.loader.exec_module(mod)
    return mod


corpus = load_corpus()


def entry(**kw: Any) -> dict[str, Any]:
    e = {"file": "level1_19_ReLU__src_a.py", "problem": "level1/19_ReLU", "repo": "o/r",
         "path": "runs/a.py", "commit": "0123456789abcdef0123456789abcdef01234567",
         "verdict": "correct", "source_says": "correct: the source says so"}
    e.update(kw)
    return e


# ---- the manifest -----------------------------------------------------------------------------


def test_manifest_is_valid_and_big_enough() -> None:
    entries = corpus.load_manifest()
    assert corpus.check_corpus(entries) == []
    s = corpus.stats(entries)
    assert s["entries"] >= 80
    assert len(s["sources"]) >= 5
    assert {"1", "2", "3"} <= set(s["levels"])
    assert s["verdicts"].get("hack", 0) >= 10
    assert len({e["file"] for e in entries}) == len(entries)
    assert all(re.fullmatch(r"[0-9a-f]{40}", e["commit"]) for e in entries)
    # every documented hack says what it does
    assert all("hack" in e["source_says"] for e in entries if e["verdict"] == "hack")
    # the KernelBench the corpus names
    assert re.fullmatch(r"[0-9a-f]{40}", corpus.KERNELBENCH_COMMIT)


def test_validate_catches_each_break() -> None:
    good = entry()
    assert corpus.validate([good]) == []
    cases = [
        ({"commit": "abc123"}, "40 lowercase hex"),
        ({"commit": "0123456789ABCDEF0123456789ABCDEF01234567"}, "40 lowercase hex"),
        ({"problem": "level1/ReLU"}, "level<L>/<P>_<Name>"),
        ({"file": "level1_19_ReLU.py"}, "file must be"),
        ({"file": "level2_19_ReLU__a.py"}, "file must be"),
        ({"repo": "noslash"}, "owner/name"),
        ({"path": "../x.py"}, "without '..'"),
        ({"path": "/abs.py"}, "must be relative"),
        ({"verdict": "fine"}, "verdict"),
        ({"verdict": "hack"}, "does not say what the hack is"),
        ({"speedup": -1}, "speedup"),
        ({"speedup": True}, "speedup"),
        ({"note": ""}, "note"),
        ({"extra": 1}, "unknown field"),
        ({"source_says": ""}, "source_says"),
    ]
    for change, want in cases:
        errors = corpus.validate([entry(**change)])
        assert errors and any(want in e for e in errors), (change, errors)
    bad = copy.deepcopy(good)
    del bad["repo"]
    assert any("repo missing" in e for e in corpus.validate([bad]))
    assert corpus.validate(["x"]) == ["entry 0: not an object"]
    dup = [good, entry(path="runs/b.py")]
    assert any("appears twice" in e for e in corpus.validate(dup))
    same_source = [good, entry(file="level1_19_ReLU__src_b.py")]
    assert any("appears twice" in e for e in corpus.validate(same_source))


def test_corpus_size_rules() -> None:
    few = [entry(file=f"level1_19_ReLU__s{i}.py", path=f"p{i}.py") for i in range(3)]
    errors = corpus.check_corpus(few)
    assert any("fewer than 80" in e for e in errors)
    assert any("fewer than 5" in e for e in errors)
    assert any("no entry of level 2" in e for e in errors)
    assert any("no entry of level 3" in e for e in errors)


def test_sets_hold_one_candidate_per_problem() -> None:
    entries = corpus.load_manifest()
    sets = corpus.assign_sets(entries)
    pairs = list(zip(sets, (e["problem"] for e in entries), strict=True))
    assert len(set(pairs)) == len(pairs)
    assert min(sets) == 0 and set(range(max(sets) + 1)) == set(sets)
    assert corpus.assign_sets([entry(), entry(), entry(problem="level2/1_X")]) == [0, 1, 0]


# ---- fetching from a local git copy -----------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], capture_output=True, text=True, check=True)
    return r.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_fetch_from_a_clone(tmp_path: Path) -> None:
    repo = tmp_path / "mirrors" / "someone" / "kernels"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "a.py").write_text("class ModelNew:\n    pass  # a\n")
    (repo / "b.py").write_text("class ModelNew:\n    pass  # b\n")
    (repo / "c.py").write_text("print('no model here')\n")
    (repo / "d.py").write_text("class ModelNew:\n    pass  # d\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "x")
    commit = git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("changed after the pinned commit\n")
    entries = [entry(repo="someone/kernels", path="a.py", commit=commit),
               entry(repo="someone/kernels", path="b.py", commit=commit,
                     file="level1_19_ReLU__src_b.py"),
               entry(repo="someone/kernels", path="d.py", commit=commit,
                     file="level2_3_Fused__src_d.py", problem="level2/3_Fused")]
    out = tmp_path / "cands"
    doc = corpus.fetch(entries, out, [tmp_path / "mirrors"], False, None)
    assert doc["sets"] == 2
    assert (out / "set_0" / "level1" / "19_ReLU.py").read_text() == \
        "class ModelNew:\n    pass  # a\n"  # the pinned bytes, not the later ones
    assert (out / "set_1" / "level1" / "19_ReLU.py").read_text().endswith("# b\n")
    assert (out / "set_0" / "level2" / "3_Fused.py").is_file()
    assert (out / "files" / "level1_19_ReLU__src_b.py").is_file()
    index = json.loads((out / "index.json").read_text())
    assert [(e["set"], e["key"]) for e in index["entries"]] == [
        (0, "level1/19_ReLU"), (1, "level1/19_ReLU"), (0, "level2/3_Fused")]
    assert all(len(e["sha256"]) == 64 for e in index["entries"])
    # no ModelNew, no copy, a problem the checkout lacks
    with pytest.raises(corpus.CorpusError, match="defines no ModelNew"):
        corpus.fetch([entry(repo="someone/kernels", path="c.py", commit=commit)], out,
                     [tmp_path / "mirrors"], False, None)
    with pytest.raises(corpus.CorpusError, match="--download"):
        corpus.fetch([entry()], out, [tmp_path / "mirrors"], False, None)
    kb = tmp_path / "kb"
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    (kb / "KernelBench" / "level1" / "19_ReLU.py").write_text("")
    with pytest.raises(corpus.CorpusError, match="level2/3_Fused"):
        corpus.fetch(entries, out, [tmp_path / "mirrors"], False, kb)
    assert corpus.raw_url("o/r", commit, "x/y.py") == \
        f"https://raw.githubusercontent.com/o/r/{commit}/x/y.py"


# ---- the agreement table ----------------------------------------------------------------------


def row(key: str, verdict: str, ours: bool | None, kb: bool | None,
        ratio: float | None = None, speedup: float | None = None) -> dict[str, Any]:
    return {"key": key, "verdict": verdict, "ours": ours, "kernelbench": kb, "ratio": ratio,
            "speedup": speedup}


def test_agreement_counts_and_geomeans() -> None:
    rows = [row("level1/1_A", "correct", True, True, 2.0),
            row("level1/2_B", "correct", True, True, 0.5),
            row("level1/3_C", "correct", False, True),        # we refuse, KernelBench accepts
            row("level2/1_D", "incorrect", False, False),
            row("level2/2_E", "incorrect", True, False),      # KernelBench refuses, we accept
            row("level2/3_F", "hack", False, True),           # a hack KernelBench accepts
            row("level2/4_G", "hack", False, False),
            row("level3/1_H", "correct", True, True, 4.0),
            row("level3/2_I", "correct", None, True),         # no result of ours
            row("level3/3_J", "hack", True, None, None, 3.0),  # a hack we let pass, no KB verdict
            row("level3/4_K", "hack", True, True, None, 1.2)]  # a hack we hold to 1.2x
    s = corpus.agreement(rows)
    assert s["confusion"] == {"both_correct": 4, "both_incorrect": 2, "we_refuse_kb_accepts": 2,
                              "kb_refuses_we_accept": 1, "no_verdict": 2}
    assert s["kb_correct_not_hack"] == {"n": 4, "we_agree": 3, "rate": 0.75}
    assert s["hacks"] == {"n": 4, "we_reject": 2, "we_hold": 1, "we_pass": 1, "kb_rejects": 1}
    t = {x["level"]: x for x in s["timing"]}
    assert t["level1"]["n"] == 2 and math.isclose(t["level1"]["geomean_ratio"], 1.0)
    assert t["level3"]["n"] == 1 and math.isclose(t["level3"]["geomean_ratio"], 4.0)
    assert "level2" not in t
    assert t["all"]["n"] == 3 and math.isclose(t["all"]["geomean_ratio"], 4 ** (1 / 3))
    assert corpus.geomean([]) is None


def test_summarize_reads_the_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cands, runs = tmp_path / "cands", tmp_path / "runs"
    cands.mkdir()
    entries = [{"file": "a.py", "set": 0, "key": "level1/1_A", "repo": "o/r", "verdict": "correct"},
               {"file": "b.py", "set": 1, "key": "level1/1_A", "repo": "o/r", "verdict": "hack"},
               {"file": "c.py", "set": 0, "key": "level2/5_C", "repo": "o/s", "verdict": "correct"}]
    (cands / "index.json").write_text(json.dumps({"sets": 2, "entries": entries}))

    def result(tid: str, ok: bool, kb: dict[str, Any] | None, ms: float = 0) -> str:
        r: dict[str, Any] = {"task": {"id": f"kernelbench/{tid}"}, "correct": ok,
                             "reward": 1 if ok else -1,
                             "reason": {"code": "ok" if ok else "verify.mismatch"},
                             "timing": {"candidate": {"median_ms": ms}} if ms else {}}
        if kb is not None:
            r["kernelbench_eval"] = kb
        return json.dumps(r)

    (runs / "set_0").mkdir(parents=True)
    (runs / "set_1").mkdir()
    (runs / "set_0" / "results.jsonl").write_text(
        result("level1/1_A", True, {"correctness": True, "runtime": 2.0}, 3.0) + "\n"
        + result("level2/5_C", False, {"correctness": True, "runtime": 1.0}) + "\n")
    (runs / "set_1" / "results.jsonl").write_text(
        result("level1/1_A", False, {"correctness": False, "reason": "Output mismatch"}) + "\n")
    s = corpus.summarize(cands, runs)
    assert [r["ours"] for r in s["rows"]] == [True, False, False]
    assert s["rows"][0]["ratio"] == 1.5 and s["rows"][2]["our_reason"] == "verify.mismatch"
    assert s["confusion"]["we_refuse_kb_accepts"] == 1 and s["hacks"]["we_reject"] == 1
    corpus.print_summary(s)
    text = capsys.readouterr().out
    assert "set_0 level2/5_C [c.py, correct]: we refuse (verify.mismatch), KernelBench accepts" \
        in text
    assert corpus.main(["summarize", str(cands), str(runs), "--json"]) == 0
