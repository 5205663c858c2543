"""``python -m cuda_agent_bridge.torch_build``: builds PyTorch C++/CUDA extensions of
PyTorch-format candidates (docs/torch-build.md) without running any candidate code.

Contract: ``build_workdir`` builds a CUDA-Agent workdir (``binding.cpp``, ``binding_registry.h``,
``kernels/*.cu|*.cpp``) into one module ``cuda_extension``; ``build_inline`` builds the specs of
``load_inline`` calls (``inline_spec`` normalizes the call's arguments, ``spec_key`` names the
spec). Each translation unit is compiled once into a content-addressed object cache
(``<cache>/torch/obj/<key>.o``) by ``c++`` or ``nvcc`` with torch's own flags, in parallel, and the
objects are linked into ``<cache>/torch/lib/<linkkey>/<name>.so``; both are written under a temp
name and renamed, so concurrent builders are safe. Only compilers run: the built library is never
loaded here. Before building a workdir, its ``model_new.py`` goes through the static check
(``static_check``, docs/torch-rules.md): a refused workdir is not compiled and its report has
status ``refused`` with the reason ``code`` (``hack.harness_tampering``, ``hack.torch_compute``,
``candidate.load_failed``). The answer is a report dict (``status``, ``message``, ``errors``,
counts, ``hash``, ``modules``, ``code``, ``notes``, ``torch_lib``); the CLI prints it as one JSON
line on stdout.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

MAX_SOURCE_BYTES = 4 << 20  # one inline spec (all its strings) / one workdir unit
MAX_LIST = 64  # entries of one list in a spec
# A workdir is built with these (the native build's optimization); load_inline specs get only
# their own extra_cflags/extra_cuda_cflags, as torch's load_inline does.
WORKDIR_CFLAGS = ("-O3",)
WORKDIR_CUDA_CFLAGS = ("-O3", "--use_fast_math")
MAX_UNITS = 64  # translation units of one workdir
MAX_SPECS = 64  # specs of one inline build
MAX_SPECS_FILE = 8 << 20
MAX_HEADERS = 1024  # headers of one workdir (searched recursively)
MAX_HEADER_BYTES = 16 << 20
MAX_WALK_ENTRIES = 10000
MAX_ERRORS = 20
MAX_ERROR_LINE = 500
MAX_OUTPUT = 1 << 20  # compiler output read back per command
HEADER_EXTS = (".h", ".hpp", ".cuh", ".inl")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ARCH_RE = re.compile(r"sm_([0-9]+a?)\Z")
WORKDIR_MODULE = "cuda_extension"
CACHE_SUBDIR = "torch"
# load_inline parameters that change nothing in what is built.
_IGNORED_ARGS = ("build_directory", "verbose", "keep_intermediates", "use_pch")
# Environment variables that change what gcc/nvcc produce: part of every unit's key.
_KEY_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX",
            "COMPILER_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")
# Flag words refused in extra flags (checked on each word and on its ','/'='-separated parts):
# they run other programs, load code into the compiler or linker, or write to chosen paths.
# Defence in depth against candidate-chosen flags, not a sandbox (docs/torch-build.md).
_DENY_EXACT = frozenset({
    "-wrapper", "-ccbin", "--compiler-bindir", "--ld-path", "-plugin", "--plugin", "-dumpdir",
    "--output-file", "-odir", "--output-directory", "-keep-dir", "--keep-dir", "-objtemp",
    "--dependency-output", "--generate-dependencies-with-compile",
    "--generate-nonsystem-dependencies-with-compile", "-MD", "-MMD", "--run", "-run",
})
_DENY_PREFIX = ("-fplugin", "-B", "-specs", "--specs", "@", "-o", "-M", "-save-temps",
                "--save-temps", "-fprofile-generate", "-fprofile-dir", "-fprofile-update",
                "-fdump-", "--plugin-opt", "-plugin-opt")
_ALLOW = frozenset({"-Bstatic", "-Bdynamic", "-Bsymbolic", "-Bsymbolic-functions"})


class BuildFailure(Exception):
    """Ends a build with a report of this status."""

    def __init__(self, status: str, message: str, errors: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = list(errors)


# ---- specs --------------------------------------------------------------------------------------

def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8 text") from None
    return value


def _text_list(value: Any, what: str, default_empty: bool = True) -> list[str]:
    if value is None and default_empty:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a string or a list of strings, "
                         f"not {type(value).__name__}")
    if len(value) > MAX_LIST:
        raise ValueError(f"{what} has {len(value)} entries (at most {MAX_LIST})")
    return [_text(v, f"{what}[{i}]") for i, v in enumerate(value)]


def _flag_list(value: Any, what: str) -> list[str]:
    out = _text_list(value, what)
    for i, flag in enumerate(out):
        if "\0" in flag:
            raise ValueError(f"{what}[{i}] contains a NUL byte")
    return out


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value) or len(value) > 200:
        raise ValueError(f"{what} must be an identifier ([A-Za-z_][A-Za-z0-9_]*), "
                         f"not {str(value)[:80]!r}")
    return value


def _opt_bool(value: Any, what: str, allow_none: bool) -> bool | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, not {type(value).__name__}")
    return value


def inline_spec(name: Any, cpp_sources: Any = None, cuda_sources: Any = None,
                sycl_sources: Any = None, functions: Any = None, extra_cflags: Any = None,
                extra_cuda_cflags: Any = None, extra_sycl_cflags: Any = None,
                extra_ldflags: Any = None, extra_include_paths: Any = None,
                build_directory: Any = None, verbose: Any = False, with_cuda: Any = None,
                with_sycl: Any = None, is_python_module: Any = True,
                with_pytorch_error_handling: Any = True, keep_intermediates: Any = True,
                use_pch: Any = False, no_implicit_headers: Any = False) -> dict[str, Any]:
    """The JSON-able spec of a ``torch.utils.cpp_extension.load_inline`` call (same parameters
    and positions, same defaults). ValueError (one line) for anything torch would not build or
    this builder does not support, and for oversized input (untrusted data)."""
    del build_directory, verbose, keep_intermediates, use_pch  # change nothing that is built
    spec: dict[str, Any] = {
        "name": _name(name, "name"),
        "cpp_sources": _text_list(cpp_sources, "cpp_sources"),
        "cuda_sources": _text_list(cuda_sources, "cuda_sources"),
    }
    if _text_list(sycl_sources, "sycl_sources") or _text_list(extra_sycl_cflags,
                                                              "extra_sycl_cflags"):
        raise ValueError("SYCL sources are not supported")
    if _opt_bool(with_sycl, "with_sycl", True):
        raise ValueError("with_sycl=True is not supported")
    if not _opt_bool(is_python_module, "is_python_module", False):
        raise ValueError("is_python_module=False is not supported (the result must be a module)")
    funcs: dict[str, str] | None
    if functions is None:
        funcs = None
    elif isinstance(functions, (str, list, tuple)):
        names = _text_list(functions, "functions")
        funcs = {_name(f, "a function name"): f for f in names}
    elif isinstance(functions, dict):
        if len(functions) > MAX_LIST:
            raise ValueError(f"functions has {len(functions)} entries (at most {MAX_LIST})")
        funcs = {_name(k, "a function name"): _text(v, f"the docstring of {str(k)[:40]}")
                 for k, v in functions.items()}
    else:
        raise ValueError(f"functions must be a list or dict, not {type(functions).__name__}")
    spec["functions"] = funcs
    for key, value in (("extra_cflags", extra_cflags), ("extra_cuda_cflags", extra_cuda_cflags),
                       ("extra_ldflags", extra_ldflags),
                       ("extra_include_paths", extra_include_paths)):
        spec[key] = _flag_list(value, key)
    spec["with_cuda"] = _opt_bool(with_cuda, "with_cuda", True)
    spec["with_pytorch_error_handling"] = _opt_bool(with_pytorch_error_handling,
                                                    "with_pytorch_error_handling", False)
    spec["no_implicit_headers"] = _opt_bool(no_implicit_headers, "no_implicit_headers", False)
    size = len(_canonical(spec))
    if size > MAX_SOURCE_BYTES:
        raise ValueError(f"the sources and flags take {size} bytes (at most {MAX_SOURCE_BYTES})")
    return spec


def _canonical(spec: dict[str, Any]) -> bytes:
    return json.dumps(spec, sort_keys=True, separators=(",", ":")).encode("utf-8")


def spec_key(spec: dict[str, Any]) -> str:
    """sha256 hex of the spec's canonical JSON: depends on the spec only."""
    return hashlib.sha256(_canonical(spec)).hexdigest()


