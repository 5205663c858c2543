"""`synth compose`: tasks of 1 to 5 catalog operators in the KernelBench convention
(docs/synth.md).

A task draws its operator count from MIX (the CUDA-Agent paper's: 3.4 % one op, 83.8 % two,
7.6 % three, 2.8 % four, 1.2 % five, 1.2 % transformer blocks), a rank, and operators that chain:
every operator but the last keeps the probe shape of its rank (so the next one gets the input it
was probed with); the last may change it. A binary operator takes the task's input as its second
operand. Only deterministic operators that compute something and whose batch dimension scales
freely are drawn.

Sizes: the batch dimension is the free one. The composer counts each operator's FLOPs (torch's
FLOP counter) and bytes (inputs and output) at the probe size and picks the batch so that a
roofline estimate of the eager runtime on the target GPU (ROOFLINE_*, an H200) lands on
a log-uniform draw in [TARGET_MS]; `synth filter` then measures the real runtime where a GPU is.

The roofline misses whole classes of operators: scans, batched linear algebra and softmax over a
non-last dimension run 10-1000x slower on a GPU than their FLOPs and bytes say, and the tasks
drawn with them overshoot the window, where the filter's pilot still spends seconds of GPU time to
drop each. `compose --measured DIR` learns that from earlier filter runs on a GPU
(slowdowns()): each operator's term of the estimate is multiplied by how much slower than the
roofline its tasks ran there, so its tasks are drawn smaller.

A draw whose task does not run at the probe batch, or whose output the evaluation's degeneracy
detector finds degenerate there (degenerate_why: zeros, a constant, or the same whatever the
input, over DRAWS input draws), is drawn again, for the same kind. Chains such as ``tanh ->
Linear -> prod`` (a product of 32 numbers below one: about 1e-15) are degenerate although none
of their operators is; `synth filter` judges again at its own batch, and counts what it drops.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import Counter
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..degenerate import Judge
from ..tasks import DEFAULT_TOLERANCE
from .catalog import PROBE_SHAPES, Json, is_usable

MIX: dict[str, float] = {"1": 0.034, "2": 0.838, "3": 0.076, "4": 0.028, "5": 0.012,
                         "block": 0.012}
TARGET_MS = (2.0, 50.0)  # the draw; the filter keeps 1-100 ms
# The roofline of the target GPU: an H200's achievable fp32 FLOP/s (no tensor cores) and
# memory bandwidth, and the cost of one kernel launch.
ROOFLINE_NAME = "H200"
ROOFLINE_FLOPS = 40e12
ROOFLINE_BYTES_PER_S = 4.0e12
ROOFLINE_LAUNCH_S = 5e-6
MAX_INPUT_BYTES = 2 << 30
DRAWS = 4  # input draws of the degeneracy detector
BLOCK_MARKERS = ("Transformer", "MultiheadAttention", "transformers.")


def usable(catalog: Json) -> list[Json]:
    return [e for e in catalog["entries"] if is_usable(e)]


def _expr(e: Json, k: int, var: str = "x") -> str:
    """The call of entry e (the k-th op of its task) on `var`."""
    name = e["id"]
    if e["call"].startswith("module"):
        call = f"self.op{k}({var}, x0)" if e["call"] == "module_binary" else f"self.op{k}({var})"
    else:
        args = {"unary": var, "unary_dim": f"{var}, -1", "binary": f"{var}, x0",
                "unary_scalar": f"{var}, 0.5"}[e["call"]]
        call = f"{name}({args})"
    return call + ("[0]" if e.get("first") else "")


def _ctor(e: Json) -> str:
    cls = e["id"].split(".", 1)[1]
    prefix = "nn." if e["source"] == "nn" else ""
    kw = ", ".join(f"{k}={v!r}" for k, v in e["init"].items())
    return f"{prefix}{cls}({kw})"


def render(ops: list[Json], rank: int, batch: int) -> str:
    """model.py of a task: class Model, batch_size, get_inputs, get_init_inputs."""
    shape = list(PROBE_SHAPES[rank])
    dims = ", ".join(["batch_size"] + [str(d) for d in shape[1:]])
    lines = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F"]
    for e in ops:
        if e["source"] == "transformers":
            cls = e["id"].split(".", 1)[1]
            lines.append(f"from {e['import_from']} import {cls}")
    lines += ["", "", "class Model(nn.Module):",
              f'    """{" -> ".join(e["id"] for e in ops)} (composed by cuda-agent synth)."""',
              "", "    def __init__(self):", "        super().__init__()"]
    for k, e in enumerate(ops):
        if e["call"].startswith("module"):
            lines.append(f"        self.op{k} = {_ctor(e)}")
    lines += ["", "    def forward(self, x):"]
    if any(e["call"] in ("binary", "module_binary") for e in ops):
        lines.append("        x0 = x")
    for k, e in enumerate(ops):
        lines.append(f"        x = {_expr(e, k)}")
    lines += ["        return x", "", "", f"batch_size = {batch}", "", "",
              "def get_inputs():", f"    return [torch.randn({dims})]", "", "",
              "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines)


def load(code: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "synth_task"}
    exec(compile(code, "model.py", "exec"), ns)  # noqa: S102 - our own generated code
    return ns


def run_probe(code: str, batch: int | None = None, seed: int = 0) -> tuple[torch.Tensor, Any]:
    """The task's output at the probe batch (or `batch`), and its namespace."""
    ns = load(code)
    if batch is not None:
        ns["batch_size"] = batch
    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]()).eval()
    inputs = ns["get_inputs"]()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = model(*inputs)
    return out, ns


