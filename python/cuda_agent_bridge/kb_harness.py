"""KernelBench's own harness, run over a candidate tree beside ours (docs/cli.md, "bench").

    python -m cuda_agent_bridge.kb_harness run --kernelbench KB --candidates CANDS --out FILE
        [--tasks TASKS] [--sample N] [--timeout S] [--device D] [--num-correct-trials N]
        [--num-perf-trials N] [--timing-method M] [--build-dir DIR] [--log FILE] [--fresh]
    python -m cuda_agent_bridge.kb_harness check --kernelbench KB
    python -m cuda_agent_bridge.kb_harness one ...        (one candidate; run's child)

`run` finds the KernelBench files of a candidate tree as `cuda-agent bench` does (CANDS/<key>.py,
CANDS/<key>/model_new.py, or KernelBench's runs layout level_<L>_problem_<P>_sample_<S>_kernel.py),
and judges each with `eval_kernel_against_ref` of the KernelBench checkout KB against that
checkout's own problem file KB/KernelBench/level<L>/<stem>.py, with the settings of KernelBench's
scripts/eval_from_generations.py (5 correctness trials, 100 timed trials, CUDA events, 180 s).

Each candidate runs in a process of its own (its own session, killed with its whole group at the
timeout, and when this process dies), so that a crash, a hang or a poisoned CUDA context ends that
candidate's evaluation only; its output goes to the log. What KernelBench's script records for a
timeout or a dead evaluation (compiled false, correctness false, metadata.error) is recorded here
too. The results are written after every candidate, atomically, to FILE in the shape of
KernelBench's eval_results.json, keyed "L<level>P<problem>" since a tree may hold several levels:

    {"L1P19": [{"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats",
                "ref_runtime", "ref_runtime_stats", "reason", "task", "problem", "candidate",
                "candidate_sha256", "harness": {"status", "seconds", "timeout_s", "stubbed"}}],
     "_harness": {"schema", "kernelbench", "kernelbench_commit", "settings", "python"}}

runtime and ref_runtime are KernelBench's numbers: milliseconds, the mean over its timed trials
(CUDA events on its own stream; ref_runtime is its timing of the reference, taken for its
excessive-speed-up check). A run again skips what FILE already holds for the same candidate bytes,
problem bytes and settings (--fresh: none), so an interrupted run resumes.

KernelBench's package imports LLM clients and helpers at module level that its eval never calls
(openai, litellm, dotenv, tqdm, requests, ...): where one is missing, a stand-in takes its place
(listed in the result's harness.stubbed) and fails if it is ever called. pydantic, which only
shapes the result, gets a minimal stand-in the same way. What eval does use (torch, numpy) must be
there: without it, `check` and `run` stop with exit code 4 and say what to install.

Exit codes: 0 every candidate has a verdict (which may be a failure); 2 usage (no checkout, no
candidate tree); 4 KernelBench's eval cannot be imported here; 130 interrupted (what was done is
kept).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "cuda-agent.kernelbench-eval/1"
META_KEY = "_harness"
EXIT_OK, EXIT_USAGE, EXIT_ENV, EXIT_INTERRUPTED = 0, 2, 4, 130
# KernelBench's scripts/eval_from_generations.py defaults
DEFAULT_TIMEOUT_S = 180.0
DEFAULT_CORRECT_TRIALS = 5
DEFAULT_PERF_TRIALS = 100
DEFAULT_TIMING = "cuda_event"
DEFAULT_SEED = 42
MAX_DEPTH = 8
REASON_MAX = 200

# Imported at module level by KernelBench's package for what its eval never calls.
STUBBABLE = frozenset({"openai", "litellm", "dotenv", "tqdm", "requests", "anthropic",
                       "together", "google", "pydra", "modal", "datasets", "tomli", "toml",
                       "archon", "transformers", "sglang"})
# Stand-ins that are called at import time and must do nothing.
NOOPS = frozenset({"dotenv.load_dotenv"})
# What eval itself needs: no stand-in, a clear error instead.
REQUIRED = ("torch", "numpy")


class HarnessError(Exception):
    """KernelBench's eval cannot be imported or used here (exit code 4)."""


