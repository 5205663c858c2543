"""The PyTorch runner: a PyTorch-format candidate's process (docs/protocol.md, "The candidate's
process" and "PyTorch-format candidates").

``python -m cuda_agent_bridge.runner PLAN.json`` takes fds 0 and 1 for itself before anything
else runs (fd 1 then points at stderr, fd 0 at /dev/null), maps the slots named by the plan,
emits ``device``, and then answers each command line on its stdin with exactly one event on its
original stdout: ``empty``, ``load``, ``setup``, ``call``, ``profile``, ``audit``, ``quit``.
Nothing of ours runs between commands (no threads, no timers); the supervisor keeps the process
stopped there. Nothing this process reports decides a reward on its own: the supervisor times
each call from outside, checks outputs through the bridge and checksums the slots.

``python -m cuda_agent_bridge.runner --record FILE SPECS.json`` is the first half of a
kernelbench candidate's build: the file is imported with ``load_inline`` recording its
arguments, and the specs are written for ``torch_build inline``; events ``done`` or ``error``.

Modules: ``plan`` (the plan, parsed defensively), ``events`` (the event stream and the failure
exceptions), ``device`` (the device and the slots), ``load`` (ModelNew, load_inline served from
built modules, the record step), ``call`` (calibration, setup, one call), ``serve`` (the
command loop). This file imports nothing.
"""
