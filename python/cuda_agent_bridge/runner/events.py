"""The runner's event stream and its failures.

Contract: ``Events(stream).emit(name, fields)`` writes one JSON line ``{"event": name, ...}``
(JSON-safe: non-finite floats as strings; messages one line, at most MESSAGE_MAX characters) on
the private copy of the original stdout and flushes it. ``Fatal(code, message)`` ends the
process: an ``error`` event, exit 1. ``CallFailed(code, message, fault)`` fails one command: a
``failed`` event; when ``fault`` (a CUDA error: the context is unusable) the process then exits 1.
"""

from __future__ import annotations

import json
from typing import IO

from ..wire import json_safe

MESSAGE_MAX = 4096


class Fatal(Exception):
    """Ends the run: an ``error`` event with this code, exit 1."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallFailed(Exception):
    """One command failed: a ``failed`` event; ``fault``: then exit 1."""

    def __init__(self, code: str, message: str, fault: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fault = fault


def cap(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MESSAGE_MAX else flat[: MESSAGE_MAX - 3] + "..."


class Events:
    """JSON lines on the protocol stream, ``event`` first, flushed per line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def emit(self, name: str, fields: dict[str, object] | None = None) -> None:
        line = json.dumps(json_safe({"event": name, **(fields or {})}), allow_nan=False)
        self.stream.write(line + "\n")
        self.stream.flush()

    def error(self, code: str, message: str) -> None:
        self.emit("error", {"code": code, "message": cap(message)})

    def failed(self, code: str, message: str) -> None:
        self.emit("failed", {"code": code, "message": cap(message)})
