"""`synth filter`: which composed tasks are kept, and why the others are not (docs/synth.md).

Stages, in order; a task is dropped at the first it fails (the funnel counts each):
1. ``runs``: model.py runs in eager PyTorch (at the probe batch: the batch dimension is free);
2. ``deterministic``: two runs on the same inputs give the same output;
3. ``stochastic``: the output does not change with the global seed (dropout, random ops);
4. ``degenerate``: the evaluation's own detector (compose.degenerate_why: degenerate.Judge over
   four input draws with the default tolerance) finds the output not within tolerance of zeros
   or a constant, and changing with the inputs;
5. ``compiles``: torch.compile runs it (skipped with ``--no-compile``; CPU-heavy, so filter runs
   tasks in parallel processes);
6. ``runtime``: eager runtime in [1, 100] ms at the task's size, measured with CUDA events
   where a GPU is, else the composer's roofline estimate (marked ``estimated``). A composed
   task is first timed at a 128th and a 16th of its batch (pilot_bound_ms): one whose lower
   bound from those is above 3x the range's top is dropped without being run at its size,
   which is what cost the GPU most (seconds to a minute a task). Stages 1-5 run
   on the CPU in parallel processes that never touch the GPU; stage 6 runs in one timing
   process (Timer), one task at a time, fed by a thread of its own while they check the next
   tasks (a task they drop is given out at once). Each task's stages 1-5
   have CHECK_LIMIT_S and its stage 6 TIMING_LIMIT_S: a task past its limit is dropped at the
   stage it was in, and holds up no other (verdicts are taken in the order they finish);
7. ``decontaminated``: its similarity (synth/similarity.py) to every KernelBench program of the
   given tree is at most 0.9;
8. ``unique``: no task kept before it (in the order the verdicts finish) has the same operators
   in the same order (a near-copy: sizes aside, the same computation).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from . import compose, similarity, vec_isa
from .catalog import PROBE_SHAPES, Json
from .compose import load, run_probe

STAGES = ("runs", "deterministic", "stochastic", "degenerate", "compiles", "runtime",
          "decontaminated", "unique")
RUNTIME_MS = (1.0, 100.0)
DECONTAMINATION_MAX = 0.9
# One task's stages 1-5 on one CPU (its first torch.compile in a cold process: 3-25 s measured;
# later ones about 1 s), and its stage 6 on the GPU. A task past either is dropped at the stage
# it was in. A timing is 3 warm-up and 5 timed calls, ended after the second when that is above
# 200 ms: a task in [1, 100] ms needs under a second of calls plus its first calls' lazy set-up
# (H100, 2026-12-06: 0.02-1.4 s in all over 27 tasks), so 30 s only cuts off what would be
# dropped anyway, and bounds what one task costs the GPU, which times one task at a time.
CHECK_LIMIT_S = 300.0
TIMING_LIMIT_S = 30.0
PILOT_DROP_MS = 3 * RUNTIME_MS[1]  # pilot_bound_ms above this: dropped untimed at its size
# Past TIMING_LIMIT_S, this long for the timing process to raise TaskTimeout before it is killed
# (the first task also waits for the process's start: torch's import and a CUDA context).
TIMER_GRACE_S = 30.0


class TaskTimeout(BaseException):
    """A task's stage ran past its limit (time_limit). Not an Exception: the stages' own
    `except Exception` turn what a task's code raises into a verdict, and must not take this."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raises TaskTimeout in this thread once `seconds` have passed (SIGALRM; the main thread
    only, else no limit). Python code is interrupted; one long C call (a single huge op) ends
    first, then the exception is raised."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise TaskTimeout

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _probe_batch(task: Json) -> int:
    if task.get("probe_batch"):
        return int(task["probe_batch"])  # an LLM's task (synth/llm.py)
    return PROBE_SHAPES[int(task["rank"])][0]


def _model(ns: dict[str, Any]) -> Any:
    return ns["Model"](*ns["get_init_inputs"]()).eval()


