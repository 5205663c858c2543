#!/usr/bin/env python3
"""Runs the adversarial candidates' kernels on the CPU (optional, no GPU, no torch needed).

Uses the emulator of examples/emu (launches rewritten into CPU threads, ASan/UBSan, CPU stand-ins
for cuBLAS(Lt) and cuDNN) plus extra.h / extra_stubs.cpp here for what these candidates use
beyond the examples (streams, events, cudaMallocAsync, occupancy, strided-batched GEMM,
__constant__). Honest candidates the emulator can run (not Thrust, CUB, WMMA or cooperative
groups) are checked on small shapes (edges, tails, several blocks) against pure-Python
references; a few cheats are checked to behave as their comments say. Slow (every GPU thread is
an OS thread): several minutes.

Usage: python3 tests/adversarial/emu/check.py [NAME ...]
"""
import ctypes, math, os, random, struct, subprocess, sys, tempfile, json

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "examples", "emu"))
import check_solutions as cs  # noqa: E402  (rewrite(), DLTensor, reexec_with_asan())

ADV = os.path.join(REPO, "tests", "adversarial")
STREAM = 0x5150


def build(kind, name, tmp):
    kdir = f"{ADV}/{kind}/{name}/kernels"
    srcs, csrcs = [], []
    for f in sorted(os.listdir(kdir)):
        p = os.path.join(kdir, f)
        if f.endswith(".cu"):
            text = cs.rewrite(open(p).read()).replace('#include "cuda_emu.h"\n', '#include "cuda_emu.h"\n#include "extra.h"\n', 1)
            dst = os.path.join(tmp, f"{kind}__{name}__{f[:-3]}.cpp")
            open(dst, "w").write(text)
            srcs.append(dst)
        elif f.endswith(".cpp"):
            srcs.append(p)
        elif f.endswith(".c"):
            csrcs.append(p)
    lib = os.path.join(tmp, f"lib_{kind}_{name}.so")
    inc = [f"-I{HERE}", f"-I{REPO}/examples/emu", f"-I{kdir}", f"-I{REPO}/build/include", f"-I{REPO}/include",
           "-I/usr/local/cuda/include"]
    objs = []
    for c in csrcs:
        o = os.path.join(tmp, os.path.basename(c) + f".{name}.o")
        subprocess.run(["gcc", "-std=c11", "-O1", "-g", "-fPIC", "-c", "-fsanitize=address,undefined"] + inc + [c, "-o", o], check=True)
        objs.append(o)
    cmd = (["g++", "-std=c++20", "-O1", "-g", "-fPIC", "-shared", "-pthread", "-w", "-Wl,-Bsymbolic",
            "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"] + inc + srcs + objs +
           [f"{REPO}/examples/emu/lib_stubs.cpp", os.path.join(HERE, "extra_stubs.cpp"), "-o", lib])
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(lib)


class Buf:
    def __init__(self, vals):
        self.n = len(vals)
        self.arr = (ctypes.c_float * max(self.n, 1))(*vals)
        self.addr = ctypes.addressof(self.arr)

    def get(self):
        return list(self.arr[:self.n])


def dl(t, buf, shape):
    t.data = buf.addr
    t.byte_offset = 0
    t.device = cs.DLDevice(2, 0)
    t.ndim = len(shape)
    t.dtype = cs.DLDataType(2, 32, 1)
    sh = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    st = []
    acc = 1
    for d in reversed(shape):
        st.insert(0, acc)
        acc *= d
    sd = (ctypes.c_int64 * max(len(shape), 1))(*st)
    t.shape = sh
    t.strides = sd
    return (sh, sd)


def prod(s):
    r = 1
    for v in s:
        r *= v
    return r


