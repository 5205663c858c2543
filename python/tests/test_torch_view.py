"""The kernel-free view of torch's CUDA libraries (torch_view.py): which units stay, what the copy
holds, and the cache. Synthetic libraries stand in for torch's; the real one is read when the
venv's torch ships CUDA libraries (its verdicts: the fill and copy units only)."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
from pathlib import Path

import pytest

from cuda_agent_bridge import torch_view as tv


def make_elf(sections: list[tuple[str, bytes]]) -> bytes:
    """A minimal ELF64 file holding the named sections (and .shstrtab)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in sections) + b".shstrtab\0"
    body = b""
    table: list[tuple[int, int, int]] = [(0, 0, 0)]  # (name offset, file offset, size)
    at = 1
    for n, data in sections:
        table.append((at, 64 + len(body), len(data)))
        at += len(n) + 1
        body += data + b"\0" * (-len(data) % 8)
    table.append((at, 64 + len(body), len(names)))
    body += names + b"\0" * (-len(names) % 8)
    shoff = 64 + len(body)
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, len(table), len(table) - 1)
    shdrs = b"".join(struct.pack("<IIQQQQIIQQ", name, 0, 0, 0, off, size, 0, 0, 1, 0)
                     for name, off, size in table)
    return bytes(head) + body + shdrs


def cubin(kernels: list[str]) -> bytes:
    return make_elf([(f".text.{k}", b"\x01" * 32) for k in kernels])


def zstd(data: bytes) -> bytes:
    lib = ctypes.CDLL("libzstd.so.1")
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.c_int]
    buf = ctypes.create_string_buffer(len(data) + 1024)
    n = lib.ZSTD_compress(buf, len(buf), data, len(data), 3)
    return buf.raw[:n]


def entry(payload: bytes, arch: int, plain: int, flags: int) -> bytes:
    padded = payload + b"\0" * (-len(payload) % 8)
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, tv.KIND_ELF, 0x101, 64, len(padded))
    struct.pack_into("<I", head, 16, len(payload))
    struct.pack_into("<I", head, 28, arch)
    struct.pack_into("<Q", head, 40, flags)
    struct.pack_into("<Q", head, 56, plain)
    return bytes(head) + padded


def blob(kernels: list[str], compressed: bool) -> bytes:
    image = cubin(kernels)
    entries = b"".join(
        entry(zstd(image), arch, len(image), tv.FLAG_ZSTD | 0x11) if compressed
        else entry(image, arch, len(image), 0x11)
        for arch in (80, 90))
    return struct.pack("<IHHQ", tv.FATBIN_MAGIC, 1, 16, len(entries)) + entries


UNITS = [
    (["_ZN2at6native_FillFunctor_a", "_ZN2at6native_FillFunctor_b"], True),   # kept
    (["_ZN2at6native_relu_kernel"], True),                                   # gone
    (["_ZN2at6native_direct_copy_kernel_cuda_x"], False),                    # kept, plain
    (["_ZN2at6native_direct_copy_kernel_cuda_y", "_ZN2at6native_add"], False),  # gone: mixed
]


def library(path: Path, units: list[tuple[list[str], bool]] = UNITS) -> bytes:
    fat = b"".join(blob(k, c) + b"\0" * 8 for k, c in units)
    data = make_elf([(".text", b"\x90" * 4096), (".nv_fatbin", fat), (".data", b"D" * 512)])
    path.write_bytes(data)
    return data


