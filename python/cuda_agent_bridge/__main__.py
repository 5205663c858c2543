"""Entry point: ``python3 -m cuda_agent_bridge [--device auto|cuda|cpu]``.

Contract: takes the process's stdin/stdout for the protocol and points file descriptors 0 and 1
at /dev/null and stderr, so nothing else (task code's print(), C libraries, child processes) can
read requests or write to the protocol stream. Writes the ``ready`` event, then serves requests
(server.serve). Exit status: 0 on EOF or shutdown, 2 when the requested device is unavailable.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys

from .wire import take_stdio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m cuda_agent_bridge",
        description="cuda-agent torch bridge: JSON lines on stdin/stdout (docs/protocol.md)",
    )
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args(argv)
    requests, answers = take_stdio()
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="cuda_agent_bridge: %(message)s"
    )

    import torch

    from .server import Context, serve
    from .tasks import TaskStore, disable_tf32
    from .timing import l2_bytes

    if args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available()):
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        logging.error("--device cuda: torch.cuda.is_available() is false (no usable GPU)")
        return 2
    else:
        device = torch.device("cuda", torch.cuda.current_device())
    disable_tf32()
    is_cuda = device.type == "cuda"
    ready = {
        "event": "ready",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device.type,
        "gpu_name": torch.cuda.get_device_name(device) if is_cuda else None,
        "cuda": torch.version.cuda,
        "l2_bytes": l2_bytes(device) if is_cuda else None,
    }
    answers.write(json.dumps(ready) + "\n")
    answers.flush()
    logging.info("ready on %s (torch %s)", device, torch.__version__)
    try:
        return serve(requests, answers, Context(TaskStore(device)))
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main())
