"""What crosses a process boundary as JSON: non-finite floats and scalar forward() arguments.

Contract (docs/protocol.md):
- ``json_safe(value)`` returns a copy of a JSON-ready value (dicts, lists, tuples, str, int, float,
  bool, None) with every non-finite float written as the string ``"nan"``, ``"inf"`` or
  ``"-inf"``, so that ``json.dumps(..., allow_nan=False)`` never fails on a number. Every answer
  of the bridge and every event of the runner goes through it.
- A scalar argument (a forward() argument that is a Python number, ``"device": "cpu"`` in the
  spec) travels as ``[index, value]``: ``value`` a JSON boolean (``bool``), an integer within
  int64 (``int64``), or a number or one of the three strings above (``float64``).
  ``decode_scalars(raw, kinds)`` checks a list of such pairs against ``kinds`` (argument index ->
  ``bool``, ``int`` or ``float``): every index exactly once, values of the right kind; it returns
  the pairs in index order with Python values, or raises ``ValueError`` with one line saying
  what is wrong.
- ``take_stdio()`` keeps private copies of fds 0 and 1 for a protocol (requests in, answers or
  events out) and points fd 0 at /dev/null and fd 1 (and ``sys.stdout``) at stderr, so that
  nothing else the process prints can be read as protocol. Both the bridge and the runner call
  it first.

Nothing here imports torch.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from typing import IO, BinaryIO

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
SCALAR_KINDS: dict[str, type] = {"bool": bool, "int64": int, "float64": float}
MAX_SCALARS = 1024
_INT64 = 2**63


def _float_text(x: float) -> str | float:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def json_safe(value: object) -> object:
    """value with non-finite floats as strings (containers copied, other values as they are)."""
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def scalar_value(value: object, kind: type, where: str) -> bool | int | float:
    """One scalar argument's JSON value as the Python number forward() receives."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{where} must be a boolean")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
            return value
        raise ValueError(f"{where} must be an integer within int64")
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"{where} must be a number (or \"nan\", \"inf\", \"-inf\")")


def decode_scalars(raw: object, kinds: Mapping[int, type],
                   where: str = "scalars") -> list[tuple[int, bool | int | float]]:
    """[[index, value], ...] checked against kinds; the pairs sorted by index."""
    if not isinstance(raw, list) or len(raw) > MAX_SCALARS:
        raise ValueError(f"{where} must be a list of [index, value] pairs")
    out: dict[int, bool | int | float] = {}
    for k, pair in enumerate(raw):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{where}[{k}] must be an [index, value] pair")
        index = pair[0]
        if isinstance(index, bool) or not isinstance(index, int) or index not in kinds:
            expected = ", ".join(str(i) for i in sorted(kinds)) or "none"
            raise ValueError(f"{where}[{k}]: {index!r} is not the index of a scalar argument "
                             f"(scalar arguments: {expected})")
        if index in out:
            raise ValueError(f"{where}: argument {index} is given twice")
        out[index] = scalar_value(pair[1], kinds[index], f"{where}[{k}] (argument {index})")
    missing = [i for i in sorted(kinds) if i not in out]
    if missing:
        raise ValueError(f"{where}: no value for scalar argument(s) "
                         f"{', '.join(str(i) for i in missing)}")
    return sorted(out.items())


def encode_scalars(values: Mapping[int, bool | int | float]) -> list[list[object]]:
    """{index: value} -> [[index, value], ...] in index order, JSON-safe."""
    return [[i, json_safe(v)] for i, v in sorted(values.items())]


def take_stdio() -> tuple[BinaryIO, IO[str]]:
    """Private copies of fds 0/1 for the protocol; fd 0 becomes /dev/null, fd 1 stderr."""
    sys.stdout.flush()
    incoming = os.fdopen(os.dup(0), "rb")
    outgoing = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    return incoming, outgoing
