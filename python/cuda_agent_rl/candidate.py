"""The candidate of a one-shot answer: its last CUDA or Python fenced code block.

The answer's fenced blocks (a line starting with three or more backticks, an info string, the
code, a closing fence of at least as many backticks) are read in order; blocks whose info
string's first word is not one of the languages below are ignored, and the LAST remaining one
is the candidate:

- `cuda`, `cu`, `cpp`, `c++`, `cxx`, `c`: a native candidate (docs/abi.md): the block is
  `kernels/kernel.cu`, compiled by nvcc, exporting `ca_forward`.
- `python`, `py`: a KernelBench candidate (docs/torch-rules.md): one .py file defining
  `ModelNew`, its CUDA built with `torch.utils.cpp_extension.load_inline`; sent as
  `model_new.py`.

The last block is taken because answers commonly quote the task or a draft first and end with
the solution. An answer with no such block has no candidate.
"""

from __future__ import annotations

import re
from typing import Any

NATIVE_LANGS = frozenset({"cuda", "cu", "cpp", "c++", "cxx", "c"})
PYTHON_LANGS = frozenset({"python", "py"})
NATIVE_FILE = "kernels/kernel.cu"
PYTHON_FILE = "model_new.py"

_FENCE = re.compile(r"^[ \t]*(`{3,})[ \t]*([^\n`]*)$")


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every closed fenced block, in order; language lower-cased."""
    out: list[tuple[str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        ticks, info = m.group(1), m.group(2).strip()
        lang = info.split()[0].lower() if info else ""
        j = i + 1
        while j < len(lines):
            close = re.match(r"^[ \t]*(`{3,})[ \t]*$", lines[j])
            if close and len(close.group(1)) >= len(ticks):
                break
            j += 1
        if j == len(lines):
            break  # an unclosed fence: not a block
        out.append((lang, "\n".join(lines[i + 1 : j]) + "\n"))
        i = j + 1
    return out


def candidate_of(answer: str) -> dict[str, Any] | None:
    """The `candidate` object of /v1/evaluate for the answer, or None when it has no block."""
    chosen: tuple[str, str] | None = None
    for lang, code in blocks(answer):
        if lang in NATIVE_LANGS or lang in PYTHON_LANGS:
            chosen = (lang, code)
    if chosen is None:
        return None
    lang, code = chosen
    if lang in PYTHON_LANGS:
        return {"format": "kernelbench", "files": {PYTHON_FILE: code}}
    return {"format": "native", "files": {NATIVE_FILE: code}}