def estimate_ms(task: Json) -> float:
    """An LLM task's roofline estimate (the composer's model): FLOPs (torch's counter) and bytes
    (inputs and output) at the probe batch, scaled to its batch_size."""
    b = _probe_batch(task)
    ns = load(task["code"])
    full = int(ns.get("batch_size", b))
    ns["batch_size"] = b
    torch.manual_seed(0)
    model = _model(ns)
    inputs = ns["get_inputs"]()
    with warnings.catch_warnings(), torch.no_grad(), FlopCounterMode(display=False) as fc:
        warnings.simplefilter("ignore")
        out = model(*inputs)
    nbytes = sum(float(t.numel() * t.element_size()) for t in [*inputs, out]
                 if isinstance(t, torch.Tensor))
    return compose.estimate_ms([float(fc.get_total_flops())], [nbytes], max(full, 1) / b)


def check_eager(task: Json) -> tuple[str, str] | None:
    """Stages 1-4: None when they pass, else (stage, why). A task that raises on any of its
    input draws (a singular matrix for linalg.inv on one of them, say) fails `runs`: the
    evaluation would draw such inputs too."""
    try:
        return _check_eager(task)
    except Exception as exc:  # noqa: BLE001 - whatever the task's code raises
        return "runs", f"on another input draw: {type(exc).__name__}: {str(exc)[:200]}"


def _check_eager(task: Json) -> tuple[str, str] | None:
    b = _probe_batch(task)
    try:
        out1, _ = run_probe(task["code"], batch=b, seed=0)
        out2, _ = run_probe(task["code"], batch=b, seed=0)
    except Exception as exc:  # noqa: BLE001 - whatever the composed code raises
        return "runs", f"{type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(out1, torch.Tensor) or not isinstance(out2, torch.Tensor):
        return "runs", "forward does not return one tensor"
    if not torch.equal(out1, out2):
        return "deterministic", "two runs on the same inputs differ"
    ns = load(task["code"])
    ns["batch_size"] = b
    torch.manual_seed(0)
    model = _model(ns)
    torch.manual_seed(123)
    inputs = ns["get_inputs"]()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.manual_seed(1)
        a = model(*inputs)
        torch.manual_seed(2)
        c = model(*inputs)
    if not torch.equal(a, c):
        return "stochastic", "the output changes with the global seed"
    why = compose.degenerate_why(task["code"], b)
    if why is not None:
        return "degenerate", why
    return None


def check_compile(task: Json) -> tuple[str, str] | None:
    b = _probe_batch(task)
    try:
        ns = load(task["code"])
        ns["batch_size"] = b
        torch.manual_seed(0)
        model = _model(ns)
        inputs = ns["get_inputs"]()
        torch._dynamo.reset()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            eager = model(*inputs)
            comp = torch.compile(model)(*inputs)  # type: ignore[no-untyped-call]
        if comp.shape != eager.shape:
            return "compiles", "torch.compile changes the output's shape"
    except Exception as exc:  # noqa: BLE001
        return "compiles", f"torch.compile: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def runtime_ms(task: Json, split: dict[str, float] | None = None) -> tuple[float, bool]:
    """(eager runtime in ms, measured): CUDA events at the task's size where a GPU is, else the
    composer's estimate. `split`, when given, gets where the timing's seconds went:
    ``timing_setup`` (the model and its inputs made on the GPU), ``timing_pilot``
    (pilot_bound_ms) and ``timing_calls`` (the warm-up and timed calls at the task's size); and
    ``pilot_bound_ms``, the pilot's bound, with ``pilot_only`` 1 when that bound is what is
    returned (the task was not timed at its size), or ``pilot_failed`` 1."""
    if not torch.cuda.is_available():
        return float(task["estimated_ms"]), False
    return timed_ms(task, "cuda", split), True


