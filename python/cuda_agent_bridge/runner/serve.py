"""The runner's command loop (docs/protocol.md, "The candidate's process").

Contract: ``serve(plan_path, commands, events)`` loads the plan, opens the device, maps the
slots, emits ``device``, then reads one command per line (at most MAX_COMMAND_BYTES; blank lines
are skipped) and answers each with exactly one event, nothing else:

| command | answer |
| --- | --- |
| ``{"cmd": "empty", "input": r}`` | ``called {"ev_ms"}`` (Harness.empty) |
| ``{"cmd": "load"}`` | ``loaded {"has_setup": true, "has_teardown": false, "format", "params"}`` |
| ``{"cmd": "setup"}`` | ``set_up`` (after load) |
| ``{"cmd": "call", "input": r, "scalars": [[i, v], ...]}`` | ``called {"ev_ms"}`` (after setup) |
| ``{"cmd": "profile", ...}`` | ``profile {"ok": false, "code": "worker.unsupported", ...}`` |
| ``{"cmd": "audit", ...}`` | ``failed {"code": "worker.unsupported"}`` |
| ``{"cmd": "quit"}`` | ``done``, then the process exits 0 |

``params`` is ``paired`` (each setup loads the params slot into ModelNew) or ``seeded`` (under
the kernelbench rules, state_dicts that do not pair: ModelNew keeps its seeded construction's
parameters; load.pairing, Harness.params).

A failed command answers ``failed {"code", "message"}`` and the loop goes on, except after a
``fault.*`` (a CUDA error), where the process exits 1. A malformed, overlong or unknown command,
or one out of order (call before setup, load twice), is fatal ``worker.bad_plan``; fatal
problems answer ``error {"code", "message"}`` and the process exits 1. At EOF the loop ends
(exit 0) without an event. ``serve`` returns the exit status; Fatal propagates to the caller.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

from ..capped import lines
from ..wire import decode_scalars
from .events import CallFailed, Events, Fatal

MAX_COMMAND_BYTES = 64 << 10
COMMANDS = ("empty", "load", "setup", "call", "profile", "audit", "quit")


def _bad(message: str) -> Fatal:
    return Fatal("worker.bad_plan", message)


def parse_command(line: bytes | None) -> dict[str, Any]:
    if line is None:
        raise _bad(f"a command line is longer than {MAX_COMMAND_BYTES} bytes")
    try:
        cmd = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"a command is not valid JSON ({exc})") from exc
    if not isinstance(cmd, dict) or not isinstance(cmd.get("cmd"), str):
        raise _bad("a command must be a JSON object with 'cmd'")
    if cmd["cmd"] not in COMMANDS:
        raise _bad(f"unknown command {cmd['cmd'][:64]!r}; expected one of {', '.join(COMMANDS)}")
    return cmd


def _input(cmd: dict[str, Any], count: int) -> int:
    r = cmd.get("input")
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < count:
        raise _bad(f"{cmd['cmd']}: 'input' must be an integer in [0, {count - 1}]")
    return r


def serve(plan_path: str, commands: BinaryIO, ev: Events) -> int:
    from .call import Harness
    from .device import map_slots, open_device
    from .load import build_model
    from .plan import load_plan

    plan = load_plan(plan_path)
    device, info = open_device(plan)
    harness = Harness(plan, device, map_slots(plan, device))
    inputs = len(plan.slots.inputs)
    kinds = plan.spec.scalar_kinds
    ev.emit("device", info)
    loaded = set_up = False
    for line in lines(commands, MAX_COMMAND_BYTES):
        if line is not None and not line.strip():
            continue
        cmd = parse_command(line)
        name = cmd["cmd"]
        try:
            if name == "empty":
                _input(cmd, inputs)
                ev.emit("called", {"ev_ms": harness.empty()})
            elif name == "load":
                if loaded:
                    raise _bad("load: the candidate is loaded already")
                harness.load(*build_model(plan, device))
                loaded = True
                ev.emit("loaded", {"has_setup": True, "has_teardown": False,
                                   "format": plan.candidate.format,
                                   "params": harness.params})
            elif name == "setup":
                if not loaded:
                    raise _bad("setup before load")
                harness.setup()
                set_up = True
                ev.emit("set_up")
            elif name == "call":
                if not set_up:
                    raise _bad("call before setup")
                r = _input(cmd, inputs)
                try:
                    scalars = decode_scalars(cmd.get("scalars", []), kinds, "call: scalars")
                except ValueError as exc:
                    raise _bad(str(exc)) from exc
                ev.emit("called", {"ev_ms": harness.call(r, scalars)})
            elif name == "profile":
                ev.emit("profile", {"ok": False, "code": "worker.unsupported", "kernels": [],
                                    "total_ns": 0, "message": "profiling PyTorch-format "
                                    "candidates is not implemented"})
            elif name == "audit":
                raise CallFailed("worker.unsupported",
                                 "audit is not implemented for PyTorch-format candidates")
            else:  # quit
                ev.emit("done")
                return 0
        except CallFailed as failure:
            ev.failed(failure.code, failure.message)
            if failure.fault:
                return 1
    return 0
