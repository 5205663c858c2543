"""cuda_agent_bridge: the Python side of cuda-agent (docs/protocol.md).

- The torch bridge (``python3 -m cuda_agent_bridge [--device auto|cuda|cpu]``, trusted,
  long-lived): describes tasks, owns the evaluation's data (the slots), fills inputs and
  parameters, checks outputs against references computed from the inputs in the slots, and
  serves the eager and ``torch.compile`` baselines one timed call at a time.
- The PyTorch runner (``python3 -m cuda_agent_bridge.runner PLAN.json``, untrusted once
  candidate code ran): a PyTorch-format candidate's process, driven by the supervisor one
  command at a time (package ``runner``).

Modules: ``server`` (the bridge's JSON-lines loop and ops), ``tasks`` (loading, seeding,
validation), ``slots`` (the shared memory), ``timing`` (the stopwatch around one call),
``wire`` (JSON-safe numbers, scalar arguments), ``refusal`` (torch compute refused in a
candidate's forward), ``errors``, ``capped`` (capped reads), ``torch_build`` (building
PyTorch-format candidates), ``rows`` (parquet rows for the importer).

Importing this package imports nothing else: the runner takes its stdio before any other code.
"""

__version__ = "0.1.0"
