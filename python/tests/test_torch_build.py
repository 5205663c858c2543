"""cuda_agent_bridge.torch_build: real compilers (g++, nvcc without a GPU), one shared cache.

Compiling torch headers takes tens of seconds here, so the builds are session fixtures and the
tests that need "already built" depend on them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cuda_agent_bridge import torch_build as tb
from support import PYTHON_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARCH = "sm_90"
HEX32 = re.compile(r"[0-9a-f]{32}\Z")
LIGHT_SOURCE = """
#include <pybind11/pybind11.h>
int add_ints(int a, int b) { return a + b; }
"""


def light_spec(name: str, extra: str = "") -> dict[str, Any]:
    """A spec that compiles in seconds: pybind11 only, no torch headers."""
    return tb.inline_spec(name=name, cpp_sources=[LIGHT_SOURCE + extra], functions=["add_ints"],
                          no_implicit_headers=True, with_pytorch_error_handling=False)


def run_module(library: str, name: str, code: str) -> str:
    """Imports the built module in a fresh interpreter (never here) and runs code with it as m."""
    script = (
        "import importlib.machinery, importlib.util, torch\n"
        f"loader = importlib.machinery.ExtensionFileLoader({name!r}, {library!r})\n"
        f"spec = importlib.util.spec_from_file_location({name!r}, {library!r}, loader=loader)\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "loader.exec_module(m)\n" + code)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def tmp_leftovers(cache: Path) -> list[str]:
    return [p.name for d in ("obj", "lib") for p in (cache / "torch" / d).iterdir()
            if p.name.startswith(".tmp")]


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("torch-build-cache")


@pytest.fixture(scope="session")
def cpu_build(cache: Path) -> dict[str, Any]:
    return tb.build_workdir(str(FIXTURES / "workdir"), str(cache), ARCH)


@pytest.fixture(scope="session")
def cuda_build(cache: Path) -> dict[str, Any]:
    return tb.build_workdir(str(FIXTURES / "workdir_cuda"), str(cache), ARCH)


INLINE_KWARGS: dict[str, Any] = {
    "name": "inline_add",
    "cpp_sources": "torch::Tensor add_scaled(torch::Tensor a, torch::Tensor b, double s) "
                   "{ return a + b * s; }",
    "functions": ["add_scaled"],
    "extra_cflags": ["-O2"],
}


@pytest.fixture(scope="session")
def inline_build(cache: Path) -> dict[str, Any]:
    return tb.build_inline([tb.inline_spec(**INLINE_KWARGS)], str(cache), ARCH)


# ---- workdir ------------------------------------------------------------------------------------

def test_workdir_builds_and_the_module_works(cpu_build: dict[str, Any], cache: Path) -> None:
    r = cpu_build
    assert r["status"] == "ok", r
    assert (r["message"], r["errors"]) == ("", [])
    assert (r["units_compiled"], r["units_cached"], r["cached"]) == (2, 0, False)
    assert r["arch"] == ARCH and HEX32.match(r["hash"])
    [module] = r["modules"]
    assert module["name"] == "cuda_extension" and module["key"] is None
    lib = module["library"]
    assert os.path.isabs(lib) and lib.startswith(str(cache / "torch" / "lib"))
    assert lib.endswith("/cuda_extension.so") and os.path.isfile(lib)
    assert len(list((cache / "torch" / "obj").glob("*.o"))) >= 2
    out = run_module(lib, "cuda_extension",
                     "x = torch.tensor([-1.0, 2.0, 3.0, -4.0])\n"
                     "b = torch.tensor([0.5, 1.0])\n"
                     "print(m.relu_scale_bias(x, 2.0, b).tolist())\n")
    assert json.loads(out) == [0.5, 5.0, 6.5, 1.0]


def test_second_build_is_cached(cpu_build: dict[str, Any], cache: Path) -> None:
    start = time.monotonic()
    r = tb.build_workdir(str(FIXTURES / "workdir"), str(cache), ARCH)
    elapsed = time.monotonic() - start
    assert r["status"] == "ok", r
    assert (r["units_compiled"], r["units_cached"], r["cached"]) == (0, 2, True)
    assert r["hash"] == cpu_build["hash"] and r["modules"] == cpu_build["modules"]
    assert elapsed < 5, elapsed


def test_copied_workdir_is_cached(cpu_build: dict[str, Any], cache: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "candidate"
    shutil.copytree(FIXTURES / "workdir", copy)
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "ok", r
    assert (r["units_compiled"], r["units_cached"], r["cached"]) == (0, 2, True)
    assert r["modules"] == cpu_build["modules"]


def test_changed_unit_is_the_only_one_compiled(cpu_build: dict[str, Any], cache: Path,
                                               tmp_path: Path) -> None:
    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir", copy)
    unit = copy / "kernels" / "relu_scale_bias_binding.cpp"
    unit.write_text(unit.read_text() + "// a comment changes the content\n")
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "ok", r
    assert (r["units_compiled"], r["units_cached"], r["cached"]) == (1, 1, False)
    assert r["hash"] != cpu_build["hash"]
    assert r["modules"][0]["library"] != cpu_build["modules"][0]["library"]
    assert tmp_leftovers(cache) == []


def test_unit_keys_follow_content_and_headers(tmp_path: Path) -> None:
    """No compiling: which unit keys change with which edit (headers count for every unit)."""
    def keys(d: Path) -> list[str]:
        module = tb._workdir_module(str(d))
        tb._plan(module, ARCH)
        return [u.key for u in module.units]

    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir", copy)
    base = keys(copy)
    assert len(set(base)) == 2
    unit = copy / "kernels" / "relu_scale_bias_binding.cpp"
    unit.write_text(unit.read_text() + "\n")
    edited = keys(copy)
    assert edited[0] == base[0] and edited[1] != base[1]
    (copy / "kernels" / "sub").mkdir()
    (copy / "kernels" / "sub" / "extra.cuh").write_text("#pragma once\n")
    with_header = keys(copy)
    assert with_header[0] != edited[0] and with_header[1] != edited[1]
    assert keys(copy) == with_header
    m = tb._workdir_module(str(copy))
    tb._plan(m, "sm_80")
    assert [u.key for u in m.units] == with_header  # C++ units do not depend on the arch


def test_arch_changes_only_cuda_unit_keys() -> None:
    def keys(arch: str) -> dict[str, str]:
        module = tb._workdir_module(str(FIXTURES / "workdir_cuda"))
        tb._plan(module, arch)
        return {u.rel: u.key for u in module.units}

    a, b = keys("sm_90"), keys("sm_80")
    assert list(a) == ["binding.cpp", "kernels/scale.cu", "kernels/scale_binding.cpp"]
    assert [a[r] == b[r] for r in a] == [True, False, True]


def test_cuda_workdir_builds(cuda_build: dict[str, Any]) -> None:
    r = cuda_build
    assert r["status"] == "ok", r
    assert (r["units_compiled"], r["units_cached"]) == (3, 0)
    lib = r["modules"][0]["library"]
    assert b"libcudart.so" in Path(lib).read_bytes()  # linked as a CUDA module
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if os.path.exists(cuobjdump):
        listing = subprocess.run([cuobjdump, "--list-elf", lib], capture_output=True, text=True)
        assert "sm_90" in listing.stdout, listing


@pytest.mark.parametrize("unit, source", [
    ("kernels/x.cu", "// nvcc\n__global__ void k(float *p)\n{ p[0] = undefined_name; }\n"),
    ("kernels/y.cpp", "// g++\nint f()\n{ return undefined_name; }\n"),
])
def test_compile_error_names_file_and_line(cuda_build: dict[str, Any], cache: Path,
                                           tmp_path: Path, unit: str, source: str) -> None:
    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir_cuda", copy)
    (copy / unit).write_text(source)
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "build.error", r
    assert r["errors"][0].startswith(f"{unit}:3: error: "), r["errors"]
    assert "undefined_name" in r["errors"][0]
    assert unit in r["message"] and "\n" not in r["message"]
    assert r["modules"] == [] and r["units_compiled"] == 0
    assert not any(str(copy) in e or "/tmp" in e for e in r["errors"]), r["errors"]
    assert tmp_leftovers(cache) == []


def test_timeout_names_the_unit(cuda_build: dict[str, Any], cache: Path, tmp_path: Path) -> None:
    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir_cuda", copy)
    (copy / "kernels" / "slow.cu").write_text(f"// {time.time_ns()}\n__global__ void k() {{}}\n")
    start = time.monotonic()
    r = tb.build_workdir(str(copy), str(cache), ARCH, timeout_s=0.3)
    assert r["status"] == "build.timeout", r
    assert "kernels/slow.cu" in r["message"]
    assert time.monotonic() - start < 10  # the compiler was killed, not waited for
    assert tmp_leftovers(cache) == []


def test_inline_without_specs_says_no_cuda_code(cache: Path) -> None:
    r = tb.build_inline([], str(cache), ARCH)
    assert r["status"] == "build.no_sources", r
    assert "builds no CUDA code" in r["message"] and "load_inline" in r["message"], r


def test_workdir_without_required_files(tmp_path: Path, cache: Path) -> None:
    r = tb.build_workdir(str(tmp_path / "missing"), str(cache), ARCH)
    assert r["status"] == "build.no_sources", r
    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir", copy)
    (copy / "binding_registry.h").unlink()
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "build.no_sources" and "binding_registry.h" in r["message"], r
    shutil.copy(FIXTURES / "workdir" / "binding_registry.h", copy)
    shutil.rmtree(copy / "kernels")
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "build.no_sources" and "kernel" in r["message"], r


def test_workdir_refuses_odd_units(tmp_path: Path, cache: Path) -> None:
    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir", copy)
    os.mkfifo(copy / "kernels" / "pipe.cu")  # reading it would block the builder
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "build.error" and "kernels/pipe.cu" in r["message"], r
    (copy / "kernels" / "pipe.cu").unlink()
    (copy / "-wrapper.cpp").write_text("int x;\n")
    r = tb.build_workdir(str(copy), str(cache), ARCH)
    assert r["status"] == "build.error" and "-wrapper.cpp" in r["message"], r


# ---- inline -------------------------------------------------------------------------------------

def test_inline_builds_and_the_module_works(inline_build: dict[str, Any]) -> None:
    r = inline_build
    assert r["status"] == "ok", r
    assert (r["units_compiled"], r["units_cached"]) == (1, 0)
    [module] = r["modules"]
    assert module["name"] == "inline_add"
    assert module["key"] == tb.spec_key(tb.inline_spec(**INLINE_KWARGS))
    out = run_module(module["library"], "inline_add",
                     "print(m.add_scaled(torch.ones(3), torch.arange(3.0), 2.0).tolist())\n")
    assert json.loads(out) == [1.0, 3.0, 5.0]


def test_inline_rebuild_is_cached(inline_build: dict[str, Any], cache: Path) -> None:
    r = tb.build_inline([tb.inline_spec(**INLINE_KWARGS)], str(cache), ARCH)
    assert (r["status"], r["cached"], r["units_compiled"]) == ("ok", True, 0), r
    assert r["modules"] == inline_build["modules"]


def test_concurrent_builders_agree(cache: Path) -> None:
    spec = light_spec("light_add", f"// {time.time_ns()}\n")
    reports: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: reports.append(
        tb.build_inline([spec], str(cache), ARCH, jobs=1))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["status"] for r in reports] == ["ok", "ok"], reports
    assert reports[0]["modules"] == reports[1]["modules"]
    assert tmp_leftovers(cache) == []
    out = run_module(reports[0]["modules"][0]["library"], "light_add", "print(m.add_ints(2, 3))")
    assert out.strip() == "5"


def test_inline_several_specs_and_duplicates(cache: Path) -> None:
    a, b = light_spec("light_a"), light_spec("light_b")
    r = tb.build_inline([a, b, a], str(cache), ARCH)
    assert r["status"] == "ok", r
    assert [m["name"] for m in r["modules"]] == ["light_a", "light_b", "light_a"]
    assert [m["key"] for m in r["modules"]] == [tb.spec_key(s) for s in (a, b, a)]
    assert r["modules"][0]["library"] == r["modules"][2]["library"]


def test_inline_no_sources(cache: Path) -> None:
    r = tb.build_inline([tb.inline_spec(name="empty", cpp_sources=[])], str(cache), ARCH)
    assert r["status"] == "build.no_sources", r
    r = tb.build_inline([], str(cache), ARCH)
    assert r["status"] == "build.no_sources", r


@pytest.mark.parametrize("cuda,has", [
    (["__global__ void k(float *x) { x[0] = 1; }"], True),
    ("template <int N> __global__\nvoid k() {}", True),
    (["// __global__ void k() {}\nint f() { return 1; }"], False),
    (["/* __global__\n */ int f();", "int g();"], False),
    (["void my__global__thing();"], False),
    ([], False),
])
def test_defines_kernel_is_kernelbenchs_cuda_impl(cuda: Any, has: bool) -> None:
    assert tb.defines_kernel([{"name": "m", "cpp_sources": ["int h();"],
                               "cuda_sources": cuda}]) is has


def test_kernelbench_profile_needs_a_kernel(cache: Path) -> None:
    """C++ that only calls PyTorch builds under cuda-agent (its symbols are judged later) but is
    no CUDA kernel under kernelbench; the message says so."""
    spec = light_spec("no_kernel")
    r = tb.build_inline([spec], str(cache), ARCH, profile="kernelbench")
    assert r["status"] == "build.no_sources" and "no CUDA kernel" in r["message"], r
    assert "__global__" in r["message"]


@pytest.mark.parametrize("flags", [
    {"extra_cflags": ["-wrapper", "/bin/sh,-c,touch {marker}"]},
    {"extra_cflags": ["-wrapper /bin/sh,-c,touch {marker}"]},  # split like torch's ninja file
    {"extra_cuda_cflags": ["-Xcompiler=-fplugin={marker}"]},
    {"extra_ldflags": ["-Wl,-plugin,{marker}"]},
    {"extra_cflags": ["-o{marker}"]},
    {"extra_cflags": ["@{marker}"]},
])
def test_inline_refuses_dangerous_flags(cache: Path, tmp_path: Path,
                                        flags: dict[str, list[str]]) -> None:
    marker = tmp_path / "pwned"
    kwargs = {k: [f.format(marker=marker) for f in v] for k, v in flags.items()}
    spec = tb.inline_spec(name="evil", cpp_sources="int x;", cuda_sources="int y;", **kwargs)
    r = tb.build_inline([spec], str(cache), ARCH)
    assert r["status"] == "build.error" and "not allowed" in r["message"], r
    assert r["units_compiled"] == 0 and not marker.exists()


def test_inline_ignores_relative_include_paths(capfd: pytest.CaptureFixture[str]) -> None:
    spec = tb.inline_spec(name="inc", cpp_sources="int x;",
                          extra_include_paths=["relative/dir", "/nonexistent/dir", "/usr/include"])
    module = tb._inline_module(0, spec, 1)
    assert module.includes == ["/usr/include"]
    err = capfd.readouterr().err
    assert "relative/dir" in err and "/nonexistent/dir" in err


def test_inline_sources_match_load_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's load_inline writes its files (its build step stubbed); ours are byte-identical."""
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "_jit_compile", lambda *a, **k: None)
    monkeypatch.setattr(cpp_extension, "remove_extension_h_precompiler_headers", lambda: None)
    cases: list[dict[str, Any]] = [
        {"cpp_sources": "int f();", "cuda_sources": ["__global__ void k() {}", "int f();"],
         "functions": ["f"]},
        {"cpp_sources": ["int f();", "int g();"], "functions": {"f": "doc f", "g": "doc g"},
         "with_pytorch_error_handling": False},
        {"cpp_sources": "int f();", "cuda_sources": "int g();", "no_implicit_headers": True,
         "functions": "f"},
        {"cpp_sources": "int f();"},
    ]
    for i, case in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        torch_args = {k: (list(v) if isinstance(v, list) else v) for k, v in case.items()}
        cpp_extension.load_inline(name=f"m{i}", build_directory=str(d), **torch_args)
        ours = tb.inline_sources(tb.inline_spec(name=f"m{i}", **case))
        theirs = {p.name: p.read_text() for p in d.iterdir() if p.suffix in (".cpp", ".cu")}
        assert ours == theirs, case


