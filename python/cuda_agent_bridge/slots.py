"""Slots: the evaluation's data in memory the bridge allocates and exports (docs/protocol.md,
"Slots"): the parameters, R input sets, the outputs of one call.

Contract:
- ``Slot.allocate(kind, nbytes, device)`` (bridge): ``kind`` ``"cuda"`` makes a CUDA virtual
  memory allocation that can be exported as a POSIX file descriptor (``cuMemCreate`` with
  ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR``); ``"cpu"`` makes a ``memfd``. ``Slot.fd`` is the
  descriptor to hand over (SCM_RIGHTS); ``Slot.bytes()`` is a uint8 tensor over the memory.
- ``Slot.attach(kind, fd, nbytes, device)`` (the candidate's process, tests): maps a received
  descriptor the same way. Each process owns its mapping; the memory lives until every process
  has closed it.
- ``layout(entries)``: each tensor's byte offset in a slot (spec order, 256-byte aligned) and the
  slot's size (at least 256, also for an empty list). src/protocol/layout.c computes the same
  from the same spec. ``tensor_views(slot, entries)``: the tensors of a list as views of a slot.
- ``send_fds``: the bridge's side of the descriptor channel (fd from ``CUDA_AGENT_FD_CHANNEL``).
Failures raise ``SlotError`` with one line saying what failed.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
from collections.abc import Sequence
from typing import Any

import torch

ALIGN = 256
MAX_SLOTS = 32  # CA_MAX_PASS_FDS on the C side
MAX_INPUTS = 16  # input slots (rotation sets) per evaluation
MAX_SLOT_BYTES = 1 << 47
_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_LOC_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READWRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class SlotError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: Any = None


def _cu(device: int) -> Any:
    """libcuda (the driver torch already loaded), initialized, with torch's primary context on
    `device` current on this thread (the virtual-memory calls act on the current context)."""
    torch.cuda.synchronize(device)
    global _driver
    if _driver is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise SlotError(f"cannot load libcuda.so.1: {exc}") from exc
        _check(lib, lib.cuInit(0), "cuInit")
        _driver = lib
    return _driver


def _check(lib: Any, rc: int, what: str) -> None:
    if rc == 0:
        return
    name = ctypes.c_char_p()
    lib.cuGetErrorName(rc, ctypes.byref(name))
    text = name.value.decode() if name.value else f"error {rc}"
    raise SlotError(f"{what} failed: {text}")


def _prop(device: int) -> _AllocProp:
    prop = _AllocProp()
    prop.type = _PINNED
    prop.requestedHandleTypes = _POSIX_FD
    prop.location = _Location(_LOC_DEVICE, device)
    return prop


class _CudaArray:
    """An object with __cuda_array_interface__ over raw device memory (for torch.as_tensor)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