class UsageError(HarnessError):
    """No KernelBench checkout, or no candidate or task tree, where one was named (exit 2)."""


# ---- the checkout ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    root: Path
    path_entry: Path  # what goes on sys.path
    module: str  # the eval module
    problems: Path  # KB/KernelBench


def layout_of(kb: Path) -> Layout:
    """Where a KernelBench checkout keeps its eval: src/kernelbench/eval.py (the package, 2025-12
    on) or src/eval.py (before)."""
    kb = kb.resolve()
    if not (kb / "KernelBench").is_dir():
        raise UsageError(f"{kb} is not a KernelBench checkout (no KernelBench/ folder)")
    if (kb / "src" / "kernelbench" / "eval.py").is_file():
        return Layout(kb, kb / "src", "kernelbench.eval", kb / "KernelBench")
    if (kb / "src" / "eval.py").is_file():
        return Layout(kb, kb, "src.eval", kb / "KernelBench")
    raise UsageError(f"{kb} has neither src/kernelbench/eval.py nor src/eval.py")


def checkout_commit(kb: Path) -> str | None:
    f = kb / "KERNELBENCH_COMMIT"
    if f.is_file():
        return f.read_text().strip() or None
    if not (kb / ".git").exists():
        return None
    try:
        r = subprocess.run(["git", "-C", str(kb), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


# ---- stand-ins for what KernelBench imports but its eval does not use --------------------------


class _Missing:
    """An attribute of a stand-in module: any use but access fails, saying what is missing."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Missing:
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._name in NOOPS:
            return None
        raise HarnessError(f"{self._name} is a stand-in (its package is not installed here); "
                           "KernelBench's eval was not expected to call it")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


def _stub_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package: its submodules are stand-ins too
    mod.__cuda_agent_stub__ = True  # type: ignore[attr-defined]

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{name}.{attr}")

    setattr(mod, "__getattr__", getattr_)  # noqa: B010 (PEP 562: the module's own __getattr__)
    return mod


def _pydantic_shim() -> types.ModuleType:
    """pydantic.BaseModel as far as KernelBench's KernelExecResult needs it: keyword fields over
    the class's annotated defaults, attribute access, model_dump()/dict()."""
    import copy

    class BaseModel:
        def __init__(self, **kwargs: Any) -> None:
            for cls in reversed(type(self).__mro__):
                for field in getattr(cls, "__annotations__", {}):
                    if hasattr(cls, field) and not field.startswith("_"):
                        setattr(self, field, copy.deepcopy(getattr(cls, field)))
            for k, v in kwargs.items():
                setattr(self, k, v)

        def model_dump(self) -> dict[str, Any]:
            return dict(vars(self))

        def dict(self) -> dict[str, Any]:
            return self.model_dump()

        def __repr__(self) -> str:
            return f"{type(self).__name__}({self.model_dump()!r})"

    mod = types.ModuleType("pydantic")
    mod.BaseModel = BaseModel  # type: ignore[attr-defined]
    mod.__cuda_agent_stub__ = True  # type: ignore[attr-defined]
    return mod


def _install_stub(name: str) -> None:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        full = ".".join(parts[:i])
        if full not in sys.modules:
            sys.modules[full] = _stub_module(full)
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[full])


def _forget(prefix: str) -> None:
    for name in [m for m in sys.modules if m == prefix or m.startswith(prefix + ".")]:
        del sys.modules[name]


def import_eval(kb: Path) -> tuple[types.ModuleType, list[str]]:
    """KernelBench's eval module from the checkout, and the packages given a stand-in."""
    lay = layout_of(kb)
    for req in REQUIRED:
        try:
            importlib.import_module(req)
        except ImportError as e:
            raise HarnessError(f"KernelBench's eval needs {req!r}, which {sys.executable} cannot "
                               f"import ({e}): pip install {req}") from e
    if str(lay.path_entry) not in sys.path:
        sys.path.insert(0, str(lay.path_entry))
    top = lay.module.split(".")[0]
    stubbed: list[str] = []
    for _ in range(32):
        try:
            mod = importlib.import_module(lay.module)
            break
        except ModuleNotFoundError as e:
            missing = e.name or ""
            root = missing.split(".")[0]
            _forget(top)
            if root in STUBBABLE:
                _install_stub(missing)
                stubbed.append(missing)
            elif root == "pydantic" and "pydantic" not in sys.modules:
                sys.modules["pydantic"] = _pydantic_shim()
                stubbed.append("pydantic (a minimal BaseModel)")
            else:
                raise HarnessError(
                    f"KernelBench's eval ({lay.module} in {lay.root}) imports {missing!r}, which "
                    f"{sys.executable} does not have: pip install {root}") from e
    else:
        raise HarnessError(f"importing {lay.module} kept failing on missing packages: {stubbed}")
    if not callable(getattr(mod, "eval_kernel_against_ref", None)):
        raise HarnessError(f"{lay.module} in {lay.root} has no eval_kernel_against_ref")
    return mod, stubbed


# ---- one candidate (the child) ------------------------------------------------------------------


def _plain(v: Any) -> Any:
    """JSON-able: what KernelBench's script does to metadata (exceptions become strings)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def _result_dict(res: Any) -> dict[str, Any]:
    if hasattr(res, "model_dump"):
        d = res.model_dump()
    elif hasattr(res, "dict"):
        d = res.dict()
    else:
        d = dict(vars(res))
    return {k: _plain(d.get(k)) for k in ("compiled", "correctness", "metadata", "runtime",
                                          "runtime_stats", "ref_runtime", "ref_runtime_stats")
            if k in d}


def eval_one(kb: Path, problem: Path, candidate: Path, device: str, correct_trials: int,
             perf_trials: int, timing_method: str, seed: int,
             build_dir: Path | None) -> dict[str, Any]:
    """KernelBench's verdict on one candidate, as its eval_from_generations.py records it
    (an exception in eval is compiled false, correctness false, with metadata cuda_error or
    other_error)."""
    mod, stubbed = import_eval(kb)
    fn: Callable[..., Any] = mod.eval_kernel_against_ref
    import torch

    params = inspect.signature(fn).parameters
    kwargs: dict[str, Any] = {"original_model_src": problem.read_text(),
                              "custom_model_src": candidate.read_text(),
                              "seed_num": seed, "num_correct_trials": correct_trials,
                              "num_perf_trials": perf_trials, "measure_performance": True,
                              "timing_method": timing_method, "verbose": False,
                              "build_dir": str(build_dir) if build_dir else None,
                              "device": torch.device(device), "backend": "cuda",
                              "precision": torch.float32}
    if "precision" in params and hasattr(mod, "get_torch_dtype_from_string"):
        kwargs["precision"] = mod.get_torch_dtype_from_string("fp32")
    passed = {k: v for k, v in kwargs.items() if k in params}
    out: dict[str, Any] = {"stubbed": stubbed,
                           "kwargs": sorted(k for k in passed if not k.endswith("_src"))}
    try:
        res = fn(**passed)
    except Exception as e:  # noqa: BLE001 (KernelBench's script catches everything here too)
        msg = f"{e}"
        hw = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        if "CUDA error" in msg:
            md = {"cuda_error": f"CUDA Error: {msg}", "cuda_error_name": type(e).__name__}
        else:
            md = {"other_error": f"error: {msg}", "other_error_name": type(e).__name__}
        if hw:
            md["hardware"] = hw
        traceback.print_exc()
        out.update({"status": "ok", "compiled": False, "correctness": False, "metadata": md,
                    "runtime": -1.0, "runtime_stats": {}})
        return out
    if res is None:
        out["status"] = "retry"  # KernelBench: a lock-file error while building; try again
        return out
    out.update({"status": "ok", **_result_dict(res)})
    return out


# ---- the tree (the parent) ----------------------------------------------------------------------


_LEVEL = re.compile(r"level([0-9]{1,9})$")
_PROBLEM = re.compile(r"([0-9]{1,9})(?:_|$)")


def key_parts(key: str) -> tuple[int, int] | None:
    """(level, problem) of a bench key ".../level<L>/<P>_<Name>", as bench/kb_runs.c reads it."""
    parts = key.split("/")
    if len(parts) < 2:
        return None
    lm, pm = _LEVEL.fullmatch(parts[-2]), _PROBLEM.match(parts[-1])
    return (int(lm[1]), int(pm[1])) if lm and pm else None


def task_keys(tasks: Path) -> list[str]:
    """The task directories (holding model.py) under tasks, as bench finds them: sorted,
    depth-first, hidden entries and symbolic links skipped, a task not searched further."""
    keys: list[str] = []

    def walk(d: Path, key: str, depth: int) -> None:
        if (d / "model.py").is_file():
            keys.append(key or ".")
            return
        if depth >= MAX_DEPTH:
            return
        for name in sorted(os.listdir(d)):
            sub = d / name
            if name.startswith(".") or sub.is_symlink() or not sub.is_dir():
                continue
            walk(sub, f"{key}/{name}" if key else name, depth + 1)

    walk(tasks, "", 0)
    return keys


def problem_keys(lay: Layout) -> list[str]:
    keys = []
    for level in sorted(lay.problems.glob("level*")):
        if level.is_dir():
            keys += [f"{level.name}/{p.stem}" for p in sorted(level.glob("*.py"))]
    return keys


def candidate_file(cands: Path, key: str, sample: int) -> Path | None:
    """bench's KernelBench candidate for key: CANDS/<key>.py, CANDS/<key>/model_new.py, or the
    runs layout's level_<L>_problem_<P>_sample_<S>_kernel.py."""
    if key != ".":
        f = cands / f"{key}.py"
        if f.is_file():
            return f
        f = cands / key / "model_new.py"
        if f.is_file():
            return f
    lp = key_parts(key)
    if lp:
        f = cands / f"level_{lp[0]}_problem_{lp[1]}_sample_{sample}_kernel.py"
        if f.is_file():
            return f
    return None


@dataclass
class Item:
    key: str
    level: int
    problem: int
    problem_file: Path | None  # None: the checkout has no such problem
    candidate: Path


def items(lay: Layout, cands: Path, tasks: Path | None, sample: int) -> list[Item]:
    out = []
    for key in task_keys(tasks) if tasks else problem_keys(lay):
        lp = key_parts(key)
        cand = candidate_file(cands, key, sample)
        if lp is None or cand is None:
            continue
        parts = key.split("/")
        pf = lay.problems / parts[-2] / f"{parts[-1]}.py"
        out.append(Item(key, lp[0], lp[1], pf if pf.is_file() else None, cand))
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reason_of(rec: dict[str, Any]) -> str:
    """One line: why KernelBench refused (or flagged) the candidate; "" when it accepted it."""
    md = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    assert isinstance(md, dict)
    if rec.get("correctness") is True:
        return "excessive speed-up flagged" if md.get("excessive_speedup") else ""
    parts = []
    for k in ("error", "correctness_issue", "compilation_error_name", "compilation_error",
              "runtime_error_name", "runtime_error", "cuda_error_name", "cuda_error",
              "other_error_name", "other_error"):
        v = md.get(k)
        if isinstance(v, str) and v.strip():
            parts.append(re.sub(r"\s+", " ", v.strip()))
            if k.endswith("_name") or k == "correctness_issue":
                nxt = md.get(k[:-5]) if k.endswith("_name") else md.get("correctness_trials")
                if isinstance(nxt, str) and nxt.strip():
                    parts.append(re.sub(r"\s+", " ", nxt.strip()))
            break
    text = ": ".join(parts) if parts else ("not compiled" if rec.get("compiled") is False
                                            else "incorrect")
    return text[:REASON_MAX]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _child_setup() -> None:  # pragma: no cover (runs in the forked child)
    os.setsid()
    try:  # die with the parent (PR_SET_PDEATHSIG = 1)
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass


class Interrupted(Exception):
    pass


class Runner:
    """Runs one child per candidate; SIGINT/SIGTERM kill the child in flight and stop."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.stop = False

    def handler(self, signum: int, frame: Any) -> None:
        self.stop = True
        if self.proc is not None:
            _kill_group(self.proc)

    def run(self, argv: list[str], env: dict[str, str], log: Any,
            timeout_s: float) -> tuple[str, int | None, float]:
        """("ok" | "timeout" | "crashed", exit status, seconds)."""
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     env=env, preexec_fn=_child_setup)  # noqa: PLW1509
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(self.proc)
            self.proc.wait()
            self.proc = None
            return "timeout", None, time.monotonic() - t0
        _kill_group(self.proc)  # what it left behind (a compiler, a helper) goes with it
        self.proc = None
        if self.stop:
            raise Interrupted()
        return ("ok" if rc == 0 else "crashed"), rc, time.monotonic() - t0


def _describe_exit(rc: int | None) -> str:
    if rc is None:
        return "no exit status"
    if rc < 0:
        try:
            return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def _load_existing(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _package_dir() -> str:
    return str(Path(__file__).resolve().parent.parent)


def _progress(line: str) -> None:
    print(line, flush=True)


def run_tree(a: argparse.Namespace) -> int:
    lay = layout_of(a.kernelbench)
    cands: Path = a.candidates
    if not cands.is_dir():
        raise UsageError(f"candidate directory {cands} does not exist")
    if a.tasks is not None and not a.tasks.is_dir():
        raise UsageError(f"task directory {a.tasks} does not exist")
    out: Path = a.out
    log_path: Path = a.log or out.with_suffix(".log")
    build_root: Path = a.build_dir or out.with_name(out.stem + ".build")
    settings = {"seed": a.seed, "num_correct_trials": a.num_correct_trials,
                "num_perf_trials": a.num_perf_trials, "timing_method": a.timing_method,
                "device": a.device, "timeout_s": a.timeout, "precision": "fp32",
                "backend": "cuda"}
    todo = items(lay, cands, a.tasks, a.sample)
    for d in (out.parent, log_path.parent, build_root):
        d.mkdir(parents=True, exist_ok=True)
    data = {} if a.fresh else _load_existing(out)
    data[META_KEY] = {"schema": SCHEMA, "kernelbench": str(lay.root),
                      "kernelbench_commit": checkout_commit(lay.root), "settings": settings,
                      "python": sys.executable}
    runner = Runner()
    old = {s: signal.signal(s, runner.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    env = dict(os.environ)
    env["PYTHONPATH"] = _package_dir() + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    a.env = env
    done = 0
    try:
        with open(log_path, "a") as log:
            for n, it in enumerate(todo, 1):
                if runner.stop:
                    raise Interrupted()
                rkey = f"L{it.level}P{it.problem}"
                cand_sha = _sha256(it.candidate)
                prob_sha = _sha256(it.problem_file) if it.problem_file else None
                recs = [r for r in data.get(rkey, []) if isinstance(r, dict)]
                prev = next((r for r in recs if r.get("sample_id") == a.sample
                             and r.get("candidate_sha256") == cand_sha
                             and r.get("problem_sha256") == prob_sha
                             and r.get("settings") == settings
                             and (r.get("harness") or {}).get("status")
                             not in ("harness_error", "retry_failed")),
                            None)
                if prev is not None:
                    _progress(f"[{n}/{len(todo)}] {it.key}: {_shown(prev)} (kept)")
                    continue
                rec = judge(it, a, lay, build_root, log, runner, settings)
                rec.update({"sample_id": a.sample, "task": it.key, "candidate": str(it.candidate),
                            "candidate_sha256": cand_sha, "problem_sha256": prob_sha,
                            "settings": settings})
                rec["reason"] = reason_of(rec) if rec.get("correctness") is not None else \
                    rec.get("reason", "")
                data[rkey] = [r for r in recs if r.get("sample_id") != a.sample] + [rec]
                _write(out, data)
                done += 1
                _progress(f"[{n}/{len(todo)}] {it.key}: {_shown(rec)}")
                if rec["harness"]["status"] == "harness_error":
                    raise HarnessError(rec["harness"].get("message", "KernelBench's eval "
                                                                     "cannot be imported"))
        _write(out, data)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    _progress(f"KernelBench's harness: {len(todo)} candidates, {done} evaluated now; {out}")
    return EXIT_OK


def _shown(rec: dict[str, Any]) -> str:
    if rec.get("correctness") is True:
        rt = rec.get("runtime")
        ms = f", {rt:.4g} ms" if isinstance(rt, (int, float)) and rt > 0 else ""
        flag = " (excessive speed-up flagged)" if (rec.get("metadata") or {}).get(
            "excessive_speedup") else ""
        return f"correct{ms}{flag}"
    if rec.get("correctness") is None:
        return f"no verdict: {rec.get('reason', '')}"
    return f"incorrect: {rec.get('reason', '')}"


def judge(it: Item, a: argparse.Namespace, lay: Layout, build_root: Path, log: Any,
          runner: Runner, settings: dict[str, Any]) -> dict[str, Any]:
    """KernelBench's record for one candidate, from a child process."""
    if it.problem_file is None:
        return {"compiled": None, "correctness": None, "metadata": {}, "runtime": -1.0,
                "runtime_stats": {}, "problem": None,
                "reason": "the KernelBench checkout has no KernelBench/"
                          + "/".join(it.key.split("/")[-2:]) + ".py",
                "harness": {"status": "no_problem", "seconds": 0.0}}
    build_dir = build_root / f"L{it.level}P{it.problem}_{_sha256(it.candidate)[:16]}"
    build_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kb_harness_") as tmp:
        result = Path(tmp) / "result.json"
        argv = [a.python or sys.executable, "-m", "cuda_agent_bridge.kb_harness", "one",
                "--kernelbench", str(lay.root), "--problem", str(it.problem_file),
                "--candidate", str(it.candidate), "--result", str(result),
                "--device", a.device, "--num-correct-trials", str(a.num_correct_trials),
                "--num-perf-trials", str(a.num_perf_trials), "--timing-method", a.timing_method,
                "--seed", str(a.seed), "--build-dir", str(build_dir)]
        status, rc, secs = "ok", None, 0.0
        child: dict[str, Any] = {}
        for attempt in range(2):  # KernelBench returns None on a lock-file error: once more
            log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {it.key} {it.candidate}"
                      f"{' (again)' if attempt else ''}\n")
            log.flush()
            status, rc, s = runner.run(argv, a.env, log, a.timeout)
            secs += s
            child = {}
            if status == "ok" and result.is_file():
                try:
                    child = json.loads(result.read_text())
                except ValueError:
                    status = "crashed"
            elif status == "ok":
                status = "crashed"
            if child.get("status") != "retry":
                break
    harness: dict[str, Any] = {"status": status, "seconds": round(secs, 3),
                               "timeout_s": a.timeout, "stubbed": child.get("stubbed", []),
                               "kwargs": child.get("kwargs", [])}
    rec: dict[str, Any] = {"problem": str(it.problem_file.relative_to(lay.problems)),
                           "harness": harness}
    if status == "timeout":
        rec.update({"compiled": False, "correctness": False,
                    "metadata": {"error": f"Evaluation timed out after {a.timeout:g} s"},
                    "runtime": -1.0, "runtime_stats": {}})
    elif status == "crashed":
        rec.update({"compiled": False, "correctness": False,
                    "metadata": {"error": f"the evaluation process died: {_describe_exit(rc)}"},
                    "runtime": -1.0, "runtime_stats": {}})
        harness["exit"] = rc
    elif child.get("status") == "harness_error":
        harness["status"] = "harness_error"
        harness["message"] = child.get("message", "")
        rec.update({"compiled": None, "correctness": None, "metadata": {},
                    "reason": child.get("message", "")})
    elif child.get("status") == "retry":
        rec.update({"compiled": None, "correctness": None, "metadata": {},
                    "reason": "KernelBench's eval returned no result twice (lock-file error)"})
        harness["status"] = "retry_failed"
    else:
        for k in ("compiled", "correctness", "metadata", "runtime", "runtime_stats",
                  "ref_runtime", "ref_runtime_stats"):
            if k in child:
                rec[k] = child[k]
    return rec


