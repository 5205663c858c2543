"""Fuzzing cuda_agent_bridge.static_check (the libFuzzer targets' counterpart for Python): random
bytes, byte-level mutations of honest and hostile sources, random token soups, and AST-level
mutations that keep the source valid Python so the checker's own logic is exercised. Whatever the
input, check_source must return a verdict (ok, refused or invalid, with a consistent code) and
raise nothing. Seeded, so a failure reproduces; CA_FUZZ_ITERATIONS scales the effort.
With hypothesis installed, its generators run too."""

from __future__ import annotations

import ast
import os
import random
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from test_static_check import HEAD, HONEST, ROUTES

from cuda_agent_bridge import static_check as sc

ITERATIONS = int(os.environ.get("CA_FUZZ_ITERATIONS", "600"))
REPO = Path(__file__).resolve().parents[2]

CORPUS: list[bytes] = [s.encode() for s in HONEST.values()]
CORPUS += [(HEAD + textwrap.dedent(r[1])).encode() for r in ROUTES]
CORPUS += [p.read_bytes() for p in sorted((REPO / "examples").rglob("*.py"))][:20]

TOKENS = ["torch", "nn", "F", ".", "(", ")", "[", "]", "{", "}", ":", ",", "=", "==", "+", "*",
          "lambda", "def", "class", "return", "yield", "await", "async", "import", "from", "as",
          "if", "else", "for", "in", "while", "with", "try", "except", "global", "del", "@",
          "getattr", "setattr", "eval", "__import__", "__class__", "__dict__", "_C", "relu",
          "self", "x", "forward", "__init__", "ModelNew", "super", "'s'", "f'{x}'", "0", "1.5",
          "\n", "\n    ", "\n        ", "#", "\\", '"""', "...", "*", "**", "->", ":=", "not",
          "os", "environ", "sys", "ops", "aten", "cuda", "Event", "elapsed_time", "__name__"]
NAMES = ["torch", "nn", "F", "x", "self", "getattr", "setattr", "eval", "open", "relu", "ModelNew",
         "os", "time", "np", "cuda_extension", "ext", "super", "__builtins__", "helper", "ctx"]
ATTRS = ["relu", "_C", "__class__", "__init__", "nn", "functional", "cuda", "Event",
         "elapsed_time", "contiguous", "view", "sys", "overrides", "library", "ops", "aten",
         "matmul", "empty_like", "environ", "perf_counter", "tb_frame", "compile", "jit",
         "__dict__", "forward", "data_ptr", "add", "values", "backends", "allow_tf32"]


def assert_verdict(data: bytes, profile: str = "cuda-agent") -> sc.Verdict:
    v = sc.check_source(data, "fuzz.py", profile)
    assert v.status in ("ok", "refused", "invalid")
    if v.status == "ok":
        assert v.code == "" and not v.findings
    elif v.status == "refused":
        assert v.code in (sc.TAMPERING, sc.COMPUTE) and v.findings
        assert v.message == next(f for f in v.findings if f.code == v.code).text()
        assert profile == "cuda-agent" or v.code == sc.TAMPERING
    else:
        assert v.code == sc.LOAD_FAILED and v.message
    v.to_json(profile, 0.0)  # serializable
    return v


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # insert random bytes
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and buf:  # delete a run
            del buf[pos:pos + rng.randint(1, 32)]
        elif op == 3:  # splice a chunk of another corpus entry
            other = rng.choice(CORPUS)
            a = rng.randrange(len(other) + 1)
            buf[pos:pos] = other[a:a + rng.randint(1, 200)]
        elif op == 4:  # duplicate a chunk
            buf[pos:pos] = buf[pos:pos + rng.randint(1, 64)]
        else:  # truncate
            del buf[pos:]
    return bytes(buf)


def token_soup(rng: random.Random) -> bytes:
    return " ".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 120))).encode()


class _Mutator(ast.NodeTransformer):
    """Random, syntax-preserving edits: renamed names and attributes, wrapped expressions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.rng.random() < 0.15:
            return ast.copy_location(ast.Name(self.rng.choice(NAMES), node.ctx), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if self.rng.random() < 0.2:
            node.attr = self.rng.choice(ATTRS)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        r = self.rng.random()
        if r < 0.05:  # getattr(f, "name")(...)
            return ast.copy_location(ast.Call(ast.Call(ast.Name("getattr", ast.Load()), [
                ast.Name(self.rng.choice(NAMES), ast.Load()),
                ast.Constant(self.rng.choice(ATTRS))], []), node.args, node.keywords), node)
        if r < 0.1:  # (lambda: call)()
            return ast.copy_location(ast.Call(ast.Lambda(ast.arguments(
                posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                kwarg=None, defaults=[]), node), [], []), node)
        return node


def mutate_ast(rng: random.Random, data: bytes) -> bytes | None:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    tree = _Mutator(rng).visit(tree)
    ast.fix_missing_locations(tree)
    try:
        return ast.unparse(tree).encode()
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None


GENERATORS: dict[str, Callable[[random.Random], bytes | None]] = {
    "random_bytes": lambda rng: bytes(rng.randrange(256) for _ in range(rng.randint(0, 400))),
    "byte_mutations": lambda rng: mutate_bytes(rng, rng.choice(CORPUS)),
    "token_soup": token_soup,
    "ast_mutations": lambda rng: mutate_ast(rng, rng.choice(CORPUS)),
}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_fuzz_never_raises(name: str) -> None:
    rng = random.Random(f"static-check-{name}")
    gen = GENERATORS[name]
    statuses: set[str] = set()
    for _ in range(ITERATIONS):
        data = gen(rng)
        if data is None:
            continue
        statuses.add(assert_verdict(data).status)
        assert_verdict(data, "kernelbench")
    assert statuses  # the generator produced something


def test_ast_mutations_find_both_verdicts() -> None:
    """The AST generator is not vacuous: it yields accepted and refused sources."""
    rng = random.Random("static-check-both")
    seen: set[str] = set()
    for _ in range(200):
        data = mutate_ast(rng, rng.choice(CORPUS[:len(HONEST)]))
        if data is not None:
            seen.add(assert_verdict(data).status)
    assert {"ok", "refused"} <= seen


def test_pathological_shapes() -> None:
    shapes = [b"", b"\n" * 10000, b"\xef\xbb\xbf" + HEAD.encode(), b"# coding: latin-1\nx=1\n",
              b"x = '" + b"a" * 100000 + b"'\n", b"\r\n".join([b"import torch"] * 1000),
              ("x = " + "+".join(["1"] * 20000) + "\n").encode(),
              ("def f(" + ", ".join(f"a{i}" for i in range(5000)) + "): pass\n").encode(),
              ("if x:\n" + "".join(" " * i + "if x:\n" for i in range(1, 90)) + " " * 90
               + "pass\n").encode(),
              b"class A:\n" + b"    def __init__(self): self.x = 1\n" * 3000,
              b"f = lambda: (yield)\n", b"async def f():\n    await x\n",
              b"match x:\n    case {'a': b, **rest}: pass\n    case [c, *d]: pass\n",
              b"def f():\n    global __name__\n    __name__ = 'x'\n",
              b"x: 'int' = 1\ny: '((((' = 2\n"]
    for data in shapes:
        assert_verdict(data)


def test_hypothesis_inputs() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                                st.lists(st.sampled_from(TOKENS), max_size=80).map(
                                    lambda t: " ".join(t).encode())))
    def run(data: bytes) -> None:
        assert_verdict(data)

    run()