def timed_ms(task: Json, device: str, split: dict[str, float] | None = None) -> float:
    """runtime_ms's measurement on `device`: CUDA events on "cuda", the wall clock on "cpu"
    (which tests use: the same steps, no GPU)."""
    split = split if split is not None else {}
    cuda = device == "cuda"
    t0 = time.perf_counter()
    ns = load(task["code"])
    full = int(ns.get("batch_size", 0) or 0)
    torch.manual_seed(0)
    with torch.device(device):  # inputs made on the GPU: a 2 GiB randn on the CPU takes seconds
        model = _model(ns)

    def call_with(inputs: list[Any]) -> Callable[[], float]:
        def call() -> float:
            if not cuda:
                c0 = time.perf_counter()
                model(*inputs)
                return 1e3 * (time.perf_counter() - c0)
            s = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            e = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            s.record()
            model(*inputs)
            e.record()
            e.synchronize()
            return float(s.elapsed_time(e))
        return call

    def inputs_at(batch: int) -> list[Any]:
        ns["batch_size"] = batch
        with torch.device(device):
            inputs = list(ns["get_inputs"]())
        if cuda:
            torch.cuda.synchronize()
        return inputs

    def time_at(batch: int) -> float:
        call = call_with(inputs_at(batch))
        with torch.no_grad():
            call()  # lazy initialization (jiterator kernels, cuBLAS, the allocator)
            return call()

    if cuda:
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    bound = None
    if task.get("probe_batch") is None:  # a composed task: its batch dimension scales freely
        try:
            bound = pilot_bound_ms(time_at, full)
        except torch.OutOfMemoryError:
            raise  # at a 16th of its size: the task's own size would not fit either
        except Exception:  # noqa: BLE001 - not at these sizes: timed at its own, as before
            split["pilot_failed"] = 1.0
    t2 = time.perf_counter()
    split["timing_setup"] = round(t1 - t0, 3)
    split["timing_pilot"] = round(t2 - t1, 3)
    if bound is not None:
        split["pilot_bound_ms"] = round(bound, 3)
        if bound > PILOT_DROP_MS:
            split["pilot_only"] = 1.0
            return bound
    call = call_with(inputs_at(full))
    t3 = time.perf_counter()
    with torch.no_grad():
        ms = median_call_ms(call)
    split["timing_setup"] = round(split["timing_setup"] + t3 - t2, 3)
    split["timing_calls"] = round(time.perf_counter() - t3, 3)
    return ms


def pilot_bound_ms(time_at: Callable[[int], float], full: int) -> float | None:
    """A lower bound on a composed task's warm runtime at batch `full`, from its warm times at
    two batches a 128th and a 16th of it (time_at(b): the second of two calls at batch b), or
    None when `full` is too small for a pilot. A composed task's batch dimension is free, and
    its GPU time grows with the batch: flat while the GPU is not full, then at least linearly
    (more waves, then more than the L2 holds). So the line through the two pilot times stays
    under the curve beyond them, and its value at `full` is a lower bound; a task whose bound
    is above PILOT_DROP_MS (three times the range's top) is out of the range whatever the
    noise. Where the time per batch row falls with the batch instead (a library switching to a
    better algorithm at large sizes), the line overestimates: by 1.6x for a time growing as
    b^0.8 over the pilot's 128x, 2.5x for b^0.6, 3x for b^0.5; only a curve flatter than that
    can lose a task in the range. Tasks far above the range cost the GPU seconds to a minute
    each at their size (H200, 2026-12-06: 69 of 482 tasks, 171 s of timing plus 6 killed after
    60 s, of 890 s); the pilot costs four calls at a 16th of the size or less."""
    b1, b2 = full // 128, full // 16
    if b1 < 1 or b2 <= b1:
        return None
    t1 = time_at(b1)
    if t1 > PILOT_DROP_MS:
        return t1  # the full size takes at least as long: no second pilot
    t2 = time_at(b2)
    slope = max(0.0, (t2 - t1) / (b2 - b1))
    return max(t1, t2 + slope * (full - b2))


def median_call_ms(call: Callable[[], float]) -> float:
    """The median of 5 timed calls after 3 warm-up calls; call() runs the model once and returns
    its time in ms. A second call already above twice the range's top ends it there: more calls
    would not bring the task into the range, and one of 3 s would cost 24 s of the GPU, which
    times one task at a time (H200, 2026-12-02: tasks dropped for their runtime took 128 s of
    the 164 s of GPU timing in a sandboxed run)."""
    call()  # lazy initialization (cuBLAS, cuDNN, allocator)
    second = call()
    if second > 2 * RUNTIME_MS[1]:
        return second
    call()
    return statistics.median(call() for _ in range(5))


