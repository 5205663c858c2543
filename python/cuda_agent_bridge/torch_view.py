"""The candidate's view of torch's CUDA libraries: torch's compute kernels are not in it.

Contract. ``build(cache_root)`` returns ``[(view_file, original_file), ...]``: for each CUDA
library of the torch install (``torch/lib`` and the ``nvidia/*/lib`` wheels) that carries device
code, a copy in which the device code of every translation unit the rules do not allow is gone.
The trusted side binds each copy over its original, read-only, in the sandbox of a
PyTorch-format candidate's process under the cuda-agent rules (src/eval/spawn.c). The copies are
built once per install (keyed by the originals' identity and ``VIEW_VERSION``) under
``<cache_root>/<key>/``, atomically (a lock, a temporary directory, a rename), readable by any
uid; a later call only checks the key.

What is kept:
- torch's own translation units whose every kernel is a fill or a copy (``FillFunctor``,
  ``copy_kernel_cuda``: what the refusal guard allows in ``forward()``: ``zeros``, ``full``,
  ``contiguous``, ``to``, ``clone``, ``copy_``), and whatever needs no kernel (allocation, views,
  metadata, memcpy, memset);
- cuBLAS, cuBLASLt and cuDNN whole (the rules allow them from the extension: GEMM and
  convolution).
Everything else loses its device code: each fatbin entry's payload is zeroed (a hole in the copy)
and its architecture set to one no GPU has, so the driver finds no image and a launch fails with
"no kernel image is available" (cudaErrorNoKernelImageForDevice). Zeroing matters: an
architecture field alone could be written back in memory by the candidate (a read-only page can be
made writable without gaining execute), while bytes that are not in the process cannot be.

Why the class fails (docs/security.md, "Torch compute in PyTorch-format candidates"): whatever
route reaches a torch operator (Python, ``torch.ops``, the C-API from C++, ``at::`` calls, a
pointer found in memory), the operator's GPU code must come from these files, and the sandbox
shows no other copy of them. What stays reachable through torch is cuBLAS and cuDNN, which the
extension may call itself, plus fill and copy. NVRTC (torch's jiterator compiles kernels at run
time) is shown as an empty file.

``python -m cuda_agent_bridge.torch_view --cache DIR`` prints ``{"masks": [[view, original],
...], "kept": [...], "seconds": s}``; ``--list LIB`` prints each translation unit's verdict.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import glob
import hashlib
import importlib.util
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

VIEW_VERSION = 1
FATBIN_MAGIC = 0xBA55ED50
DEAD_ARCH = 10  # sm_10: no GPU a current driver supports has it, so no entry matches
KIND_PTX, KIND_ELF = 1, 2
FLAG_ZSTD = 0x8000
# Libraries kept whole (file name prefixes): the rules let the extension call them itself.
WHOLE = ("libcublas.so", "libcublasLt.so", "libcudnn")
# Libraries shown as empty files: run-time compilers (torch's jiterator).
EMPTY = ("libnvrtc.so", "libnvrtc.alt.so", "libnvrtc-builtins")
# A torch translation unit is kept when every kernel's name holds one of these (FillKernel.cu;
# Copy.cu, which also materializes the conjugate or negative views of complex tensors).
KEEP_KERNELS = ("FillFunctor", "copy_kernel_cuda", "neg_conj_kernel_cuda")
TORCH_KEEPS = ("libtorch_cuda.so",)  # the torch libraries whose units are judged one by one
MAX_CUBIN = 1 << 30
# torch's own calls into cuBLAS(Lt) and cuDNN: in these libraries, every imported function of
# theirs that computes is renamed (cu... -> ca...) and resolves to the refusal library instead;
# handle, descriptor and query functions (the extension may use torch's cuBLAS handle) are kept.
RENAMED_IN = ("libtorch_cuda.so", "libtorch_cuda_linalg.so")
LIBRARY_CALL = re.compile(r"(?:cublasLt|cublas|cudnn)[A-Z]")
MANAGEMENT = re.compile(
    r"(?:cublasLt|cublas|cudnn)(?:Create|Destroy|Set|Get|Restore|DropoutGetStatesSize"
    r"|Backend(?:Create|Destroy)Descriptor|BackendFinalize|Backend(?:Set|Get)Attribute"
    r"|MatmulDesc|MatmulPreference|MatrixLayout|MatmulAlgoGetHeuristic)")
REFUSED_STATUS = {"cublas": 15, "cudnn": 3000}  # CUBLAS_STATUS_/CUDNN_STATUS_NOT_SUPPORTED
REFUSAL_LIBRARY = "libca_torch_refused.so"
REFUSED_SYMBOL = "ca_torch_refused"  # char[128]: the first refused call's name


@dataclass(frozen=True)
class Entry:
    """One image of a fatbin: the header's offset in the file, its payload's range."""

    header: int
    kind: int
    arch: int
    flags: int
    payload: int
    size: int  # padded payload size
    stored: int  # payload bytes actually stored (compressed size when compressed)
    plain: int  # uncompressed size


@dataclass
class Unit:
    """One fatbin blob: a translation unit's device code, every architecture."""

    offset: int
    entries: list[Entry]


