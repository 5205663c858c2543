"""``python -m cuda_agent_bridge.torch_build``: builds PyTorch C++/CUDA extensions of
PyTorch-format candidates (docs/torch-build.md) without running any candidate code.

Contract: ``build_workdir`` builds a CUDA-Agent workdir (``binding.cpp``, ``binding_registry.h``,
``kernels/*.cu|*.cpp``) into one module ``cuda_extension``; ``build_inline`` builds the specs of
``load_inline`` calls (``inline_spec`` normalizes the call's arguments, ``spec_key`` names the
spec). Each translation unit is compiled once into a content-addressed object cache
(``<cache>/torch/obj/<key>.o``) by ``c++`` or ``nvcc`` with torch's own flags, in parallel, and the
objects are linked into ``<cache>/torch/lib/<linkkey>/<name>.so``; both are written under a temp
name and renamed, so concurrent builders are safe. A C++ unit that starts with include lines of
torch's headers compiles with those headers precompiled once per compiler, flags and torch
(torch_pch: ``<cache>/torch/pch``; its object under a key that says so). Only compilers run: the
built library is never loaded here. The build is candidate code too: a spec's flags must pass an
allow list (``check_flags``), and every compiler and linker runs in ``cuda-agent sandbox-exec``,
writing only into a fresh staging directory from which the trusted side copies the checked output
into the cache (``find_sandbox``, ``_run``, ``_adopt``); errors never quote files outside the
candidate's sources and the toolkit (``_error_lines``). Before building a workdir, its
``model_new.py`` goes through the static check (``static_check``, docs/torch-rules.md): a refused
workdir is not compiled and its report has status ``refused`` with the reason ``code``
(``hack.harness_tampering``, ``hack.torch_compute``, ``candidate.load_failed``). The answer is a
report dict (``status``, ``message``, ``errors``, counts, ``hash``, ``modules``, ``code``,
``notes``, ``torch_lib``, ``pch``); the CLI prints it as one JSON line on stdout.
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

from . import torch_pch

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


class BuildFailure(Exception):
    """Ends a build with a report of this status."""

    def __init__(self, status: str, message: str, errors: Sequence[str] = (),
                 code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = list(errors)
        self.code = code


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


# ---- candidate-chosen flags: an allow list -------------------------------------------------------
# Every word of extra_cflags (host compiler), extra_cuda_cflags (nvcc) and extra_ldflags (the
# host compiler as linker driver) must match an entry below, option name and value shape; the
# words nvcc hands to ptxas, the host compiler and cudafe++ (-Xptxas, -Xcompiler, -Xcudafe) and
# gcc hands to ld (-Wl, -Xlinker) are checked one by one against that tool's own list. Nothing
# on these lists names a file to write, a program or plugin to run, or a file to read outside
# the toolkit, torch and the system (docs/torch-build.md, "Flags").
_DOC = "docs/torch-build.md, section Flags, lists what is allowed"
_VAL = r"[A-Za-z0-9_.+\-]*"  # a macro value: no quote, slash, space, comma, '@', '$'
_STD = r"(c|gnu)\+\+(11|14|17|20|23|0x|1y|1z|2a|2b)"
_SM = r"(sm|compute|lto)_\d+[af]?"
_GENCODE = rf"arch=compute_\d+[af]?,code=\[?{_SM}(,{_SM})*\]?"
_MACRO_D = rf"[A-Za-z_]\w*(={_VAL})?"
_MACRO_U = r"[A-Za-z_]\w*"
_HOST_F = ("fast-math|unroll-loops|unroll-all-loops|strict-aliasing|omit-frame-pointer|"
           "math-errno|trapping-math|finite-math-only|associative-math|reciprocal-math|"
           "signed-zeros|tree-vectorize|tree-slp-vectorize|permissive|exceptions|rtti|plt|"
           "semantic-interposition|strict-overflow|inline-functions|prefetch-loop-arrays|"
           "peel-loops|ipa-pta|stack-protector|visibility-inlines-hidden|PIC|pic")
_ISA = "avx|avx2|avx512[a-z0-9]*|fma|f16c|sse[0-9.]*|ssse3|bmi|bmi2|popcnt|lzcnt"


def _words(*patterns: str) -> re.Pattern[str]:
    return re.compile("(?:" + "|".join(f"(?:{p})" for p in patterns) + r")\Z")


# Host compiler words (extra_cflags; each -Xcompiler part in extra_cuda_cflags).
_HOST = _words(
    r"-O[0-3sgz]?", r"-Ofast", r"-g[0-3]?", r"-w", r"-pipe", r"-pthread", rf"-std={_STD}",
    rf"-D{_MACRO_D}", rf"-U{_MACRO_U}", rf"-f(no-)?({_HOST_F})",
    r"-W(no-)?(error=)?[b-km-oq-z][a-z0-9+-]*(=\d+)?", r"-W(no-)?(error=)?[alp][a-z0-9+-]+(=\d+)?",
    r"-Werror", r"-fvisibility=(hidden|default)", r"-ffp-contract=(fast|on|off)",
    r"-fmax-errors=\d+", r"-f(constexpr-depth|constexpr-steps|template-depth)=\d+",
    r"-fdiagnostics-color(=(always|never|auto))?", r"-m(arch|tune|cpu)=[a-z0-9_.+-]+",
    rf"-m(no-)?({_ISA})")
# nvcc words (extra_cuda_cflags).
_NVCC = _words(
    r"-O[0-3]", r"--?use_fast_math", r"--?std=c\+\+(11|14|17|20)", rf"-D{_MACRO_D}",
    rf"-U{_MACRO_U}", r"-lineinfo", r"--generate-line-info", r"-G", r"--device-debug", r"-g",
    r"--?expt-relaxed-constexpr", r"--?expt-extended-lambda", r"--?extended-lambda",
    r"--?maxrregcount=\d+", r"-res-usage", r"--resource-usage", r"--?extra-device-vectorization",
    r"--?restrict", r"--?allow-unsupported-compiler", r"-w", r"--disable-warnings",
    r"-W(no-)?[b-km-oq-z][a-z0-9-]*(=[a-z0-9,-]+)?", r"-W(no-)?[alp][a-z0-9-]+(=[a-z0-9,-]+)?",
    r"--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)", r"--?diag-suppress=\d+(,\d+)*",
    r"--?display-error-number", r"--?default-stream=(legacy|null|per-thread)", r"--threads=\d+",
    rf"-arch={_SM}", rf"--gpu-architecture={_SM}", rf"-code={_SM}(,{_SM})*",
    rf"--gpu-code={_SM}(,{_SM})*", rf"-gencode={_GENCODE}", rf"--generate-code={_GENCODE}")
# ptxas words (-Xptxas / --ptxas-options parts).
_PTXAS = _words(
    r"-v", r"--verbose", r"-O[0-3]", r"--opt-level=[0-3]", r"-warn-spills", r"--warn-on-spills",
    r"-warn-lmem-usage", r"--warn-on-local-memory-usage", r"-warn-double-usage",
    r"--warn-on-double-precision-use", r"--?maxrregcount=\d+", r"--?dlcm=(ca|cg|cs)",
    r"--def-load-cache=(ca|cg|cs|lu|cv)", r"--?dscm=(wb|cg|cs|wt)",
    r"--def-store-cache=(wb|cg|cs|wt)", r"--?allow-expensive-optimizations(=(true|false))?",
    r"--suppress-stack-size-warning", r"--disable-optimizer-constants")
# cudafe++ words (-Xcudafe parts).
_CUDAFE = _words(r"--diag_suppress=\w+", r"--diag_warning=\w+", r"--display_error_number")
# Link words (extra_ldflags; the host compiler drives the link): the libraries the rules allow.
_LINK = _words(
    r"-l(cudart|cublas|cublasLt|cudnn|c10|c10_cuda|torch|torch_cpu|torch_cuda|torch_python|"
    r"stdc\+\+|m)", r"-O[0-3]", r"-g[0-3]?", r"-shared", r"-fPIC", r"-pthread")
# ld words (-Wl parts, -Xlinker values); "-z" takes the next part.
_LD = _words(r"-O[01]", r"--as-needed", r"--no-as-needed", r"-Bdynamic", r"-Bsymbolic",
             r"-Bsymbolic-functions", r"--gc-sections", r"--no-undefined")
_LD_Z = _words(r"defs|now|relro|noexecstack")
# Options that take the next word as their value, per tool: the value's check.
_PAIRS: dict[str, dict[str, str]] = {
    "cxx": {"-D": "macro_d", "-U": "macro_u", "-I": "dir", "-isystem": "dir"},
    "nvcc": {"-D": "macro_d", "-U": "macro_u", "-I": "dir", "-isystem": "dir",
             "-gencode": "gencode", "--generate-code": "gencode", "-arch": "sm",
             "--gpu-architecture": "sm", "-code": "sm", "--gpu-code": "sm",
             "-Xptxas": "ptxas", "--ptxas-options": "ptxas", "-Xcompiler": "host",
             "--compiler-options": "host", "-Xcudafe": "cudafe", "-maxrregcount": "int",
             "--maxrregcount": "int", "-std": "std", "--std": "std",
             "-default-stream": "stream", "--default-stream": "stream", "--threads": "int",
             "-diag-suppress": "ints", "--diag-suppress": "ints"},
    "link": {"-l": "lib", "-L": "dir", "-Xlinker": "ld1"},
}
_VALUE_RE = {"macro_d": re.compile(_MACRO_D + r"\Z"), "macro_u": re.compile(_MACRO_U + r"\Z"),
             "gencode": re.compile(_GENCODE + r"\Z"), "sm": re.compile(rf"{_SM}(,{_SM})*\Z"),
             "int": re.compile(r"\d{1,6}\Z"), "ints": re.compile(r"\d+(,\d+)*\Z"),
             "std": re.compile(r"c\+\+(11|14|17|20)\Z"),
             "stream": re.compile(r"(legacy|null|per-thread)\Z")}
# Joined pass-through forms: option=parts (nvcc), or -Wl,parts (the link driver).
_PASS_JOINED = {"nvcc": {"-Xptxas=": "ptxas", "--ptxas-options=": "ptxas",
                         "-Xcompiler=": "host", "--compiler-options=": "host",
                         "-Xcudafe=": "cudafe"},
                "cxx": {}, "link": {"-Wl,": "ld"}}
_JOINED_DIR = {"cxx": "-I", "nvcc": "-I", "link": "-L"}
_INNER = {"ptxas": (_PTXAS, "ptxas"), "host": (_HOST, "the host compiler"),
          "cudafe": (_CUDAFE, "cudafe++"), "ld1": (_LD, "the linker")}
MAX_FLAG_WORD = 300


class FlagRefused(Exception):
    """A candidate-chosen flag word that is not on the allow list."""


def _refuse(word: str, why: str = "") -> FlagRefused:
    shown = word if len(word) <= 80 else word[:77] + "..."
    return FlagRefused(f"flag {shown!r} is not allowed{why} ({_DOC})")


def _visible(path: str, roots: Sequence[str]) -> bool:
    """Whether path resolves inside one of roots (the toolkit, torch, the system)."""
    if not os.path.isabs(path) or "\0" in path:
        return False
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def _check_parts(value: str, kind: str, word: str) -> None:
    """The comma-separated parts a pass-through option hands to another tool."""
    parts = value.split(",")
    if kind == "ld":
        i = 0
        while i < len(parts):
            if parts[i] == "-z" and i + 1 < len(parts) and _LD_Z.match(parts[i + 1]):
                i += 2
                continue
            if not _LD.match(parts[i]):
                raise _refuse(word, f": the linker option {parts[i][:60]!r} is not on the list")
            i += 1
        return
    table, tool = _INNER[kind]
    for part in [value] if kind == "ld1" else parts:
        if not table.match(part):
            raise _refuse(word, f": {part[:60]!r} is not on the list for {tool}")


def _check_value(kind: str, value: str, word: str, roots: Sequence[str]) -> None:
    if kind == "dir":
        if not _visible(value, roots):
            raise _refuse(f"{word} {value}", ": an include or library directory must be an "
                                             "absolute path inside the toolkit, torch or /usr")
    elif kind == "lib":
        if not _LINK.match("-l" + value):
            raise _refuse(f"{word} {value}")
    elif kind in ("ptxas", "host", "cudafe", "ld1"):
        _check_parts(value, kind, f"{word} {value}")
    elif not _VALUE_RE[kind].match(value):
        raise _refuse(f"{word} {value}")


def check_flags(words: Sequence[str], tool: str, roots: Sequence[str]) -> None:
    """Raises FlagRefused for the first word (or option and value) of ``words`` that the allow
    list of ``tool`` ("cxx": extra_cflags, "nvcc": extra_cuda_cflags, "link": extra_ldflags)
    does not have; roots are the directories -I/-isystem/-L may name."""
    table = {"cxx": _HOST, "nvcc": _NVCC, "link": _LINK}[tool]
    i = 0
    while i < len(words):
        word = words[i]
        if len(word) > MAX_FLAG_WORD:
            raise _refuse(word, f": longer than {MAX_FLAG_WORD} characters")
        pair = _PAIRS[tool].get(word)
        if pair is not None:
            if i + 1 >= len(words):
                raise _refuse(word, ": its value is missing")
            _check_value(pair, words[i + 1], word, roots)
            i += 2
            continue
        joined = next((p for p in _PASS_JOINED[tool] if word.startswith(p)), None)
        if joined is not None:
            _check_parts(word[len(joined):], _PASS_JOINED[tool][joined], word)
        elif word.startswith(_JOINED_DIR[tool]) and len(word) > 2:
            _check_value("dir", word[2:], word[:2], roots)
        elif not table.match(word):
            raise _refuse(word)
        i += 1


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
    return os.path.realpath(found)  # no symlink through /etc/alternatives, which the sandbox lacks


def _nvcc() -> str:
    want = os.environ.get("NVCC")
    if want:
        found = _which(want)
    else:
        found = shutil.which("nvcc") or _which("/usr/local/cuda/bin/nvcc")
    if found is None:
        raise BuildFailure("build.internal", "nvcc not found (set NVCC or put nvcc on PATH)")
    return os.path.realpath(found)


_SYSTEM_ROOTS = ("/usr", "/opt")  # what the sandbox shows anyway (with /lib*, /bin, /sbin)
_SANDBOX_VISIBLE = ("/usr", "/opt", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")


def _toolkit_roots() -> tuple[str, ...]:
    """Real paths of the directories a build reads besides its own sources: the system (/usr,
    /opt), torch's include and library directories, Python's include directory and the
    library directories of torch's link flags (the CUDA toolkit's)."""
    t = _torch()
    dirs = [*_SYSTEM_ROOTS, *t.include_cpu, t.lib_dir, sysconfig.get_paths()["include"]]
    for more in (_include_cuda, lambda: _torch_ldflags(True), lambda: _torch_ldflags(False)):
        try:
            dirs += [d[2:] if d.startswith("-L") else d for d in more()
                     if not d.startswith("-l")]
        except BuildFailure:
            pass
    return tuple(dict.fromkeys(os.path.realpath(d) for d in dirs if os.path.isabs(d)))


def _bind_roots(dirs: Sequence[str]) -> list[str]:
    """The existing directories of dirs the sandbox does not show already, none inside
    another."""
    def inside(d: str, root: str) -> bool:
        return d == root or d.startswith(root.rstrip("/") + "/")

    out: list[str] = []
    for d in sorted({os.path.realpath(x) for x in dirs}, key=len):
        if os.path.isdir(d) and not any(inside(d, r) for r in (*_SANDBOX_VISIBLE, *out)):
            out.append(d)
    return out


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
class _PchPlan:
    """The precompiled header a C++ unit may use (torch_pch): its key, the include names it
    holds and the compile command less ``-x c++-header prefix.h``, the dependency file and
    the output."""

    key: str
    names: list[str]
    argv: list[str]


@dataclass
class _Unit:
    rel: str  # path relative to the module's source directory (what the compiler sees)
    data: bytes
    cuda: bool
    key: str = ""  # what the unit is: its bytes, command, toolchain (the report's hash)
    argv: list[str] = field(default_factory=list)  # without "-o OUT"
    pch: _PchPlan | None = None

    def pch_obj_key(self) -> str:
        """The object's cache key when compiled with its precompiled header."""
        return _digest(["unit+pch", self.key, self.pch.key]) if self.pch else ""


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
    roots = _toolkit_roots()
    includes = []
    for path in spec["extra_include_paths"]:
        path = path.strip()
        if not (os.path.isabs(path) and os.path.isdir(path)):
            print(f"torch_build: {label}ignoring extra include path {path!r} (not an existing "
                  "absolute directory)", file=sys.stderr)
        elif _visible(path, roots):
            includes.append(path)
        else:
            raise BuildFailure("build.error", f"{label}extra include path {path[:80]!r} is not "
                                              "allowed: only directories of the toolkit, torch "
                                              f"and /usr, /opt ({_DOC})")
    units = [_Unit(n, text.encode("utf-8"), n.endswith(".cu"))
             for n, text in inline_sources(spec).items()]
    cuda = bool(spec["cuda_sources"]) or spec["with_cuda"] is True
    return _Module(spec["name"], spec_key(spec), label, units, [], cuda, includes,
                   _split_flags(spec["extra_cflags"], label, "cxx", roots),
                   _split_flags(spec["extra_cuda_cflags"], label, "nvcc", roots),
                   _split_flags(spec["extra_ldflags"], label, "link", roots))