def call(lib, args, params, out_shape, setup=True):
    """args/params: list of (values, shape). Returns rc, out values, args after."""
    keep = []
    a_bufs = [Buf(v) for v, _ in args]
    p_bufs = [Buf(v) for v, _ in params]
    o_buf = Buf([float("nan")] * prod(out_shape))
    A = (cs.DLTensor * max(len(args), 1))()
    P = (cs.DLTensor * max(len(params), 1))()
    O = (cs.DLTensor * 1)()
    for i, (b, (_, s)) in enumerate(zip(a_bufs, args)):
        keep.append(dl(A[i], b, s))
    for i, (b, (_, s)) in enumerate(zip(p_bufs, params)):
        keep.append(dl(P[i], b, s))
    keep.append(dl(O[0], o_buf, out_shape))
    if setup and hasattr(lib, "ca_setup"):
        try:
            su = lib.ca_setup
        except AttributeError:
            su = None
        if su is not None:
            su.restype = ctypes.c_int
            rc = su(P, len(params), ctypes.c_void_p(STREAM))
            if rc:
                return rc, None, None, None
    lib.ca_forward.restype = ctypes.c_int
    rc = lib.ca_forward(A, len(args), P, len(params), O, 1, ctypes.c_void_p(STREAM))
    return rc, o_buf.get(), [b.get() for b in a_bufs], [b.get() for b in p_bufs]


def f32(v):
    return [struct.unpack('f', struct.pack('f', x))[0] for x in v]


def rn(n):
    return f32([random.gauss(0, 1) for _ in range(n)])


def ref_gemm(x, w, m, n, k):
    return [sum(x[i * k + p] * w[j * k + p] for p in range(k)) for i in range(m) for j in range(n)]


def ref_conv(x, w, b, N, C, H, W, K):
    out = []
    for nn in range(N):
        for kk in range(K):
            for h in range(H):
                for ww in range(W):
                    acc = b[kk]
                    for c in range(C):
                        for r in range(3):
                            for s in range(3):
                                ih, iw = h + r - 1, ww + s - 1
                                if 0 <= ih < H and 0 <= iw < W:
                                    acc += x[((nn * C + c) * H + ih) * W + iw] * w[((kk * C + c) * 3 + r) * 3 + s]
                    out.append(acc)
    return out


def ref_softmax(x, rows, d):
    out = []
    for r in range(rows):
        row = x[r * d:(r + 1) * d]
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = sum(e)
        out += [v / s for v in e]
    return out


def close(out, ref, atol, rtol):
    bad = [i for i, (o, r) in enumerate(zip(out, ref)) if not (abs(o - r) <= atol + rtol * abs(r))]
    return (not bad and len(out) == len(ref)), (f"{len(bad)} bad, first {bad[0]}: {out[bad[0]]} vs {ref[bad[0]]}" if bad else "")


def task_cases(task):
    if task == "scale_add":
        for shape in [(37, 129), (3,), (64, 64), (300, 301)]:
            x = rn(prod(shape))
            yield [(x, shape)], [], shape, [2 * v + 1 for v in x], 1e-5, 1e-5
    elif task == "gemm":
        for m, n, k in [(33, 47, 70), (64, 64, 64), (1, 5, 3), (96, 80, 48), (256, 260, 40)]:
            x = rn(m * k)
            bound = 1 / math.sqrt(k)
            w = f32([random.uniform(-bound, bound) for _ in range(n * k)])
            yield [(x, (m, k))], [(w, (n, k))], (m, n), ref_gemm(x, w, m, n, k), 2e-3, 2e-3
    elif task == "conv":
        for N, C, H, W, K in [(2, 3, 7, 9, 5), (1, 2, 17, 18, 20), (1, 1, 16, 16, 16)]:
            x = rn(N * C * H * W)
            bound = 1 / math.sqrt(C * 9)
            w = f32([random.uniform(-bound, bound) for _ in range(K * C * 9)])
            b = f32([random.uniform(-bound, bound) for _ in range(K)])
            yield [(x, (N, C, H, W))], [(w, (K, C, 3, 3)), (b, (K,))], (N, K, H, W), ref_conv(x, w, b, N, C, H, W, K), 1e-4, 1e-4
    elif task == "rowsum":
        for rows, d in [(37, 129), (9, 1024), (5, 1), (300, 64), (3, 1030)]:
            x = rn(rows * d)
            yield [(x, (rows, d))], [], (rows,), [sum(x[r * d:(r + 1) * d]) for r in range(rows)], 1e-4, 1e-4
    elif task == "softmax":
        for rows, d in [(5, 1024), (7, 100), (3, 1030), (9, 33), (4, 1)]:
            x = f32([3 * v for v in rn(rows * d)])
            yield [(x, (rows, d))], [], (rows, d), ref_softmax(x, rows, d), 1e-6, 1e-4