def _sections(buf: mmap.mmap | bytes) -> Iterator[tuple[bytes, int, int]]:
    """(name, offset, size) of each section of an ELF64 image; none when it is not one or its
    section table does not fit (names are read up to 256 bytes)."""
    if len(buf) < 64 or buf[:4] != b"\x7fELF" or buf[4] != 2:
        return
    shoff, = struct.unpack_from("<Q", buf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    if not shoff or shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > len(buf):
        return
    str_off, = struct.unpack_from("<Q", buf, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        h = shoff + i * shentsize
        name_at, = struct.unpack_from("<I", buf, h)
        off, size = struct.unpack_from("<QQ", buf, h + 0x18)
        end = buf.find(b"\0", str_off + name_at, str_off + name_at + 256)
        if end >= 0:
            yield buf[str_off + name_at:end], off, size


def _section(mm: mmap.mmap, name: bytes) -> tuple[int, int] | None:
    """(offset, size) of an ELF64 section, or None."""
    for n, off, size in _sections(mm):
        if n == name:
            return (off, size) if off + size <= len(mm) else None
    return None


def units(mm: mmap.mmap) -> Iterator[Unit]:
    """Every fatbin blob of the file's .nv_fatbin section (none when it has no such section)."""
    sec = _section(mm, b".nv_fatbin")
    if sec is None:
        return
    start, size = sec
    pos, end = start, start + size
    while pos + 16 <= end:
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", mm, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # blobs are 8-aligned; padding between them
            continue
        e, stop, entries = pos + hsz, min(pos + hsz + fsz, end), []
        while e + 64 <= stop:
            kind, _ev, ehs, psz = struct.unpack_from("<HHIQ", mm, e)
            if ehs < 64 or e + ehs + psz > stop:
                break
            stored, = struct.unpack_from("<I", mm, e + 16)
            arch, = struct.unpack_from("<I", mm, e + 28)
            flags, = struct.unpack_from("<Q", mm, e + 40)
            plain, = struct.unpack_from("<Q", mm, e + 56)
            entries.append(Entry(e, kind, arch, flags, e + ehs, psz, min(stored, psz), plain))
            e += ehs + psz
        yield Unit(pos, entries)
        pos = max(stop, pos + 16)


_zstd: ctypes.CDLL | None = None


def _decompress(data: bytes, plain: int) -> bytes:
    global _zstd
    if _zstd is None:
        lib = ctypes.CDLL("libzstd.so.1")
        lib.ZSTD_decompress.restype = ctypes.c_size_t
        lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                        ctypes.c_size_t]
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        lib.ZSTD_isError.restype = ctypes.c_uint
        _zstd = lib
    if not 0 < plain <= MAX_CUBIN:
        raise ValueError("implausible uncompressed size")
    buf = ctypes.create_string_buffer(plain)
    n = _zstd.ZSTD_decompress(buf, plain, data, len(data))
    if _zstd.ZSTD_isError(n):
        raise ValueError("zstd error")
    return buf.raw[:n]


def kernel_names(cubin: bytes) -> set[str]:
    """The kernels of a cubin: its sections named ``.text.<kernel>``."""
    names = {n[6:].decode("ascii", "replace") for n, _, _ in _sections(cubin)
             if n.startswith(b".text.")}
    if not names and (len(cubin) < 64 or cubin[:4] != b"\x7fELF"):
        raise ValueError("not an ELF64 cubin")
    return names


def unit_kernels(mm: mmap.mmap, unit: Unit) -> set[str] | None:
    """The kernels of a unit, read from its first cubin; None when they cannot be read."""
    for e in unit.entries:
        if e.kind != KIND_ELF:
            continue
        data = bytes(mm[e.payload:e.payload + e.stored])
        try:
            return kernel_names(_decompress(data, e.plain) if e.flags & FLAG_ZSTD else data)
        except (ValueError, OSError):
            return None
    return None


def keep_unit(names: set[str] | None) -> bool:
    """A torch unit is kept when it has kernels and every one is a fill or a copy."""
    return bool(names) and all(any(k in n for k in KEEP_KERNELS) for n in names or ())


def computing_imports(mm: mmap.mmap) -> list[tuple[int, str]]:
    """(offset in the file of its name, name) of each imported cuBLAS/cuDNN function that
    computes, when its name's first two bytes are shared with no other symbol's name."""
    dynsym, dynstr = _section(mm, b".dynsym"), _section(mm, b".dynstr")
    if dynsym is None or dynstr is None:
        return []
    (sym_off, sym_size), (str_off, str_size) = dynsym, dynstr
    names: dict[int, list[tuple[str, bool]]] = {}
    for at in range(sym_off, sym_off + sym_size - 23, 24):
        name_at, = struct.unpack_from("<I", mm, at)
        shndx, = struct.unpack_from("<H", mm, at + 6)
        if not name_at or name_at >= str_size:
            continue
        end = mm.find(b"\0", str_off + name_at, str_off + str_size)
        name = mm[str_off + name_at:end].decode("ascii", "replace")
        names.setdefault(name_at, []).append((name, shndx == 0))
    found = []
    for name_at, uses in names.items():
        name, imported = uses[0]
        if (len(uses) == 1 and imported and LIBRARY_CALL.match(name)
                and not MANAGEMENT.match(name)
                and name_at + 1 not in names and name_at - 1 not in names):
            found.append((str_off + name_at, name))
    return sorted(found)


def refused_name(name: str) -> str:
    """The name a renamed import resolves to (same length: the string table keeps its layout)."""
    return "ca" + name[2:]


def _refusal_source(names: list[str]) -> str:
    lines = [f"char {REFUSED_SYMBOL}[128];",
             "static long refuse(const char *name, long status)", "{",
             f"\tif (!{REFUSED_SYMBOL}[0])",
             f"\t\tfor (int i = 0; i < 127 && name[i]; i++) {REFUSED_SYMBOL}[i] = name[i];",
             "\treturn status;", "}"]
    for name in names:
        status = REFUSED_STATUS["cudnn" if name.startswith("cudnn") else "cublas"]
        lines.append(f'long {refused_name(name)}(void) {{ return refuse("{name}", {status}); }}')
    return "\n".join(lines) + "\n"


def _build_refusal_library(names: list[str], out: str) -> None:
    """A library defining every renamed import: it records the call and returns NOT_SUPPORTED
    (torch raises). No libc: nothing is imported, nothing is versioned."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise OSError("no C compiler (cc) to build the refusal library")
    src = out + ".c"
    with open(src, "w") as f:
        f.write(_refusal_source(names))
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-ffreestanding", "-nostdlib",
                    "-fno-tree-loop-distribute-patterns", "-o", out, src],
                   check=True, capture_output=True, timeout=120)
    os.chmod(out, 0o644)


def _libraries() -> list[str]:
    """The torch install's CUDA libraries: torch/lib and the nvidia wheels' lib directories."""
    found: list[str] = []
    for pkg, pattern in (("torch", "lib/*.so*"), ("nvidia", "*/lib/*.so*")):
        spec = importlib.util.find_spec(pkg)
        for root in (spec.submodule_search_locations or []) if spec else []:
            found += glob.glob(os.path.join(root, pattern))
    out = []
    for f in sorted(set(found)):
        real = os.path.realpath(f)
        if os.path.isfile(real) and real not in out:
            out.append(real)
    return out


def _key(libs: list[str]) -> str:
    h = hashlib.sha256(f"torch_view {VIEW_VERSION}\n".encode())
    for f in libs:
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()[:24]


@dataclass
class Plan:
    """What a library's copy changes: entries whose device code goes, the kept torch units'
    offsets, the imports renamed (file offset of the name, name)."""

    gone: list[Entry]
    kept: list[int]
    renamed: list[tuple[int, str]]


def _plan(path: str) -> Plan:
    name = os.path.basename(path)
    plan = Plan([], [], [])
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return plan
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            judged = name in TORCH_KEEPS
            for u in units(mm):
                if judged and keep_unit(unit_kernels(mm, u)):
                    plan.kept.append(u.offset)
                else:
                    plan.gone += u.entries
            if name in RENAMED_IN:
                plan.renamed = computing_imports(mm)
    return plan


def _write_view(src: str, dst: str, gone: list[Entry],
                renamed: list[tuple[int, str]] | None = None) -> None:
    """dst: src with each gone entry's payload a hole and its architecture DEAD_ARCH, and each
    renamed import's name starting with "ca"."""
    size = os.path.getsize(src)
    holes = sorted((e.payload, e.payload + e.size) for e in gone)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.truncate(size)
        pos = 0
        for lo, hi in [*holes, (size, size)]:
            while pos < lo:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), lo - pos, pos, pos)
                if n <= 0:
                    raise OSError(f"short copy of {src}")
                pos += n
            pos = max(pos, hi)
        for e in gone:
            fout.seek(e.header + 28)
            fout.write(struct.pack("<I", DEAD_ARCH))
        for at, name in renamed or []:
            fout.seek(at)
            fout.write(refused_name(name)[:2].encode())
    os.chmod(dst, 0o644)