def _split_flags(flags: list[str], label: str, tool: str, roots: Sequence[str]) -> list[str]:
    """Each flag split as torch's ninja file (a shell) splits it; the words checked against the
    allow list of the tool (check_flags)."""
    out: list[str] = []
    for flag in flags:
        try:
            out += shlex.split(flag.strip())
        except ValueError as exc:
            raise BuildFailure("build.error", f"{label}bad flag {flag[:80]!r}: {exc}") from exc
    try:
        check_flags(out, tool, roots)
    except FlagRefused as exc:
        what = {"cxx": "extra_cflags", "nvcc": "extra_cuda_cflags", "link": "extra_ldflags"}[tool]
        raise BuildFailure("build.error", f"{label}{what}: {exc}") from exc
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
    pch_argv = _pch_argv(module, cxx, common)
    for u in module.units:
        if u.cuda:
            nvcc = _nvcc()
            argv = [nvcc, *common, *t.nvcc_flags, _gencode(arch), "--compiler-options", "-fPIC",
                    *module.cuda_cflags]
            if not any(f.startswith(("-std=", "--std=")) or f in ("-std", "--std")
                       for f in argv):
                argv.append("-std=c++17")
            versions = [_version(nvcc), _version(cxx)]
        else:
            argv = list(cflags)
            versions = [_version(cxx)]
        u.argv = [*argv, "-c", u.rel]
        u.key = _digest(["unit", u.data, "\0".join(u.argv), *versions, *base])
        u.pch = None if u.cuda or pch_argv is None else _pch_plan(module, u, pch_argv)
    link = ["-shared", *module.ldflags, *_torch_ldflags(module.cuda), f"-Wl,-rpath,{t.lib_dir}"]
    module.link_argv = [cxx, *link]
    module.link_key = _digest(["link", module.name, *[u.key for u in module.units],
                               "\0".join(module.link_argv), _version(cxx), t.version])


