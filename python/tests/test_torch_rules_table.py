"""src/build/torch_rules.c's table of the ATen operators a PyTorch-format extension may call from
C++ is refusal.py's allowlists expanded to torchgen's operator names (at::_ops::<name>): every
overload of every ALLOWED_ATEN op and of the ALLOWED_TENSOR / ALLOWED_TORCH names that are ATen
ops. This keeps the C table and the runtime guard the same list for the installed torch."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from cuda_agent_bridge.refusal import ALLOWED_ATEN, ALLOWED_TENSOR, ALLOWED_TORCH

SOURCE = Path(__file__).resolve().parents[2] / "src" / "build" / "torch_rules.c"


def c_table() -> list[str]:
    text = SOURCE.read_text()
    body = re.search(r"static const char \*const allowed_ops\[\] = \{(.*?)\n\};", text, re.S)
    assert body is not None
    return re.findall(r'"([^"]+)"', body.group(1))


def expected() -> set[str]:
    names: set[str] = set()
    for packet in ALLOWED_ATEN | ALLOWED_TENSOR | ALLOWED_TORCH:
        ops = getattr(torch.ops.aten, packet, None)
        if ops is None or not hasattr(ops, "overloads"):
            continue
        for overload in ops.overloads():
            names.add(packet if overload == "default" else f"{packet}_{overload}")
    return names


def test_table_is_sorted_for_bsearch() -> None:
    table = c_table()
    assert table == sorted(table) and len(table) == len(set(table))


def test_table_is_refusal_py_expanded() -> None:
    table = set(c_table())
    want = expected()
    assert table - want == set(), "the C table allows ops refusal.py does not"
    assert want - table == set(), "refusal.py allows ops the C table lacks"


def test_no_compute_op_in_the_table() -> None:
    table = set(c_table())
    for op in ("relu", "add_Tensor", "mm", "matmul", "sum", "index_Tensor", "gather", "exp",
               "softmax_int", "_softmax", "addmm", "convolution", "cat"):
        assert op not in table