def cpu_verdict(task: Json, do_compile: bool) -> Json:
    """Stages 1-5 of one task, on the CPU (the parallel part): {id, stage, why[, compiled]}."""
    torch.set_num_threads(1)
    out: Json = {"id": task["id"], "stage": None, "why": ""}
    secs: dict[str, float] = {}
    failed: tuple[str, str] | None = None
    stage, t0 = "checks", time.perf_counter()
    try:
        with time_limit(CHECK_LIMIT_S):
            failed = check_eager(task)
            secs["checks"] = round(time.perf_counter() - t0, 3)
            if failed is None and do_compile:
                stage, t0 = "compile", time.perf_counter()
                failed = check_compile(task)
                secs["compile"] = round(time.perf_counter() - t0, 3)
                out["compiled"] = failed is None
    except TaskTimeout:
        secs[stage] = round(time.perf_counter() - t0, 3)
        failed = ("compiles" if stage == "compile" else "runs",
                  f"its {'torch.compile' if stage == 'compile' else 'eager checks'} took more "
                  f"than {CHECK_LIMIT_S:g} s on the CPU")
        torch._dynamo.reset()  # nothing of the interrupted compile is kept for the next task
    out["seconds"] = secs  # where a run's time goes (step_filter sums them)
    if failed is None and task.get("estimated_ms") is None:
        try:
            task["estimated_ms"] = out["estimated_ms"] = round(estimate_ms(task), 3)
        except Exception as exc:  # noqa: BLE001
            failed = "runs", f"estimating its runtime: {type(exc).__name__}: {str(exc)[:200]}"
    if failed:
        out["stage"], out["why"] = failed
    return out


def timed_verdict(task: Json, out: Json) -> Json:
    """Stage 6 on a verdict that passed stages 1-5 (in one process: the GPU times one task at a
    time, so that no timing shares the GPU with another)."""
    if out["stage"] is not None:
        return out
    if task.get("estimated_ms") is None and out.get("estimated_ms") is not None:
        task = dict(task, estimated_ms=out["estimated_ms"])  # an LLM task's, from stage 1-5
    t0 = time.perf_counter()
    try:
        split: dict[str, float] = {}
        with time_limit(TIMING_LIMIT_S):
            ms, measured = runtime_ms(task, split)
        out.setdefault("seconds", {})["timing"] = round(time.perf_counter() - t0, 3)
        out["timing_split"] = split  # not under seconds: time_report sums those
    except TaskTimeout:
        out.setdefault("seconds", {})["timing"] = round(time.perf_counter() - t0, 3)
        out["stage"] = "runtime"
        out["why"] = f"its timing took more than {TIMING_LIMIT_S:g} s on the GPU"
        out["gpu_fault"] = True  # the process is replaced: what it was doing may go on
        return out
    except Exception as exc:  # noqa: BLE001 - out of memory at the task's size, say
        out["stage"], out["why"] = "runtime", f"{type(exc).__name__}: {str(exc)[:200]}"
        out["gpu_fault"] = True  # a CUDA error can be sticky: the process's context is lost
        return out
    out["runtime_ms"], out["measured"] = round(ms, 3), measured
    if split.get("pilot_only"):
        out["stage"] = "runtime"
        out["why"] = (f"eager runtime at least {ms:.3g} ms (a bound from its times at a 128th and "
                      f"a 16th of its batch; not timed at its size), above {PILOT_DROP_MS:g} ms")
    elif not RUNTIME_MS[0] <= ms <= RUNTIME_MS[1]:
        out["stage"] = "runtime"
        out["why"] = (f"eager runtime {ms:.3g} ms is outside [{RUNTIME_MS[0]:g}, "
                      f"{RUNTIME_MS[1]:g}] ms" + ("" if measured else " (estimated)"))
    return out


def verdict(task: Json, do_compile: bool) -> Json:
    """Stages 1-6 of one task, in this process."""
    out = timed_verdict(task, cpu_verdict(task, do_compile))
    out.pop("gpu_fault", None)
    return out


