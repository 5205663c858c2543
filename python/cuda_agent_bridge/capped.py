"""Reading what may come from anywhere with a size cap: a JSON file, lines of a stream (no torch
import here).

Contract: ``read_json(path, cap)`` returns the parsed value or raises ``ReadError`` whose
``kind`` is ``"io"`` (cannot read: the message has the OS's reason), ``"size"`` (more than cap
bytes) or ``"json"`` (not valid UTF-8 JSON); callers turn it into their own error codes.
``lines(stream, cap)`` yields the lines of a binary stream without their line ending, and
``None`` in place of a line longer than ``cap`` bytes (whose bytes are read and dropped, so the
next line starts where it should); it ends at EOF. It never holds more than ``cap + 1`` bytes of
a line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import BinaryIO


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


def lines(stream: BinaryIO, cap: int) -> Iterator[bytes | None]:
    """The stream's lines (without b"\\n" or b"\\r\\n"); None for a line over cap bytes."""
    while True:
        line = stream.readline(cap + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line.rstrip(b"\r\n")
            continue
        if len(line) <= cap:  # the last line, without a newline
            yield line.rstrip(b"\r")
            return
        while True:  # an overlong line: drop the rest of it
            rest = stream.readline(cap + 1)
            if not rest or rest.endswith(b"\n"):
                break
        yield None
        if not rest:
            return
