"""In-process tests of the building blocks: flattening, names, near-duplicates, the comparison
rule, JSON-safe numbers and scalar arguments, capped lines, the runner's plan and commands."""

from __future__ import annotations

import copy
import io
import json
import math
from typing import Any

import pytest
import torch
from torch import nn

from cuda_agent_bridge import server, wire
from cuda_agent_bridge.capped import lines
from cuda_agent_bridge.errors import BridgeError, one_line
from cuda_agent_bridge.tasks import TaskStore, arg_names, flatten_outputs


def test_flatten_depth_first() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    assert flatten_outputs((a, [b, (c,)], d)) == [a, b, c, d]
    assert flatten_outputs(a) == [a]
    with pytest.raises(BridgeError) as err:
        flatten_outputs([a, [b, 3]])
    assert err.value.code == "task.bad_output" and "output [1][1] is an int" in err.value.message


def test_one_line() -> None:
    assert one_line("a\n  b\tc\n") == "a b c"
    assert len(one_line("x" * 5000)) == 800 and one_line("x" * 5000).endswith("...")


def test_arg_names() -> None:
    class Plain(nn.Module):
        def forward(self, x: torch.Tensor, y: float) -> torch.Tensor:
            return x * y

    class Star(nn.Module):
        def forward(self, x: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
            return x

    assert arg_names(Plain(), 2) == ["x", "y"]
    assert arg_names(Star(), 3) == ["x", "extra.0", "extra.1"]
    assert arg_names(Plain(), 3)[2] == "arg2"


def test_unexpected_exception_is_bridge_internal(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(ctx: server.Context, req: dict[str, Any]) -> dict[str, object]:
        return {"x": 1 // 0}

    monkeypatch.setitem(server.OPS, "describe", explode)
    ctx = server.Context(TaskStore(torch.device("cpu")))
    answer, stop = server.handle(ctx, b'{"id": 4, "op": "describe"}')
    assert not stop
    assert answer == {
        "id": 4,
        "ok": False,
        "error": {
            "code": "bridge.internal",
            "message": "ZeroDivisionError: integer division or modulo by zero",
        },
    }
    answer, stop = server.handle(ctx, b'{"id": "s", "op": "shutdown"}')
    assert stop and answer == {"id": "s", "ok": True, "result": {}}


@pytest.mark.parametrize("chunk", [2, 1 << 26])
def test_compare_stats_follows_the_c_rule(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """server.compare_stats (device data) counts what src/eval/compare.c counts: NaN only
    matches NaN, an infinity only itself, finite pairs by allclose; errors over finite pairs."""
    monkeypatch.setattr(server, "CHECK_CHUNK", chunk)
    nan, inf = float("nan"), float("inf")
    out = torch.tensor([1.0, nan, inf, 2.0, 5.0, nan, -inf])
    ref = torch.tensor([1.0, nan, inf, 2.5, 5.0, 3.0, inf])
    got = server.compare_stats(out, ref, atol=0.1, rtol=0.1)
    assert got["numel"] == 7 and got["mismatches"] == 3 and got["nan_unwritten"] == 1, got
    assert got["first_index"] == 3 and got["first_out"] == 2.0 and got["first_ref"] == 2.5
    assert got["max_abs_err"] == pytest.approx(0.5) and got["max_rel_err"] == pytest.approx(0.2)
    same = server.compare_stats(ref.clone(), ref, atol=0.0, rtol=0.0)
    assert same["mismatches"] == 0 and same["first_index"] is None and same["max_abs_err"] == 0
    unwritten = server.compare_stats(torch.full((5,), nan), torch.ones(5), 1e-5, 1e-5)
    first_out = unwritten["first_out"]
    assert unwritten["nan_unwritten"] == 5 and isinstance(first_out, float), unwritten
    assert math.isnan(first_out)
    ints = server.compare_stats(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), 0.0, 0.0)
    assert ints["mismatches"] == 1 and ints["first_index"] == 2, ints


def test_json_safe_and_encode() -> None:
    value = {"a": [1.5, math.nan, (math.inf, -math.inf)], "b": True, "c": None, "d": 3}
    assert wire.json_safe(value) == {"a": [1.5, "nan", ["inf", "-inf"]], "b": True, "c": None,
                                     "d": 3}
    line = server.encode({"id": 1, "ok": True, "result": {"max_abs_err": math.inf}})
    assert json.loads(line) == {"id": 1, "ok": True, "result": {"max_abs_err": "inf"}}
    bad = json.loads(server.encode({"id": 2, "ok": True, "result": {"x": object()}}))
    assert bad["id"] == 2 and bad["error"]["code"] == "bridge.internal"


def test_decode_scalars() -> None:
    kinds = {1: float, 2: int, 4: bool}
    got = wire.decode_scalars([[4, False], [1, "-inf"], [2, 7]], kinds)
    assert got == [(1, -math.inf), (2, 7), (4, False)]
    assert wire.decode_scalars([[1, 3], [2, -(2**63)], [4, True]], kinds)[0] == (1, 3.0)
    assert isinstance(wire.decode_scalars([[1, 3], [2, 0], [4, True]], kinds)[0][1], float)
    nan = wire.decode_scalars([[1, "nan"], [2, 0], [4, True]], kinds)[0][1]
    assert isinstance(nan, float) and math.isnan(nan)
    assert wire.decode_scalars([], {}) == []
    bad: Any
    for bad, message in (({}, "must be a list"), ([[1]], "pair"), ([(1, 2.0)], "pair"),
                         ([[1, "x"], [2, 0], [4, True]], "must be a number"),
                         ([[1, 1.0], [2, 2**63], [4, True]], "within int64"),
                         ([[1, 1.0], [2, True], [4, True]], "integer"),
                         ([[1, 1.0], [2, 1], [4, 0]], "boolean"),
                         ([[1, 1.0], [2, 1], [4, True], [3, 1]], "not the index"),
                         ([[True, 1.0], [2, 1], [4, True]], "not the index"),
                         ([[1, 1.0], [2, 1]], "no value for scalar argument(s) 4"),
                         ([[1, 1.0]] * 2000, "must be a list")):
        with pytest.raises(ValueError, match=None) as err:
            wire.decode_scalars(bad, kinds)
        assert message in str(err.value), (bad, err.value)
    assert wire.encode_scalars({2: 1, 1: math.inf}) == [[1, "inf"], [2, 1]]


def test_capped_lines() -> None:
    data = b"one\r\n" + b"x" * 20 + b"\n\nexactly10!\n" + b"y" * 11 + b"\nlast"
    assert list(lines(io.BytesIO(data), 10)) == [b"one", None, b"", b"exactly10!", None,
                                                  b"last"]
    assert list(lines(io.BytesIO(b"z" * 25), 10)) == [None]
    assert list(lines(io.BytesIO(b""), 10)) == []
    assert list(lines(io.BytesIO(b"0123456789\n"), 10)) == [b"0123456789"]


def test_cuda_fault_codes() -> None:
    from cuda_agent_bridge.runner.call import cuda_fault, safe_text

    assert cuda_fault("CUDA error: an illegal memory access was encountered") == \
        "fault.illegal_address"
    assert cuda_fault("CUDA error: misaligned address") == "fault.misaligned_address"
    assert cuda_fault("CUDA error: unspecified launch failure") == "fault.launch_failure"
    assert cuda_fault("CUDA error: out of resources") == "fault.cuda_error"
    assert cuda_fault("shape mismatch") is None

    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert safe_text(Hostile()) == "Hostile"


RUNNER_SPEC: dict[str, Any] = {
    "args": [{"index": 0, "name": "x", "dtype": "float32", "shape": [8, 32], "device": "cuda"},
             {"index": 1, "name": "s", "dtype": "float64", "shape": [], "device": "cpu"}],
    "params": [],
    "outputs": [{"index": 0, "name": "output", "dtype": "float32", "shape": [8, 32]}],
}


def runner_plan(**changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "version": 2, "device": 0, "spec": copy.deepcopy(RUNNER_SPEC),
        "slots": {"kind": "cpu", "params": {"fd": 3, "bytes": 256},
                  "inputs": [{"fd": 4, "bytes": 1024}, {"fd": 5, "bytes": 1024}],
                  "outputs": {"fd": 6, "bytes": 1024}},
        "candidate": {"format": "kernelbench", "path": "/c.py", "task_dir": "/t",
                      "torch_device": "cpu"}}
    for key, value in changes.items():
        node = plan
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return plan


def test_runner_plan() -> None:
    from cuda_agent_bridge.runner.plan import parse_plan

    plan = parse_plan(runner_plan())
    assert plan.slots.kind == "cpu" and [s.fd for s in plan.slots.inputs] == [4, 5]
    assert plan.spec.scalar_kinds == {1: float} and [a.index for a in plan.spec.tensor_args] == [0]
    assert plan.candidate.inline_modules == {} and plan.candidate.init_seed == 0
    workdir = parse_plan(runner_plan(candidate={"format": "workdir", "dir": "/w",
                                                "task_dir": "/t", "extension": "/e.so",
                                                "torch_device": "cpu"}))
    assert workdir.candidate.path == "/w" and workdir.candidate.extension == "/e.so"


@pytest.mark.parametrize("changes,message", [
    ({"version": 1}, "version must be 2"),
    ({"version": None}, "version must be 2"),
    ({"spec.outputs": []}, "spec.outputs is empty"),
    ({"spec.args": [{"dtype": "complex64", "shape": [2]}]}, "not a supported dtype"),
    ({"spec.args": [{"dtype": "float32", "shape": [-1]}]}, "non-negative integers"),
    ({"spec.args": [{"dtype": "float32", "shape": [2**40, 2**40]}]}, "larger than 2^47"),
    ({"spec.args": [{"dtype": "float32", "shape": [2], "device": "cpu"}]}, "Python-number"),
    ({"spec.args": [{"dtype": "int32", "shape": [], "device": "cpu"}]}, "Python-number"),
    ({"slots.kind": "cuda"}, "does not match candidate.torch_device"),
    ({"slots.inputs": []}, "slots.inputs must list 1 to 16"),
    ({"slots.outputs": {"fd": 3, "bytes": 1024}}, "the same descriptor"),
    ({"slots.outputs": {"fd": 2, "bytes": 1024}}, "slots.outputs.fd"),
    ({"slots.outputs": {"fd": 6, "bytes": 512}}, "need 1024 bytes"),
    ({"slots.inputs": [{"fd": 4, "bytes": 1024}, {"fd": 5, "bytes": 1000}]}, "need 1024"),
    ({"candidate.format": "onnx"}, "candidate.format must be one of"),
    ({"candidate.path": None}, "needs 'path'"),
    ({"candidate.task_dir": 3}, "needs 'task_dir'"),
    ({"candidate.inline_modules": {"k": 3}}, "inline_modules"),
    ({"candidate.init_seed": -1}, "init_seed"),
    ({"candidate": {"format": "workdir", "dir": "/w", "task_dir": "/t"}}, "'extension'"),
])
def test_runner_plan_rejects(changes: dict[str, Any], message: str) -> None:
    from cuda_agent_bridge.runner.events import Fatal
    from cuda_agent_bridge.runner.plan import parse_plan

    with pytest.raises(Fatal) as err:
        parse_plan(runner_plan(**changes))
    assert err.value.code == "worker.bad_plan" and message in err.value.message, err.value.message


def test_runner_commands() -> None:
    from cuda_agent_bridge.runner.events import Fatal
    from cuda_agent_bridge.runner.serve import parse_command

    assert parse_command(b'{"cmd": "call", "input": 0}') == {"cmd": "call", "input": 0}
    for line, message in ((None, "longer than"), (b"{", "not valid JSON"),
                          (b"\xff", "not valid JSON"), (b"[]", "JSON object with 'cmd'"),
                          (b'{"cmd": 3}', "JSON object with 'cmd'"),
                          (b'{"cmd": "reference"}', "unknown command 'reference'")):
        with pytest.raises(Fatal) as err:
            parse_command(line)
        assert err.value.code == "worker.bad_plan" and message in err.value.message


def test_runner_events_are_json_safe_and_one_line() -> None:
    from cuda_agent_bridge.runner.events import MESSAGE_MAX, Events

    out = io.StringIO()
    ev = Events(out)
    ev.emit("called", {"ev_ms": math.nan})
    ev.failed("abi.forward_failed", "two\nlines " + "x" * 10000)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first == {"event": "called", "ev_ms": "nan"}
    assert second["message"].startswith("two lines") and len(second["message"]) == MESSAGE_MAX


def test_torch_defaults_are_restored_after_every_request(tmp_path: Any) -> None:
    from support import write_task

    source = """
    import torch
    from torch import nn
    class Model(nn.Module):
        def forward(self, x):
            torch.backends.cuda.matmul.allow_tf32 = True
            return x * 2
    def get_inputs():
        torch.set_default_dtype(torch.float64)
        return [torch.randn(4)]
    def get_init_inputs():
        return []
    """
    task = write_task(tmp_path, "rude", source)
    ctx = server.Context(TaskStore(torch.device("cpu")))
    line = json.dumps({"id": 1, "op": "describe", "task_dir": str(task), "seed": 1}).encode()
    answer, _ = server.handle(ctx, line)
    assert answer["ok"] is True, answer
    assert torch.get_default_dtype() == torch.float32
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