def degenerate_why(code: str, batch: int) -> str | None:
    """The degeneracy detector's message for the task at `batch` (degenerate.Judge, the
    evaluation's default tolerance, parameters from seed 0, inputs from seeds 1000 to
    1000 + DRAWS - 1), or None when its output is not degenerate. Raises what the task raises."""
    ns = load(code)
    ns["batch_size"] = batch
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]()).eval()
    judge = Judge(DEFAULT_TOLERANCE, DEFAULT_TOLERANCE)
    for k in range(DRAWS):
        torch.manual_seed(1000 + k)
        draw = ns["get_inputs"]()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            judge.add([model(*draw)])
    deg = judge.result()
    return deg.message() if deg is not None else None


def cost(ops: list[Json], rank: int) -> tuple[list[float], list[float]]:
    """FLOPs and bytes of each op at the probe batch (one op at a time, on the CPU)."""
    x = torch.randn(*PROBE_SHAPES[rank])
    flops, nbytes = [], []
    for e in ops:
        code = render([e], rank, PROBE_SHAPES[rank][0])
        ns = load(code)
        model = ns["Model"]().eval()
        with warnings.catch_warnings(), torch.no_grad(), FlopCounterMode(display=False) as fc:
            warnings.simplefilter("ignore")
            y = model(x)  # a binary op's second operand is its own input here
        n_in = x.numel() * (2 if e["call"] in ("binary", "module_binary") else 1)
        flops.append(float(fc.get_total_flops()))
        nbytes.append(4.0 * (n_in + y.numel()))
        x = y
    return flops, nbytes


def estimate_ms(flops: list[float], nbytes: list[float], scale: float,
                slowdown: list[float] | None = None) -> float:
    """The roofline estimate (ms) of ops with these FLOPs and bytes at the probe batch times
    scale; slowdown (one factor per op, default 1) multiplies each op's term but its launch."""
    k = slowdown or [1.0] * len(flops)
    s = sum(max(f * scale / ROOFLINE_FLOPS, b * scale / ROOFLINE_BYTES_PER_S) * m
            + ROOFLINE_LAUNCH_S for f, b, m in zip(flops, nbytes, k, strict=True))
    return 1e3 * s


SLOWDOWN_MAX = 1e4


def slowdowns(runs: list[tuple[list[Json], list[Json]]]) -> dict[str, float]:
    """Per operator, how much slower than the roofline its tasks ran on a GPU in earlier filter
    runs (each run's tasks and verdicts, as in its tasks.jsonl and verdicts.jsonl): the least
    ratio, over the tasks
    that hold the operator, of the measured eager runtime (or the pilot's lower bound) to the
    task's roofline estimate, where that is above 1 (capped at SLOWDOWN_MAX). The least, so that
    an operator is marked slow only when every task that held it ran slow: a chain of a slow
    and a fast operator marks both, and one fast task of the second clears it. Verdicts without
    a GPU measurement (`measured` false: the CPU's estimate; no runtime: a failure) count for
    nothing."""
    least: dict[str, float] = {}
    for tasks, verdicts in runs:
        est: dict[str, tuple[list[str], float]] = {}
        for t in tasks:
            e = t.get("roofline_ms", t.get("estimated_ms"))  # before any slowdown
            if isinstance(e, (int, float)) and e > 0:
                est[t["id"]] = (list(t["ops"]), float(e))
        for v in verdicts:
            ms = v.get("runtime_ms")
            if v.get("measured") is not True or not isinstance(ms, (int, float)) or ms <= 0 \
                    or v.get("id") not in est:
                continue
            ops, e = est[v["id"]]
            for op in ops:
                least[op] = min(least.get(op, math.inf), ms / e)
    return {op: min(r, SLOWDOWN_MAX) for op, r in least.items() if r > 1.0}


