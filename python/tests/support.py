"""Test support: a real bridge subprocess (CPU) speaking the protocol with a descriptor
channel, the slots it sends, and tiny task sources."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from cuda_agent_bridge.slots import Slot, layout, tensor_views

PYTHON_DIR = Path(__file__).resolve().parent.parent


@dataclass
class TestSlots:
    """Slots as the supervisor holds them: a mapping of each, and the descriptors (open, to be
    passed to a runner)."""

    params: Slot
    inputs: list[Slot]
    outputs: Slot
    kind: str = "cpu"

    __test__ = False

    def all(self) -> list[Slot]:
        return [self.params, *self.inputs, self.outputs]

    def fds(self) -> tuple[int, ...]:
        return tuple(s.fd for s in self.all())

    def plan_slots(self) -> dict[str, Any]:
        def ref(s: Slot) -> dict[str, int]:
            return {"fd": s.fd, "bytes": s.nbytes}

        return {"kind": self.kind, "params": ref(self.params),
                "inputs": [ref(s) for s in self.inputs], "outputs": ref(self.outputs)}

    def views(self, slot: Slot, entries: list[dict[str, Any]]) -> list[torch.Tensor]:
        return tensor_views(slot, entries)

    def poison(self) -> None:
        self.outputs.bytes().fill_(0xFF)

    def close(self) -> None:
        for s in self.all():
            s.close()


def make_slots(spec: dict[str, Any], inputs: int) -> TestSlots:
    """memfd slots sized for spec (what the bridge's `slots` op makes on the CPU)."""
    tensor_args = [a for a in spec["args"] if a.get("device") != "cpu"]
    size = {k: layout(v)[1] for k, v in (("params", spec["params"]), ("args", tensor_args),
                                          ("outputs", spec["outputs"]))}
    return TestSlots(Slot.allocate("cpu", size["params"], 0),
                     [Slot.allocate("cpu", size["args"], 0) for _ in range(inputs)],
                     Slot.allocate("cpu", size["outputs"], 0))


class Bridge:
    """A `python -m cuda_agent_bridge --device cpu` child with a descriptor channel; one
    request, one answer."""

    def __init__(self, device: str = "cpu") -> None:
        self.kind = device
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONUNBUFFERED="1",
                   CUDA_AGENT_FD_CHANNEL=str(theirs.fileno()))
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent_bridge", "--device", device],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            stderr=self._stderr,
            env=env,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self._next_id = 0
        self._pending = b""
        self.ready = self.read_line(timeout=120)

    def read_line(self, timeout: float) -> dict[str, Any]:
        """The next stdout line, parsed (a stray print fails the parse); waits at most timeout."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.close()
                raise TimeoutError(f"bridge gave no answer within {timeout} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError(f"bridge exited (rc={self.proc.wait()}): {self._pending!r}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        obj = json.loads(line)
        assert isinstance(obj, dict)
        return obj

    def unread(self) -> bytes:
        """Bytes already read from stdout but not yet returned as a line."""
        return self._pending

    def send_raw(self, line: bytes, timeout: float = 60) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        return self.read_line(timeout)

    def request(self, op: str, timeout: float = 60, **fields: Any) -> dict[str, Any]:
        self._next_id += 1
        answer = self.send_raw(json.dumps({"id": self._next_id, "op": op, **fields}).encode(),
                               timeout)
        assert answer["id"] == self._next_id
        return answer

    def ok(self, op: str, timeout: float = 60, **fields: Any) -> dict[str, Any]:
        answer = self.request(op, timeout, **fields)
        assert answer["ok"], answer
        result = answer["result"]
        assert isinstance(result, dict)
        return result

    def error(self, op: str, **fields: Any) -> dict[str, str]:
        answer = self.request(op, **fields)
        assert not answer["ok"], answer
        error = answer["error"]
        assert isinstance(error, dict)
        return error

    def slots(self, params_bytes: int, input_bytes: int, inputs: int, output_bytes: int,
              ) -> TestSlots:
        """The `slots` op, and the descriptors it sends, mapped as the supervisor maps them."""
        result = self.ok("slots", params_bytes=params_bytes, input_bytes=input_bytes,
                         inputs=inputs, output_bytes=output_bytes)
        assert result == {"kind": self.kind, "count": inputs + 2}, result
        _, fds, _, _ = socket.recv_fds(self.channel, 64, 64)
        assert len(fds) == inputs + 2
        sizes = [params_bytes] + [input_bytes] * inputs + [output_bytes]
        mapped = [Slot.attach(self.kind, fd, n, 0) for fd, n in zip(fds, sizes, strict=True)]
        return TestSlots(mapped[0], mapped[1:-1], mapped[-1], self.kind)

    def slots_for(self, spec: dict[str, Any], inputs: int) -> TestSlots:
        tensor_args = [a for a in spec["args"] if a.get("device") != "cpu"]
        return self.slots(layout(spec["params"])[1], layout(tensor_args)[1], inputs,
                          layout(spec["outputs"])[1])

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._stderr.close()
        self.channel.close()


class Runner:
    """`python -m cuda_agent_bridge.runner PLAN.json` driven the way the supervisor drives it:
    one command, one event (read from its stdout, each line parsed: a stray print fails)."""

    def __init__(self, plan: Path, pass_fds: tuple[int, ...] = (),
                 args: tuple[str, ...] | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONUNBUFFERED="1")
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent_bridge.runner", *(args or (str(plan),))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
            pass_fds=pass_fds, bufsize=0)
        self.pending = b""

    def event(self, timeout: float = 120) -> dict[str, Any] | None:
        """The next event, or None at EOF; fails after timeout seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.proc.kill()
                raise TimeoutError(f"no event within {timeout} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                assert not self.pending, self.pending
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        obj = json.loads(line)
        assert isinstance(obj, dict) and isinstance(obj.get("event"), str), obj
        return obj

    def quiet(self, seconds: float) -> bool:
        """True when nothing arrives on stdout for `seconds`."""
        assert self.proc.stdout is not None
        if self.pending:
            return False
        ready, _, _ = select.select([self.proc.stdout.fileno()], [], [], seconds)
        return not ready

    def send_raw(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def command(self, cmd: str, timeout: float = 120, **fields: Any) -> dict[str, Any]:
        self.send_raw(json.dumps({"cmd": cmd, **fields}).encode())
        ev = self.event(timeout)
        assert ev is not None, f"EOF after {cmd}; stderr: {self.stderr()}"
        return ev

    def start(self, calibrate: int = 2, timeout: float = 120) -> list[float]:
        """The supervisor's start: the device event, calibration calls, load, setup."""
        ev = self.event(timeout)
        assert ev is not None and ev["event"] == "device", (ev, self.stderr())
        times = []
        for _ in range(calibrate):
            ev = self.command("empty", input=0)
            assert ev["event"] == "called" and ev["ev_ms"] >= 0, ev
            times.append(ev["ev_ms"])
        ev = self.command("load", timeout)
        assert ev["event"] == "loaded", (ev, self.stderr())
        ev = self.command("setup")
        assert ev == {"event": "set_up"}, (ev, self.stderr())
        return times

    def finish(self, timeout: float = 60) -> tuple[list[dict[str, Any]], int]:
        """Every event left, and the exit status."""
        events = []
        while (ev := self.event(timeout)) is not None:
            events.append(ev)
        return events, self.proc.wait(timeout)

    def quit(self) -> int:
        assert self.command("quit") == {"event": "done"}
        assert self.event() is None
        return self.proc.wait(60)

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._stderr.close()


def write_task(root: Path, name: str, source: str, task_json: dict[str, Any] | None = None) -> Path:
    """Creates root/name/model.py (dedented) and an optional task.json; returns the directory."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.py").write_text(textwrap.dedent(source))
    if task_json is not None:
        (d / "task.json").write_text(json.dumps(task_json))
    return d


def import_task(task_dir: Path) -> ModuleType:
    """Imports task_dir/model.py in the test process (for computing expected values directly)."""
    name = f"test_task_{abs(hash(str(task_dir)))}"
    spec = importlib.util.spec_from_file_location(name, task_dir / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ELEMENTWISE = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(16, 32)]

def get_init_inputs():
    return []
"""

def relu_scale_bias_task(rows: int, cols: int) -> str:
    """A task with a parameter and a Python float argument: relu(x) * scale + bias."""
    return f"""
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x, scale):
        return torch.relu(x) * scale + self.bias

def get_inputs():
    return [torch.randn({rows}, {cols}), 2.0]

def get_init_inputs():
    return [{cols}]
"""


# Parameters plus a Python float argument.
LINEAR_SCALE = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.register_buffer("offset", torch.randn(n_out))

    def forward(self, x, scale):
        return self.linear(x) * scale + self.offset

def get_inputs():
    return [torch.randn(4, 8), 0.5]

def get_init_inputs():
    return [8, 6]
"""

TWO_OUTPUTS = """
import torch
from torch import nn

class Model(nn.Module):
    def forward(self, a, b):
        return a + b, (a * b).sum(dim=1)

def get_inputs():
    return [torch.randn(3, 5), torch.randn(3, 5)]

def get_init_inputs():
    return []
"""
