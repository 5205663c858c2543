"""Entry point: ``python -m cuda_agent_bridge.runner PLAN.json`` or
``python -m cuda_agent_bridge.runner --record FILE SPECS.json``.

Contract: before anything else is imported, keeps private, non-inheritable copies of fds 0 and 1
(commands in, events out) and points fd 0 at /dev/null and fd 1 at stderr (``sys.stdout`` too),
so the candidate's prints go to stderr and its code can neither read commands nor write events
through the standard descriptors. Then serves the plan (``serve.serve``) or records (``load.
record_inline``, then ``done``). A ``Fatal`` answers ``error`` and exits 1; an unexpected
exception answers ``error`` ``worker.internal`` and exits 1. The process ends with
``os._exit`` once its last event is flushed: no candidate ``atexit`` handler or finalizer runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..wire import take_stdio

USAGE = ("usage: python -m cuda_agent_bridge.runner PLAN.json\n"
         "       python -m cuda_agent_bridge.runner --record CANDIDATE.py SPECS.json")


def main(argv: Sequence[str] | None = None) -> int:
    commands, stream = take_stdio()
    args = list(sys.argv[1:] if argv is None else argv)
    sys.dont_write_bytecode = True  # candidate code is imported from read-only places

    from .events import Events, Fatal

    ev = Events(stream)
    record = len(args) == 3 and args[0] == "--record"
    if not record and (len(args) != 1 or args[0].startswith("-")):
        print(USAGE, file=sys.stderr)
        ev.error("worker.bad_plan", USAGE.replace("\n", " "))
        return 1
    try:
        if record:
            from .load import record_inline

            record_inline(args[1], args[2])
            ev.emit("done")
            return 0
        from .serve import serve

        return serve(args[0], commands, ev)
    except Fatal as exc:
        ev.error(exc.code, exc.message)
        return 1
    except Exception as exc:  # a bug here, not the candidate's: say so plainly
        from .call import safe_text

        ev.error("worker.internal", f"the PyTorch runner failed: {safe_text(exc)}")
        return 1


def _exit(status: int) -> None:
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # nothing left to report to
            pass
    os._exit(status)


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:  # the supervisor went away (BrokenPipeError), or worse
        code = 1
    _exit(code)