class Slot:
    """One slot: a descriptor and a mapping of it in this process."""

    def __init__(self, kind: str, fd: int, nbytes: int, device: int) -> None:
        self.kind = kind
        self.fd = fd
        self.nbytes = nbytes
        self.device = device
        self._mm: mmap.mmap | None = None
        self._ptr = 0
        self._mapped = 0
        self._handle = ctypes.c_ulonglong(0)
        self._tensor: torch.Tensor | None = None

    # -- making and taking -------------------------------------------------------------------

    @classmethod
    def allocate(cls, kind: str, nbytes: int, device: int) -> Slot:
        if nbytes <= 0:
            raise SlotError("a slot needs a positive size")
        if kind == "cpu":
            fd = os.memfd_create("cuda-agent-slot", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, nbytes)
            except OSError as exc:
                os.close(fd)
                raise SlotError(f"cannot size a {nbytes}-byte memfd: {exc}") from exc
            slot = cls(kind, fd, nbytes, device)
            slot._map_cpu()
            return slot
        if kind != "cuda":
            raise SlotError(f"unknown slot kind {kind!r}")
        lib = _cu(device)
        prop = _prop(device)
        gran = ctypes.c_size_t(0)
        _check(lib, lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0),
               "cuMemGetAllocationGranularity")
        size = -(-nbytes // gran.value) * gran.value
        slot = cls(kind, -1, nbytes, device)
        _check(lib, lib.cuMemCreate(ctypes.byref(slot._handle), ctypes.c_size_t(size),
                                    ctypes.byref(prop), ctypes.c_ulonglong(0)),
               f"cuMemCreate of {size} bytes")
        exported = ctypes.c_int(-1)
        try:
            _check(lib, lib.cuMemExportToShareableHandle(ctypes.byref(exported), slot._handle,
                                                          _POSIX_FD, ctypes.c_ulonglong(0)),
                   "cuMemExportToShareableHandle")
            slot.fd = exported.value
            slot._map_cuda(size)
        except SlotError:
            slot.close()
            raise
        return slot

    @classmethod
    def attach(cls, kind: str, fd: int, nbytes: int, device: int) -> Slot:
        slot = cls(kind, fd, nbytes, device)
        if kind == "cpu":
            slot._map_cpu()
            return slot
        if kind != "cuda":
            raise SlotError(f"unknown slot kind {kind!r}")
        lib = _cu(device)
        gran = ctypes.c_size_t(0)
        prop = _prop(device)
        _check(lib, lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0),
               "cuMemGetAllocationGranularity")
        _check(lib, lib.cuMemImportFromShareableHandle(ctypes.byref(slot._handle),
                                                        ctypes.c_void_p(fd), _POSIX_FD),
               "cuMemImportFromShareableHandle")
        try:
            slot._map_cuda(-(-nbytes // gran.value) * gran.value)
        except SlotError:
            slot.close()
            raise
        return slot

    def _map_cpu(self) -> None:
        try:
            self._mm = mmap.mmap(self.fd, self.nbytes)
        except (OSError, ValueError) as exc:
            raise SlotError(f"cannot map a {self.nbytes}-byte slot: {exc}") from exc
        self._tensor = torch.frombuffer(self._mm, dtype=torch.uint8)

    def _map_cuda(self, size: int) -> None:
        lib = _cu(self.device)
        ptr = ctypes.c_ulonglong(0)
        _check(lib, lib.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size),
                                            ctypes.c_size_t(0), ctypes.c_ulonglong(0),
                                            ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        self._ptr = ptr.value
        _check(lib, lib.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), self._handle,
                                 ctypes.c_ulonglong(0)), "cuMemMap")
        self._mapped = size
        access = _AccessDesc(_Location(_LOC_DEVICE, self.device), _READWRITE)
        _check(lib, lib.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access),
                                       ctypes.c_size_t(1)), "cuMemSetAccess")
        self._tensor = torch.as_tensor(_CudaArray(self._ptr, self.nbytes),
                                       device=torch.device("cuda", self.device))

    # -- use ---------------------------------------------------------------------------------

    def bytes(self) -> torch.Tensor:
        if self._tensor is None:
            raise SlotError("the slot is closed")
        return self._tensor

    def view(self, offset: int, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
        """The slot's bytes at offset as a tensor of dtype and shape (no copy)."""
        size = dtype.itemsize
        count = 1
        for n in shape:
            count *= int(n)
        return self.bytes()[offset:offset + count * size].view(dtype).view(tuple(shape))

    def close_fd(self) -> None:
        """Closes the descriptor; the mapping stays."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        self._tensor = None
        if self.kind == "cuda" and _driver is not None:
            lib = _driver
            if self._mapped:
                lib.cuMemUnmap(ctypes.c_ulonglong(self._ptr), ctypes.c_size_t(self._mapped))
                self._mapped = 0
            if self._ptr:
                lib.cuMemAddressFree(ctypes.c_ulonglong(self._ptr), ctypes.c_size_t(0))
                self._ptr = 0
            if self._handle.value:
                lib.cuMemRelease(self._handle)
                self._handle = ctypes.c_ulonglong(0)
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view is still alive; the mapping goes with the process
                pass
            self._mm = None
        self.close_fd()


def _nbytes(entry: dict[str, Any]) -> int:
    from .tasks import dtype_from_name

    count = 1
    for n in entry["shape"]:
        count *= int(n)
    return count * dtype_from_name(str(entry["dtype"])).itemsize


def layout(entries: Sequence[dict[str, Any]]) -> tuple[list[int], int]:
    """Each tensor's offset in a slot (spec order, ALIGN-aligned) and the slot's size.

    entries: ``{"dtype": name, "shape": [...]}`` (spec entries; other keys ignored)."""
    offsets: list[int] = []
    at = 0
    for entry in entries:
        offsets.append(at)
        at += -(-_nbytes(entry) // ALIGN) * ALIGN
    return offsets, max(at, ALIGN)


def tensor_views(slot: Slot, entries: Sequence[dict[str, Any]]) -> list[torch.Tensor]:
    """The entries' tensors as views of the slot (no copy), at layout(entries)'s offsets."""
    from .tasks import dtype_from_name

    offsets, size = layout(entries)
    if size > slot.nbytes:
        raise SlotError(f"the tensors need {size} bytes; the slot holds {slot.nbytes}")
    return [slot.view(at, dtype_from_name(str(e["dtype"])), [int(n) for n in e["shape"]])
            for e, at in zip(entries, offsets, strict=True)]


def send_fds(fds: Sequence[int]) -> None:
    """Sends fds on the descriptor channel the C side gave this process (one message)."""
    channel = os.environ.get("CUDA_AGENT_FD_CHANNEL")
    if not channel or not channel.isdigit():
        raise SlotError("no descriptor channel (CUDA_AGENT_FD_CHANNEL is not set)")
    sock = socket.socket(fileno=os.dup(int(channel)))
    try:
        socket.send_fds(sock, [b"slots"], list(fds))
    except OSError as exc:
        raise SlotError(f"cannot send descriptors: {exc}") from exc
    finally:
        sock.close()
