"""Task code writing to stdout (print, sys.__stdout__, raw fd 1) cannot corrupt the protocol."""

from __future__ import annotations

from pathlib import Path

from support import Bridge, write_task

NOISY = """
import os
import sys
import torch
from torch import nn

print("at import")
sys.__stdout__.write("via sys.__stdout__\\n")
sys.__stdout__.flush()
os.write(1, b"raw fd 1 at import\\n")

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        print("in __init__", flush=True)

    def forward(self, x):
        print("in forward", x.shape)
        os.write(1, b"raw fd 1 in forward\\n")
        return x * 3

def get_inputs():
    print("in get_inputs")
    return [torch.randn(4)]

def get_init_inputs():
    print("in get_init_inputs")
    return []
"""


def test_printing_task_keeps_protocol_clean(tmp_path: Path) -> None:
    task = write_task(tmp_path, "noisy", NOISY)
    b = Bridge()
    try:
        # Bridge.read_line json-parses every stdout line, so any stray output fails here.
        spec = b.ok("describe", task_dir=str(task), seed=1)
        assert spec["outputs"][0]["shape"] == [4]
        slots = b.slots_for(spec, 1)
        try:
            assert b.ok("fill", task_dir=str(task), model_seed=0, params=True,
                        sets=[{"input": 0, "seed": 2}])["scalars"] == [[]]
            assert b.ok("check", task_dir=str(task), model_seed=0, input=0, scalars=[], atol=0,
                        rtol=0)["outputs"][0]["numel"] == 4
            assert "settings" in b.ok("bench_open", task_dir=str(task), model_seed=0,
                                      mode="eager")
            assert b.ok("bench_call", input=0, scalars=[])["ev_ms"] >= 0
        finally:
            slots.close()
        assert b.request("shutdown")["ok"]
        assert b.proc.stdout is not None
        assert b.unread() + b.proc.stdout.read() == b""  # nothing after the last answer
        assert b.proc.wait(timeout=30) == 0
        err = b.stderr_text()
        for text in ("at import", "via sys.__stdout__", "raw fd 1 at import", "in __init__",
                     "in forward", "raw fd 1 in forward", "in get_inputs", "in get_init_inputs"):
            assert text in err, text
    finally:
        b.close()