def _pch_argv(module: _Module, cxx: str, common: list[str]) -> list[str] | None:
    """The command that precompiles a C++ unit's prefix: the unit's, less the module's name
    (so modules of any name share the header; gcc refuses the header where a torch header
    would have read the macro) and the candidate's own include directories (a header read
    from there is the candidate's text); None when precompiled headers are off."""
    if torch_pch.mode() == "off":
        return None
    own = {f"-I{d}" for d in module.includes if not os.path.isabs(d)}
    kept = [f for f in common if not f.startswith("-DTORCH_EXTENSION_NAME=") and f not in own]
    return [cxx, *kept, "-fPIC", "-std=c++17", *module.cflags]


def _pch_plan(module: _Module, u: _Unit, argv: list[str]) -> _PchPlan | None:
    """The unit's precompiled header: the ``#include <...>`` lines it starts with
    (torch_pch.scan_prefix), up to the first that names one of the candidate's own headers,
    when one of them is torch's; keyed by everything that changes what gcc makes of them."""
    own: set[str] = set()
    for rel, _ in module.headers:
        own.add(rel)
        for d in module.includes:
            if not os.path.isabs(d) and rel.startswith(os.path.normpath(d) + "/"):
                own.add(rel[len(os.path.normpath(d)) + 1:])
    names: list[str] = []
    for name in torch_pch.scan_prefix(u.data):
        if name in own:
            break
        names.append(name)
    torch_dirs = _torch().include_cpu
    if not any(os.path.isfile(os.path.join(d, n)) for n in names for d in torch_dirs):
        return None
    try:
        st = os.stat(argv[0])
        binary = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        binary = "?"
    key = _digest(["torch-pch/1", "\0".join(argv), "\0".join(names), _version(argv[0]),
                   binary, _torch().version, sys.version, _env_key()])
    return _PchPlan(key, names, argv)


