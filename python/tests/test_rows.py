"""cuda_agent_bridge.rows: parquet rows as JSON lines for `cuda-agent tasks import ops6k`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cuda_agent_bridge import rows

PYTHON_DIR = Path(__file__).resolve().parent.parent

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MODEL = (
    "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
    "        return x\n\ndef get_inputs():\n    return [torch.randn(2)]\n\n"
    "def get_init_inputs():\n    return []\n"
)


def run_module(*args: str, extra_path: str | None = None) -> subprocess.CompletedProcess[str]:
    path = str(PYTHON_DIR) if extra_path is None else f"{extra_path}{os.pathsep}{PYTHON_DIR}"
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run(
        [sys.executable, "-m", "cuda_agent_bridge.rows", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def lines(text: str) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(o, dict) for o in out)
    return out


def test_rows_in_order_with_every_ops_form(tmp_path: Path) -> None:
    f = tmp_path / "t.parquet"
    table = pa.table(
        {
            "code": [MODEL, "x = 1\n", MODEL],
            "ops": ['["torch.relu"]', "['torch.add', 'F.gelu']", None],
            "data_source": ["gen-a", None, "gen-b"],
            "unrelated": [1, 2, 3],
        }
    )
    pq.write_table(table, f, row_group_size=2)  # two row groups: order must hold across them
    out = io.StringIO()
    assert rows.write_rows(str(f), out) == 3
    got = lines(out.getvalue())
    assert [sorted(r) for r in got] == [["code", "data_source", "ops"]] * 3
    assert got[0] == {"code": MODEL, "ops": '["torch.relu"]', "data_source": "gen-a"}
    assert got[1] == {"code": "x = 1\n", "ops": "['torch.add', 'F.gelu']", "data_source": None}
    assert got[2]["ops"] is None and got[2]["data_source"] == "gen-b"


def test_list_column_binary_code_and_missing_optional_columns(tmp_path: Path) -> None:
    f = tmp_path / "t.parquet"
    table = pa.table(
        {
            "code": pa.array([MODEL.encode(), "é\n".encode()], type=pa.binary()),
            "ops": pa.array([["torch.nn.Conv2d", "torch.relu"], []], type=pa.list_(pa.string())),
        }
    )
    pq.write_table(table, f)
    out = io.StringIO()
    rows.write_rows(str(f), out)
    got = lines(out.getvalue())
    assert got[0] == {"code": MODEL, "ops": ["torch.nn.Conv2d", "torch.relu"], "data_source": None}
    assert got[1]["code"] == "é\n" and got[1]["ops"] == []
    assert "é" in out.getvalue()  # UTF-8 kept, not \u-escaped (lines stay short)


def test_oversized_rows_become_skips() -> None:
    big = "x" * (rows.MAX_CODE_BYTES + 1)
    skip = json.loads(rows.row_line({"code": big}))
    assert set(skip) == {"_skip"} and "over the limit" in skip["_skip"]
    ok = json.loads(rows.row_line({"code": "x" * rows.MAX_CODE_BYTES}))
    assert len(ok["code"]) == rows.MAX_CODE_BYTES
    # a small code whose other cells make the line too long
    long_ops = ["o" * 1000] * 5000
    skip = json.loads(rows.row_line({"code": "c", "ops": long_ops}))
    assert "_skip" in skip and "row" in skip["_skip"]


def test_cells_made_json_ready() -> None:
    line = rows.row_line({"code": "c", "ops": float("nan"), "data_source": 3})
    assert json.loads(line) == {"code": "c", "ops": None, "data_source": 3}
    assert "NaN" not in line
    line = rows.row_line({"code": "c", "ops": ("a", b"b"), "data_source": {"k": 1}})
    assert json.loads(line) == {"code": "c", "ops": ["a", "b"], "data_source": {"k": 1}}


def test_module_end_to_end(tmp_path: Path) -> None:
    f = tmp_path / "t.parquet"
    pq.write_table(pa.table({"code": [MODEL, MODEL], "ops": [["a"], ["b"]]}), f)
    r = run_module(str(f))
    assert r.returncode == 0, r.stderr
    assert [o["ops"] for o in lines(r.stdout)] == [["a"], ["b"]]
    assert r.stderr == ""


def test_errors_are_one_line_with_exit_2(tmp_path: Path) -> None:
    nocode = tmp_path / "nocode.parquet"
    pq.write_table(pa.table({"text": ["x"], "ops": [["a"]]}), nocode)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 this is not parquet")
    for args, msg in (
        ([str(nocode)], "has no 'code' column (columns: ops, text)"),
        ([str(junk)], "not a readable parquet file"),
        ([str(tmp_path / "missing.parquet")], "not a readable parquet file"),
        ([], "usage"),
        (["a", "b"], "usage"),
    ):
        r = run_module(*args)
        assert r.returncode == rows.EXIT_BAD_FILE, (args, r.stderr)
        assert msg in r.stderr, (args, r.stderr)
        assert r.stderr.count("\n") == 1, r.stderr
        assert r.stdout == ""


def test_no_pyarrow_says_how_to_fix(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "pyarrow"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    f = tmp_path / "t.parquet"
    f.write_bytes(b"PAR1")
    r = run_module(str(f), extra_path=str(shim.parent))
    assert r.returncode == rows.EXIT_NO_PYARROW
    assert r.stderr.strip() == rows.NO_PYARROW
    assert r.stdout == ""