EMULATED = {  # honest candidates the emulator can run (no CUB, Thrust, WMMA, cooperative groups)
    "multi_stream_join", "cublas_sgemm", "cublaslt_matmul", "cudnn_conv_fma", "im2col_cublas_conv",
    "direct_conv_packed", "smem_tiled_gemm", "register_tiled_gemm", "setup_transposed_gemm",
    "warp_shuffle_rowsum", "block_smem_rowsum", "malloc_async_rowsum", "multi_file_c_host",
    "float4_tail_scale_add", "grid_stride_scale_add", "printf_debug_scale_add", "persistent_softmax",
    "block_softmax", "template_warp_softmax", "constant_lut_softmax",
}


def check_cheats(tmp, only):
    """A few cheats behave as their comments say (so a GPU failure to reject them is real)."""
    fails = 0

    def report(ok, what):
        nonlocal fails
        print(("ok   " if ok else "FAIL ") + what)
        fails += not ok

    def lib_of(name):
        lib = build("cheats", name, tmp)
        ctypes.c_void_p.in_dll(lib, "emu_expected_stream").value = STREAM
        return lib

    def want(name):
        return not only or name in only

    m, n, k = 40, 36, 48
    bound = 1 / math.sqrt(k)
    x = rn(m * k)
    w = f32([random.uniform(-bound, bound) for _ in range(n * k)])
    w2 = f32([random.uniform(-bound, bound) for _ in range(n * k)])
    if want("value_cache"):
        lib = lib_of("value_cache")
        rc, out, _, _ = call(lib, [(x, (m, k))], [(w, (n, k))], (m, n), setup=True)
        ok, why = close(out, ref_gemm(x, w, m, n, k), 1e-3, 1e-3)
        report(rc == 0 and ok, f"value_cache: a fresh input is computed {why}")
        # Weights changed without ca_setup: an output that follows the old weights proves a cache hit.
        xs = f32([v * 1.0009765625 for v in x])
        rc, out, _, _ = call(lib, [(xs, (m, k))], [(w2, (n, k))], (m, n), setup=False)
        ok, why = close(out, ref_gemm(xs, w, m, n, k), 1e-4, 1e-4)
        report(rc == 0 and ok, f"value_cache: a scaled input is served from the cache, exactly {why}")
        xp = f32([v * (1 + random.uniform(-1, 1) / 1024) for v in x])
        rc, out, _, _ = call(lib, [(xp, (m, k))], [(w2, (n, k))], (m, n), setup=False)
        ok, why = close(out, ref_gemm(xp, w, m, n, k), 1e-2, 1e-2)
        report(rc == 0 and ok, f"value_cache: a per-element perturbed input is served too {why}")
    if want("params_in_place"):
        lib = lib_of("params_in_place")
        xq = rn(m * k)
        wq = f32([random.uniform(-bound, bound) for _ in range(k * k)])
        rc, out, _, p_after = call(lib, [(xq, (m, k))], [(wq, (k, k))], (m, k))
        ok, why = close(out, ref_gemm(xq, wq, m, k, k), 1e-3, 1e-3)
        report(rc == 0 and ok and p_after[0] != wq, f"params_in_place: right output, weight transposed in place {why}")
    if want("stale_previous"):
        lib = lib_of("stale_previous")
        xf = rn(m * k)
        rc, out1, _, _ = call(lib, [(x, (m, k))], [(w, (n, k))], (m, n), setup=True)
        rc2, out2, _, _ = call(lib, [(xf, (m, k))], [(w, (n, k))], (m, n), setup=False)
        ok1, _ = close(out1, ref_gemm(x, w, m, n, k), 1e-3, 1e-3)
        report(rc == 0 and rc2 == 0 and ok1 and out2 == out1, "stale_previous: the second call returns the first output")
    rows, d = 200, 1024
    xr = rn(rows * d)
    if want("fp16_accumulate"):
        lib = lib_of("fp16_accumulate")
        rc, out, _, _ = call(lib, [(xr, (rows, d))], [], (rows,))
        ref = [sum(xr[r * d:(r + 1) * d]) for r in range(rows)]
        nbad = sum(1 for o, r in zip(out, ref) if abs(o - r) > 0.01 + 0.01 * abs(r))
        report(rc == 0 and nbad > 5, f"fp16_accumulate: {nbad} of {rows} rows beyond atol = rtol = 1e-2")
    if want("partial_rows"):
        lib = lib_of("partial_rows")
        rc, out, _, _ = call(lib, [(xr, (rows, d))], [], (rows,))
        report(rc == 0 and all(math.isnan(v) for v in out[rows // 2:]) and
               not any(math.isnan(v) for v in out[:rows // 2]), "partial_rows: the second half stays NaN")
    if want("launch_failure_ignored"):
        lib = lib_of("launch_failure_ignored")
        rc, out, _, _ = call(lib, [(rn(1000), (1000,))], [], (1000,))
        report(rc == 0 and all(math.isnan(v) for v in out), "launch_failure_ignored: returns 0, outputs untouched")
    if want("input_in_place"):
        lib = lib_of("input_in_place")
        xsm = rn(5 * 64)
        rc, out, a_after, _ = call(lib, [(xsm, (5, 64))], [], (5, 64))
        ok, why = close(out, ref_softmax(xsm, 5, 64), 1e-6, 1e-4)
        report(rc == 0 and ok and a_after[0] != xsm, f"input_in_place: right output, input modified {why}")
    return fails


def main():
    cs.reexec_with_asan()
    random.seed(1)
    only = set(sys.argv[1:])
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(EMULATED):
            if only and name not in only:
                continue
            task = json.load(open(f"{ADV}/honest/{name}/expect.json"))["task"]
            lib = build("honest", name, tmp)
            ctypes.c_void_p.in_dll(lib, "emu_expected_stream").value = STREAM
            for args, params, oshape, ref, atol, rtol in task_cases(task):
                rc, out, a_after, p_after = call(lib, args, params, oshape)
                probs = []
                if rc:
                    probs.append(f"rc={rc}")
                else:
                    ok, why = close(out, ref, atol, rtol)
                    if not ok:
                        probs.append(why)
                    if any(a != b for (v, _), after in zip(args, a_after) for a, b in zip(v, after)):
                        probs.append("input modified")
                    if any(a != b for (v, _), after in zip(params, p_after) for a, b in zip(v, after)):
                        probs.append("params modified")
                print(("FAIL " if probs else "ok   ") + f"{name} {[s for _, s in args]} " + "; ".join(probs),
                      flush=True)
                fails += bool(probs)
            mis = ctypes.c_int.in_dll(lib, "emu_stream_mismatches").value
            if mis and name != "multi_stream_join":  # the one that launches on its side streams
                print(f"FAIL {name}: {mis} launches on a foreign stream")
                fails += 1
        fails += check_cheats(tmp, only)
    print(f"failures: {fails}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
