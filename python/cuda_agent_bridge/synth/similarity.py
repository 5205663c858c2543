"""How alike two task programs are, for decontamination and near-copies (docs/synth.md,
"Similarity").

A program's fingerprint is the token sequence of its abstract syntax tree (pre-order: one token
per node type) with the names that carry meaning kept, and the rest made anonymous:
- calls into torch's namespaces keep their dotted name (``torch.tanh``, ``nn.Conv2d``,
  ``F.gelu``, ``torch.special.expit``), so two programs that compute differently differ;
- every other identifier (classes, variables, attributes, arguments) becomes ``Name``, and every
  constant ``Const``, so renaming things or changing sizes changes nothing;
- docstrings and imports are dropped.

The similarity of two programs is difflib's ratio of their fingerprints (2 x matches / total
tokens, 1.0 for the same program): a renamed copy of a KernelBench task scores 1.0.
"""

from __future__ import annotations

import ast
import difflib
import json
from pathlib import Path

KEEP_ROOTS = ("torch", "nn", "F")


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in KEEP_ROOTS:
        return ".".join([node.id, *reversed(parts)])
    return None


def fingerprint(code: str) -> list[str]:
    tree = ast.parse(code)
    out: list[str] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            return  # a docstring
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name:
                out.append(name)
                return
        if isinstance(node, ast.Constant):
            out.append("Const")
            return
        if isinstance(node, ast.Name):
            out.append("Name")
            return
        out.append(type(node).__name__)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return out


def similarity(a: list[str], b: list[str]) -> float:
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def corpus(root: Path) -> dict[str, list[str]]:
    """Fingerprints of every parsable .py under root (a KernelBench checkout's levels), or those
    a corpus file (JSON, written by `synth kb-corpus`) holds."""
    if root.is_file():
        data = json.loads(root.read_text())
        return {str(k): [str(t) for t in v] for k, v in data.items()}
    out: dict[str, list[str]] = {}
    for p in sorted(root.rglob("*.py")):
        try:
            out[str(p.relative_to(root))] = fingerprint(p.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue
    return out


def closest(fp: list[str], others: dict[str, list[str]]) -> tuple[str, float]:
    """The most similar program of others and its similarity ("", 0.0 when there is none).
    Cheap bounds first: difflib's quick ratios bound the real one from above."""
    best, score = "", 0.0
    for name, other in others.items():
        m = difflib.SequenceMatcher(None, fp, other, autojunk=False)
        if m.real_quick_ratio() <= score or m.quick_ratio() <= score:
            continue
        r = m.ratio()
        if r > score:
            best, score = name, r
    return best, score