def inline_sources(spec: dict[str, Any]) -> dict[str, str]:
    """The files load_inline would write for this spec: ``main.cpp`` and, with CUDA sources,
    ``cuda.cu`` (its source generation, mirrored)."""
    cpp = list(spec["cpp_sources"])
    if not spec["no_implicit_headers"]:
        cpp.insert(0, "#include <torch/extension.h>")
    functions = spec["functions"]
    if functions is not None:
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for fname, doc in functions.items():
            if spec["with_pytorch_error_handling"]:
                cpp.append(f'm.def("{fname}", torch::wrap_pybind_function({fname}), "{doc}");')
            else:
                cpp.append(f'm.def("{fname}", {fname}, "{doc}");')
        cpp.append("}")
    files = {"main.cpp": "\n".join(cpp)}
    cuda = list(spec["cuda_sources"])
    if cuda:
        if not spec["no_implicit_headers"]:
            cuda[0:0] = ["#include <torch/types.h>", "#include <cuda.h>",
                         "#include <cuda_runtime.h>"]
        files["cuda.cu"] = "\n".join(cuda)
    return files


# ---- toolchain ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Torch:
    version: str
    include_cpu: tuple[str, ...]
    abi_flags: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    lib_dir: str


def _field(fields: list[bytes], value: str | bytes) -> None:
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    fields.append(len(data).to_bytes(8, "little") + data)


