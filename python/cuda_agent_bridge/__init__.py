"""cuda_agent_bridge: the torch bridge of cuda-agent.

A long-lived process (``python3 -m cuda_agent_bridge [--device auto|cuda|cpu]``) that runs a
task's PyTorch code for the C supervisor: it describes tasks, writes reference inputs, params and
outputs as safetensors files, and times the eager and ``torch.compile`` baselines with the shared
timing protocol. The wire protocol is specified in docs/protocol.md ("Torch bridge").

Modules: ``server`` (JSON-lines loop and the ops), ``tasks`` (loading, seeding, validation),
``timing`` (the shared timing protocol), ``files`` (safetensors I/O), ``errors`` (error codes).
"""

__version__ = "0.1.0"
