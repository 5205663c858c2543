"""The runner's device and its mappings of the slots.

Contract: ``open_device(plan)`` returns the torch device (the plan's CUDA device, made current,
or the CPU for tests) and the ``device`` event's fields (informational: the result's ``env``
comes from the supervisor's own context); no usable GPU is ``Fatal(worker.no_gpu)``.
``map_slots(plan, device)`` maps the descriptors the supervisor passed (fds 3, 4, ...) and closes
them (the mappings stay); a descriptor that cannot be mapped is ``Fatal(worker.bad_input)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..slots import Slot, SlotError
from .events import Fatal
from .plan import Plan, SlotRef


@dataclass
class Mapped:
    params: Slot
    inputs: list[Slot]
    outputs: Slot


def open_device(plan: Plan) -> tuple[torch.device, dict[str, object]]:
    if plan.candidate.torch_device == "cpu":
        return torch.device("cpu"), {
            "name": "cpu", "driver": None, "cuda_driver": None, "cuda_runtime": None,
            "sm_count": None, "l2_bytes": None, "sm_clock_mhz": None,
            "compute_capability": None, "memory_bytes": None, "pci_bus_id": None,
            "device": None, "torch": torch.__version__,
        }
    if not torch.cuda.is_available():
        raise Fatal("worker.no_gpu", "no usable CUDA device (torch.cuda.is_available() is false)")
    if plan.device >= torch.cuda.device_count():
        raise Fatal("worker.no_gpu", f"device {plan.device} does not exist "
                    f"({torch.cuda.device_count()} visible)")
    dev = torch.device("cuda", plan.device)
    torch.cuda.set_device(dev)
    p = torch.cuda.get_device_properties(dev)
    bus = getattr(p, "pci_bus_id", None)
    return dev, {
        "name": p.name, "driver": None, "cuda_driver": None, "cuda_runtime": torch.version.cuda,
        "sm_count": p.multi_processor_count, "l2_bytes": getattr(p, "L2_cache_size", None),
        "sm_clock_mhz": None, "compute_capability": f"{p.major}.{p.minor}",
        "memory_bytes": p.total_memory,
        "pci_bus_id": bus if isinstance(bus, str) else None, "device": plan.device,
        "torch": torch.__version__,
    }


def _map(kind: str, ref: SlotRef, device: torch.device, what: str) -> Slot:
    try:
        slot = Slot.attach(kind, ref.fd, ref.nbytes, device.index or 0)
    except SlotError as exc:
        raise Fatal("worker.bad_input", f"cannot map the {what} slot (fd {ref.fd}): "
                    f"{exc.message}") from exc
    except OSError as exc:
        raise Fatal("worker.bad_input", f"cannot map the {what} slot (fd {ref.fd}): "
                    f"{exc.strerror}") from exc
    slot.close_fd()
    return slot


def map_slots(plan: Plan, device: torch.device) -> Mapped:
    s = plan.slots
    return Mapped(_map(s.kind, s.params, device, "params"),
                  [_map(s.kind, ref, device, f"inputs[{i}]") for i, ref in enumerate(s.inputs)],
                  _map(s.kind, s.outputs, device, "outputs"))
