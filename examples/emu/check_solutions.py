#!/usr/bin/env python3
"""Checks the example native solutions on the CPU, without a GPU.

Each solution's kernels/*.cu is rewritten (launches `k<<<g, b, s, st>>>(a)` become
`emu_launch(emu_config(g, b, s, st), [=] { k(a); })`, includes swapped for cuda_emu.h, grid caps
shrunk so grid-stride loops really loop), compiled with g++ and ASan/UBSan together with
lib_stubs.cpp (CPU stand-ins for the runtime, cuBLAS(Lt) and cuDNN, from their documented
semantics), loaded with ctypes and called through the real ABI (DLTensors, 0-d CPU scalars,
params in state_dict order) on small shapes chosen to hit every path: vector and scalar, tails,
misaligned pointers, byte_offset, generic fallbacks, library fallbacks. Outputs are compared with
the task's own model.py run by torch on the CPU; inputs must be unchanged; every launch and library
call must use the stream given to ca_forward.

Usage (torch needed): python3 examples/emu/check_solutions.py [solution ...]
Re-executes itself with libasan preloaded (the solution libraries are built with ASan).
"""
import ctypes
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.dirname(HERE)
REPO = os.path.dirname(EXAMPLES)


def reexec_with_asan():
    if os.environ.get("EMU_ASAN_PRELOADED") == "1":
        return
    libasan = subprocess.check_output(["gcc", "-print-file-name=libasan.so"], text=True).strip()
    env = dict(os.environ)
    env["LD_PRELOAD"] = libasan
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    env["EMU_ASAN_PRELOADED"] = "1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


# ---------------------------------------------------------------- source rewriting


