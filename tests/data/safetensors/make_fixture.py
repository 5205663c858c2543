"""Regenerates torch_written.safetensors, the fixture tests/unit/test_safetensors.c reads to check
that files written by the Python `safetensors` package parse with the expected values.

Run from this directory: python make_fixture.py  (needs torch and safetensors)."""
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def tensors():
    return {
        "args.0": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5 - 1.0,  # -1 .. 1.5
        "args.1": torch.tensor([1.0, -2.0, 0.5, 3.140625], dtype=torch.bfloat16),
        "args.2": torch.tensor([[1.0, -0.5], [65504.0, 6.103515625e-05]], dtype=torch.float16),
        "args.3": torch.tensor([-3, 0, 1 << 40], dtype=torch.int64),
        "args.4": torch.tensor([True, False, True, True, False], dtype=torch.bool),
        "args.5": torch.tensor(2.5, dtype=torch.float64),  # 0-d
        "params.0": torch.zeros((0, 4), dtype=torch.float32),  # zero-size
    }


def main():
    path = os.path.join(HERE, "torch_written.safetensors")
    save_file(tensors(), path, metadata={"seed": "7", "kind": "inputs"})
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