class Decontaminator:
    """Stages 7-8, in task order (each task is compared with those kept before it)."""

    def __init__(self, kernelbench: dict[str, list[str]]) -> None:
        self.kernelbench = kernelbench
        self.kept: dict[tuple[str, ...], str] = {}  # operator sequence -> the kept task

    def check(self, task: Json) -> tuple[str, str, Json] | None:
        fp = similarity.fingerprint(task["code"])
        name, score = similarity.closest(fp, self.kernelbench)
        info: Json = {"kernelbench_closest": name, "kernelbench_similarity": round(score, 4)}
        if score > DECONTAMINATION_MAX:
            return "decontaminated", f"similarity {score:.3f} to KernelBench {name}", info
        ops = tuple(task["ops"])
        if ops in self.kept:
            return "unique", f"the same operators as the kept task {self.kept[ops]}", info
        self.kept[ops] = task["id"]
        return None


def _warm_timing_process() -> bool:
    """A new timing process's first job: torch imported and, where a GPU is, its CUDA context
    made, while the checks go on (some seconds each time)."""
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
    return True


class Timer:
    """Stage 6 in a process of its own (spawned), one task at a time. A task that breaks the CUDA
    context (an illegal address inside a torch op at a large size, say: the error is sticky, and
    every later CUDA call of that process fails) or kills the process costs that task only: the
    process is replaced at once by a spare, started beforehand (torch imported, its CUDA
    context made, nothing run), and a new spare starts while the next tasks are timed. The
    spare is idle: it holds a context and runs nothing, so it does not share the GPU with a
    timing; only its start (a CUDA context made) can overlap one, and a timing here decides no
    more than the [1, 100] ms window. (H200, 2026-12-06: 11 replacements in 482 timed tasks,
    each then waiting for a new process's start.)"""

    def __init__(self) -> None:
        self.ex: Any = None
        self.spare: Any = None

    @staticmethod
    def _new() -> Any:
        import concurrent.futures as cf
        import multiprocessing as mp

        ex = cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
        ex.submit(_warm_timing_process)  # its first task waits behind this
        return ex

    def start(self) -> None:
        if self.ex is None:
            self.ex, self.spare = self.spare or self._new(), None
        if self.spare is None:
            self.spare = self._new()

    def _pool(self) -> Any:
        self.start()
        return self.ex

    def close(self) -> None:
        for ex in (self.ex, self.spare):
            if ex is not None:
                ex.shutdown(wait=True, cancel_futures=True)
        self.ex = self.spare = None

    def restart(self) -> None:
        """The spare takes over; the old process ends on its own (a faulted context's teardown
        is not waited for)."""
        if self.ex is not None:
            self.ex.shutdown(wait=False, cancel_futures=True)
            self.ex = None
        self.start()

    def kill(self) -> None:
        """Ends the timing process at once (it is stuck in a call that does not return), and
        lets the spare take over."""
        if self.ex is not None:
            # the executor's own processes (a private attribute, there since Python 3.2)
            for p in list((getattr(self.ex, "_processes", None) or {}).values()):
                p.kill()
            self.ex.shutdown(wait=False, cancel_futures=True)
            self.ex = None
        self.start()

    def run(self, fn: Callable[..., Any], *args: Any, limit_s: float) -> Any:
        """fn(*args) in the timing process; TimeoutError (the process killed and replaced)
        when it has not returned after limit_s: a CUDA call that never returns is out of
        time_limit's reach, which only interrupts Python code."""
        import concurrent.futures as cf

        fut = self._pool().submit(fn, *args)
        try:
            return fut.result(timeout=limit_s)
        except cf.TimeoutError:
            self.kill()
            raise

    def __call__(self, task: Json, out: Json) -> Json:
        from concurrent.futures.process import BrokenProcessPool

        if out["stage"] is not None:
            return out
        limit = TIMING_LIMIT_S + TIMER_GRACE_S
        try:
            res: Json = self.run(timed_verdict, task, out, limit_s=limit)
        except BrokenProcessPool:
            res = dict(out, stage="runtime", why="the timing process died", gpu_fault=True)
        except TimeoutError:
            return dict(out, stage="runtime", why=f"its timing did not end within {limit:g} s "
                        "(the timing process was killed)")
        if res.pop("gpu_fault", False):
            self.restart()
        return res