def test_spec_key_depends_on_the_spec_only() -> None:
    spec = tb.inline_spec(**INLINE_KWARGS)
    reordered = dict(reversed(list(spec.items())))
    assert list(reordered) != list(spec)
    assert tb.spec_key(reordered) == tb.spec_key(spec)
    assert re.fullmatch(r"[0-9a-f]{64}", tb.spec_key(spec))
    assert tb.inline_spec(**spec) == spec  # a spec is its own normal form
    assert json.loads(json.dumps(spec)) == spec
    changed = tb.inline_spec(**{**INLINE_KWARGS, "cpp_sources": INLINE_KWARGS["cpp_sources"] + " "})
    assert tb.spec_key(changed) != tb.spec_key(spec)
    assert tb.spec_key(tb.inline_spec(**{**INLINE_KWARGS, "name": "other"})) != tb.spec_key(spec)


def test_inline_spec_normalizes() -> None:
    spec = tb.inline_spec("n", "a", "b", functions=["f", "g"], extra_cflags="-O2",
                          build_directory="/x", verbose=True)
    assert spec == {
        "name": "n", "cpp_sources": ["a"], "cuda_sources": ["b"],
        "functions": {"f": "f", "g": "g"}, "extra_cflags": ["-O2"], "extra_cuda_cflags": [],
        "extra_ldflags": [], "extra_include_paths": [], "with_cuda": None,
        "with_pytorch_error_handling": True, "no_implicit_headers": False,
    }


