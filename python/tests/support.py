"""Test support: a real bridge subprocess (CPU) speaking the protocol, and tiny task sources."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

PYTHON_DIR = Path(__file__).resolve().parent.parent


class Bridge:
    """A `python -m cuda_agent_bridge --device cpu` child; one request, one answer."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONUNBUFFERED="1")
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent_bridge", "--device", "cpu"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            stderr=self._stderr,
            env=env,
        )
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
        return answer["error"]

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

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