@dataclass
class _Run:
    status: str  # ok, failed, timeout, skipped, sandbox (the sandbox could not start)
    output: str = ""
    rc: int = 0


SANDBOX_SETUP_FAILED = 125  # cuda-agent sandbox-exec: the sandbox could not be set up
SANDBOX_TIMEOUT = 124
SANDBOX_OFF_ENV = "CUDA_AGENT_SANDBOX"
MAX_ARTIFACT = 1 << 30  # bytes of one object or library a build may hand back


@dataclass(frozen=True)
class Sandbox:
    """How compilers and linkers run: ``exe`` is the cuda-agent binary whose ``sandbox-exec``
    runs each command (docs/security.md), or None: unsandboxed (CUDA_AGENT_SANDBOX=0 or
    --no-sandbox only)."""

    exe: str | None


def find_sandbox(sandbox: str | bool = True) -> Sandbox:
    """The sandbox of a build: False runs unsandboxed, a string is the cuda-agent binary, True
    finds it (CUDA_AGENT_SANDBOX=0: unsandboxed; else $CUDA_AGENT_ROOT/build/cuda-agent, the
    checkout's build/cuda-agent, cuda-agent on PATH). BuildFailure ("env.sandbox") when none is
    found: a build never falls back to running unsandboxed by itself."""
    if sandbox is False or (sandbox is True and os.environ.get(SANDBOX_OFF_ENV) == "0"):
        print("torch_build: the compilers run WITHOUT the sandbox (CUDA_AGENT_SANDBOX=0 or "
              "--no-sandbox): candidate flags and sources reach the host", file=sys.stderr)
        return Sandbox(None)
    if isinstance(sandbox, str):
        found = _which(sandbox)
        if found is None:
            raise _sandbox_failure(f"{sandbox} is not an executable file")
        return Sandbox(os.path.abspath(found))
    roots = [os.environ.get("CUDA_AGENT_ROOT", ""),
             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    for root in roots:
        exe = os.path.join(root, "build", "cuda-agent")
        if root and _which(exe):
            return Sandbox(exe)
    on_path = shutil.which("cuda-agent")
    if on_path is None:
        raise _sandbox_failure("cannot find the cuda-agent binary that runs compilers in the "
                               "sandbox (pass --sandbox-exec PATH, set CUDA_AGENT_ROOT, or set "
                               "CUDA_AGENT_SANDBOX=0 to build without the sandbox)")
    return Sandbox(os.path.abspath(on_path))


def _sandbox_failure(message: str) -> BuildFailure:
    return BuildFailure("build.internal", f"env.sandbox: {message}", code="env.sandbox")


def _command_env() -> dict[str, str]:
    """What a compiler sees of the environment besides PATH, LANG and HOME: C messages and the
    variables that are part of every unit's key."""
    env = {"LC_ALL": "C"}
    env.update({k: os.environ[k] for k in _KEY_ENV if k in os.environ})
    return env


def _run(argv: list[str], cwd: str, deadline: float, stop: threading.Event, sandbox: Sandbox,
         ro: Sequence[str] = (), rw: Sequence[str] = ()) -> _Run:
    """One compiler command in its own process group (killed whole at the deadline), through
    ``cuda-agent sandbox-exec`` unless sandbox.exe is None: it sees the system, the ro
    directories read-only and writes only into the rw directories. Output (stdout and stderr
    together) read back up to MAX_OUTPUT bytes."""
    if stop.is_set():
        return _Run("skipped")
    left = deadline - time.monotonic()
    if left <= 0:
        return _Run("timeout")
    if sandbox.exe is not None:
        cmd = [sandbox.exe, "sandbox-exec"]
        for path in ro:
            cmd += ["--ro", path]
        for path in rw:
            cmd += ["--rw", path]
        cmd += ["--cwd", cwd, "--timeout", f"{left:.3f}"]
        for k, v in _command_env().items():
            cmd += ["--env", f"{k}={v}"]
        cmd += ["--", *argv]
        env = dict(os.environ)
        grace = 5.0  # sandbox-exec's --timeout kills the whole sandbox first (exit 124)
    else:
        cmd = argv
        env = dict(os.environ, **_command_env())
        grace = 0.0
    for k in ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"):
        env.pop(k, None)
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            if sandbox.exe is not None:
                return _Run("sandbox", f"cannot run {sandbox.exe}: {exc.strerror}", -1)
            return _Run("failed", f"cannot run {argv[0]}: {exc.strerror}", -1)
        try:
            rc = proc.wait(timeout=left + grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return _Run("timeout")
        out.seek(0)
        text = out.read(MAX_OUTPUT).decode("utf-8", "replace")
    if sandbox.exe is not None and rc == SANDBOX_TIMEOUT:
        return _Run("timeout")
    if sandbox.exe is not None and rc == SANDBOX_SETUP_FAILED:
        return _Run("sandbox", text, rc)
    return _Run("ok" if rc == 0 else "failed", text, rc)


def _read_staged(path: str, cap: int) -> str:
    """A text file a sandboxed command wrote (not followed if a link), at most cap bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{os.path.basename(path)} is not a regular file")
        data = f.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"{os.path.basename(path)} has more than {cap} bytes")
    return data.decode("utf-8", "surrogateescape")


def _adopt(staged: str, dest: str, elf_type: int, what: str) -> None:
    """Copies what a sandboxed command left at ``staged`` to ``dest`` (a path the trusted side
    chose) after checking it: a regular file, not a link, at most MAX_ARTIFACT bytes, a 64-bit
    little-endian ELF of elf_type (1: an object, 3: a shared library)."""
    try:
        fd = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BuildFailure("build.error", f"{what} produced no output ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BuildFailure("build.error", f"{what} produced something that is not a file")
        if st.st_size > MAX_ARTIFACT:
            raise BuildFailure("build.error", f"{what} produced {st.st_size} bytes (at most "
                                              f"{MAX_ARTIFACT})")
        head = src.read(18)
        if (len(head) < 18 or head[:6] != b"\x7fELF\x02\x01"
                or int.from_bytes(head[16:18], "little") != elf_type):
            raise BuildFailure("build.error", f"{what} produced a file that is not an ELF "
                                              f"{'object' if elf_type == 1 else 'library'}")
        src.seek(0)
        with open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            os.fchmod(dst.fileno(), 0o644 if elf_type == 1 else 0o755)


_GCC_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)?\s*"
                       r"(?:fatal error|error):\s*(?P<msg>.*)$")
_NVCC_DIAG = re.compile(r"^(?P<file>\S.*?)\((?P<line>\d+)\):\s*(?:catastrophic\s+)?"
                        r"error(?:\s*#[\w-]+)?:\s*(?P<msg>.*)$")
_OTHER_ERROR = re.compile(r"\berror\b|\bfatal\b|cannot find|undefined reference", re.IGNORECASE)
_ERROR_COUNT = re.compile(r"^\d+ errors? detected in the compilation")


# Any diagnostic's location (gcc's file:line: or file:line, and nvcc's file(line):).
_LOCATED = re.compile(r"^(?P<file>[^\s:(][^:(]*?)(?::\d+[:,]|\(\d+\):)")
_NVCC_TMP = "/tmp/tmpxft_"  # nvcc's intermediates of the candidate's own unit
WITHHELD = "diagnostic withheld (a file outside the candidate's sources)"


def _quotable(name: str, shown: Sequence[str]) -> bool:
    """Whether errors may quote the file: the candidate's sources (relative, inside its
    directory), nvcc's intermediates of them, and the toolkit's, torch's and the system's."""
    if not os.path.isabs(name):
        norm = os.path.normpath(name)
        return norm != ".." and not norm.startswith("../")
    return name.startswith(_NVCC_TMP) or _visible(name, (*shown, *_SYSTEM_ROOTS))


def _error_lines(output: str, replace: Sequence[tuple[str, str]],
                 shown: Sequence[str] = ()) -> list[str]:
    """The diagnostics of a failed command as ``file:line: error: message`` (gcc's
    ``file:line:col:`` and nvcc's ``file(line):`` alike), other error lines as they are. A
    diagnostic of any kind located in a file that is not quotable (_quotable: outside the
    candidate's sources and the directories ``shown``) becomes ``<file>: diagnostic withheld
    ...``; quoted source and caret lines (indented) are never kept."""
    found: list[str] = []
    for raw in output.splitlines():
        line = raw.rstrip()
        for old, new in replace:
            line = line.replace(old, new)
        if not line or line[0].isspace() or _ERROR_COUNT.match(line):
            continue
        where = _LOCATED.match(line)
        if where is not None and not _quotable(where.group("file"), shown):
            line = f"{where.group('file')[:200]}: {WITHHELD}"
        else:
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
        found = [ln[:MAX_ERROR_LINE] for ln in output.splitlines()
                 if ln.strip() and not ln[0].isspace()][:MAX_ERRORS]
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
        "sandboxed": more.get("sandboxed", False),
        "pch": more.get("pch", {"mode": torch_pch.mode(), "used": 0, "built": 0,
                                "fallbacks": 0}),
    }
    return report


class _Builder:
    def __init__(self, cache_dir: str, arch: str, jobs: int, timeout_s: float,
                 sandbox: Sandbox) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.timeout_s = timeout_s
        self.arch = arch
        self.jobs = jobs or os.cpu_count() or 1
        self.sandbox = sandbox
        root = os.path.join(os.path.abspath(cache_dir), CACHE_SUBDIR)
        self.obj_dir = os.path.join(root, "obj")
        self.lib_dir = os.path.join(root, "lib")
        self.stop = threading.Event()
        self.compiled = 0
        self.cached = 0
        self.linked = 0
        self.lock = threading.Lock()
        self.replace: list[tuple[str, str]] = []
        self.work = ""
        self.ro: list[str] = []  # what every command reads besides its sources
        self.shown: tuple[str, ...] = ()  # where files that errors may quote live
        self.pch = torch_pch.Store(os.path.join(root, "pch"))
        self.pch_action: dict[str, str] = {}  # PCH key: use, build or plain (this build)
        self.pch_entries: dict[str, torch_pch.Entry | None] = {}
        self.pch_locks: dict[str, threading.Lock] = {}
        self.pch_counts = {"used": 0, "built": 0, "fallbacks": 0}
        self.obj_of: dict[str, str] = {}  # unit key: the cache key of its object

    def build(self, modules: list[_Module], work: str) -> dict[str, Any]:
        os.makedirs(self.obj_dir, exist_ok=True)
        os.makedirs(self.lib_dir, exist_ok=True)
        os.chmod(work, 0o711)  # the sandboxed compiler's uid reads the sources below
        self.work = work
        self.shown = _toolkit_roots()
        self.ro = _bind_roots(self.shown)
        for i, m in enumerate(modules):
            m.src_dir = os.path.join(work, str(i))
            for rel, data in [*[(u.rel, u.data) for u in m.units], *m.headers]:
                path = os.path.join(m.src_dir, rel)
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
                os.chmod(path, 0o644)
            self.replace.append((m.src_dir + os.sep, ""))
            self.replace.append((m.src_dir, "."))
            _plan(m, self.arch)
        todo: dict[str, tuple[_Module, _Unit]] = {}
        for m in modules:
            for u in m.units:
                hit = next((k for k in (u.key, u.pch_obj_key())
                            if k and os.path.isfile(self._obj(k))), "")
                if hit or u.key in todo:
                    self.cached += 1
                    if hit:
                        self.obj_of[u.key] = hit
                else:
                    todo[u.key] = (m, u)
        self._pch_decide([u for _, u in todo.values()])
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
                       hash=hashed, modules=listed, torch_lib=_torch().lib_dir,
                       sandboxed=self.sandbox.exe is not None, pch=self.pch_report())

    def pch_report(self) -> dict[str, Any]:
        return {"mode": torch_pch.mode(), **self.pch_counts}

    # ---- precompiled headers (torch_pch) ----

    def _pch_decide(self, units: list[_Unit]) -> None:
        """Per precompiled header the units to compile could use: use it (published and
        vouched for), build it (seen by an earlier build, or CUDA_AGENT_TORCH_PCH=eager), or
        compile without it (a key seen the first time, which is marked seen; one that failed)."""
        for u in units:
            if u.pch is None or u.pch.key in self.pch_action:
                continue
            key = u.pch.key
            if self.pch.failed(key):
                action = "plain"
            elif (entry := self.pch.ready(key)) is not None:
                self.pch_entries[key] = entry
                action = "use"
            elif torch_pch.mode() == "eager" or self.pch.seen(key):
                action = "build"
            else:
                self.pch.mark("seen", key)
                action = "plain"
            self.pch_action[key] = action

    def _pch_for(self, m: _Module, u: _Unit) -> torch_pch.Entry | None:
        """The precompiled header the unit compiles with, built first when this build builds
        it (once per key; the other units of that key wait), or None."""
        if u.pch is None or self.pch_action.get(u.pch.key, "plain") == "plain":
            return None
        key = u.pch.key
        with self.lock:
            lock = self.pch_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.pch_entries:
                self.pch_entries[key] = self._build_pch(m, u.pch)
            entry = self.pch_entries[key]
        if entry is None:
            return None
        own = [d for d in m.includes if not os.path.isabs(d)]
        name = torch_pch.shadowed(entry.deps, [*[r for r, _ in m.headers],
                                               *[x.rel for x in m.units]], own)
        if name:  # the candidate's file would have been read instead of the toolkit's
            print(f"torch_build: {m.label}{u.rel} compiles without the precompiled header: "
                  f"the candidate's {name} could shadow a header it holds", file=sys.stderr)
            return None
        return entry

    def _build_pch(self, m: _Module, plan: _PchPlan) -> torch_pch.Entry | None:
        """Precompiles plan's include lines in the sandbox (sources: a directory holding only
        prefix.h, which the trusted side wrote) and publishes the checked result; None when it
        fails (a compile error marks the key failed: not tried again)."""
        src = self._stage("pchsrc-")
        stage = self._stage("stage-")
        tmp = ""
        try:
            os.chmod(src, 0o755)
            with open(os.path.join(src, "prefix.h"), "wb") as f:
                f.write(torch_pch.header_text(plan.names))
            os.chmod(os.path.join(src, "prefix.h"), 0o644)
            gch = os.path.join(stage, "prefix.h.gch")
            deps_file = os.path.join(stage, "prefix.d")
            argv = [*plan.argv, "-x", "c++-header", "prefix.h", "-MD", "-MF", deps_file,
                    "-o", gch]
            run = _run(argv, src, self.deadline, self.stop, self.sandbox, [src, *self.ro],
                       [stage])
            if run.status != "ok":
                if run.status == "failed":
                    print(f"torch_build: precompiling {' '.join(plan.names)} failed (exit "
                          f"{run.rc}); compiling without it:\n{run.output[:65536]}",
                          file=sys.stderr)
                    if 0 < run.rc < 128:
                        self.pch.mark("failed", plan.key)
                return None
            deps = [d for d in torch_pch.parse_deps(_read_staged(deps_file, 16 << 20))
                    if d != "prefix.h"]
            roots = (*self.shown, *_SYSTEM_ROOTS)
            bad = next((d for d in deps if not _visible(d, roots)), None)
            if bad is not None or not deps or len(deps) > torch_pch.MAX_DEPS:
                print(f"torch_build: precompiled header of {' '.join(plan.names)} not kept: it "
                      f"read {bad or f'{len(deps)} files'}", file=sys.stderr)
                self.pch.mark("failed", plan.key)
                return None
            tmp = self.pch.new_tmp(plan.key)
            torch_pch.write_entry(tmp, plan.key, plan.names, gch, deps,
                                  {"argv": plan.argv})
            entry = self.pch.publish(plan.key, tmp)
            tmp = ""
            if entry is not None:
                with self.lock:
                    self.pch_counts["built"] += 1
            return entry
        except (OSError, ValueError) as exc:
            print(f"torch_build: precompiled header of {' '.join(plan.names)} not kept: {exc}",
                  file=sys.stderr)
            return None
        finally:
            for d in (src, stage, tmp):
                if d:
                    shutil.rmtree(d, ignore_errors=True)

    def _obj(self, key: str) -> str:
        return os.path.join(self.obj_dir, key + ".o")

    def _fail(self, m: _Module, what: str, run: _Run,
              replace: Sequence[tuple[str, str]] = ()) -> BuildFailure:
        self.stop.set()
        if run.status == "timeout":
            return BuildFailure("build.timeout", f"{m.label}{what} did not finish within the "
                                                 f"{self.timeout_s:g} s build time limit")
        if run.status == "sandbox":
            print(f"torch_build: the sandbox failed for {m.label}{what}:\n{run.output[:65536]}",
                  file=sys.stderr)
            lines = [ln for ln in run.output.splitlines() if ln.strip()]
            return _sandbox_failure(f"{m.label}{what}: {lines[-1] if lines else 'no output'}")
        errors = _error_lines(run.output, [*replace, *self.replace], self.shown)
        print(f"torch_build: {m.label}{what} failed (exit {run.rc}):\n{run.output[:65536]}",
              file=sys.stderr)
        first = f": {errors[0]}" if errors else f" (exit {run.rc})"
        return BuildFailure("build.error", f"{m.label}{what} failed{first}", errors)

    def _stage(self, prefix: str) -> str:
        """A fresh directory in the build's work directory: the one place a command writes."""
        return tempfile.mkdtemp(prefix=prefix, dir=self.work)

    def _compile(self, m: _Module, u: _Unit) -> BuildFailure | None:
        if self.stop.is_set():
            return None
        entry = self._pch_for(m, u)
        stage = self._stage("stage-")
        try:
            out = os.path.join(stage, "unit.o")
            key = u.key
            if entry is not None:  # the same include lines first, precompiled
                argv = [*u.argv[:-2], "-include", entry.include, "-Winvalid-pch",
                        "-Wno-error=invalid-pch", *u.argv[-2:], "-o", out]
                run = _run(argv, m.src_dir, self.deadline, self.stop, self.sandbox,
                           [m.src_dir, entry.dir, *self.ro], [stage])
                if run.status == "failed":  # whatever the reason: as without the header
                    print(f"torch_build: {m.label}{u.rel} failed with the precompiled header "
                          f"(exit {run.rc}); compiling it without:\n{run.output[:16384]}",
                          file=sys.stderr)
                    with self.lock:
                        self.pch_counts["fallbacks"] += 1
                    shutil.rmtree(stage, ignore_errors=True)
                    stage = self._stage("stage-")
                    out = os.path.join(stage, "unit.o")
                    entry = None
                else:
                    key = u.pch_obj_key()
            if entry is None:
                run = _run([*u.argv, "-o", out], m.src_dir, self.deadline, self.stop,
                           self.sandbox, [m.src_dir, *self.ro], [stage])
            if run.status == "skipped":
                return None
            if run.status != "ok":
                return self._fail(m, f"compiling {u.rel}", run,
                                  [(out, u.rel.rsplit(".", 1)[0] + ".o"), (stage + os.sep, "")])
            fd, tmp = tempfile.mkstemp(prefix=f".tmp-{key[:16]}-", suffix=".o",
                                       dir=self.obj_dir)
            os.close(fd)
            try:
                _adopt(out, tmp, 1, f"{m.label}compiling {u.rel}")
                os.replace(tmp, self._obj(key))
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            with self.lock:
                self.compiled += 1
                self.obj_of[u.key] = key
                if entry is not None:
                    self.pch_counts["used"] += 1
            return None
        except BuildFailure as exc:
            self.stop.set()
            return exc
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _link(self, m: _Module) -> BuildFailure | None:
        # the objects, with or without a precompiled header (the same bytes); the library is
        # keyed by what it is built from, so builders agree whichever objects they found
        objects = [self.obj_of.get(u.key, u.key) for u in m.units]
        final_dir = os.path.join(self.lib_dir, m.link_key)
        m.library = os.path.join(final_dir, m.name + ".so")
        if os.path.isfile(m.library):
            return None
        inputs = self._stage("objects-")  # the cached objects, read-only to the linker
        stage = self._stage("stage-")
        tmp_dir = ""
        try:
            os.chmod(inputs, 0o755)
            objs: list[str] = []
            names: list[tuple[str, str]] = []
            for i, u in enumerate(m.units):
                objs.append(os.path.join(inputs, f"{i}.o"))
                names.append((objs[-1], u.rel.rsplit(".", 1)[0] + ".o"))
                _link_or_copy(self._obj(objects[i]), objs[-1])
            out = os.path.join(stage, m.name + ".so")
            argv = [m.link_argv[0], *objs, *m.link_argv[1:], "-o", out]
            run = _run(argv, inputs, self.deadline, threading.Event(), self.sandbox,
                       [inputs, *self.ro], [stage])
            if run.status != "ok":
                return self._fail(m, f"linking {m.name}", run,
                                  [*names, (stage + os.sep, ""), (inputs + os.sep, "")])
            tmp_dir = tempfile.mkdtemp(prefix=f".tmp-{m.link_key[:16]}-", dir=self.lib_dir)
            os.chmod(tmp_dir, 0o755)
            _adopt(out, os.path.join(tmp_dir, m.name + ".so"), 3, f"{m.label}linking {m.name}")
            try:
                os.rename(tmp_dir, final_dir)
            except OSError:
                if not os.path.isfile(m.library):  # not a concurrent builder's copy
                    raise
            with self.lock:
                self.linked += 1
            return None
        except BuildFailure as exc:
            return exc
        finally:
            for d in (inputs, stage, tmp_dir):
                if d and os.path.isdir(d):
                    shutil.rmtree(d, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    """A cached object into a link's input directory: a hard link where the sandboxed linker
    can read the object (the input directory is bound read-only), else a copy."""
    if os.stat(src).st_mode & 0o044 == 0o044:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


def _build(make_modules: Any, cache_dir: str, arch: str, jobs: int, timeout_s: float,
           replace: Sequence[tuple[str, str]] = (), sandbox: str | bool = True) -> dict[str, Any]:
    _check_args(cache_dir, arch, jobs, timeout_s)
    _FACTS_DIR.append(os.path.join(cache_dir, "torch", "facts"))
    start = time.monotonic()
    try:
        box = find_sandbox(sandbox)
    except BuildFailure as exc:
        return _report(exc.status, exc.message, start, arch, code=exc.code)
    builder = _Builder(cache_dir, arch, jobs, timeout_s, box)
    builder.replace += replace
    try:
        modules = make_modules()
        with tempfile.TemporaryDirectory(prefix="cuda-agent-torch-build-") as work:
            return builder.build(modules, work)
    except BuildFailure as exc:
        return _report(exc.status, exc.message, builder.start, arch, errors=exc.errors,
                       compiled=builder.compiled, cached=builder.cached, code=exc.code,
                       pch=builder.pch_report())
    except Exception as exc:  # a bug or a broken environment: still one report
        print(f"torch_build: internal error: {exc!r}", file=sys.stderr)
        return _report("build.internal", f"{type(exc).__name__}: {exc}", builder.start, arch,
                       compiled=builder.compiled, cached=builder.cached)


def build_workdir(directory: str, cache_dir: str, arch: str, jobs: int = 0,
                  timeout_s: float = 300, profile: str = "cuda-agent",
                  sandbox: str | bool = True) -> dict[str, Any]:
    """Checks the workdir's Python (static_check, under the rules profile) and, when it passes,
    builds the workdir into the module ``cuda_extension``; returns the report. ``sandbox`` is
    find_sandbox's argument: the compilers run in the sandbox unless it is False."""
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
                    [(directory + os.sep, ""), (directory, ".")], sandbox)
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
                 timeout_s: float = 300, profile: str = "cuda-agent",
                 sandbox: str | bool = True) -> dict[str, Any]:
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

    return _build(modules, cache_dir, arch, jobs, timeout_s, sandbox=sandbox)


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
        box = s.add_mutually_exclusive_group()
        box.add_argument("--sandbox-exec", metavar="CUDA_AGENT",
                         help="the cuda-agent binary whose sandbox-exec runs each compiler "
                         "(default: found next to this package or on PATH)")
        box.add_argument("--no-sandbox", action="store_true",
                         help="run the compilers without the sandbox (as CUDA_AGENT_SANDBOX=0)")
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
    sandbox: str | bool = False if args.no_sandbox else args.sandbox_exec or True
    if args.mode == "workdir":
        report = build_workdir(args.path, args.cache, args.arch, args.jobs, args.timeout,
                               args.profile, sandbox)
    else:
        start = time.monotonic()
        try:
            specs = _read_specs(args.path)
        except BuildFailure as exc:
            report = _report(exc.status, exc.message, start, args.arch)
        else:
            report = build_inline(specs, args.cache, args.arch, args.jobs, args.timeout,
                                  args.profile, sandbox)
    out.write(json.dumps(report) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