def _draw_count(rng: random.Random) -> str:
    u, acc = rng.random(), 0.0
    for k, p in MIX.items():
        acc += p
        if u < acc:
            return k
    return "2"


def draw_kind(rng: random.Random) -> str:
    """The kind of a task (MIX): "1" to "5" operators, or "block"."""
    return _draw_count(rng)


def compose_one(catalog: Json, rng: random.Random, index: int, kind: str,
                redrawn: Counter[str] | None = None,
                slowdown: dict[str, float] | None = None) -> Json | None:
    """One task of the given kind, or None when this draw of operators could not be made into
    one (the caller draws again, for the same kind, so that the mix stays MIX). Why a draw
    failed is counted in `redrawn`: "chain" (no operators that chain), "runs" (it raises at
    the probe batch) or "degenerate" (degenerate_why). slowdown: slowdowns()' factors, which
    scale each op's term of the estimate (the task then records its plain roofline estimate as
    roofline_ms and its largest factor as slowdown)."""
    redrawn = redrawn if redrawn is not None else Counter()
    pool = usable(catalog)
    blocks = [e for e in pool if any(m in e["id"] for m in BLOCK_MARKERS)]
    if kind == "block":
        if not blocks:
            return None
        first = rng.choice(blocks)
        rank = rng.choice(first["batch_free_ranks"])
        ops = [first]
        n = 1 + rng.randint(0, 1)  # a block, maybe followed by one more op
    else:
        n = int(kind)
        rank = rng.choice([2, 3, 4, 5])
        ops = []
    probe = list(PROBE_SHAPES[rank])
    keep = [e for e in pool if rank in e["batch_free_ranks"]
            and e["shapes"].get(str(rank)) == probe and e not in blocks]
    last = [e for e in pool if rank in e["batch_free_ranks"] and e not in blocks]
    while len(ops) < n:
        choices = keep if len(ops) < n - 1 else last
        if (ops and ops[-1]["shapes"].get(str(rank)) != probe) or not choices:
            redrawn["chain"] += 1  # a shape-changing op can only be last
            return None
        ops.append(rng.choice(choices))
    if len(ops) > 1 and ops[0]["shapes"].get(str(rank)) != probe and kind == "block":
        redrawn["chain"] += 1
        return None
    try:
        flops, nbytes = cost(ops, rank)
        factors = [(slowdown or {}).get(e["id"], 1.0) for e in ops]
        base = estimate_ms(flops, nbytes, 1.0, factors)
        target = math.exp(rng.uniform(math.log(TARGET_MS[0]), math.log(TARGET_MS[1])))
        launch = 1e3 * ROOFLINE_LAUNCH_S * len(ops)
        per_unit = max(base - launch, 1e-9)
        scale = max(1.0, (target - launch) / per_unit)
        b0 = PROBE_SHAPES[rank][0]
        in_bytes = 4.0 * math.prod(PROBE_SHAPES[rank])
        scale = min(scale, MAX_INPUT_BYTES / in_bytes)
        batch = max(1, int(b0 * scale))
        code = render(ops, rank, batch)
        degenerate = degenerate_why(code, b0)  # runs it on DRAWS inputs: raises if it cannot
    except Exception:  # noqa: BLE001 - a combination that does not run: draw again
        redrawn["runs"] += 1
        return None
    if degenerate is not None:
        redrawn["degenerate"] += 1
        return None
    task: Json = {"id": f"synth-{index:06d}", "kind": kind, "ops": [e["id"] for e in ops],
                  "rank": rank, "batch": batch,
                  "estimated_ms": round(estimate_ms(flops, nbytes, batch / b0, factors), 3),
                  "roofline": ROOFLINE_NAME, "code": code}
    if max(factors) > 1.0:
        task["roofline_ms"] = round(estimate_ms(flops, nbytes, batch / b0), 3)
        task["slowdown"] = round(max(factors), 3)
    return task
