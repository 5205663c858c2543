"""Reading a JSON file that may come from anywhere, with a size cap (no torch import here).

Contract: ``read_json(path, cap)`` returns the parsed value or raises ``ReadError`` whose
``kind`` is ``"io"`` (cannot read: the message has the OS's reason), ``"size"`` (more than cap
bytes) or ``"json"`` (not valid UTF-8 JSON); callers turn it into their own error codes.
"""

from __future__ import annotations

import json


class ReadError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def read_json(path: str, cap: int) -> object:
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise ReadError("io", f"cannot read {path}: {exc.strerror}") from exc
    if len(data) > cap:
        raise ReadError("size", f"{path} is larger than {cap} bytes")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReadError("json", f"{path} is not valid JSON ({exc})") from exc