def _digest(parts: Sequence[str | bytes]) -> str:
    fields: list[bytes] = []
    for p in parts:
        _field(fields, p)
    return hashlib.sha256(b"".join(fields)).hexdigest()


def _torch_fresh() -> _Torch:
    import torch
    from torch.utils import cpp_extension as ce

    abi: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(ce, "_get_pybind11_abi_build_flags"):
            abi += list(ce._get_pybind11_abi_build_flags())
        if hasattr(ce, "_get_glibcxx_abi_build_flags"):
            abi += list(ce._get_glibcxx_abi_build_flags())
        else:
            abi.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    return _Torch(str(torch.__version__), tuple(_include_paths(False)), tuple(abi),
                  tuple(ce.COMMON_NVCC_FLAGS), str(ce.TORCH_LIB_PATH))


def _include_paths(cuda: bool) -> list[str]:
    from torch.utils import cpp_extension as ce

    try:
        paths = ce.include_paths(device_type="cuda" if cuda else "cpu")
    except TypeError:  # torch before 2.6: include_paths(cuda=...)
        paths = ce.include_paths(cuda=cuda)  # type: ignore[call-arg]
    return [str(p) for p in paths]


def _include_cuda_fresh() -> tuple[str, ...]:
    try:
        return tuple(_include_paths(True))
    except Exception as exc:
        raise BuildFailure("build.internal", f"torch has no CUDA include paths ({exc})") from exc


def _torch_ldflags_fresh(cuda: bool) -> tuple[str, ...]:
    """torch's own link flags for an extension module (``_prepare_ldflags``), or the same set
    written out where that private function is missing or changed its signature."""
    from torch.utils import cpp_extension as ce

    lib = str(ce.TORCH_LIB_PATH)
    prepare = getattr(ce, "_prepare_ldflags", None)
    if callable(prepare):
        args = {"extra_ldflags": [], "with_cuda": cuda, "with_sycl": False, "verbose": False,
                "is_standalone": False}
        try:
            params = inspect.signature(prepare).parameters
            if set(params) <= set(args):
                return tuple(str(f) for f in prepare(**{k: args[k] for k in params}))
        except Exception as exc:  # e.g. no CUDA_HOME: the fallback says so below
            print(f"torch_build: _prepare_ldflags failed ({exc}); using the default set",
                  file=sys.stderr)
    flags = [f"-L{lib}", "-lc10"] + (["-lc10_cuda"] if cuda else []) + ["-ltorch_cpu"]
    flags += (["-ltorch_cuda"] if cuda else []) + ["-ltorch", "-ltorch_python"]
    if cuda:
        home = getattr(ce, "CUDA_HOME", None)
        if not home:
            raise BuildFailure("build.internal", "CUDA_HOME is unknown: cannot link cudart")
        sub = "lib64" if os.path.isdir(os.path.join(home, "lib64")) else "lib"
        flags += [f"-L{os.path.join(home, sub)}", "-lcudart"]
    return tuple(flags)


# ---- what torch says, cached ---------------------------------------------------------------------
# Asking torch for its flags means importing it (seconds); the answers only change with the
# Python and the torch installation, so they are kept in <cache>/torch/facts/<key>.json, keyed
# by the interpreter and torch's version.py (found without importing torch). A cache hit then
# builds nothing and imports nothing.
_FACTS_DIR: list[str] = []  # set by _build: where the facts file lives