# ---- the command line -----------------------------------------------------------------------


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(v: str) -> Any:
        x = kind(v)
        if not x > 0:
            raise argparse.ArgumentTypeError(f"{v} is not positive")
        return x
    return parse


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernelbench", type=Path, required=True, help="a KernelBench checkout")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--num-correct-trials", type=_positive(int), default=DEFAULT_CORRECT_TRIALS)
    p.add_argument("--num-perf-trials", type=_positive(int), default=DEFAULT_PERF_TRIALS)
    p.add_argument("--timing-method", default=DEFAULT_TIMING)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cuda_agent_bridge.kb_harness",
                                description="KernelBench's own eval over a candidate tree")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="judge every KernelBench file of a candidate tree")
    _common(r)
    r.add_argument("--candidates", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True, help="the eval_results.json to write")
    r.add_argument("--tasks", type=Path, help="take the keys from this task tree (bench's)")
    r.add_argument("--sample", type=int, default=0)
    r.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT_S,
                   help="seconds per candidate, its build included (KernelBench's: 180)")
    r.add_argument("--build-dir", type=Path, help="kept builds (default: OUT's stem.build/)")
    r.add_argument("--log", type=Path, help="the candidates' output (default: OUT with .log)")
    r.add_argument("--fresh", action="store_true", help="judge everything again")
    r.add_argument("--python", help="the Python of the children (default: this one)")
    c = sub.add_parser("check", help="import KernelBench's eval and say what was stood in")
    c.add_argument("--kernelbench", type=Path, required=True)
    o = sub.add_parser("one", help="one candidate (run's child)")
    _common(o)
    o.add_argument("--problem", type=Path, required=True)
    o.add_argument("--candidate", type=Path, required=True)
    o.add_argument("--result", type=Path, required=True)
    o.add_argument("--build-dir", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        a = parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    if a.cmd == "one":
        try:
            rec = eval_one(a.kernelbench, a.problem, a.candidate, a.device,
                           a.num_correct_trials, a.num_perf_trials, a.timing_method, a.seed,
                           a.build_dir)
        except HarnessError as e:
            rec = {"status": "harness_error", "message": str(e)}
        _write(a.result, rec)
        return EXIT_OK
    try:
        if a.cmd == "check":
            layout_of(a.kernelbench)
            mod, stubbed = import_eval(a.kernelbench)
            sig = inspect.signature(mod.eval_kernel_against_ref)
            print(json.dumps({"kernelbench": str(a.kernelbench.resolve()),
                              "commit": checkout_commit(a.kernelbench.resolve()),
                              "module": mod.__name__, "stubbed": stubbed,
                              "parameters": list(sig.parameters)}, indent=1))
            return EXIT_OK
        return run_tree(a)
    except Interrupted:
        print("kb_harness: interrupted; what was judged is kept (run again to resume)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except HarnessError as e:
        print(f"kb_harness: {e}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, UsageError) else EXIT_ENV


if __name__ == "__main__":
    sys.exit(main())
