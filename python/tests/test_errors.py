"""Broken tasks map to their task.* code, bad requests to bridge.bad_request; EOF and shutdown
exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from support import ELEMENTWISE, PYTHON_DIR, Bridge, write_task

OK_TAIL = """
def get_inputs():
    return [torch.randn(2, 3)]
def get_init_inputs():
    return []
"""
HEAD = "import torch\nfrom torch import nn\n"
IDENTITY = HEAD + "class Model(nn.Module):\n    def forward(self, x):\n        return x\n"


def model_with_forward(body: str) -> str:
    return HEAD + "class Model(nn.Module):\n    def forward(self, x):\n" + body + OK_TAIL


BROKEN: list[tuple[str, str, str, str]] = [
    # (name, model.py, code, part of the message)
    ("syntax", HEAD + "def broken(:\n    pass\n", "task.syntax_error",
     "model.py line 3: invalid syntax"),
    ("indent", HEAD + "x = 1\n    y = 2\n", "task.syntax_error",
     "model.py line 4: invalid syntax (unexpected indent)"),
    ("import", "import torch\nimport no_such_module_xyz\n", "task.import_error",
     "model.py line 2: ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("module_raises", HEAD + "raise RuntimeError('boom at import')\n", "task.import_error",
     "model.py line 3: importing raised RuntimeError: boom at import"),
    ("no_model", HEAD + OK_TAIL, "task.no_model", "model.py defines no class Model"),
    ("model_not_module", HEAD + "class Model:\n    pass\n" + OK_TAIL, "task.no_model",
     "subclass of torch.nn.Module"),
    ("no_get_inputs", IDENTITY + "def get_init_inputs():\n    return []\n",
     "task.no_get_inputs", "defines no function get_inputs()"),
    ("no_get_init_inputs", IDENTITY + "def get_inputs():\n    return [torch.randn(2)]\n",
     "task.no_get_init_inputs", "defines no function get_init_inputs()"),
    ("init_raises", HEAD + "class Model(nn.Module):\n    def __init__(self):\n"
     "        raise ValueError('bad width')\n" + OK_TAIL, "task.init_raised",
     "model.py line 5: Model(*get_init_inputs()) raised ValueError: bad width"),
    ("init_inputs_not_list", IDENTITY + "def get_inputs():\n    return [torch.randn(2)]\n"
     "def get_init_inputs():\n    return 3\n", "task.init_raised",
     "get_init_inputs() returned an int; it must return a list"),
    ("inputs_raise", IDENTITY + "def get_inputs():\n    raise ValueError('no inputs today')\n"
     "def get_init_inputs():\n    return []\n", "task.inputs_raised",
     "get_inputs() raised ValueError: no inputs today"),
    ("inputs_exit", IDENTITY + "import sys\ndef get_inputs():\n    sys.exit(3)\n"
     "def get_init_inputs():\n    return []\n", "task.inputs_raised",
     "get_inputs() raised SystemExit: 3"),
    ("bad_input", IDENTITY + "def get_inputs():\n    return [torch.randn(2), 'hello']\n"
     "def get_init_inputs():\n    return []\n", "task.bad_input",
     "get_inputs()[1] is a str; forward() arguments must be tensors or Python numbers"),
    ("forward_raises", model_with_forward("        return x @ torch.ones(7, 7)\n"),
     "task.forward_raised", "model.py line 5: forward() raised RuntimeError"),
    ("returns_str", model_with_forward("        return 'done'\n"), "task.bad_output",
     "forward() returned a str; it must return a tensor or a tuple/list of tensors"),
    ("returns_none_inside", model_with_forward("        return (x, None)\n"), "task.bad_output",
     "forward() output [1] is None; forward() must return"),
    ("returns_empty", model_with_forward("        return ()\n"), "task.bad_output",
     "forward() returned no tensors"),
    ("nondeterministic", model_with_forward("        return x + torch.rand_like(x)\n"),
     "task.nondeterministic", "forward() output differs between two calls on the same inputs"),
]


@pytest.mark.parametrize("name,source,code,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_task(bridge: Bridge, tmp_path: Path, name: str, source: str, code: str,
                     message: str) -> None:
    task = tmp_path / name
    task.mkdir()
    (task / "model.py").write_text(source)
    error = bridge.error("describe", task_dir=str(task), seed=1)
    assert error["code"] == code, error
    assert message in error["message"], error
    assert "\n" not in error["message"]


def test_missing_files(bridge: Bridge, tmp_path: Path) -> None:
    error = bridge.error("describe", task_dir=str(tmp_path / "nope"), seed=1)
    assert error["code"] == "task.missing_file" and "does not exist" in error["message"]
    (tmp_path / "empty").mkdir()
    error = bridge.error("describe", task_dir=str(tmp_path / "empty"), seed=1)
    assert error["code"] == "task.missing_file" and "has no model.py" in error["message"]


def test_bad_task_json(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "t", ELEMENTWISE)
    (task / "task.json").write_text('{"precision": "fp16",\n "atol": }')
    error = bridge.error("describe", task_dir=str(task), seed=1)
    assert error["code"] == "task.syntax_error" and "task.json line 2" in error["message"]
    (task / "task.json").write_text(json.dumps({"precision": "fp8"}))
    error = bridge.error("describe", task_dir=str(task), seed=1)
    assert error["code"] == "task.syntax_error" and "'fp8'" in error["message"]


def test_forward_raising_in_check_and_bench_call(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "t", model_with_forward("        raise KeyError('k')\n"))
    slots = bridge.slots(256, 256, 1, 256)
    try:
        bridge.ok("fill", task_dir=str(task), params=True, model_seed=0,
                  sets=[{"input": 0, "seed": 1}])
        error = bridge.error("check", task_dir=str(task), model_seed=0, input=0, scalars=[],
                             atol=0, rtol=0)
        assert error["code"] == "task.forward_raised" and "KeyError" in error["message"]
        assert "settings" in bridge.ok("bench_open", task_dir=str(task), model_seed=0,
                                       mode="eager")
        error = bridge.error("bench_call", input=0, scalars=[])
        assert error["code"] == "task.forward_raised"
    finally:
        bridge.ok("slots_close")
        slots.close()


SLOTS = {"params_bytes": 256, "input_bytes": 256, "inputs": 1, "output_bytes": 256}
BAD_FIELDS: list[tuple[str, dict[str, object], str]] = [
    ("describe", {"seed": 1}, "describe: missing field 'task_dir'"),
    ("describe", {"task_dir": "/x"}, "describe: missing field 'seed'"),
    ("describe", {"task_dir": "/x", "seed": "1"}, "seed"),
    ("describe", {"task_dir": "/x", "seed": -1}, "seed"),
    ("describe", {"task_dir": 3, "seed": 1}, "'task_dir' must be a non-empty string"),
    ("slots", dict(SLOTS, inputs=0), "'inputs' must be an integer in [1, 16]"),
    ("slots", dict(SLOTS, inputs=17), "'inputs' must be an integer in [1, 16]"),
    ("slots", dict(SLOTS, output_bytes=0), "'output_bytes' must be an integer"),
    ("slots", dict(SLOTS, params_bytes=True), "'params_bytes' must be an integer"),
    ("slots", {"params_bytes": 256, "inputs": 1, "output_bytes": 256},
     "missing field 'input_bytes'"),
    ("fill", {"task_dir": "/x", "params": 1, "sets": []}, "'params' must be a boolean"),
    ("fill", {"task_dir": "/x", "params": True, "sets": []}, "missing field 'model_seed'"),
    ("fill", {"task_dir": "/x", "params": False, "sets": {}}, "'sets' must be a list"),
    ("fill", {"task_dir": "/x", "params": False, "sets": [{"input": 0}]}, "sets[0].seed"),
    ("fill", {"task_dir": "/x", "params": False, "sets": [3]}, "sets[0] must be an object"),
    ("fill", {"task_dir": "/x", "params": False,
              "sets": [{"input": 0, "seed": 1}, {"input": 0, "seed": 2}]}, "the same input"),
    ("fill", {"task_dir": "/x", "params": False, "sets": [{"input": 0, "seed": 1}] * 65},
     "at most 64"),
    ("check", {"task_dir": "/x", "model_seed": 0, "input": 5, "scalars": [], "atol": 0,
               "rtol": 0}, "'input' must be an integer in [0, 0]"),
    ("check", {"task_dir": "/x", "model_seed": 0, "input": 0, "scalars": [], "atol": 0,
               "rtol": 0}, "inputs[0] was never filled"),
    ("bench_open", {"task_dir": "/x", "model_seed": 0, "mode": "fast"}, "'mode' must be"),
    ("bench_empty", {"input": 1}, "'input' must be an integer in [0, 0]"),
]


@pytest.mark.parametrize("op,fields,message", BAD_FIELDS)
def test_bad_fields(bridge: Bridge, op: str, fields: dict[str, object], message: str) -> None:
    slots = bridge.slots(256, 256, 1, 256) if op != "slots" else None
    try:
        error = bridge.error(op, **fields)
        assert error["code"] == "bridge.bad_request" and message in error["message"], error
    finally:
        bridge.ok("slots_close")
        if slots is not None:
            slots.close()


def test_overlong_request_line(bridge: Bridge) -> None:
    answer = bridge.send_raw(b'{"id": 3, "op": "describe", "x": "' + b"y" * (1 << 20) + b'"}')
    assert answer == {"id": None, "ok": False, "error": {
        "code": "bridge.bad_request", "message": "request line longer than 1048576 bytes"}}
    assert bridge.ok("slots_close") == {"closed": 0}  # the next line is read as it should be


@pytest.mark.parametrize(
    "line,message",
    [
        (b"this is not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"op": "describe"}', "needs an 'id'"),
        (b'{"id": 9, "op": "frobnicate"}', "unknown op 'frobnicate'"),
        (b'{"id": 9}', "unknown op None"),
        (b'\xff\xfe{"id": 1}', "not valid UTF-8"),
    ],
)
def test_bad_request_lines(bridge: Bridge, line: bytes, message: str) -> None:
    answer = bridge.send_raw(line)
    assert answer["ok"] is False
    assert answer["error"]["code"] == "bridge.bad_request"
    assert message in answer["error"]["message"]
    assert answer["id"] == (9 if b'"id": 9' in line else None)


def test_bridge_survives_everything_above(bridge: Bridge, tmp_path: Path) -> None:
    assert bridge.proc.stdin is not None
    bridge.proc.stdin.write(b"\n   \n")  # blank lines get no answer
    task = write_task(tmp_path, "t", ELEMENTWISE)
    assert bridge.ok("describe", task_dir=str(task), seed=1)["precision"] == "fp32"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_device_cuda_without_gpu_exits_2() -> None:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run([sys.executable, "-m", "cuda_agent_bridge", "--device", "cuda"],
                          input=b"", capture_output=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"torch.cuda.is_available() is false" in proc.stderr


def test_shutdown_and_eof_exit_zero() -> None:
    b = Bridge()
    try:
        assert b.request("shutdown") == {"id": 1, "ok": True, "result": {}}
        assert b.proc.wait(timeout=30) == 0
    finally:
        b.close()
    b = Bridge()
    try:
        assert b.proc.stdin is not None
        b.proc.stdin.close()
        assert b.proc.wait(timeout=30) == 0
    finally:
        b.close()
