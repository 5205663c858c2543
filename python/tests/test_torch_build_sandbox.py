"""torch_build against candidate-chosen flags and sources (issue 45, item 1): the flag allow
list refuses every spelling that writes, reads or runs something (the found attack: nvcc's
--time and ld's --dependency-file), honest flag sets of public KernelBench candidates pass it,
and every compiler and linker runs in ``cuda-agent sandbox-exec``: a flag forced past the list
cannot write outside the command's staging directory, a macro-built include of a host file
fails, and errors never quote a file outside the candidate's sources."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuda_agent_bridge import torch_build as tb
from support import PYTHON_DIR

ARCH = "sm_90"
CUDA_AGENT = PYTHON_DIR.parent / "build" / "cuda-agent"
KERNEL = "__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }"
LIGHT_SOURCE = """
#include <pybind11/pybind11.h>
int add_ints(int a, int b) { return a + b; }
"""


def light_spec(name: str, extra: str = "", **flags: Any) -> dict[str, Any]:
    """A spec that compiles in seconds: pybind11 only, no torch headers."""
    return tb.inline_spec(name=name, cpp_sources=[LIGHT_SOURCE + extra], functions=["add_ints"],
                          no_implicit_headers=True, with_pytorch_error_handling=False, **flags)


def sandbox_or_skip() -> str:
    """The checkout's cuda-agent when its sandbox-exec runs a program here, else a skip."""
    if not CUDA_AGENT.is_file():
        pytest.skip(f"{CUDA_AGENT} is not built (make all)")
    out = subprocess.run([str(CUDA_AGENT), "sandbox-exec", "--", "/bin/true"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip(f"cuda-agent sandbox-exec cannot run here (exit {out.returncode}): "
                    f"{out.stderr.strip()[:300]}")
    return str(CUDA_AGENT)


@pytest.fixture(scope="module")
def roots() -> tuple[str, ...]:
    return tb._toolkit_roots()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the sandboxed compiler's uid (65534 when run as root) can reach, as the
    builder's own work directory (pytest's tmp_path lies below a 0700 directory)."""
    d = Path(tempfile.mkdtemp(prefix="torch-build-sandbox-test-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("torch-build-sandbox-cache")


# ---- (a) the found attack ---------------------------------------------------------------------

def test_the_found_attack_is_refused_and_writes_nothing(cache: Path, tmp_path: Path) -> None:
    p1, p2 = tmp_path / "p1", tmp_path / "p2"
    spec = tb.inline_spec(name="attack", cpp_sources="void f();", cuda_sources=KERNEL,
                          extra_cuda_cflags=["-O3", "--time", str(p1)],
                          extra_ldflags=[f"-Wl,--dependency-file={p2}"])
    r = tb.build_inline([spec], str(cache), ARCH)
    assert r["status"] == "build.error", r
    assert "'--time' is not allowed" in r["message"] and "docs/torch-build.md" in r["message"]
    assert (r["units_compiled"], r["modules"]) == (0, [])
    spec = tb.inline_spec(name="attack2", cpp_sources="void f();", cuda_sources=KERNEL,
                          extra_ldflags=[f"-Wl,--dependency-file={p2}"])
    r = tb.build_inline([spec], str(cache), ARCH)
    assert r["status"] == "build.error" and "extra_ldflags" in r["message"], r
    assert "--dependency-file" in r["message"]
    assert not p1.exists() and not p2.exists()


# ---- (b) other spellings that write, read or run ------------------------------------------------

REFUSED = [
    ("link", "-Wl,--output=/tmp/x"), ("link", "-Xlinker --output -Xlinker /tmp/x"),
    ("link", "-Xlinker --dependency-file=/tmp/x"), ("link", "-Wl,-Map=/tmp/map"),
    ("link", "-Wl,-rpath,/tmp"), ("link", "-Wl,-plugin,/tmp/p.so"), ("link", "-lcuda"),
    ("link", "-L/root"), ("link", "-L /root"), ("link", "-Wl,@/tmp/resp"),
    ("cxx", "-fopt-info-all=/tmp/f"), ("cxx", "-fdump-tree-all"), ("cxx", "-save-temps"),
    ("cxx", "@/tmp/resp"), ("cxx", "-specs=/tmp/s"), ("cxx", "-B/tmp/dir"), ("cxx", "-B /tmp"),
    ("cxx", "-wrapper /bin/sh,-c,touch"), ("cxx", "-fplugin=/tmp/p.so"),
    ("cxx", "-include /etc/hostname"), ("cxx", "-imacros /etc/hostname"), ("cxx", "-I/etc"),
    ("cxx", "-I /etc"), ("cxx", "-isystem /root"), ("cxx", "-MF /tmp/d"), ("cxx", "-MD"),
    ("cxx", "-o /tmp/x"), ("cxx", "-o/tmp/x"), ("cxx", "-Wp,-MD,/tmp/x"),
    ("cxx", "-Wa,-adhln=/tmp/x"), ("cxx", "-Wl,--output=/tmp/x"), ("cxx", "-DP=/etc/hostname"),
    ("cxx", "-D P=/etc/hostname"), ("cxx", "-fprofile-generate=/tmp"), ("cxx", "-x c++"),
    ("nvcc", "--time /tmp/t"), ("nvcc", "-time=/tmp/t"), ("nvcc", "--dependency-output /tmp/d"),
    ("nvcc", "--compiler-bindir /tmp"), ("nvcc", "-ccbin=/usr/bin/gcc"), ("nvcc", "--keep"),
    ("nvcc", "--keep-dir /tmp"), ("nvcc", "-Xcompiler -fplugin=/tmp/p.so"),
    ("nvcc", "-Xcompiler=-fPIC,-MD"), ("nvcc", "--compiler-options -save-temps"),
    ("nvcc", "-Xlinker --output=/tmp/x"), ("nvcc", "--linker-options=-o,/tmp/x"),
    ("nvcc", "-Xptxas -o,/tmp/x"), ("nvcc", "-Xptxas=--output-file=/tmp/x"),
    ("nvcc", "--options-file /tmp/o"), ("nvcc", "-optf=/tmp/o"), ("nvcc", "--run"),
    ("nvcc", "-Xnvlink -o,/tmp/x"), ("nvcc", "--generate-dependencies-with-compile"),
    ("nvcc", "-MF /tmp/d"), ("nvcc", "-odir /tmp"), ("nvcc", "-Wl,--output=/tmp/x"),
    ("nvcc", "-gencode arch=compute_90,code=sm_90,/tmp/x"), ("nvcc", "-arch=/tmp/x"),
    ("nvcc", "-forward-unknown-to-host-compiler"), ("nvcc", "-D"),
]


@pytest.mark.parametrize(("tool", "flags"), REFUSED)
def test_writing_reading_running_spellings_are_refused(tool: str, flags: str,
                                                       roots: tuple[str, ...]) -> None:
    with pytest.raises(tb.FlagRefused, match="is not allowed.*docs/torch-build.md"):
        tb.check_flags(shlex.split(flags), tool, roots)


@pytest.mark.parametrize("kwargs", [
    {"extra_cflags": ["-wrapper /bin/sh,-c,touch {marker}"]},
    {"extra_cuda_cflags": ["-Xcompiler", "-fdump-tree-all-graph={marker}"]},
    {"extra_ldflags": ["-Xlinker", "--output={marker}"]},
    {"extra_include_paths": ["{dir}"]},
])
def test_refused_spec_builds_nothing(kwargs: dict[str, list[str]], cache: Path,
                                     tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    filled = {k: [f.format(marker=marker, dir=tmp_path) for f in v] for k, v in kwargs.items()}
    spec = tb.inline_spec(name="refused", cpp_sources="int x;", cuda_sources=KERNEL, **filled)
    r = tb.build_inline([spec], str(cache), ARCH)
    assert r["status"] == "build.error" and "not allowed" in r["message"], r
    assert "docs/torch-build.md" in r["message"]
    assert r["units_compiled"] == 0 and not marker.exists()


# ---- (c) honest flags of public candidates ------------------------------------------------------

HONEST: list[dict[str, list[str]]] = [
    {"extra_cflags": [""], "extra_ldflags": [""]},
    {"extra_cflags": ["-O3"], "extra_cuda_cflags": ["-O3", "--use_fast_math"]},
    {"extra_cuda_cflags": ["-O3"], "extra_ldflags": ["-lcublas"]},
    {"extra_cflags": ["-O3", "-DCUDA_KERNEL"], "extra_ldflags": ["-lcublasLt", "-lcublas"],
     "extra_cuda_cflags": ["-O3", "--expt-relaxed-constexpr", "-DCUDA_KERNEL"]},
    {"extra_cuda_cflags": ["-O3", "--use_fast_math", "-std=c++17"],
     "extra_ldflags": ["-lcublas"]},
    {"extra_cuda_cflags": ["-O3", "--use_fast_math", "--restrict", "-lineinfo",
                           "-Xptxas=-O3,-v,-warn-spills", "-gencode",
                           "arch=compute_100a,code=sm_100a"], "extra_ldflags": ["-lcublas"]},
    {"extra_cuda_cflags": ["-res-usage", "--maxrregcount 60", "--use_fast_math", "-O3",
                           "-Xptxas -O3", "-gencode arch=compute_90,code=sm_90",
                           "-gencode arch=compute_90,code=compute_90"]},
    {"extra_cuda_cflags": ["-res-usage", "-D_C_=64", "-D_CHUNK_LEN_=16", "--use_fast_math",
                           "-O3", "-Xptxas -O3", "--extra-device-vectorization"]},
    {"extra_cuda_cflags": ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                           "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                           "--expt-relaxed-constexpr", "--expt-extended-lambda",
                           "--use_fast_math", "-Xptxas -v"]},
    {"extra_cuda_cflags": ["-O3", "--use_fast_math", "-allow-unsupported-compiler",
                           "-arch=sm_90a", "-Xcompiler", "-fPIC,-O3", "--ptxas-options=-v",
                           "-Xcudafe", "--diag_suppress=177", "-maxrregcount=64",
                           "-I/usr/local/cuda/include"]},
    {"extra_cflags": ["-O3", "-std=c++17", "-march=native", "-ffast-math", "-funroll-loops",
                      "-Wall", "-Wno-unused-variable", "-DNDEBUG", "-w"]},
    {"extra_ldflags": ["-L/usr/local/cuda/lib64", "-lcudart", "-Wl,--as-needed",
                       "-Wl,-z,defs"], "extra_include_paths": ["/usr/local/cuda/include"]},
]


@pytest.mark.parametrize("flags", HONEST)
def test_honest_flag_sets_pass(flags: dict[str, list[str]]) -> None:
    include = [p for p in flags.get("extra_include_paths", []) if os.path.isdir(p)]
    spec = tb.inline_spec(name="honest", cpp_sources="int x;", cuda_sources=KERNEL,
                          **{**flags, "extra_include_paths": include})
    module = tb._inline_module(0, spec, 1)
    assert module.cuda_cflags == [w for f in spec["extra_cuda_cflags"] for w in shlex.split(f)]
    assert module.ldflags == [w for f in spec["extra_ldflags"] for w in shlex.split(f)]
    assert module.includes == include


# ---- (d) the sandbox ----------------------------------------------------------------------------

def _dirs(root: Path) -> tuple[Path, Path, Path]:
    src, stage, outside = root / "src", root / "stage", root / "outside"
    for d in (src, stage, outside):
        d.mkdir()
    src.chmod(0o755)
    return src, stage, outside


def test_a_forced_flag_cannot_write_outside_staging(open_dir: Path) -> None:
    """Flags the list refuses, handed straight to the command runner: in the sandbox the
    compiler cannot write the host path they name (nor into its read-only sources); without
    it (the control) the same command does."""
    exe = sandbox_or_skip()
    src, stage, outside = _dirs(open_dir)
    (src / "a.cpp").write_text("int a() { return 1; }\n")
    (src / "a.cpp").chmod(0o644)
    argv = [tb._cxx(), "-c", "a.cpp", "-o", str(stage / "a.o"), "-MD", "-MF",
            str(outside / "p1")]
    deadline = time.monotonic() + 120
    run = tb._run(argv, str(src), deadline, threading.Event(), tb.Sandbox(exe), [str(src)],
                  [str(stage)])
    assert run.status == "failed", run
    assert not (outside / "p1").exists()
    run = tb._run([*argv[:-1], str(src / "p1")], str(src), deadline, threading.Event(),
                  tb.Sandbox(exe), [str(src)], [str(stage)])
    assert run.status == "failed" and not (src / "p1").exists(), run
    control = tb._run(argv, str(src), deadline, threading.Event(), tb.Sandbox(None))
    assert control.status == "ok" and (outside / "p1").exists(), control


def test_nvcc_time_forced_through_writes_nothing(open_dir: Path) -> None:
    exe = sandbox_or_skip()
    try:
        nvcc = tb._nvcc()
    except tb.BuildFailure:
        pytest.skip("no nvcc here")
    src, stage, outside = _dirs(open_dir)
    (src / "k.cu").write_text(KERNEL + "\n")
    (src / "k.cu").chmod(0o644)
    argv = [nvcc, "--time", str(outside / "p1"), "-c", "k.cu", "-o", str(stage / "k.o")]
    deadline = time.monotonic() + 300
    run = tb._run(argv, str(src), deadline, threading.Event(), tb.Sandbox(exe), [str(src)],
                  [str(stage)])
    assert run.status in ("ok", "failed"), run
    assert not (outside / "p1").exists()
    control = tb._run(argv, str(src), deadline, threading.Event(), tb.Sandbox(None))
    assert control.status == "ok" and (outside / "p1").exists(), control


def test_macro_include_of_a_host_file_fails_and_is_not_quoted(cache: Path,
                                                              tmp_path: Path) -> None:
    exe = sandbox_or_skip()
    secret = tmp_path / "secret.h"
    secret.write_text("int leaked_secret_word_4711 = oops_secret_word_4711;\n")
    hostname = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").is_file() else ""
    for path in ("/etc/hostname", str(secret)):
        extra = (f"\n#define P {path}\n#define S(x) #x\n#define STR(x) S(x)\n#include STR(P)\n")
        r = tb.build_inline([light_spec("leak", extra)], str(cache), ARCH, sandbox=exe)
        assert r["status"] == "build.error", r
        text = json.dumps(r)
        assert "secret_word_4711" not in text
        if hostname:
            assert hostname not in text.replace(path, "")


def test_errors_withhold_diagnostics_located_outside(roots: tuple[str, ...]) -> None:
    """The filter on its own (whatever the sandbox shows): a diagnostic in another file is
    named, never quoted; the candidate's and the toolkit's are kept."""
    torch_header = os.path.join(roots[2], "torch", "extension.h")
    output = (
        "In file included from main.cpp:5:\n"
        "/etc/passwd:1:5: error: found ':' in nested-name-specifier, expected '::'\n"
        "    1 | root:x:0:0:root:/root:/bin/bash\n"
        "      |     ^\n"
        "/etc/passwd:1:1: error: 'root' does not name a type\n"
        "/srv/other/secret.h(3): error: identifier \"hunter2\" is undefined\n"
        "  hunter2\n"
        "  ^\n"
        "../../../root/keys.h:2:1: note: 'hunter2' declared here\n"
        f"{torch_header}:9:1: error: expected ';'\n"
        "main.cpp:7:1: error: 'y' was not declared in this scope\n")
    lines = tb._error_lines(output, [], roots)
    assert lines == [
        f"/etc/passwd: {tb.WITHHELD}",
        f"/srv/other/secret.h: {tb.WITHHELD}",
        f"../../../root/keys.h: {tb.WITHHELD}",
        f"{torch_header}:9: error: expected ';'",
        "main.cpp:7: error: 'y' was not declared in this scope",
    ]
    assert "hunter2" not in "".join(lines) and "root:x" not in "".join(lines)


def test_honest_build_in_the_sandbox_builds_and_caches(cache: Path) -> None:
    exe = sandbox_or_skip()
    spec = light_spec("honest_sandboxed", extra_cflags=["-O2", "-DNDEBUG"])
    r = tb.build_inline([spec], str(cache), ARCH, sandbox=exe)
    assert r["status"] == "ok", r
    [module] = r["modules"]
    lib = Path(module["library"])
    assert lib.is_file() and lib.is_relative_to(cache / "torch" / "lib")
    assert lib.read_bytes()[:4] == b"\x7fELF"
    objects = list((cache / "torch" / "obj").glob("*.o"))
    assert objects and all(o.stat().st_uid == os.getuid() for o in [*objects, lib])
    again = tb.build_inline([spec], str(cache), ARCH, sandbox=exe)
    assert (again["status"], again["cached"], again["modules"]) == ("ok", True, r["modules"])
    assert not [p for d in ("obj", "lib") for p in (cache / "torch" / d).iterdir()
                if p.name.startswith(".tmp")]


def test_no_cuda_agent_is_env_sandbox(cache: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    r = tb.build_inline([light_spec("nobox")], str(cache), ARCH, sandbox=str(tmp_path / "no"))
    assert (r["status"], r["code"]) == ("build.internal", "env.sandbox"), r
    assert r["message"].startswith("env.sandbox: ") and r["modules"] == []
    monkeypatch.delenv("CUDA_AGENT_SANDBOX", raising=False)
    monkeypatch.setenv("CUDA_AGENT_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tb, "__file__", str(tmp_path / "a" / "b" / "torch_build.py"))
    with pytest.raises(tb.BuildFailure, match="CUDA_AGENT_SANDBOX=0") as info:
        tb.find_sandbox()
    assert info.value.code == "env.sandbox"
    monkeypatch.setenv("CUDA_AGENT_SANDBOX", "0")
    assert tb.find_sandbox() == tb.Sandbox(None)


def test_cli_sandbox_options(tmp_path: Path) -> None:
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps({"specs": [light_spec("cli_box")]}))
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    base = [sys.executable, "-m", "cuda_agent_bridge.torch_build", "inline", str(specs),
            "--cache", str(tmp_path / "cache"), "--arch", ARCH]
    out = subprocess.run([*base, "--sandbox-exec", str(tmp_path / "missing")], env=env,
                         capture_output=True, text=True, timeout=300)
    report = json.loads(out.stdout)
    assert (out.returncode, report["status"], report["code"]) == (0, "build.internal",
                                                                   "env.sandbox"), out
    both = subprocess.run([*base, "--sandbox-exec", "x", "--no-sandbox"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert both.returncode == 2 and both.stdout == "", both
