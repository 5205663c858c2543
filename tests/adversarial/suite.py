#!/usr/bin/env python3
"""The candidate suites' loader and GPU runner, shared by tests/adversarial and tests/faults.

Used by tests/adversarial/check_build.sh and tests/adversarial/run.sh (see their README.md);
not meant to be called by hand. Two layouts:

- split (tests/adversarial): <suite>/honest/<name>/ ("expect": "pass") and
  <suite>/cheats/<name>/ ("expect": "reject");
- flat (tests/faults): <suite>/<name>/; "expect": "reject" makes a fault, "expect": "pass" the
  task's control, a known-good candidate the runner evaluates after every fault of its task.

Every candidate holds expect.json and a candidate of one of the formats cuda-agent evaluates:
kernels/ (native), model_new.py alone (a KernelBench ModelNew file, format kernelbench) or
binding.cpp + model_new.py + kernels/ (a CUDA-Agent workdir). Its "task" names a directory under
<suite>/tasks/ or else under tests/adversarial/tasks/ (shared by every suite).

expect.json ("expect" says which kind of candidate it is; unknown keys are errors):
  {"task", "technique", "expect": "pass"}                      honest / control
  {..., "expect": "reject", "reasons": [...], "stage": "build"|"run", optional "sandbox",
   "watchdog", "requires", "host_files", "timeout"}            cheat / fault
  {..., "expect": "held", "twin": NAME, "reasons": [...], "stage", optional "tolerance"
   (default 0.10), "sandbox", "requires", "timeout"}           cheat whose work is real but
                                                               whose claimed speed is fake
A "held" cheat passes when it is rejected with one of its reasons, or when it is correct, its
timing.candidate.median_ms is at least (1 - tolerance) x its twin's in the same run and its
reward is not higher than the twin's. The twin is an honest candidate of the same suite and
task doing the same work; the runner evaluates it whenever the cheat is evaluated.
"stage": "build" means the build must reject it (check_build.sh). "stage": "run" means it must
build and the evaluation must catch it; the build may catch it earlier, but only with one of its
reasons that a build can produce (build.* for every format; also hack.harness_tampering,
hack.torch_compute and sandbox.violation for the PyTorch formats, whose build imports the file
in the sandbox and checks it statically): check_build.sh accepts that and says so.

Commands:
  list SUITE [NAME...]   checks every expect.json, prints one tab-separated line per candidate:
                         kind, name, candidate dir, task dir, stage, reasons ("ok" for pass kinds),
                         the reasons a stage-run candidate may already be rejected with at build
                         ("-": none)
  run [options] [NAME...]  evaluates the candidates with `cuda-agent eval`, one call per task,
                         and prints one line per check, "pass|fail|skip<TAB>label<TAB>detail"
                         (and "note<TAB>-<TAB>text"), then "end"; appends one JSON line per
                         evaluation (and skipped candidate) to --results
  table RESULTS          the results as a table, with counts
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

SHARED_TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")
# Sandbox layers a candidate may require (src/sandbox/sandbox.c, layer_names).
LAYERS = ("user_ns", "mount_ns", "pid_ns", "net_ns", "ipc_ns", "uts_ns", "cgroup_ns", "filesystem",
          "no_new_privs", "capabilities", "rlimits", "cgroup", "seccomp")
PASS_KINDS = ("honest", "control")
# The keys expect.json may hold, by "expect".
PASS_KEYS = frozenset({"task", "technique", "expect"})
REJECT_KEYS = PASS_KEYS | {"reasons", "stage", "sandbox", "watchdog", "requires", "host_files", "timeout"}
HELD_KEYS = (REJECT_KEYS - {"watchdog", "host_files"}) | {"twin", "tolerance"}
DEFAULT_TOLERANCE = 0.10  # a held cheat's median may be this fraction below its twin's
# Reason codes a build can produce besides build.*: the PyTorch formats' build imports the file in
# the sandbox (sandbox.violation) and checks it statically (hack.harness_tampering,
# hack.torch_compute).
TORCH_BUILD_CODES = frozenset({"hack.harness_tampering", "hack.torch_compute", "sandbox.violation"})
TIME_SLACK_S = 30  # a fault's evaluation must end within the watchdog + this
MAX_RESUMES = 3  # new eval calls after one ended early, per task group


@dataclass
class Candidate:
    kind: str  # honest | cheat (split layout), fault | control (flat layout)
    name: str
    path: str  # the candidate directory
    task: str  # the task directory
    task_name: str
    stage: str = "-"  # build | run; "-" for pass kinds
    reasons: list[str] = field(default_factory=list)
    sandbox: bool = False  # may only run under --sandbox
    watchdog: bool = False  # ends by the watchdog
    requires: list[str] = field(default_factory=list)  # sandbox layers that must be on
    host_files: list[str] = field(default_factory=list)  # must not exist on the host afterwards
    timeout: int = 0  # the least watchdog it needs (s); 0: the runner's
    format: str = "native"  # native | kernelbench | workdir (as cuda-agent detects it)
    expect: str = "pass"  # pass | reject | held
    twin: str = ""  # held: the honest candidate doing the same work
    tolerance: float = DEFAULT_TOLERANCE  # held: how far below the twin's median it may be

    @property
    def expected(self) -> str:
        if self.kind in PASS_KINDS:
            return "ok"
        if self.expect == "held":
            return f"held to {self.twin} (-{self.tolerance:.0%}) or {','.join(self.reasons)}"
        return ",".join(self.reasons)

    @property
    def at_build(self) -> list[str]:
        """The reasons a stage-run candidate may already be rejected with by the build."""
        if self.stage != "run":
            return []
        extra = TORCH_BUILD_CODES if self.format != "native" else frozenset()
        return [r for r in self.reasons if r.startswith("build.") or r in extra]


def rel(path: str) -> str:
    r = os.path.relpath(path)
    return path if r.startswith("..") else r


def is_split(suite: str) -> bool:
    return os.path.isdir(os.path.join(suite, "honest")) or os.path.isdir(os.path.join(suite, "cheats"))


def find_task(suite: str, task: str) -> str | None:
    if not task or "/" in task or task.startswith("."):
        return None
    for base in (os.path.join(suite, "tasks"), SHARED_TASKS):
        if os.path.isfile(os.path.join(base, task, "model.py")):
            return rel(os.path.join(base, task))
    return None


def detect_format(d: str) -> tuple[str | None, str]:
    """The candidate's format as cuda-agent detects it (src/eval/torch_candidate.c), or None and
    why not."""
    kernels = os.path.isdir(os.path.join(d, "kernels"))
    model_new = os.path.isfile(os.path.join(d, "model_new.py"))
    if os.path.isfile(os.path.join(d, "binding.cpp")):
        if kernels and model_new:
            return "workdir", ""
        return None, "binding.cpp without model_new.py and kernels/ (a CUDA-Agent workdir has all three)"
    if kernels:
        if model_new:
            return None, "kernels/ and model_new.py without binding.cpp: cuda-agent would take it as native"
        return "native", ""
    if model_new:
        return "kernelbench", ""
    return None, "no kernels/ (native), model_new.py (kernelbench) or binding.cpp (workdir)"


def _is_bool(v: object) -> bool:
    return isinstance(v, bool)


def parse(suite: str, kind: str, name: str, d: str, flat: bool, errors: list[str]) -> Candidate | None:
    where = rel(d)
    try:
        with open(os.path.join(d, "expect.json")) as f:
            e = json.load(f)
    except (OSError, ValueError) as ex:
        errors.append(f"{where}: expect.json: {ex}")
        return None
    if not isinstance(e, dict):
        errors.append(f"{where}: expect.json is not an object")
        return None
    task = e.get("task")
    task_dir = find_task(suite, task) if isinstance(task, str) else None
    if task_dir is None or not isinstance(task, str):
        errors.append(f"{where}: task {task!r} is not a task under {rel(suite)}/tasks or {rel(SHARED_TASKS)}")
        return None
    if not isinstance(e.get("technique"), str) or not e["technique"].strip():
        errors.append(f"{where}: no technique")
    fmt, why = detect_format(d)
    if fmt is None:
        errors.append(f"{where}: {why}")
        fmt = "native"
    expect = e.get("expect")
    if flat:
        kind = "control" if expect == "pass" else "fault"
    want = ("pass",) if kind in PASS_KINDS else ("reject",) if flat else ("reject", "held")
    if not isinstance(expect, str) or expect not in want:
        errors.append(f"{where}: \"expect\" must be {' or '.join(repr(w) for w in want)} here, not {expect!r}")
        return None
    allowed = {"pass": PASS_KEYS, "reject": REJECT_KEYS, "held": HELD_KEYS}[expect]
    unknown = sorted(set(e) - allowed)
    if unknown:
        errors.append(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for "
                      f"\"expect\": \"{expect}\" (allowed: {', '.join(sorted(allowed))})")
    c = Candidate(kind, name, rel(d), task_dir, task, format=fmt, expect=expect)
    if kind in PASS_KINDS:
        return c
    reasons, stage = e.get("reasons"), e.get("stage")
    if stage not in ("build", "run") or not isinstance(reasons, list) or not reasons or \
            not all(isinstance(r, str) and r and r == r.strip() for r in reasons):
        errors.append(f"{where}: needs \"stage\": \"build\" or \"run\" and \"reasons\", a non-empty list "
                      "of reason codes")
        return None
    if len(set(reasons)) != len(reasons):
        errors.append(f"{where}: \"reasons\" lists a code twice")
    c.stage, c.reasons = stage, reasons
    for key in ("sandbox", "watchdog"):
        v = e.get(key, None if flat else False)
        if not _is_bool(v):
            errors.append(f"{where}: \"{key}\" must be true or false")
        else:
            setattr(c, key, v)
    if expect == "reject" and c.watchdog != ("timeout" in reasons):
        errors.append(f"{where}: \"watchdog\": true goes with reason timeout, and only with it")
    req = e.get("requires", [])
    if not isinstance(req, list) or not all(r in LAYERS for r in req):
        errors.append(f"{where}: \"requires\" lists sandbox layers, some of {', '.join(LAYERS)}")
    elif req and not c.sandbox:
        errors.append(f"{where}: \"requires\" needs \"sandbox\": true")
    else:
        c.requires = req
    t = e.get("timeout", 0)
    if not isinstance(t, int) or _is_bool(t) or not 0 <= t <= 600:
        errors.append(f"{where}: \"timeout\" is whole seconds, at most 600")
    else:
        c.timeout = t
    files = e.get("host_files", [])
    if not isinstance(files, list) or not all(isinstance(p, str) and p and ".." not in p.split("/")
                                              for p in files):
        errors.append(f"{where}: \"host_files\" lists paths (absolute, or inside the candidate)")
    else:
        c.host_files = [p if p.startswith("/") else os.path.abspath(os.path.join(d, p)) for p in files]
    if expect == "held":
        twin, tol = e.get("twin"), e.get("tolerance", DEFAULT_TOLERANCE)
        if not isinstance(twin, str) or not twin or "/" in twin:
            errors.append(f"{where}: \"twin\" must name an honest candidate of the suite")
        else:
            c.twin = twin
        if not isinstance(tol, (int, float)) or _is_bool(tol) or not 0 < tol < 1:
            errors.append(f"{where}: \"tolerance\" must be a number between 0 and 1 (exclusive)")
        else:
            c.tolerance = float(tol)
        if "timeout" in reasons:
            errors.append(f"{where}: a held cheat does its work: reason timeout does not fit")
    return c


def load(suite: str, only: list[str]) -> tuple[list[Candidate], list[str]]:
    """Every candidate of the suite in order (NAMEs: those, plus their tasks' controls)."""
    errors: list[str] = []
    found: list[Candidate] = []
    flat = not is_split(suite)
    if flat:
        dirs = [("fault", n, os.path.join(suite, n)) for n in sorted(os.listdir(suite))
                if os.path.isdir(os.path.join(suite, n)) and n != "tasks" and not n.startswith((".", "_"))]
    else:
        dirs = [(kind, n, os.path.join(suite, sub, n)) for sub, kind in (("honest", "honest"), ("cheats", "cheat"))
                if os.path.isdir(os.path.join(suite, sub))
                for n in sorted(os.listdir(os.path.join(suite, sub)))]
    for kind, name, d in dirs:
        c = parse(suite, kind, name, d, flat, errors)
        if c:
            found.append(c)
    if flat:
        for task in sorted({c.task for c in found}):
            controls = [c.name for c in found if c.task == task and c.kind == "control"]
            if any(c.task == task and c.kind == "fault" for c in found) and len(controls) != 1:
                errors.append(f"{rel(suite)}: task {task} needs exactly one control (\"expect\": \"pass\") "
                              f"to evaluate after its faults; found {controls or 'none'}")
    by_name = {c.name: c for c in found}
    for c in found:
        if c.expect != "held" or not c.twin:
            continue
        t = by_name.get(c.twin)
        if t is None:
            errors.append(f"{c.path}: twin {c.twin!r} is no candidate of {rel(suite)}")
        elif t.kind not in PASS_KINDS:
            errors.append(f"{c.path}: twin {c.twin!r} is a {t.kind}, not an honest candidate")
        elif t.task != c.task:
            errors.append(f"{c.path}: twin {c.twin!r} is of task {t.task_name}, not {c.task_name}")
    if only:
        names = set(by_name)
        errors += [f"{rel(suite)}: no candidate named {n}" for n in only if n not in names]
        wanted = set(only) | {c.twin for c in found if c.name in only and c.expect == "held"}
        tasks = {c.task for c in found if c.name in wanted}
        found = [c for c in found if c.name in wanted or (c.kind == "control" and c.task in tasks)]
    return found, errors


def cmd_list(args: argparse.Namespace) -> int:
    cands, errors = load(args.suite, args.names)
    for m in errors:
        print(m, file=sys.stderr)
    for c in cands:
        print("\t".join([c.kind, c.name, c.path, c.task, c.stage, ",".join(c.reasons) or "ok",
                         ",".join(c.at_build) or "-"]))
    return 1 if errors else 0


# ---- run ----------------------------------------------------------------------------------------

@dataclass
class Held:
    """A held cheat's correct, timed result waiting for its twin's result of the same run."""

    c: Candidate
    label: str
    r: dict[str, Any]
    got: str  # what it got, for messages


def median_ms(r: dict[str, Any] | None) -> float | None:
    """timing.candidate.median_ms of a result when it is a positive number."""
    t = ((r or {}).get("timing") or {}).get("candidate") or {}
    m = t.get("median_ms") if isinstance(t, dict) else None
    return float(m) if isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0 else None


def held_verdict(h: Held, twin: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether a correct, timed held cheat was held to its twin: its median at least
    (1 - tolerance) x the twin's and its reward not above the twin's."""
    c, r = h.c, h.r
    m = median_ms(r)
    assert m is not None
    if twin is None:
        return False, f"its twin {c.twin} has no result in this run, so its claimed speed cannot be checked; {h.got}"
    tm, reward, twin_reward = median_ms(twin), r.get("reward"), twin.get("reward")
    if twin.get("correct") is not True or tm is None or not isinstance(twin_reward, (int, float)):
        code = (twin.get("reason") or {}).get("code", "no-result")
        return False, (f"its twin {c.twin} was not correct and timed in this run (got {code}), so its claimed "
                       f"speed cannot be checked; {h.got}")
    floor = (1.0 - c.tolerance) * tm
    r["check"].update({"twin": c.twin, "median_ms": m, "twin_median_ms": tm, "twin_reward": twin_reward})
    ok = m >= floor and isinstance(reward, (int, float)) and reward <= twin_reward
    verdict = "held" if ok else "NOT held (its claimed speed stood)"
    return ok, (f"{verdict}: correct, median {m:.4g} ms against its twin {c.twin}'s {tm:.4g} ms (floor "
                f"{floor:.4g} ms at -{c.tolerance:.0%}), reward {reward} against {twin_reward}; expected "
                f"{c.expected}")


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.flags = shlex.split(args.flags)
        # The sandbox is on by default; --no-sandbox or CUDA_AGENT_SANDBOX=0 turns it off
        # (a later --sandbox turns it back on).
        flags_on = [f for f in self.flags if f in ("--sandbox", "--no-sandbox")]
        if flags_on:
            self.sandboxed = flags_on[-1] == "--sandbox"
        else:
            self.sandboxed = os.environ.get("CUDA_AGENT_SANDBOX") != "0"
        self.flat = not is_split(args.suite)
        self.suite = os.path.basename(os.path.normpath(args.suite))
        self.layers: dict[str, dict[str, Any]] = {}  # as reported by sandboxed results of this run
        self.calls = 0
        self.held: list[Held] = []  # held cheats that were not rejected, waiting for their twin
        self.twin_results: dict[str, dict[str, Any]] = {}  # honest results of this run, by name

    def emit(self, verdict: str, label: str, detail: str) -> None:
        print(f"{verdict}\t{label}\t{' '.join(detail.split())}", flush=True)

    def record(self, r: dict[str, Any]) -> None:
        with open(self.a.results, "a") as f:
            f.write(json.dumps(r) + "\n")

    def skip(self, c: Candidate, why: str) -> None:
        self.record({"reason": {"code": "skipped", "message": why}, "reward": None,
                     "check": {"suite": self.suite, "kind": c.kind, "name": c.name, "label": f"{c.kind} {c.name}",
                               "expected": c.expected, "got": "skipped", "verdict": "skip", "passed": False,
                               "why": why}})
        self.emit("skip", f"{c.kind} {c.name}", why)

    def sequence(self, group: list[Candidate], controls: dict[str, Candidate]) -> list[tuple[Candidate, str]]:
        """The eval order of one task's group with labels: in a flat suite each fault is followed
        by its task's control."""
        seq: list[tuple[Candidate, str]] = []
        for c in group:
            seq.append((c, f"{c.kind} {c.name}"))
            ctl = controls.get(c.task)
            if self.flat and c.kind == "fault" and ctl:
                seq.append((ctl, f"{ctl.name} after {c.name}"))
        return seq

    def clear_host_files(self, c: Candidate) -> list[str]:
        found = []
        for p in c.host_files:
            if os.path.lexists(p):
                found.append(p)
                try:
                    os.remove(p)
                except OSError as ex:
                    found[-1] += f" (cannot remove: {ex.strerror})"
        return found

    def eval_call(self, task: str, seq: list[tuple[Candidate, str]], w: int) -> None:
        """`cuda-agent eval` for the sequence, judging every entry. If the call ends early, the
        entry it was on is judged no-result and the rest go to a fresh call (MAX_RESUMES times;
        then they are all no-result): never skipped silently."""
        for c, _ in seq:
            stale = self.clear_host_files(c)
            if stale:
                self.emit("note", "-", f"removed files left by an earlier run before {c.name}: "
                                       f"{', '.join(stale)}")
        resumes = 0
        while seq:
            done, rc, why = self.one_call(task, seq, w)
            if done >= len(seq):
                return
            last = resumes >= MAX_RESUMES or done + 1 >= len(seq)
            for c, label in seq[done:] if last else seq[done:done + 1]:
                self.judge(c, label, {"reason": {"code": "no-result", "message": why}}, None, rc, w)
            seq = [] if last else seq[done + 1:]
            resumes += 1
            if seq:
                self.emit("note", "-", f"the eval call ended early; resuming with {seq[0][1]} in a new one")

    def one_call(self, task: str, seq: list[tuple[Candidate, str]], w: int) -> tuple[int, int, str]:
        """Runs one eval call (watchdog w) and judges the entries it returned a result for.
        Returns how many did, the exit status, and what to say about the others."""
        limit = len(seq) * (w + 90) + 120
        self.calls += 1
        err_path = os.path.join(self.a.tmp, f"eval{self.calls}.stderr")
        argv = ["timeout", "-k", "10", str(limit), self.a.cli, "eval", "--json", "-q", "--budget",
                str(self.a.budget), "--timeout", str(w), *self.flags, task, *[c.path for c, _ in seq]]
        done = stray = 0
        t0 = prev = time.monotonic()
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
            assert proc.stdout is not None
            for raw in proc.stdout:
                now = time.monotonic()
                try:
                    r = json.loads(raw)
                except ValueError:
                    r = None
                if not isinstance(r, dict) or not str(r.get("schema", "")).startswith("cuda-agent.result"):
                    stray += 1
                    continue
                if done < len(seq):
                    # judged at once (the rc is not known yet): the table shows progress live
                    self.judge(seq[done][0], seq[done][1], r, now - prev, None, w)
                    done += 1
                else:
                    stray += 1
                prev = now
            rc = proc.wait()
        try:
            with open(err_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 600))
                err_tail = f.read().decode(errors="replace")
        except OSError:
            err_tail = ""
        how = (f"was killed at the call's time limit ({limit} s)" if rc in (124, 137) and
               time.monotonic() - t0 >= limit else f"exited {rc}")
        why = (f"cuda-agent {how} after {done} of {len(seq)} results (this candidate was next)"
               f"{f'; {stray} stray lines' if stray else ''}; stderr: {err_tail}")
        return done, rc, why

    def judge(self, c: Candidate, label: str, r: dict[str, Any], wall: float | None, rc: int | None,
              w: int) -> None:
        reason = r.get("reason") or {}
        code = reason.get("code", "no-result")
        reward = r.get("reward")
        msg = " ".join(str(reason.get("message", "")).split())[:400]
        exit_note = f", exit {rc}" if rc is not None else ""
        got = f"got {code} (reward {reward}{exit_note}): {msg}"
        deferred = False
        if c.kind in PASS_KINDS:
            passed = r.get("correct") is True and isinstance(reward, (int, float)) and reward >= 1
        elif c.expect == "held" and not (reward == -1 and code in c.reasons):
            # Not rejected: it holds only if its time is no better than its twin's (decided once
            # the twin's result of this run is in). Anything but a correct, timed result fails.
            passed = False
            deferred = r.get("correct") is True and median_ms(r) is not None
        else:
            passed = reward == -1 and code in c.reasons
        why = f"expected {c.expected}, {got}"
        total = (r.get("seconds") or {}).get("total")
        took = total if isinstance(total, (int, float)) else wall
        if self.flat and c.kind == "fault" and code != "no-result" and took is not None and \
                took > w + TIME_SLACK_S:
            passed = deferred = False
            why = f"took {took:.0f} s, over the watchdog {w} s + {TIME_SLACK_S} s; {why}"
        left = self.clear_host_files(c)
        if left:
            passed = deferred = False
            why = f"left files on the host (removed now): {', '.join(left)}; {why}"
        if isinstance(r.get("isolation"), dict) and r["isolation"].get("sandbox") is True:
            for name, state in (r["isolation"].get("layers") or {}).items():
                if isinstance(state, dict):
                    self.layers[name] = state
        r["check"] = {"suite": self.suite, "kind": c.kind, "name": c.name, "label": label,
                      "expected": c.expected, "got": code, "seconds": took, "wall_seconds": wall, "exit": rc,
                      "watchdog": w}
        if deferred:
            self.held.append(Held(c, label, r, got))
        else:
            self.finish(r, passed, why)
        if c.kind in PASS_KINDS:
            self.twin_results[c.name] = r
        self.resolve_held(final=False)

    def finish(self, r: dict[str, Any], passed: bool, why: str) -> None:
        """Completes r's check object with the verdict, records r and prints its line."""
        r["check"].update({"verdict": "pass" if passed else "fail", "passed": passed, "why": why})
        self.record(r)
        self.emit("pass" if passed else "fail", r["check"]["label"], why)

    def resolve_held(self, final: bool) -> None:
        """Decides the held cheats whose twin has a result now (final: all of them; a twin with no
        result in this run fails its cheat, which cannot be judged then)."""
        waiting: list[Held] = []
        for h in self.held:
            twin = self.twin_results.get(h.c.twin)
            if twin is None and not final:
                waiting.append(h)
                continue
            passed, why = held_verdict(h, twin)
            self.finish(h.r, passed, why)
        self.held = waiting

    def missing_layers(self, c: Candidate) -> list[str]:
        return [f"{n} ({(self.layers.get(n) or {}).get('detail', 'not reported')})" for n in c.requires
                if not (self.layers.get(n) or {}).get("on")]

    def run(self) -> int:
        cands, errors = load(self.a.suite, self.a.names)
        if errors:
            for m in errors:
                print(m, file=sys.stderr)
            return 1
        controls = {c.task: c for c in cands if c.kind == "control"}
        tasks: list[str] = []
        for c in cands:
            if c.task not in tasks:
                tasks.append(c.task)
        runnable: list[Candidate] = []
        for c in cands:
            if c.kind == "control":
                continue  # evaluated after each fault of its task
            if c.sandbox and not self.sandboxed:
                self.skip(c, "runs only under --sandbox (it would harm the host otherwise); "
                             f"the eval flags are {self.a.flags!r}")
                continue
            runnable.append(c)
        for ctl in controls.values():
            if not any(c.task == ctl.task for c in runnable):
                runnable.append(ctl)  # no fault of its task runs: the control once on its own
        # First everything that needs no particular sandbox layer; then, once a sandboxed result
        # of this run showed the layers on, the rest.
        for phase in (1, 2):
            for task in tasks:
                group = [c for c in runnable if c.task == task and bool(c.requires) == (phase == 2)]
                if phase == 2 and group and not self.layers and task in controls:
                    self.eval_call(task, [(controls[task], f"{controls[task].name} (sandbox probe)")],
                                   self.a.watchdog)
                ready = []
                for c in group:
                    missing = self.missing_layers(c)
                    if missing:
                        self.skip(c, f"needs sandbox layers that this host's sandboxed evaluations did not "
                                     f"have on: {', '.join(missing)}")
                    else:
                        ready.append(c)
                # one call per watchdog: a candidate's "timeout" raises it for its own call
                for w in sorted({max(self.a.watchdog, c.timeout) for c in ready}):
                    self.eval_call(task, self.sequence([c for c in ready if max(self.a.watchdog, c.timeout) == w],
                                                       controls), w)
        self.resolve_held(final=True)
        print("end\t-\t-", flush=True)
        return 0


def cmd_run(args: argparse.Namespace) -> int:
    return Runner(args).run()


# ---- table --------------------------------------------------------------------------------------

def cmd_table(args: argparse.Namespace) -> int:
    with open(args.results) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print(f"{'candidate':38} {'expected':44} {'got':26} {'reward':>6} {'ms':>9} {'s':>5}  verdict")
    for r in rows:
        c = r["check"]
        t = (r.get("timing") or {}).get("candidate") or {}
        ms = t.get("median_ms")
        ms_s = f"{ms:9.4f}" if isinstance(ms, (int, float)) else f"{'-':>9}"
        secs = c.get("seconds")
        secs_s = f"{secs:5.0f}" if isinstance(secs, (int, float)) else f"{'-':>5}"
        exp = c["expected"] if len(c["expected"]) <= 44 else c["expected"][:41] + "..."
        print(f"{c['label']:38} {exp:44} {c['got']:26} {str(r.get('reward')):>6} {ms_s} {secs_s}  "
              f"{ {'pass': 'ok', 'fail': 'FAIL', 'skip': 'SKIP'}[c['verdict']]}")
    counts: dict[str, list[int]] = {}
    for r in rows:
        c = r["check"]
        k = counts.setdefault(c["kind"], [0, 0, 0])
        k[0] += c["verdict"] == "pass"
        k[1] += 1
        k[2] += c["verdict"] == "skip"
    what = {"honest": "honest candidates correct", "cheat": "cheats rejected (or held) as expected",
            "fault": "faults ended as expected", "control": "control evaluations correct"}
    print("\n" + "; ".join(f"{what.get(k, k)}: {v[0]}/{v[1]}" + (f" ({v[2]} skipped)" if v[2] else "")
                           for k, v in counts.items()))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("list")
    pl.add_argument("suite")
    pl.add_argument("names", nargs="*")
    pl.set_defaults(func=cmd_list)
    pr = sub.add_parser("run")
    pr.add_argument("--suite", required=True)
    pr.add_argument("--cli", required=True)
    pr.add_argument("--results", required=True)
    pr.add_argument("--tmp", required=True)
    pr.add_argument("--watchdog", type=int, required=True)
    pr.add_argument("--budget", required=True)
    pr.add_argument("--flags", default="")
    pr.add_argument("names", nargs="*")
    pr.set_defaults(func=cmd_run)
    pt = sub.add_parser("table")
    pt.add_argument("results")
    pt.set_defaults(func=cmd_table)
    args = p.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