def _hide_gpu() -> None:
    """Pool workers check on the CPU only: the GPU is kept for timing."""
    import os

    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def _pool_start(isa_verdicts: vec_isa.Verdicts | None) -> None:
    """A pool process's start: no GPU, and inductor's vector-ISA probe answered from the run's
    (synth/vec_isa.py)."""
    _hide_gpu()
    vec_isa.install(isa_verdicts)


def run_parallel(tasks: list[Json], do_compile: bool, jobs: int,
                 progress: Any = None) -> Iterator[tuple[Json, Json]]:
    """(task, verdict) pairs in the order the verdicts finish (with `jobs` > 1; in task order
    with 1), so that a slow task holds up no other: stages 1-5 in `jobs` processes (1: in this
    one) that live for the whole run; stage 6 in the Timer's process where a GPU is (else here:
    the estimate), one task at a time, in a thread of its own. A task dropped by stages 1-5 is
    given out as its checks end, whatever is being timed (a timing takes up to TIMING_LIMIT_S
    and its grace); one that passed them waits its turn on the GPU."""
    timer = Timer() if torch.cuda.is_available() else None
    if timer is not None:
        timer.start()  # its process starts now, beside the checks' cold start

    def timed(t: Json, v: Json) -> Json:
        if timer is not None:
            t0 = time.perf_counter()
            res = timer(t, v)
            if v["stage"] is None:  # the whole turn, the timing process's round trip included
                res.setdefault("timing_split", {})["turn"] = round(time.perf_counter() - t0, 3)
            return res
        v = timed_verdict(t, v)
        v.pop("gpu_fault", None)
        return v

    try:
        if jobs <= 1:
            for k, t in enumerate(tasks):
                yield t, timed(t, cpu_verdict(t, do_compile))
                if progress:
                    progress(k + 1)
            return
        yield from _pooled(tasks, do_compile, jobs, timed, progress)
    finally:
        if timer is not None:
            timer.close()


def _pooled(tasks: list[Json], do_compile: bool, jobs: int,
            timed: Callable[[Json, Json], Json], progress: Any) -> Iterator[tuple[Json, Json]]:
    """run_parallel's pool: each finished check goes out at once (dropped) or to the timing
    thread's queue (passed); the generator gives out what either has finished."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import queue

    done: queue.Queue[tuple[Json, Json] | BaseException] = queue.Queue()
    to_time: queue.Queue[tuple[Json, Json] | None] = queue.Queue()

    def timing_thread() -> None:
        while (item := to_time.get()) is not None:
            try:
                done.put((item[0], timed(*item)))
            except BaseException as exc:  # noqa: BLE001 - handed to the generator, raised there
                done.put(exc)

    def checked(task: Json, fut: cf.Future[Json]) -> None:  # the pool's result thread
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            done.put(exc)
        elif fut.result()["stage"] is None:
            to_time.put((task, fut.result()))
        else:
            done.put((task, fut.result()))

    # One compile thread per worker: the pool is the parallelism. inductor otherwise starts a
    # compile pool of its own, as wide as the host, in each of the `jobs` workers.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # inductor's vector-ISA probe once here, not once in each of the `jobs` processes
    verdicts = vec_isa.probe() if do_compile and tasks else None
    ex = cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"),
                                initializer=_pool_start, initargs=(verdicts,))
    th = threading.Thread(target=timing_thread, name="synth-timing", daemon=True)
    th.start()
    try:
        for t in tasks:
            ex.submit(cpu_verdict, t, do_compile).add_done_callback(functools.partial(checked, t))
        for k in range(len(tasks)):
            item = done.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if progress:
                progress(k + 1)
    finally:  # interrupted: what was not started is dropped, not waited for
        ex.shutdown(wait=True, cancel_futures=True)
        to_time.put(None)
        th.join()