@pytest.mark.parametrize("kwargs", [
    {"name": "1bad", "cpp_sources": "x"},
    {"name": "a-b", "cpp_sources": "x"},
    {"name": 3, "cpp_sources": "x"},
    {"name": "n", "cpp_sources": 5},
    {"name": "n", "cpp_sources": ["x", None]},
    {"name": "n", "cpp_sources": "x", "cuda_sources": {"a": 1}},
    {"name": "n", "cpp_sources": "x", "functions": 3},
    {"name": "n", "cpp_sources": "x", "functions": ["f(); evil"]},
    {"name": "n", "cpp_sources": "x", "functions": {"f": 1}},
    {"name": "n", "cpp_sources": "x", "extra_cflags": [1]},
    {"name": "n", "cpp_sources": "x", "extra_ldflags": ["-l\0x"]},
    {"name": "n", "cpp_sources": "x", "with_cuda": "yes"},
    {"name": "n", "cpp_sources": "x", "no_implicit_headers": 1},
    {"name": "n", "cpp_sources": ["x"] * 65},
    {"name": "n", "cpp_sources": "x" * (4 << 20)},
    {"name": "n", "cpp_sources": ["x" * (1 << 20)] * 5},
    {"name": "n", "cpp_sources": "\ud800"},
    {"name": "n", "cpp_sources": "x", "sycl_sources": "y"},
    {"name": "n", "cpp_sources": "x", "is_python_module": False},
])
def test_inline_spec_rejects(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as info:
        tb.inline_spec(**kwargs)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_build_inline_reports_bad_specs(cache: Path) -> None:
    for bad in ({"name": "n", "cpp_sources": 5}, {"name": "n", "unknown": 1}, "text"):
        r = tb.build_inline([bad], str(cache), ARCH)  # type: ignore[list-item]
        assert r["status"] == "build.error" and r["modules"] == [], r


def test_api_rejects_bad_arguments(cache: Path) -> None:
    for arch in ("sm90", "compute_90", "sm_90b", "90"):
        with pytest.raises(ValueError):
            tb.build_workdir(str(FIXTURES / "workdir"), str(cache), arch)
    with pytest.raises(ValueError):
        tb.build_workdir(str(FIXTURES / "workdir"), str(cache), ARCH, jobs=-1)
    with pytest.raises(ValueError):
        tb.build_workdir(str(FIXTURES / "workdir"), str(cache), ARCH, timeout_s=0)


def test_error_lines_normalized() -> None:
    output = (
        "In file included from main.cpp:2:\n"
        "/tmp/d/0/main.cpp:7:12: error: 'y' was not declared in this scope\n"
        "    7 | return y; // error here\n"
        "kernels/../k.h:1:10: fatal error: nope.h: No such file or directory\n"
        'kernels/a.cu(12): error: expected a ";"\n'
        'kernels/a.cu(13): error #20-D: identifier "q" is undefined\n'
        "1 error detected in the compilation of \"kernels/a.cu\".\n"
        "collect2: error: ld returned 1 exit status\n"
        "/usr/bin/ld: cannot find -lfoo: No such file or directory\n")
    assert tb._error_lines(output, [("/tmp/d/0/", "")]) == [
        "main.cpp:7: error: 'y' was not declared in this scope",
        "k.h:1: error: nope.h: No such file or directory",
        'kernels/a.cu:12: error: expected a ";"',
        'kernels/a.cu:13: error: identifier "q" is undefined',
        "collect2: error: ld returned 1 exit status",
        "/usr/bin/ld: cannot find -lfoo: No such file or directory",
    ]
    assert tb._error_lines("something odd\n\nhappened\n", []) == ["something odd", "happened"]
    assert len(tb._error_lines("a.c:1:1: error: x\n" * 5 + "".join(
        f"a.c:{i}:1: error: x\n" for i in range(100)), [])) == tb.MAX_ERRORS


# ---- CLI ----------------------------------------------------------------------------------------

def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    return subprocess.run([sys.executable, "-m", "cuda_agent_bridge.torch_build", *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("args", [
    [],
    ["workdir", "d", "--cache", "c"],
    ["workdir", "d", "--cache", "c", "--arch", "sm90"],
    ["workdir", "d", "--cache", "c", "--arch", "sm_90", "--jobs", "-1"],
    ["workdir", "d", "--cache", "c", "--arch", "sm_90", "--timeout", "x"],
    ["nothing", "d", "--cache", "c", "--arch", "sm_90"],
])
def test_cli_usage_errors(args: list[str]) -> None:
    out = cli(*args)
    assert out.returncode == 2, out
    assert out.stdout == ""


def test_cli_prints_one_json_line(cpu_build: dict[str, Any], cache: Path) -> None:
    out = cli("workdir", str(FIXTURES / "workdir"), "--cache", str(cache), "--arch", ARCH)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and out.stdout.endswith("\n")
    report = json.loads(lines[0])
    assert (report["status"], report["cached"]) == ("ok", True)
    assert report["modules"] == cpu_build["modules"]


def test_cli_inline_reports(tmp_path: Path, cache: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = cli("inline", str(bad), "--cache", str(cache), "--arch", ARCH)
    assert out.returncode == 0 and json.loads(out.stdout)["status"] == "build.internal", out
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"specs": ["x" * (9 << 20)]}))
    out = cli("inline", str(big), "--cache", str(cache), "--arch", ARCH)
    assert out.returncode == 0 and json.loads(out.stdout)["status"] == "build.error", out
    err = tmp_path / "err.json"
    err.write_text(json.dumps({"specs": [tb.inline_spec(name="broken", cpp_sources="int f( {",
                                                        no_implicit_headers=True)]}))
    out = cli("inline", str(err), "--cache", str(cache), "--arch", ARCH)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "build.error" and report["errors"][0].startswith("main.cpp:1: ")
