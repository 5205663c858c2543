"""Tensor files: safetensors written atomically with the names of docs/protocol.md.

Contract: ``save_tensors(path, prefix, tensors, metadata)`` writes ``<prefix>.0`` ...
``<prefix>.<n-1>`` (``args``, ``params`` or ``outputs``) as contiguous CPU copies into a temporary
file next to ``path`` and renames it over ``path``, so readers never see a partial file.
``load_tensors`` reads such a file back in index order.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import torch
from safetensors.torch import load_file, save_file


def save_tensors(
    path: str, prefix: str, tensors: Sequence[torch.Tensor], metadata: dict[str, str]
) -> None:
    """Writes ``tensors`` as ``<prefix>.<i>`` into ``path`` atomically (temp file + rename)."""
    # safetensors refuses tensors that share storage (views, tied weights): those are cloned;
    # the rest are written as they are (a copy of hundreds of MB costs real time).
    named: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for i, t in enumerate(tensors):
        c = t.detach().to("cpu").contiguous()
        storage = c.untyped_storage()
        if (c.storage_offset() != 0 or storage.nbytes() != c.numel() * c.element_size()
                or storage.data_ptr() in seen):
            c = c.clone()
        seen.add(c.untyped_storage().data_ptr())
        named[f"{prefix}.{i}"] = c
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=directory)
    os.close(fd)
    try:
        save_file(named, tmp, metadata=metadata)
        # Readable by the sandbox's uid (65534 when cuda-agent runs as root): mkstemp makes
        # 0600 (and save_file keeps it). Files under private/ stay private through its 0700.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load_tensors(path: str, prefix: str) -> list[torch.Tensor]:
    """Reads ``<prefix>.0`` ... from ``path`` in index order."""
    named = load_file(path)
    count = sum(1 for name in named if name.startswith(prefix + "."))
    return [named[f"{prefix}.{i}"] for i in range(count)]
