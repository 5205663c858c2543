"""LLM composition for `synth compose --llm-url` (docs/synth.md, "Composition by an LLM").

The C side (src/synth/llm_compose.c) sends the prompts this module writes and stores the
replies; this module never talks to the network. A prompt names the operators drawn for a task
(the same draw of kinds and operators as the composer's) and asks for one model.py in the
KernelBench convention. A reply is untrusted text: it is only parsed here (its code block, its
syntax tree), never run. It runs only in `synth filter`, inside the sandbox, through the same
stages as the composer's tasks.
"""

from __future__ import annotations

import ast
import random
import re
import warnings

from .catalog import Json
from .compose import BLOCK_MARKERS, draw_kind, usable

MAX_CODE = 64 << 10  # bytes of one task's code
PROBE_BATCH = 2      # the CPU stages run LLM tasks at this batch_size

SYSTEM = (
    "You write PyTorch reference programs for a GPU kernel benchmark, in the KernelBench "
    "convention. Answer with one Python code block and nothing else.")

USER = """Write a model.py that combines these operators into one computation: {ops}.

Rules:
- `class Model(nn.Module)` with `__init__(self, *args)` and `forward(self, ...)`, using each
  operator at least once, in a plausible order, so that shapes match;
- a module-level `batch_size = <int>`, the first dimension of every input;
- `get_inputs()` returns a list of input tensors made with torch.randn or torch.rand (sizes
  using batch_size), `get_init_inputs()` the list of __init__'s arguments;
- sizes such that one forward pass takes 1-100 ms on an H200 in float32;
- import only torch, torch.nn as nn, torch.nn.functional as F and math; no randomness in
  forward (no dropout in training mode), no I/O, no prints."""

ALLOWED_IMPORTS = {"torch", "torch.nn", "torch.nn.functional", "math", "typing"}
FORBIDDEN_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars",
                   "getattr", "setattr", "delattr", "input", "breakpoint", "memoryview"}


def prompts(catalog: Json, n: int, seed: int, first: int = 0) -> list[Json]:
    """n prompts from index `first` on: {id, kind, ops, messages}. The draw of prompt k depends
    on seed and k only, so that a resumed run asks the same questions."""
    pool = usable(catalog)
    plain = [e for e in pool if not any(m in e["id"] for m in BLOCK_MARKERS)]
    blocks = [e for e in pool if any(m in e["id"] for m in BLOCK_MARKERS)]
    out = []
    for k in range(first, first + n):
        rng = random.Random(f"{seed}:{k}")
        kind = draw_kind(rng)
        if kind == "block" and blocks:
            ops = [rng.choice(blocks)["id"], rng.choice(plain)["id"]]
        else:
            count = 2 if kind == "block" else int(kind)
            ops = [rng.choice(plain)["id"] for _ in range(count)]
        msgs = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": USER.format(ops=", ".join(ops))}]
        out.append({"id": f"llm-{k:06d}", "kind": kind, "ops": ops, "messages": msgs})
    return out


_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract(content: str) -> str:
    """The code of a reply: its first fenced block, else the whole reply."""
    m = _BLOCK.search(content)
    return (m.group(1) if m else content).strip() + "\n"


def static_check(code: str) -> str | None:
    """Why a reply's code is not a task (None: it may be one). Only its syntax tree is looked
    at; the sandbox, not this, is what holds a hostile program."""
    if len(code.encode()) > MAX_CODE:
        return f"code over {MAX_CODE} bytes"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning on odd literals: not ours to show
            tree = ast.parse(code)
    except SyntaxError as exc:
        return f"not Python: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # a NUL byte
        return f"not Python: {exc}"
    top = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if need not in top:
            return f"defines no top-level {need}"
    if not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "batch_size"
                                                  for t in n.targets) for n in tree.body):
        return "no module-level batch_size"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name not in ALLOWED_IMPORTS]
        elif isinstance(node, ast.ImportFrom):
            bad = [] if (node.module or "") in ALLOWED_IMPORTS else [node.module or "."]
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            bad = [node.id]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("__")
              and node.attr != "__init__"):  # super().__init__() only
            bad = [node.attr]
        else:
            continue
        if bad:
            return f"uses {bad[0]} (only torch and math; no I/O, no reflection)"
    return None


def ingest(prompt: Json, reply: Json) -> tuple[Json | None, str]:
    """(task, "") from a reply, or (None, why not)."""
    if "error" in reply:
        return None, f"the LLM request failed: {str(reply['error'])[:200]}"
    code = extract(str(reply.get("content") or ""))
    why = static_check(code)
    if why:
        return None, why
    return {"id": prompt["id"], "kind": prompt["kind"], "ops": prompt["ops"],
            "source": "llm", "probe_batch": PROBE_BATCH, "estimated_ms": None,
            "code": code}, ""