def rewrite_launches(src):
    out, pos = [], 0
    while True:
        i = src.find("<<<", pos)
        if i < 0:
            out.append(src[pos:])
            return "".join(out)
        # kernel expression: identifier with optional template arguments, just before <<<
        j = i
        if src[j - 1] == ">":
            depth = 0
            while True:
                j -= 1
                if src[j] == ">":
                    depth += 1
                elif src[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_:"):
            j -= 1
        kernel = src[j:i]
        k = src.find(">>>", i)
        cfg = src[i + 3:k]
        p = k + 3
        while src[p].isspace():
            p += 1
        assert src[p] == "(", src[i - 40:p + 10]
        depth, q = 0, p
        while True:
            if src[q] == "(":
                depth += 1
            elif src[q] == ")":
                depth -= 1
                if depth == 0:
                    break
            q += 1
        args = src[p + 1:q]
        out.append(src[pos:j])
        out.append(f"emu_launch(emu_config({cfg}), [=]() {{ {kernel}({args}); }})")
        pos = q + 1


def rewrite(src):
    src = re.sub(r"#include <cuda_runtime\.h>\n", "", src)
    src = re.sub(r"#include <cuda_agent/abi\.h>\n", "", src)
    src = src.replace("1 << 20", "EMU_MAX_BLOCKS")
    return '#include "cuda_emu.h"\n' + rewrite_launches(src)


def build(name, tmp):
    kdir = os.path.join(EXAMPLES, "solutions", name, "kernels")
    srcs = []
    for f in sorted(os.listdir(kdir)):
        if f.endswith(".cu"):
            with open(os.path.join(kdir, f)) as fh:
                text = rewrite(fh.read())
            dst = os.path.join(tmp, f"{name}__{f[:-3]}.cpp")
            with open(dst, "w") as fh:
                fh.write(text)
            srcs.append(dst)
    lib = os.path.join(tmp, f"lib{name}.so")
    include = [f"-I{HERE}", f"-I{REPO}/build/include", f"-I{REPO}/include", "-I/usr/include",
               "-I/usr/local/cuda/include"]
    cmd = (["g++", "-std=c++20", "-O1", "-g", "-fPIC", "-shared", "-pthread", "-Wall", "-Wno-comment",
            "-Wno-unused-function", "-Wno-unknown-pragmas", "-Wl,-Bsymbolic", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
           + include + srcs + [os.path.join(HERE, "lib_stubs.cpp"), "-o", lib])
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(lib)


# ---------------------------------------------------------------- ABI plumbing


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


KDLCPU, KDLCUDA = 1, 2
LIBC = ctypes.CDLL(None)
LIBC.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]
STREAM = 0x5150  # the sentinel stream handed to ca_forward / ca_setup


class Buffers:
    """Exact-size "device" allocations (ASan sees any overrun) that outlive the call."""

    def __init__(self):
        self.ptrs, self.keep = [], []

    def alloc(self, nbytes):
        p = ctypes.c_void_p()
        assert LIBC.posix_memalign(ctypes.byref(p), 256, max(nbytes, 1)) == 0
        self.ptrs.append(p.value)
        return p.value

    def free(self):
        for p in self.ptrs:
            LIBC.free(p)
        self.ptrs = []


def dtype_of(t):
    import torch
    table = {torch.float32: (2, 32), torch.float64: (2, 64), torch.int64: (0, 64), torch.int32: (0, 32)}
    code, bits = table[t.dtype]
    return DLDataType(code, bits, 1)


def fill_tensor(dl, t, bufs, device, misalign=0, use_byte_offset=False):
    """Describes torch CPU tensor t as a DLTensor; 'device' tensors get their own buffer.

    misalign: bytes added to the data address (via data or via byte_offset)."""
    t = t.contiguous()
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    bufs.keep += [shape, strides]
    nbytes = t.numel() * t.element_size()
    if device == KDLCPU:
        data = t.data_ptr()
        bufs.keep.append(t)
        base, off = data, 0
    else:
        base = bufs.alloc(nbytes + misalign)
        ctypes.memmove(base + misalign, t.data_ptr(), nbytes)
        if use_byte_offset:
            off = misalign
        else:
            base, off = base + misalign, 0
    dl.data = base
    dl.byte_offset = off
    dl.device = DLDevice(device, 0)
    dl.ndim = t.dim()
    dl.dtype = dtype_of(t)
    dl.shape = shape
    dl.strides = strides
    return base + off


def read_back(ptr, like):
    import torch
    out = torch.empty_like(like)
    ctypes.memmove(out.data_ptr(), ptr, out.numel() * out.element_size())
    return out


def same_bytes(a, b):
    import torch
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def load_model(name):
    path = os.path.join(EXAMPLES, "tasks", name, "model.py")
    spec = importlib.util.spec_from_file_location(f"task_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def as_arg_tensor(a):
    import torch
    if isinstance(a, bool):
        return torch.tensor(a), KDLCPU
    if isinstance(a, int):
        return torch.tensor(a, dtype=torch.int64), KDLCPU
    if isinstance(a, float):
        return torch.tensor(a, dtype=torch.float64), KDLCPU
    return a, KDLCUDA


def call(lib, model, args, misalign=0, use_byte_offset=False, out_override=None):
    """Runs ca_setup (if any) and ca_forward; returns (rc, outputs, reference, inputs_ok)."""
    import torch
    bufs = Buffers()
    try:
        if out_override is not None:  # a call that must be rejected: no reference
            refs = out_override
        else:
            with torch.no_grad():
                ref = model(*args)
            refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        params = [p.detach().contiguous() for p in model.state_dict().values()]
        dl_args = (DLTensor * max(len(args), 1))()
        arg_ptrs = []
        for i, a in enumerate(args):
            t, dev = as_arg_tensor(a)
            arg_ptrs.append((fill_tensor(dl_args[i], t, bufs, dev, misalign, use_byte_offset), t, dev))
        dl_params = (DLTensor * max(len(params), 1))()
        for i, p in enumerate(params):
            fill_tensor(dl_params[i], p, bufs, KDLCUDA)
        outs_like = refs
        dl_outs = (DLTensor * max(len(outs_like), 1))()
        out_ptrs = []
        for i, r in enumerate(outs_like):
            out_ptrs.append(fill_tensor(dl_outs[i], torch.full_like(r, float("nan")), bufs, KDLCUDA,
                                        misalign, use_byte_offset))
        setup = getattr(lib, "ca_setup", None)
        if setup is not None:
            setup.restype = ctypes.c_int
            rc = setup(dl_params, len(params), ctypes.c_void_p(STREAM))
            if rc != 0:
                return rc, None, refs, True
        lib.ca_forward.restype = ctypes.c_int
        rc = lib.ca_forward(dl_args, len(args), dl_params, len(params), dl_outs, len(outs_like),
                            ctypes.c_void_p(STREAM))
        outs = [read_back(p, r) for p, r in zip(out_ptrs, outs_like)]
        inputs_ok = all(dev == KDLCPU or same_bytes(read_back(p, t.contiguous()), t)
                        for p, t, dev in arg_ptrs)
        return rc, outs, refs, inputs_ok
    finally:
        bufs.free()


# ---------------------------------------------------------------- cases


def cases():
    import torch

    def rn(*s):
        return torch.randn(*s)

    ew = "elementwise_chain"
    yield ew, [], [rn(37, 129)], {}
    yield ew, [], [rn(130, 131)], {}  # n4 > cap * chunk: grid-stride loop
    yield ew, [], [rn(3)], {}  # tail only
    yield ew, [], [rn(64, 64)], {}
    yield ew, [], [rn(33, 65)], {"misalign": 4}
    yield ew, [], [rn(33, 64)], {"misalign": 8, "use_byte_offset": True}

    ln = "layernorm"
    for shape, d, kw in [((37, 1024), 1024, {}), ((9, 512), 512, {}), ((5, 1000), 1000, {}),
                         ((6, 100), 100, {}), ((5, 1030), 1030, {}), ((4, 2048), 2048, {}),
                         ((7, 1024), 1024, {"misalign": 4}), ((2, 3, 256), 256, {}), ((5, 1), 1, {}),
                         ((11, 8), 8, {"misalign": 16, "use_byte_offset": True})]:
        yield ln, [d], [rn(*shape) * 2 + 0.5], kw

    gm = "gemm_bias_relu"
    for k, n, m in [(7, 9, 5), (64, 48, 33), (1, 1, 1)]:
        yield gm, [k, n], [rn(m, k)], {}
    yield gm, [16, 12], [rn(10, 16)], {"env": {"EMU_LT_NOALGO": "1"}}
    yield gm, [16, 12], [rn(10, 16)], {"env": {"EMU_LT_FAIL": "1"}}
    yield gm, [16, 12], [rn(10, 16)], {"misalign": 4}

    cv = "conv_relu"
    yield cv, [3, 4, 3], [rn(2, 3, 6, 5)], {}
    yield cv, [3, 4, 3], [rn(2, 3, 4, 4)], {}  # hw % 4 == 0: vector bias+relu
    yield cv, [5, 6, 1], [rn(3, 5, 7, 8)], {}
    yield cv, [2, 3, 5], [rn(1, 2, 9, 6)], {}
    yield cv, [3, 4, 3], [rn(2, 3, 6, 6)], {"env": {"EMU_CUDNN_FIND_FAIL": "1"}}
    yield cv, [3, 4, 3], [rn(2, 3, 6, 6)], {"misalign": 4}

    sr = "scaled_residual_params_scalar"
    yield sr, [3], [rn(2, 3, 20), 0.75, 3], {}
    yield sr, [3], [rn(2, 3, 21), -1.5, 2], {}
    yield sr, [5], [rn(4, 5, 1030), 0.3, 1], {}
    yield sr, [2], [rn(1, 2, 4100), 2.0, 0], {}
    yield sr, [2], [rn(3, 2, 16), 1.25, -1], {}
    yield sr, [4], [rn(2, 4, 24), 0.5, 4], {"misalign": 4}

    to = "two_outputs"
    yield to, [], [rn(37, 4096)], {}
    yield to, [], [rn(5, 1000)], {}
    yield to, [], [rn(3, 7, 130)], {}
    yield to, [], [rn(9, 1030)], {}
    yield to, [], [rn(6, 512)], {"misalign": 4}
    yield to, [], [rn(4, 100)], {}
    yield to, [], [rn(2, 3)], {}
    x = rn(4, 64)
    x[1, 5] = float("nan")
    x[2, 63] = float("nan")
    yield to, [], [x], {}

    ls = "log_softmax_rows"
    yield ls, [], [rn(5, 4096) * 2], {}
    yield ls, [], [rn(3, 8192)], {}
    yield ls, [], [rn(4, 1000)], {}
    yield ls, [], [rn(3, 8200)], {}
    yield ls, [], [rn(7, 1001)], {}
    yield ls, [], [rn(5, 256)], {"misalign": 4}
    x = rn(4, 1001)
    x[0, 0] = float("-inf")
    x[2, 500] = float("-inf")
    yield ls, [], [x], {}
    x = rn(4, 1000)
    x[1, 0] = float("-inf")
    yield ls, [], [x], {}


def reject_cases():
    """Calls that must return nonzero: wrong dtype, shapes or counts (outputs given explicitly)."""
    import torch
    e = torch.empty
    yield "elementwise_chain", [], [torch.randn(8, 8).double()], [e(8, 8, dtype=torch.float64)]
    yield "elementwise_chain", [], [torch.randn(8, 8)], [e(8, 9)]
    yield "layernorm", [16], [torch.randn(4, 8)], [e(4, 8)]  # last dim 8 != weight 16
    yield "two_outputs", [], [torch.randn(4, 8)], [e(4)]  # one output instead of two
    yield "two_outputs", [], [torch.randn(4, 8)], [e(4), e(5)]
    yield "scaled_residual_params_scalar", [3], [torch.randn(2, 3, 8), 0.5, 1.5], [e(2, 3, 8)]  # float steps
    yield "scaled_residual_params_scalar", [3], [torch.randn(2, 4, 8), 0.5, 1], [e(2, 4, 8)]  # C mismatch
    yield "gemm_bias_relu", [8, 4], [torch.randn(3, 7)], [e(3, 4)]  # K mismatch
    yield "conv_relu", [3, 4, 3], [torch.randn(1, 2, 5, 5)], [e(1, 4, 5, 5)]  # C mismatch
    yield "log_softmax_rows", [], [torch.randn(4, 8)], [e(4, 8), e(4, 8)]


def close(out, ref, atol=1e-4, rtol=1e-4):
    import torch
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return False, f"shape/dtype {tuple(out.shape)}/{out.dtype} vs {tuple(ref.shape)}/{ref.dtype}"
    ok = torch.isclose(out, ref, atol=atol, rtol=rtol, equal_nan=True)
    if bool(ok.all()):
        return True, ""
    bad = (~ok).nonzero()[0].tolist()
    return False, (f"{int((~ok).sum())} mismatches, first at {bad}: got {out[tuple(bad)].item()}, "
                   f"want {ref[tuple(bad)].item()}")


def main():
    reexec_with_asan()
    import torch
    torch.manual_seed(0)
    only = set(sys.argv[1:])
    failures, count = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        libs, models = {}, {}

        def get(name):
            if name not in libs:
                libs[name] = build(name, tmp)
                ctypes.c_void_p.in_dll(libs[name], "emu_expected_stream").value = STREAM
                models[name] = load_model(name)
            return libs[name], models[name]

        for name, init, args, kw in cases():
            if only and name not in only:
                continue
            lib, mod = get(name)
            env = kw.get("env", {})
            for k, v in env.items():
                os.environ[k] = v
            model = mod.Model(*init)
            mis = ctypes.c_int.in_dll(lib, "emu_stream_mismatches")
            before = mis.value
            rc, outs, refs, inputs_ok = call(lib, model, args, kw.get("misalign", 0),
                                             kw.get("use_byte_offset", False))
            for k in env:
                del os.environ[k]
            shapes = [tuple(a.shape) if torch.is_tensor(a) else a for a in args]
            label = f"{name} init={init} args={shapes} {kw}"
            count += 1
            problems = []
            if rc != 0:
                problems.append(f"rc={rc}")
            else:
                for i, (o, r) in enumerate(zip(outs, refs)):
                    ok, why = close(o, r)
                    if not ok:
                        problems.append(f"output {i}: {why}")
            if not inputs_ok:
                problems.append("inputs modified")
            if mis.value != before:
                problems.append("work on a foreign stream")
            print(("FAIL " if problems else "ok   ") + label + (": " + "; ".join(problems) if problems else ""))
            failures += bool(problems)

        for name, init, args, outs in reject_cases():
            if only and name not in only:
                continue
            lib, mod = get(name)
            rc, _, _, _ = call(lib, mod.Model(*init), args, out_override=outs)
            count += 1
            shapes = [tuple(a.shape) if torch.is_tensor(a) else a for a in args]
            print(("ok   " if rc != 0 else "FAIL ") + f"reject {name} {shapes} -> {[tuple(o.shape) for o in outs]} rc={rc}")
            failures += rc == 0

        for lib in libs.values():
            td = getattr(lib, "ca_teardown", None)
            if td is not None:
                td()
    print(f"{count - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
