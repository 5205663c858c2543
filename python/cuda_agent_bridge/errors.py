"""Errors the bridge reports: a protocol error code plus one line a person can act on.

Contract: every expected failure is raised as ``BridgeError(code, message)`` where ``code`` is one
of the codes in docs/protocol.md (``task.*``, ``bridge.*``, ``baseline.compile_failed``) and
``message`` is a single line. The server turns it into ``{"ok": false, "error": {...}}``.
"""

from __future__ import annotations

import traceback

MESSAGE_LIMIT = 800


class BridgeError(Exception):
    """A failure with a stable protocol code and a one-line message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = one_line(message)


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Collapses whitespace (newlines included) to single spaces and caps the length."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def article(noun: str) -> str:
    """'a str', 'an int'."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def exception_text(exc: BaseException) -> str:
    """'ValueError: bad shape' (type name and the message, one line)."""
    msg = one_line(str(exc))
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def task_line(exc: BaseException, path: str) -> int | None:
    """Line number of the innermost traceback frame inside the file ``path``, if any."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == path:
            line = frame.lineno
    return line