def _facts_key() -> str:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    origin = spec.origin if spec is not None and spec.origin else ""
    version_py = os.path.join(os.path.dirname(origin), "version.py")
    try:
        st = os.stat(version_py)
        with open(version_py, "rb") as f:
            stamp = f"{st.st_mtime_ns}:{st.st_size}:" + hashlib.sha256(f.read()).hexdigest()
    except OSError:
        stamp = "no-version-py"
    return _digest(["facts/1", os.path.realpath(sys.executable), sys.version, origin, stamp,
                    os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")])


def _facts_fresh() -> dict[str, Any]:
    t = _torch_fresh()
    facts: dict[str, Any] = {"version": t.version, "include_cpu": list(t.include_cpu),
                             "abi_flags": list(t.abi_flags), "nvcc_flags": list(t.nvcc_flags),
                             "lib_dir": t.lib_dir, "ldflags_cpu": list(_torch_ldflags_fresh(False))}
    for key, get in (("include_cuda", _include_cuda_fresh),
                     ("ldflags_cuda", lambda: _torch_ldflags_fresh(True))):
        try:
            facts[key] = list(get())
        except BuildFailure as exc:
            facts[key] = {"error": exc.message}
    return facts


@functools.lru_cache(maxsize=1)
def _facts() -> dict[str, Any]:
    path = os.path.join(_FACTS_DIR[-1], _facts_key() + ".json") if _FACTS_DIR else ""
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                cached = json.load(f)
            if isinstance(cached, dict) and "version" in cached:
                return cached
        except (OSError, ValueError):
            pass
    facts = _facts_fresh()
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(facts, f)
            os.replace(tmp, path)
        except OSError as exc:
            print(f"torch_build: cannot cache torch's flags ({exc})", file=sys.stderr)
    return facts


def _facts_list(key: str) -> tuple[str, ...]:
    v = _facts()[key]
    if isinstance(v, dict):
        raise BuildFailure("build.internal", str(v.get("error", f"torch gave no {key}")))
    return tuple(str(x) for x in v)


def _torch() -> _Torch:
    f = _facts()
    return _Torch(str(f["version"]), _facts_list("include_cpu"), _facts_list("abi_flags"),
                  _facts_list("nvcc_flags"), str(f["lib_dir"]))


def _include_cuda() -> tuple[str, ...]:
    return _facts_list("include_cuda")


def _torch_ldflags(cuda: bool) -> tuple[str, ...]:
    return _facts_list("ldflags_cuda" if cuda else "ldflags_cpu")


def _which(name: str) -> str | None:
    if "/" in name:
        return name if os.access(name, os.X_OK) and os.path.isfile(name) else None
    return shutil.which(name)


def _cxx() -> str:
    want = os.environ.get("CXX") or "c++"
    found = _which(want)
    if found is None:
        raise BuildFailure("build.internal", f"C++ compiler {want!r} not found (set CXX)")
    return found


def _nvcc() -> str:
    want = os.environ.get("NVCC")
    if want:
        found = _which(want)
    else:
        found = shutil.which("nvcc") or _which("/usr/local/cuda/bin/nvcc")
    if found is None:
        raise BuildFailure("build.internal", "nvcc not found (set NVCC or put nvcc on PATH)")
    return found


@functools.lru_cache(maxsize=8)
def _version(compiler: str) -> str:
    """``COMPILER --version``, once per process and compiler."""
    try:
        out = subprocess.run([compiler, "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildFailure("build.internal", f"{compiler} --version failed: {exc}") from exc
    return out.stdout.decode("utf-8", "replace")


def _env_key() -> str:
    return "\n".join(f"{k}={os.environ[k]}" for k in _KEY_ENV if k in os.environ)


# ---- inputs -------------------------------------------------------------------------------------

@dataclass
class _Unit:
    rel: str  # path relative to the module's source directory (what the compiler sees)
    data: bytes
    cuda: bool
    key: str = ""
    argv: list[str] = field(default_factory=list)  # without "-o OUT"


@dataclass
class _Module:
    name: str
    key: str | None
    label: str  # prefix of messages ("" or "spec 1 (name): ")
    units: list[_Unit]
    headers: list[tuple[str, bytes]]
    cuda: bool
    includes: list[str]  # user -I directories, relative to src_dir or absolute
    cflags: list[str]
    cuda_cflags: list[str]
    ldflags: list[str]
    src_dir: str = ""
    link_key: str = ""
    link_argv: list[str] = field(default_factory=list)
    library: str = ""


def _read_regular(path: str, rel: str, cap: int) -> bytes:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise BuildFailure("build.error", f"{rel} is not a regular file")
        if st.st_size > cap:
            raise BuildFailure("build.error", f"{rel} has {st.st_size} bytes (at most {cap})")
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise BuildFailure("build.error", f"cannot read {rel}: {exc.strerror}") from exc
    if len(data) > cap:
        raise BuildFailure("build.error", f"{rel} has more than {cap} bytes")
    return data


def _workdir_module(directory: str) -> _Module:
    if not os.path.isdir(directory):
        raise BuildFailure("build.no_sources", f"workdir {directory} is not a directory")
    missing = [n for n in ("binding.cpp", "binding_registry.h")
               if not os.path.isfile(os.path.join(directory, n))]
    if missing:
        raise BuildFailure("build.no_sources", f"workdir has no {' or '.join(missing)}")
    rels: set[str] = set()
    for sub in ("", "kernels"):
        d = os.path.join(directory, sub)
        if not os.path.isdir(d):
            continue
        for entry in os.listdir(d):
            if entry.endswith((".cu", ".cpp")):
                rels.add(os.path.join(sub, entry) if sub else entry)
    rels.discard("binding.cpp")
    if not rels:
        raise BuildFailure("build.no_sources",
                           "workdir has no kernel sources (*.cu or *.cpp in the workdir or "
                           "kernels/ besides binding.cpp)")
    ordered = ["binding.cpp", *sorted(rels)]
    odd = [r for r in ordered if os.path.basename(r).startswith("-")]
    if odd:  # it would reach the compiler as an option
        raise BuildFailure("build.error", f"source file names may not start with '-': {odd[0]}")
    if len(ordered) > MAX_UNITS:
        raise BuildFailure("build.error", f"workdir has {len(ordered)} translation units "
                                          f"(at most {MAX_UNITS})")
    units = [_Unit(r, _read_regular(os.path.join(directory, r), r, MAX_SOURCE_BYTES),
                   r.endswith(".cu")) for r in ordered]
    headers = _workdir_headers(directory)
    return _Module(WORKDIR_MODULE, None, "", units, headers, any(u.cuda for u in units),
                   [".", "kernels"], list(WORKDIR_CFLAGS), list(WORKDIR_CUDA_CFLAGS), [])


def _workdir_headers(directory: str) -> list[tuple[str, bytes]]:
    """Every header under the workdir (recursively, symlinked directories not followed),
    sorted by relative path."""
    found: list[tuple[str, bytes]] = []
    seen = total = 0
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        seen += len(dirs) + len(files)
        if seen > MAX_WALK_ENTRIES:
            raise BuildFailure("build.error",
                               f"workdir has more than {MAX_WALK_ENTRIES} files and directories")
        for f in files:
            if not f.endswith(HEADER_EXTS):
                continue
            rel = os.path.relpath(os.path.join(root, f), directory)
            data = _read_regular(os.path.join(root, f), rel, MAX_HEADER_BYTES)
            found.append((rel, data))
            total += len(data)
            if len(found) > MAX_HEADERS or total > MAX_HEADER_BYTES:
                raise BuildFailure("build.error", f"workdir headers exceed {MAX_HEADERS} files "
                                                  f"or {MAX_HEADER_BYTES} bytes")
    found.sort()
    return found


def _inline_module(index: int, raw: Any, count: int) -> _Module:
    label = f"spec {index}: " if count > 1 else ""
    if not isinstance(raw, dict):
        raise BuildFailure("build.error", f"{label}a spec must be an object")
    try:
        spec = inline_spec(**raw)
    except (TypeError, ValueError) as exc:
        raise BuildFailure("build.error", f"{label}bad spec: {exc}") from exc
    if count > 1:
        label = f"spec {index} ({spec['name']}): "
    if not spec["cpp_sources"] and not spec["cuda_sources"]:
        raise BuildFailure("build.no_sources", f"{label}spec {spec['name']} has no cpp_sources "
                                               "and no cuda_sources")
    includes = []
    for path in spec["extra_include_paths"]:
        path = path.strip()
        if os.path.isabs(path) and os.path.isdir(path):
            includes.append(path)
        else:
            print(f"torch_build: {label}ignoring extra include path {path!r} (not an existing "
                  "absolute directory)", file=sys.stderr)
    units = [_Unit(n, text.encode("utf-8"), n.endswith(".cu"))
             for n, text in inline_sources(spec).items()]
    cuda = bool(spec["cuda_sources"]) or spec["with_cuda"] is True
    return _Module(spec["name"], spec_key(spec), label, units, [], cuda, includes,
                   _split_flags(spec["extra_cflags"], label),
                   _split_flags(spec["extra_cuda_cflags"], label),
                   _split_flags(spec["extra_ldflags"], label))


def _split_flags(flags: list[str], label: str) -> list[str]:
    """Each flag split as torch's ninja file (a shell) splits it, refused words checked."""
    out: list[str] = []
    for flag in flags:
        try:
            words = shlex.split(flag.strip())
        except ValueError as exc:
            raise BuildFailure("build.error", f"{label}bad flag {flag[:80]!r}: {exc}") from exc
        for word in words:
            for part in [word, *re.split(r"[,=]", word)]:
                if part in _ALLOW:
                    continue
                if part in _DENY_EXACT or part.startswith(_DENY_PREFIX):
                    raise BuildFailure("build.error", f"{label}flag {word[:80]!r} is not allowed "
                                                      "(it runs programs, loads plugins or "
                                                      "writes files)")
        out += words
    return out


# ---- commands -----------------------------------------------------------------------------------

def _gencode(arch: str) -> str:
    m = ARCH_RE.match(arch)
    if m is None:
        raise ValueError(f"arch must look like sm_90 or sm_90a, not {arch!r}")
    return f"-gencode=arch=compute_{m.group(1)},code=sm_{m.group(1)}"


def _plan(module: _Module, arch: str) -> None:
    """Each unit's command line (without the output) and key; the module's link command."""
    t = _torch()
    system = list(_include_cuda() if module.cuda else t.include_cpu)
    system.append(sysconfig.get_paths()["include"])
    common = [f"-DTORCH_EXTENSION_NAME={module.name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
              *t.abi_flags, *[f"-I{d}" for d in module.includes]]
    for d in system:
        common += ["-isystem", d]
    cxx = _cxx()
    cflags = [cxx, *common, "-fPIC", "-std=c++17", *module.cflags]
    headers = _digest([x for rel, data in module.headers for x in (rel, data)])
    base = [t.version, sys.version, _env_key(), headers]
    for u in module.units:
        if u.cuda:
            nvcc = _nvcc()
            argv = [nvcc, *common, *t.nvcc_flags, _gencode(arch), "--compiler-options", "-fPIC",
                    *module.cuda_cflags]
            if not any(f.startswith("-std=") or f == "-std" for f in argv):
                argv.append("-std=c++17")
            versions = [_version(nvcc), _version(cxx)]
        else:
            argv = list(cflags)
            versions = [_version(cxx)]
        u.argv = [*argv, "-c", u.rel]
        u.key = _digest(["unit", u.data, "\0".join(u.argv), *versions, *base])
    link = ["-shared", *module.ldflags, *_torch_ldflags(module.cuda), f"-Wl,-rpath,{t.lib_dir}"]
    module.link_argv = [cxx, *link]
    module.link_key = _digest(["link", module.name, *[u.key for u in module.units],
                               "\0".join(module.link_argv), _version(cxx), t.version])


@dataclass
class _Run:
    status: str  # ok, failed, timeout, skipped
    output: str = ""
    rc: int = 0


def _run(argv: list[str], cwd: str, deadline: float, stop: threading.Event) -> _Run:
    """One compiler command in its own process group (killed whole at the deadline); output
    (stdout and stderr together) read back up to MAX_OUTPUT bytes."""
    if stop.is_set():
        return _Run("skipped")
    left = deadline - time.monotonic()
    if left <= 0:
        return _Run("timeout")
    env = dict(os.environ, LC_ALL="C")
    for k in ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"):
        env.pop(k, None)
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            return _Run("failed", f"cannot run {argv[0]}: {exc.strerror}", -1)
        try:
            rc = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return _Run("timeout")
        out.seek(0)
        text = out.read(MAX_OUTPUT).decode("utf-8", "replace")
    return _Run("ok" if rc == 0 else "failed", text, rc)


_GCC_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)?\s*"
                       r"(?:fatal error|error):\s*(?P<msg>.*)$")
_NVCC_DIAG = re.compile(r"^(?P<file>\S.*?)\((?P<line>\d+)\):\s*(?:catastrophic\s+)?"
                        r"error(?:\s*#[\w-]+)?:\s*(?P<msg>.*)$")
_OTHER_ERROR = re.compile(r"\berror\b|\bfatal\b|cannot find|undefined reference", re.IGNORECASE)
_ERROR_COUNT = re.compile(r"^\d+ errors? detected in the compilation")


def _error_lines(output: str, replace: Sequence[tuple[str, str]]) -> list[str]:
    """The diagnostics of a failed command as ``file:line: error: message`` (gcc's
    ``file:line:col:`` and nvcc's ``file(line):`` alike), other error lines as they are."""
    found: list[str] = []
    for raw in output.splitlines():
        line = raw.rstrip()
        for old, new in replace:
            line = line.replace(old, new)
        if not line or line[0].isspace() or _ERROR_COUNT.match(line):
            continue
        m = _GCC_DIAG.match(line) or _NVCC_DIAG.match(line)
        if m is not None:
            name = m.group("file")
            if not os.path.isabs(name):
                name = os.path.normpath(name)
            line = f"{name}:{m.group('line')}: error: {m.group('msg')}"
        elif not _OTHER_ERROR.search(line):
            continue
        line = line[:MAX_ERROR_LINE]
        if line not in found:
            found.append(line)
        if len(found) >= MAX_ERRORS:
            break
    if not found:  # no recognizable error line: the first lines say what happened
        found = [ln[:MAX_ERROR_LINE] for ln in output.splitlines() if ln.strip()][:MAX_ERRORS]
    return found


# ---- the build ----------------------------------------------------------------------------------

def _check_args(cache_dir: str, arch: str, jobs: int, timeout_s: float) -> None:
    _gencode(arch)
    if not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs must be an integer >= 0, not {jobs!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, not {timeout_s!r}")
    if not cache_dir:
        raise ValueError("cache_dir must not be empty")


def _report(status: str, message: str, start: float, arch: str, **more: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "status": status, "message": " ".join(message.split())[:4096],
        "errors": more.get("errors", []), "seconds": round(time.monotonic() - start, 3),
        "units_compiled": more.get("compiled", 0), "units_cached": more.get("cached", 0),
        "cached": more.get("all_cached", False), "arch": arch, "hash": more.get("hash", ""),
        "modules": more.get("modules", []), "code": more.get("code", ""),
        "notes": more.get("notes", []), "torch_lib": more.get("torch_lib", ""),
    }
    return report


class _Builder:
    def __init__(self, cache_dir: str, arch: str, jobs: int, timeout_s: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.timeout_s = timeout_s
        self.arch = arch
        self.jobs = jobs or os.cpu_count() or 1
        root = os.path.join(os.path.abspath(cache_dir), CACHE_SUBDIR)
        self.obj_dir = os.path.join(root, "obj")
        self.lib_dir = os.path.join(root, "lib")
        self.stop = threading.Event()
        self.compiled = 0
        self.cached = 0
        self.linked = 0
        self.lock = threading.Lock()
        self.replace: list[tuple[str, str]] = []

    def build(self, modules: list[_Module], work: str) -> dict[str, Any]:
        os.makedirs(self.obj_dir, exist_ok=True)
        os.makedirs(self.lib_dir, exist_ok=True)
        for i, m in enumerate(modules):
            m.src_dir = os.path.join(work, str(i))
            for rel, data in [*[(u.rel, u.data) for u in m.units], *m.headers]:
                path = os.path.join(m.src_dir, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
            self.replace.append((m.src_dir + os.sep, ""))
            self.replace.append((m.src_dir, "."))
            _plan(m, self.arch)
        todo: dict[str, tuple[_Module, _Unit]] = {}
        for m in modules:
            for u in m.units:
                if os.path.isfile(self._obj(u.key)) or u.key in todo:
                    self.cached += 1
                else:
                    todo[u.key] = (m, u)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            results = list(pool.map(lambda mu: self._compile(*mu), todo.values()))
            failure = next((r for r in results if r is not None), None)
            if failure is not None:
                raise failure
            links = list(pool.map(self._link, modules))
        failure = next((r for r in links if r is not None), None)
        if failure is not None:
            raise failure
        hashed = _digest([m.link_key for m in modules])[:32]
        listed = [{"name": m.name, "key": m.key, "library": m.library} for m in modules]
        return _report("ok", "", self.start, self.arch, compiled=self.compiled,
                       cached=self.cached, all_cached=self.compiled == 0 and self.linked == 0,
                       hash=hashed, modules=listed, torch_lib=_torch().lib_dir)

    def _obj(self, key: str) -> str:
        return os.path.join(self.obj_dir, key + ".o")

    def _fail(self, m: _Module, what: str, run: _Run,
              replace: Sequence[tuple[str, str]] = ()) -> BuildFailure:
        self.stop.set()
        if run.status == "timeout":
            return BuildFailure("build.timeout", f"{m.label}{what} did not finish within the "
                                                 f"{self.timeout_s:g} s build time limit")
        errors = _error_lines(run.output, [*replace, *self.replace])
        print(f"torch_build: {m.label}{what} failed (exit {run.rc}):\n{run.output[:65536]}",
              file=sys.stderr)
        first = f": {errors[0]}" if errors else f" (exit {run.rc})"
        return BuildFailure("build.error", f"{m.label}{what} failed{first}", errors)

    def _compile(self, m: _Module, u: _Unit) -> BuildFailure | None:
        final = self._obj(u.key)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{u.key[:16]}-", suffix=".o", dir=self.obj_dir)
        os.close(fd)
        try:
            run = _run([*u.argv, "-o", tmp], m.src_dir, self.deadline, self.stop)
            if run.status == "skipped":
                return None
            if run.status != "ok":
                return self._fail(m, f"compiling {u.rel}", run,
                                  [(tmp, u.rel.rsplit(".", 1)[0] + ".o")])
            os.replace(tmp, final)
            with self.lock:
                self.compiled += 1
            return None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _link(self, m: _Module) -> BuildFailure | None:
        final_dir = os.path.join(self.lib_dir, m.link_key)
        m.library = os.path.join(final_dir, m.name + ".so")
        if os.path.isfile(m.library):
            return None
        tmp_dir = tempfile.mkdtemp(prefix=f".tmp-{m.link_key[:16]}-", dir=self.lib_dir)
        try:
            out = os.path.join(tmp_dir, m.name + ".so")
            objs = [self._obj(u.key) for u in m.units]
            argv = [m.link_argv[0], *objs, *m.link_argv[1:], "-o", out]
            run = _run(argv, tmp_dir, self.deadline, threading.Event())
            if run.status != "ok":
                return self._fail(m, f"linking {m.name}", run)
            try:
                os.rename(tmp_dir, final_dir)
            except OSError:
                if not os.path.isfile(m.library):  # not a concurrent builder's copy
                    raise
            with self.lock:
                self.linked += 1
            return None
        finally:
            if os.path.isdir(tmp_dir):
                shutil.rmtree(tmp_dir, ignore_errors=True)


def _build(make_modules: Any, cache_dir: str, arch: str, jobs: int,
           timeout_s: float, replace: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    _check_args(cache_dir, arch, jobs, timeout_s)
    _FACTS_DIR.append(os.path.join(cache_dir, "torch", "facts"))
    builder = _Builder(cache_dir, arch, jobs, timeout_s)
    builder.replace += replace
    try:
        modules = make_modules()
        with tempfile.TemporaryDirectory(prefix="cuda-agent-torch-build-") as work:
            return builder.build(modules, work)
    except BuildFailure as exc:
        return _report(exc.status, exc.message, builder.start, arch, errors=exc.errors,
                       compiled=builder.compiled, cached=builder.cached)
    except Exception as exc:  # a bug or a broken environment: still one report
        print(f"torch_build: internal error: {exc!r}", file=sys.stderr)
        return _report("build.internal", f"{type(exc).__name__}: {exc}", builder.start, arch,
                       compiled=builder.compiled, cached=builder.cached)


def build_workdir(directory: str, cache_dir: str, arch: str, jobs: int = 0,
                  timeout_s: float = 300, profile: str = "cuda-agent") -> dict[str, Any]:
    """Checks the workdir's Python (static_check, under the rules profile) and, when it passes,
    builds the workdir into the module ``cuda_extension``; returns the report."""
    from . import static_check

    _check_args(cache_dir, arch, jobs, timeout_s)
    if profile not in static_check.PROFILES:
        raise ValueError(f"profile must be one of {', '.join(static_check.PROFILES)}, "
                         f"not {profile!r}")
    directory = os.path.abspath(directory)
    start = time.monotonic()
    verdict = static_check.Verdict("ok")
    try:  # no model_new.py (or no workdir): the build and the runner say so, as before
        if os.path.exists(os.path.join(directory, "model_new.py")):
            verdict = static_check.check_workdir(directory, profile)
    except static_check.CheckerError as exc:
        return _report("build.internal", f"the static check cannot run: {exc}", start, arch)
    if verdict.status != "ok":
        data = verdict.to_json(profile, 0.0)
        return _report("refused", verdict.message, start, arch, code=verdict.code,
                       errors=data["errors"], notes=verdict.notes)
    report = _build(lambda: [_workdir_module(directory)], cache_dir, arch, jobs, timeout_s,
                    [(directory + os.sep, ""), (directory, ".")])
    report["notes"] = verdict.notes[:MAX_ERRORS]
    return report


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_KERNEL = re.compile(r"\b__global__\b")


def defines_kernel(specs: list[dict[str, Any]]) -> bool:
    """Whether some spec's CUDA sources define a kernel (``__global__`` outside comments):
    KernelBench's cuda_impl check, which the kernelbench rules require."""
    for spec in specs:
        sources = spec.get("cuda_sources") if isinstance(spec, dict) else None
        if isinstance(sources, str):
            sources = [sources]
        for text in sources if isinstance(sources, list) else []:
            if isinstance(text, str) and _KERNEL.search(_COMMENTS.sub(" ", text)):
                return True
    return False


def build_inline(specs: list[dict[str, Any]], cache_dir: str, arch: str, jobs: int = 0,
                 timeout_s: float = 300, profile: str = "cuda-agent") -> dict[str, Any]:
    """Builds each load_inline spec into the module of its name; returns the report (its
    ``modules`` in the order of ``specs``). Under the kernelbench profile the sources must
    define a CUDA kernel (``defines_kernel``), else ``build.no_sources``."""
    def modules() -> list[_Module]:
        if not isinstance(specs, list):
            raise BuildFailure("build.internal", "specs must be a list")
        if not specs:
            raise BuildFailure(
                "build.no_sources",
                "the candidate builds no CUDA code: no torch.utils.cpp_extension.load_inline "
                "call ran while model_new.py was imported and ModelNew was constructed (a "
                "KernelBench candidate must compile its kernels with load_inline; one that only "
                "calls PyTorch is not a CUDA kernel)")
        if len(specs) > MAX_SPECS:
            raise BuildFailure("build.error", f"{len(specs)} specs (at most {MAX_SPECS})")
        if profile == "kernelbench" and not defines_kernel(specs):
            raise BuildFailure(
                "build.no_sources",
                "the candidate defines no CUDA kernel: no __global__ function in the "
                "cuda_sources of its load_inline calls (the kernelbench rules, like "
                "KernelBench's cuda_impl check, need one; C++ that only calls PyTorch is not a "
                "CUDA kernel)")
        return [_inline_module(i, s, len(specs)) for i, s in enumerate(specs)]

    return _build(modules, cache_dir, arch, jobs, timeout_s)


# ---- CLI ----------------------------------------------------------------------------------------

def _read_specs(path: str) -> Any:
    from .capped import ReadError, read_json

    try:
        obj = read_json(path, MAX_SPECS_FILE)
    except ReadError as exc:
        raise BuildFailure("build.error" if exc.kind == "size" else "build.internal",
                           exc.message) from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("specs"), list):
        raise BuildFailure("build.internal", f'{path} must be {{"specs": [spec, ...]}}')
    return obj["specs"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cuda_agent_bridge.torch_build",
                                description="Builds PyTorch extensions of PyTorch-format "
                                            "candidates into a content-addressed cache.")
    sub = p.add_subparsers(dest="mode", required=True)
    for mode, what in (("workdir", "the CUDA-Agent workdir"),
                       ("inline", 'a JSON file {"specs": [spec, ...]}')):
        s = sub.add_parser(mode)
        s.add_argument("path", help=what)
        s.add_argument("--cache", required=True, help="cache directory")
        s.add_argument("--arch", required=True, help="sm_XX or sm_XXa")
        s.add_argument("--jobs", type=int, default=0, help="parallel compilers (0: CPU count)")
        s.add_argument("--timeout", type=float, default=300.0, help="seconds for the build")
        s.add_argument("--profile", default="cuda-agent", choices=("cuda-agent", "kernelbench"),
                       help="rules profile (docs/torch-rules.md): the workdir's static check; "
                       "kernelbench needs a __global__ kernel in inline sources")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 on usage errors
    try:
        _check_args(args.cache, args.arch, args.jobs, args.timeout)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything printed during the build goes to stderr: stdout is the report
    if args.mode == "workdir":
        report = build_workdir(args.path, args.cache, args.arch, args.jobs, args.timeout,
                               args.profile)
    else:
        start = time.monotonic()
        try:
            specs = _read_specs(args.path)
        except BuildFailure as exc:
            report = _report(exc.status, exc.message, start, args.arch)
        else:
            report = build_inline(specs, args.cache, args.arch, args.jobs, args.timeout,
                                  args.profile)
    out.write(json.dumps(report) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