def test_units_and_verdicts(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    library(lib)
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        found = list(tv.units(mm))
        verdicts = [tv.keep_unit(tv.unit_kernels(mm, u)) for u in found]
    assert [len(u.entries) for u in found] == [2, 2, 2, 2]
    assert verdicts == [True, False, True, False]
    assert not tv.keep_unit(None) and not tv.keep_unit(set())


def test_view_zeroes_the_gone_units_and_keeps_the_rest(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    original = library(lib)
    plan = tv._plan(str(lib))
    gone = plan.gone
    assert len(plan.kept) == 2 and len(gone) == 4
    out = tmp_path / "view.so"
    tv._write_view(str(lib), str(out), gone)
    view = out.read_bytes()
    assert len(view) == len(original) and os.stat(out).st_mode & 0o777 == 0o644
    changed = bytearray(len(view))
    for e in gone:
        assert view[e.payload:e.payload + e.size] == b"\0" * e.size  # the code is not there
        assert struct.unpack_from("<I", view, e.header + 28)[0] == tv.DEAD_ARCH
        changed[e.payload:e.payload + e.size] = b"\1" * e.size
        changed[e.header + 28:e.header + 32] = b"\1" * 4
    assert all(a == b for a, b, c in zip(view, original, changed, strict=True) if not c)
    with open(out, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        verdicts = [tv.keep_unit(tv.unit_kernels(mm, u)) for u in tv.units(mm)]
    assert verdicts == [True, False, True, False]  # the gone units' kernels cannot be read


def test_other_libraries_lose_every_unit(tmp_path: Path) -> None:
    lib = tmp_path / "libcufft.so.12"
    library(lib, [(["fft_kernel"], True), (["_ZN2at6native_FillFunctor_c"], False)])
    plan = tv._plan(str(lib))
    assert plan.kept == [] and len(plan.gone) == 4 and plan.renamed == []


def test_unreadable_units_go(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    data = bytearray(library(lib, [(["_ZN2at6native_FillFunctor_a"], True)]))
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        (u,) = tv.units(mm)
    for e in u.entries:  # a corrupt compressed payload: fail closed
        data[e.payload:e.payload + 8] = b"\xff" * 8
    lib.write_bytes(bytes(data))
    plan = tv._plan(str(lib))
    assert plan.kept == [] and len(plan.gone) == 2


def test_build_caches_by_install_and_masks_the_right_files(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    libs = tmp_path / "lib"
    libs.mkdir()
    library(libs / "libtorch_cuda.so")
    library(libs / "libcublas.so.13", [(["gemm"], True)])
    library(libs / "libcusparse.so.12", [(["spmv"], True)])
    (libs / "libnvrtc.so.13").write_bytes(b"compiler")
    (libs / "libc10.so").write_bytes(make_elf([(".text", b"x")]))
    found = sorted(str(p) for p in libs.iterdir())
    monkeypatch.setattr(tv, "_libraries", lambda: found)
    cache = tmp_path / "cache"
    view = tv.build(str(cache))
    masks = {os.path.basename(dst): src for src, dst in view["masks"]}  # type: ignore[attr-defined]
    assert sorted(masks) == ["libcusparse.so.12", "libnvrtc.so.13", "libtorch_cuda.so"]
    assert os.path.getsize(masks["libnvrtc.so.13"]) == 0
    assert all(src.startswith(str(cache) + "/") for src in masks.values())
    assert len(view["kept"]) == 2  # type: ignore[arg-type]
    first = json.loads((Path(masks["libtorch_cuda.so"]).parent / "view.json").read_text())
    again = tv.build(str(cache))  # found by key: the same files
    assert again["masks"] == first["masks"]
    os.utime(libs / "libtorch_cuda.so", ns=(1, 1))  # another install: another key
    other = tv.build(str(cache))
    assert other["masks"] != first["masks"]
    assert not [p for p in cache.iterdir() if p.name.startswith(".build-")]


def test_computing_imports_and_the_refusal_library(tmp_path: Path) -> None:
    """Which cuBLAS/cuDNN imports are renamed (compute, not handles or queries), the rename
    keeps the string table's layout, and the refusal library defines every renamed name, imports
    nothing, records the first call and returns NOT_SUPPORTED."""
    names = ["cublasSgemm_v2", "cublasCreate_v2", "cublasLtMatmul", "cublasLtMatmulDescCreate",
             "cudnnConvolutionForward", "cudnnGetVersion", "cublasSetStream_v2", "cudaMalloc"]
    assert [n for n in names if tv.LIBRARY_CALL.match(n) and not tv.MANAGEMENT.match(n)] == [
        "cublasSgemm_v2", "cublasLtMatmul", "cudnnConvolutionForward"]
    assert all(len(tv.refused_name(n)) == len(n) for n in names)
    out = str(tmp_path / tv.REFUSAL_LIBRARY)
    tv._build_refusal_library(["cublasSgemm_v2", "cudnnConvolutionForward"], out)
    lib = ctypes.CDLL(out)
    assert lib.cablasSgemm_v2() == 15 and lib.cadnnConvolutionForward() == 3000
    cell = (ctypes.c_char * 128).in_dll(lib, tv.REFUSED_SYMBOL)
    assert cell.value == b"cublasSgemm_v2"  # the first call is kept
    with open(out, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert tv._section(mm, b".gnu.version_r") is None  # nothing imported, nothing versioned


def test_the_real_torch_keeps_fill_and_copy_only() -> None:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    assert spec and spec.submodule_search_locations
    lib = os.path.join(spec.submodule_search_locations[0], "lib", "libtorch_cuda.so")
    if not os.path.exists(lib):
        pytest.skip("this torch has no CUDA libraries")
    kept_names: set[str] = set()
    n_units = 0
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for u in tv.units(mm):
            n_units += 1
            names = tv.unit_kernels(mm, u)
            if tv.keep_unit(names):
                kept_names |= names or set()
    assert n_units > 100
    assert any("FillFunctor" in n for n in kept_names)
    assert any("direct_copy_kernel_cuda" in n for n in kept_names)
    assert not any(w in n for n in kept_names for w in ("gemm", "reduce", "softmax", "relu"))
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        renamed = {name for _, name in tv.computing_imports(mm)}
    assert {"cublasSgemm_v2", "cublasGemmEx", "cublasLtMatmul",
            "cudnnConvolutionForward"} <= renamed
    assert not {"cublasCreate_v2", "cublasSetStream_v2", "cudnnCreate"} & renamed