def build(cache_root: str) -> dict[str, object]:
    """The view (built if missing): masks [[view, original]], kept torch units, libraries."""
    t0 = time.monotonic()
    libs = _libraries()
    key = _key(libs)
    final = os.path.join(cache_root, key)
    manifest = os.path.join(final, "view.json")
    os.makedirs(cache_root, mode=0o755, exist_ok=True)
    if not os.path.exists(manifest):
        with open(os.path.join(cache_root, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(manifest):
                _build_into(cache_root, final, libs)
    with open(manifest) as f:
        view = json.load(f)
    view["seconds"] = round(time.monotonic() - t0, 3)
    return dict(view)


def _build_into(cache_root: str, final: str, libs: list[str]) -> None:
    tmp = tempfile.mkdtemp(prefix=".build-", dir=cache_root)
    try:
        os.chmod(tmp, 0o755)
        masks: list[list[str]] = []
        kept: list[str] = []
        refused: set[str] = set()
        empty = os.path.join(tmp, "empty")
        open(empty, "wb").close()
        os.chmod(empty, 0o644)
        for i, lib in enumerate(libs):
            base = os.path.basename(lib)
            view = os.path.join(tmp, f"{i:03d}-{base}")
            if base.startswith(EMPTY):
                masks.append([os.path.join(final, "empty"), lib])
                continue
            if base.startswith(WHOLE):
                continue
            plan = _plan(lib)
            kept += [f"{base}@{off:#x}" for off in plan.kept]
            refused |= {name for _, name in plan.renamed}
            if plan.gone or plan.renamed:
                _write_view(lib, view, plan.gone, plan.renamed)
                masks.append([os.path.join(final, os.path.basename(view)), lib])
        preload = ""
        if refused:
            _build_refusal_library(sorted(refused), os.path.join(tmp, REFUSAL_LIBRARY))
            preload = os.path.join(final, REFUSAL_LIBRARY)
            masks.append([preload, preload])
        with open(os.path.join(tmp, "view.json"), "w") as f:
            json.dump({"version": VIEW_VERSION, "masks": masks, "kept": kept,
                       "refused_calls": sorted(refused), "preload": preload,
                       "libraries": libs}, f, indent=1)
        os.chmod(os.path.join(tmp, "view.json"), 0o644)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent_bridge.torch_view")
    ap.add_argument("--cache", help="the views' directory (built there once per install)")
    ap.add_argument("--list", metavar="LIB", help="print each translation unit's verdict")
    a = ap.parse_args(argv)
    if a.list:
        with open(a.list, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for u in units(mm):
                names = unit_kernels(mm, u)
                verdict = "keep" if keep_unit(names) else "gone"
                sample = sorted(names or [])[:1]
                print(f"{u.offset:#x} {verdict} {len(names or [])} {' '.join(sample)[:100]}")
        return 0
    if not a.cache:
        ap.error("--cache DIR or --list LIB")
    json.dump(build(a.cache), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
