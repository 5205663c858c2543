"""``python -m cuda_agent_bridge.static_check``: the static check of a PyTorch-format candidate's
Python, run by the trusted build step before any of the candidate's code runs
(docs/torch-rules.md).

Contract: ``check_source(data, filename, profile)`` parses one file (it never executes, imports or
compiles candidate code) and returns a ``Verdict``:

- ``ok``;
- ``refused`` with ``code`` ``hack.harness_tampering`` (reflection and escape routes, torch
  internals that can switch off the runtime refusal, monkeypatching: refused under every
  profile) or ``hack.torch_compute`` (direct torch compute in code that ``forward()`` can reach:
  refused under the ``cuda-agent`` profile, allowed under ``kernelbench``, where each such call
  is a note) or ``hack.fallback`` (``kernelbench`` only, KernelBench's ``code_bypass``: a ``try``
  statement in code ``forward()`` can reach, or a ``ModelNew`` whose ``forward`` is the one of
  a class named ``Model`` it inherits);
- ``invalid`` with ``code`` ``candidate.load_failed`` (unreadable, too large, not Python).

``check_kernelbench(path)`` and ``check_workdir(directory)`` apply it to a candidate. Findings name
``file:line`` and what to do. What a static check cannot decide (operators such as ``x + 1``,
calls through objects) is left to the runtime guard (refusal.py).

The allowlists are refusal.py's ``ALLOWED_TORCH`` and ``ALLOWED_TENSOR``, and torch's function
and method names come from torch's own stubs; both are read as text (refusal.py's source is parsed,
torch is located with ``importlib.util.find_spec``), because importing torch takes seconds.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import io
import json
import os
import re
import stat
import sys
import time
import tokenize
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PROFILES = ("cuda-agent", "kernelbench")
TAMPERING = "hack.harness_tampering"
COMPUTE = "hack.torch_compute"
FALLBACK = "hack.fallback"  # kernelbench profile: KernelBench's code_bypass category
LOAD_FAILED = "candidate.load_failed"
MAX_FILE_BYTES = 4 << 20  # one candidate .py (the recorder reads at most 8 MiB of a file)
MAX_NODES = 200_000  # AST nodes of one file (honest files have a few thousand)
MAX_DEPTH = 100  # AST nesting of one file
MAX_FINDINGS = 100
MAX_ALIASES = 32  # dotted names one variable may stand for
MAX_REPORTED = 20  # lines of "errors" in the JSON verdict

# Modules candidate code may import (and their submodules); torch is further checked by name.
ALLOWED_IMPORTS = frozenset({
    "torch", "math", "cmath", "numbers", "typing", "typing_extensions", "dataclasses", "enum",
    "abc", "functools", "itertools", "collections", "contextlib", "copy", "warnings", "random",
    "time", "os", "json", "re", "numpy", "triton", "__future__", "cuda_extension",
})
_STAR_OK = frozenset({"math", "cmath", "typing"})
_KNOWN_SUBMODULES = frozenset({"os.path", "collections.abc", "triton.language", "numpy.linalg",
                               "numpy.random", "numpy.fft"})
_OS_ALLOWED = frozenset({"environ", "getenv", "putenv", "path", "sep", "pathsep", "linesep",
                         "name", "cpu_count", "getpid", "fspath", "curdir", "getcwd", "makedirs"})
_NUMPY_DENIED = frozenset({"ctypeslib", "load", "loadtxt", "genfromtxt", "fromfile", "memmap",
                           "save", "savez", "savez_compressed", "savetxt", "lib", "DataSource",
                           "fromregex", "f2py", "distutils", "testing"})
_TYPING_DENIED = frozenset({"get_type_hints", "ForwardRef", "evaluate_forward_ref"})
# What candidate code may use of the small standard modules (they import sys, os, builtins under
# other names: enum's bltns, random's _os): the first attribute must be listed; None: any public
# name (modules of functions and constants only).
_MODULE_ATTRS: dict[str, frozenset[str] | None] = {
    "math": None, "cmath": None, "itertools": None, "numbers": None, "collections.abc": None,
    "os.path": None, "__future__": None, "cuda_extension": None,
    "dataclasses": frozenset({"dataclass", "field", "fields", "asdict", "astuple", "replace",
                              "is_dataclass", "InitVar", "MISSING", "KW_ONLY",
                              "FrozenInstanceError", "make_dataclass"}),
    "enum": frozenset({"Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "auto", "unique"}),
    "abc": frozenset({"ABC", "ABCMeta", "abstractmethod", "abstractproperty"}),
    "functools": frozenset({"partial", "partialmethod", "reduce", "lru_cache", "cache",
                            "cached_property", "wraps", "update_wrapper", "total_ordering",
                            "singledispatch", "singledispatchmethod", "cmp_to_key"}),
    "collections": frozenset({"OrderedDict", "defaultdict", "namedtuple", "deque", "Counter",
                              "ChainMap", "UserDict", "UserList", "UserString", "abc"}),
    "contextlib": frozenset({"contextmanager", "nullcontext", "suppress", "ExitStack", "closing",
                             "AbstractContextManager", "ContextDecorator"}),
    "copy": frozenset({"copy", "deepcopy", "Error"}),
    "warnings": frozenset({"warn", "filterwarnings", "simplefilter", "catch_warnings",
                           "resetwarnings"}),
    "random": frozenset({"seed", "random", "randint", "randrange", "uniform", "choice",
                         "choices", "shuffle", "sample", "gauss", "normalvariate", "getrandbits",
                         "Random"}),
    "time": frozenset({"time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic",
                       "monotonic_ns", "process_time", "sleep"}),
    "json": frozenset({"dumps", "loads", "JSONDecodeError"}),
    "re": frozenset({"compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall",
                     "finditer", "escape", "IGNORECASE", "I", "MULTILINE", "M", "DOTALL", "S",
                     "VERBOSE", "X", "ASCII", "A", "Pattern", "Match", "error"}),
}
_TYPING_EXTRA = frozenset({"cast", "overload", "final", "get_args", "get_origin",
                           "no_type_check", "runtime_checkable"})
# Attribute names refused on any object: modules torch and others re-export (torch.sys,
# torch.ctypes, cpp_extension.setuptools, ...), frames and code objects, helpers that evaluate
# strings, load native code or read files.
_DENIED_ATTRS = frozenset({
    "sys", "os", "ctypes", "gc", "inspect", "importlib", "builtins", "threading", "_thread",
    "subprocess", "multiprocessing", "signal", "pickle", "marshal", "types", "traceback", "code",
    "codeop", "runpy", "pdb", "bdb", "shutil", "tempfile", "socket", "mmap", "atexit", "resource",
    "posix", "fcntl", "pty", "concurrent", "copyreg", "dis", "linecache", "faulthandler",
    "tracemalloc", "io", "pathlib", "glob", "site", "sysconfig", "zipimport", "pkgutil", "asyncio",
    "selectors", "operator", "weakref", "setuptools", "pkg_resources", "distutils", "sympy",
    "pip", "jinja2", "yaml", "dill", "cloudpickle", "pydoc", "fsspec", "urllib", "requests",
    "sympify", "lambdify", "parse_expr", "CUDAPluggableAllocator", "change_current_allocator",
    "tunable", "from_file", "logging", "platform",
    "tb_frame", "tb_next", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "co_code", "co_consts",
    "func_globals", "func_code", "load_library", "get_type_hints", "ForwardRef", "settrace",
    "setprofile",
})
# Identifiers of the machinery the runtime refusal is made of (torch function and dispatch modes,
# dispatch keys): refused in any attribute name.
_GUARD_RE = re.compile(r"torch_function|torch_dispatch|TorchFunction|TorchDispatch|dispatch_mode|"
                       r"DispatchMode|mode_stack|DisableTorch|disabled_torch|DispatchKey|"
                       r"dispatch_key|PythonDispatcher|python_dispatch|TLSSnapshot|_pop_mode|"
                       r"_push_mode|enable_python_dispatcher")
_SAFE_DUNDER_ATTRS = frozenset({"__init__", "__name__", "__doc__", "__qualname__", "__version__",
                                "__module__", "__file__"})
_SAFE_DUNDER_NAMES = frozenset({"__name__", "__file__", "__doc__"})
# Reflection on the candidate's own instance (`self.__dict__` in an extra_repr, a
# `self.__class__.__name__`): the first attribute of a chain whose base is `self` only; what
# follows is checked as usual (`self.__class__.__mro__` stays refused).
_OWN_DUNDER_ATTRS = frozenset({"__dict__", "__class__"})
_STORABLE_DUNDER_NAMES = frozenset({"__all__", "__slots__", "__constants__", "__version__"})
_SAFE_DUNDER_DEFS = frozenset({"__init__", "__repr__", "__str__", "__len__", "__iter__", "__next__",
                               "__getitem__", "__contains__", "__enter__", "__exit__",
                               "__post_init__", "__hash__", "__eq__", "__ne__", "__lt__", "__le__",
                               "__gt__", "__ge__", "__bool__"})
_DANGEROUS_BUILTINS = frozenset({"eval", "exec", "compile", "__import__", "globals", "locals",
                                 "vars", "open", "input", "breakpoint", "help", "getattr",
                                 "setattr", "delattr"})
# torch.<first>...: refused as tampering (they reach torch internals, other processes, files or
# code the check cannot see), or compute that runs later than where it appears.
_TORCH_DENIED = {
    "overrides": "it can switch off the harness's torch-compute refusal",
    "library": "it registers kernels into torch's dispatcher",
    "multiprocessing": "it starts processes", "distributed": "it starts processes",
    "hub": "it downloads and runs code", "package": "it loads pickled code",
    "fx": "it generates and runs code", "export": "it traces and runs code",
    "futures": "it runs work on other threads", "load": "it reads files and runs pickled code",
    "save": "it writes files", "classes": "it loads native code",
    "jit": "it compiles code (and evaluates type comments) the check cannot see",
    "compiler": "it loads compiled artifacts", "onnx": "it traces models and writes files",
    "serialization": "it reads files and runs pickled code",
}
_TORCH_UTILS_OK = frozenset({"cpp_extension", "dlpack", "checkpoint", "benchmark", "hooks"})
# Private torch names honest code copies from torch's own layers (nn.Linear's reset_parameters,
# nn.Conv2d's argument helpers): allowed as the last name of a torch chain.
_TORCH_PRIVATE_OK = frozenset({"_calculate_fan_in_and_fan_out", "_calculate_correct_fan",
                               "_pair", "_single", "_triple", "_quadruple", "_ntuple",
                               "_reverse_repeat_tuple", "_assert"})
_DEFERRED = {  # compute that runs later than the line it appears on
    ("compile",): "torch.compile", ("vmap",): "torch.vmap",
    ("func",): "torch.func", ("cuda", "graph"): "CUDA graph capture",
    ("cuda", "graphs"): "CUDA graph capture", ("cuda", "CUDAGraph"): "CUDA graph capture",
    ("cuda", "make_graphed_callables"): "CUDA graph capture",
    ("cuda", "graph_pool_handle"): "CUDA graph capture",
}
# torch.jit.script and torch.jit.trace compile the file's own functions (source the check has
# read) and torch's modules: compute run later, as torch.compile (a note under kernelbench; CUDA-L1
# scripts its torch layers). The rest of torch.jit stays tampering (load, CompilationUnit from a
# string, fork, the private modules).
_JIT_DEFERRED = frozenset({("jit", "script"), ("jit", "trace")})
_COMPUTE_NAMESPACES = (("nn", "functional"), ("nn", "init"), ("linalg",), ("fft",), ("special",),
                       ("sparse",), ("nested",), ("masked",), ("ops",), ("distributions",))
_BACKEND_FLAGS = frozenset({"allow_tf32", "benchmark", "deterministic", "enabled",
                            "allow_fp16_reduced_precision_reduction",
                            "allow_bf16_reduced_precision_reduction", "benchmark_limit"})
# Methods of Python's own containers and strings: a call x.name() with one of these names is
# not known to be a Tensor method (a set's add, a list's sort), so it is left to the runtime guard.
_CONTAINER_METHODS = frozenset(
    n for t in (list, dict, set, frozenset, tuple, str, bytes, int, float, complex)
    for n in dir(t) if not n.startswith("_"))
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod", "property"})
# Class decorators that return the class they are given (so the name is still the file's class).
_SAME_CLASS_DECORATORS = frozenset({("dataclasses", "dataclass"), ("functools", "total_ordering")})
# Methods of nn.Module that iterate over its own modules and tensors, and the attributes that
# would let other objects in (ModuleList.insert does not check its argument either).
_OWN_ITERATORS = frozenset({"modules", "children", "parameters", "buffers"})
_MODULE_INTERNALS = frozenset({"_modules", "_parameters", "_buffers"})
# Methods that read a dict.
_DICT_READS = frozenset({"get", "items", "keys", "values", "copy"})
# Builtins that make a new object.
_FRESH_BUILTINS = frozenset({"dict", "list", "set", "tuple", "frozenset", "int", "float", "str",
                             "bool", "bytes", "complex", "range", "enumerate", "zip", "object"})
_INIT_HOOKS = frozenset({"reset_parameters", "_reset_parameters"})  # called by torch's __init__s
_MAIN_GUARD = "__main__"

_REFUSE_WHY = "it can switch off the harness's torch-compute refusal"
_COMPUTE_HINT = ("compute with your own kernels (allowed from torch in forward(): allocation, "
                 "shape/metadata, views, copies)")


class CheckerError(Exception):
    """The checker itself cannot run (no torch installation, refusal.py unreadable)."""


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    code: str  # TAMPERING, FALLBACK or COMPUTE
    message: str

    def text(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class Verdict:
    status: str  # ok | refused | invalid
    code: str = ""
    message: str = ""
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: int = 0

    def to_json(self, profile: str, seconds: float) -> dict[str, object]:
        return {"status": self.status, "profile": profile, "code": self.code,
                "message": self.message,
                "errors": [f.text() for f in self.findings[:MAX_REPORTED]] or
                ([self.message] if self.message else []),
                "findings": [{"file": f.file, "line": f.line, "code": f.code,
                              "message": f.message} for f in self.findings[:MAX_FINDINGS]],
                "notes": self.notes[:MAX_REPORTED], "files": self.files,
                "seconds": round(seconds, 3)}


def _invalid(message: str) -> Verdict:
    return Verdict("invalid", LOAD_FAILED, message)


# ---- what torch and refusal.py say, read as text ----------------------------------------------

@dataclass(frozen=True)
class Facts:
    allowed_torch: frozenset[str]
    allowed_tensor: frozenset[str]
    torch_functions: frozenset[str]  # torch.<name> functions (refused at run time unless allowed)
    tensor_methods: frozenset[str]  # Tensor methods (refused at run time unless allowed)
    torch_root: str  # the torch package directory


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckerError(f"cannot read {path}: {exc}") from exc


def _literal_sets(path: str, names: Sequence[str]) -> dict[str, frozenset[str]]:
    """Module-level ``NAME = frozenset({...})`` literals of a Python file, by name."""
    found: dict[str, frozenset[str]] = {}
    for node in ast.parse(_read_text(path)).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "frozenset" and len(node.value.args) == 1):
            found[node.targets[0].id] = frozenset(ast.literal_eval(node.value.args[0]))
    missing = [n for n in names if n not in found]
    if missing:
        raise CheckerError(f"{path} has no literal {', '.join(missing)}")
    return found


def _class_defs(text: str, cls: str) -> set[str]:
    """Names of the methods of a top-level class in a .py/.pyi text (without parsing all of it)."""
    start = text.find(f"\nclass {cls}")
    if start < 0:
        return set()
    end = text.find("\nclass ", start + 1)
    body = text[start:end if end > 0 else len(text)]
    return set(re.findall(r"^    (?:async )?def (\w+)\(", body, re.MULTILINE))


@functools.lru_cache(maxsize=1)
def facts() -> Facts:
    """refusal.py's allowlists and torch's function and Tensor method names (no torch import)."""
    here = os.path.dirname(os.path.abspath(__file__))
    lists = _literal_sets(os.path.join(here, "refusal.py"), ("ALLOWED_TORCH", "ALLOWED_TENSOR"))
    spec = importlib.util.find_spec("torch")  # finds the package; runs none of its code
    if spec is None or not spec.submodule_search_locations:
        raise CheckerError("torch is not installed for this Python")
    root = list(spec.submodule_search_locations)[0]
    functions = set(re.findall(r"^def (\w+)\(",
                               _read_text(os.path.join(root, "_C", "_VariableFunctions.pyi")),
                               re.MULTILINE))
    for node in ast.parse(_read_text(os.path.join(root, "functional.py"))).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                 for t in node.targets)):
            functions |= set(ast.literal_eval(node.value))
    methods = _class_defs(_read_text(os.path.join(root, "_C", "__init__.pyi")), "TensorBase")
    methods |= _class_defs(_read_text(os.path.join(root, "_tensor.py")), "Tensor")
    if len(functions) < 100 or len(methods) < 100:
        raise CheckerError(f"torch at {root} has no usable stubs")
    functions = {n for n in functions if not n.startswith("__")}  # operators: not decidable
    return Facts(lists["ALLOWED_TORCH"], lists["ALLOWED_TENSOR"], frozenset(functions),
                 frozenset(m for m in methods if not m.startswith("__")), root)


@functools.lru_cache(maxsize=1024)
def _module_imports(path: str, package: str) -> dict[str, str]:
    """The names a module file binds by import at its top level (also inside top-level if/try
    blocks), each to the dotted name it imports; package is the module's own package, for
    relative imports. Read as text: nothing is imported."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found: dict[str, str] = {}
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            for a in node.names:
                found[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                    a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([base] if base else [])])
            for a in node.names:
                if a.name != "*":
                    found[a.asname or a.name] = f"{base}.{a.name}"
        elif isinstance(node, (ast.If, ast.Try)):
            todo.extend(node.body)
            todo.extend(node.orelse)
            if isinstance(node, ast.Try):
                todo.extend(node.finalbody)
                for h in node.handlers:
                    todo.extend(h.body)
    return found


@functools.lru_cache(maxsize=8)
def _package_root(name: str) -> str | None:
    """The directory holding the installed package `name` (found, not imported)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(list(spec.submodule_search_locations)[0])


@functools.lru_cache(maxsize=4096)
def _foreign_module(chain: tuple[str, ...]) -> tuple[int, str] | None:
    """For a chain into an installed package (torch.nn.functional.np), the first name that is
    a module the package imports from elsewhere, as (index, what it is); None when every name is
    the package's own (or no longer a module)."""
    top = chain[0]
    base = _package_root(top)
    if base is None:
        return None
    module = [top]
    for i, name in enumerate(chain[1:], 1):
        here = os.path.join(base, *module)
        if os.path.isfile(os.path.join(here, name + ".py")) or \
                os.path.isfile(os.path.join(here, name, "__init__.py")):
            module.append(name)
            continue
        source = os.path.join(here, "__init__.py") if os.path.isdir(here) else here + ".py"
        package = ".".join(module if os.path.isdir(here) else module[:-1])
        target = _module_imports(source, package).get(name)
        if target is None:
            return None  # defined in the module itself: a function, class or constant
        if target.split(".")[0] != top:
            return i, target
        parts = target.split(".")
        path = os.path.join(base, *parts)
        if not (os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py"))):
            return None  # the package's own object, imported from another of its modules
        module = parts
    return None


# ---- the check of one file ----------------------------------------------------------------------

Chain = tuple[str, ...]


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _flat_chain(node: ast.AST) -> tuple[list[str], ast.AST]:
    """``a.b.c`` as (["b", "c"], Name a); the innermost non-attribute node comes back as base."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    attrs.reverse()
    return attrs, node


def _literal_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
        return node.value
    return None


@dataclass
class _Def:
    node: ast.AST  # FunctionDef, AsyncFunctionDef, Lambda, or a GeneratorExp run later
    name: str
    cls: str | None  # the class whose body holds it directly
    nested: bool  # inside another def (or a lambda / generator)
    first_param: str | None  # self / cls / ctx: attributes of it may be set
    generator: bool  # yields or awaits: its body runs when consumed, not when called
    parent: _Def | None = None  # the enclosing def
    decorated: bool = False  # has a decorator that may keep it (a root of reachability)
    uses: list[tuple[_Def | None, bool]] = field(default_factory=list)  # (scope, direct call)
    bound: set[str] | None = None  # names local to it (parameters, assignments, defs, imports)


@dataclass
class _Class:
    name: str
    bases: list[str]  # names of base classes defined in this file
    methods: dict[str, str]  # name -> "plain" | "static" | "class" | "property"
    is_function: bool  # subclasses torch.autograd.Function


class _Counts(dict[str, int]):
    def __missing__(self, key: str) -> int:
        return 0


def _binding_names(n: ast.AST) -> list[str]:
    """The names one node binds, in any scope (for classes bound once, by their statement)."""
    if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
        return [n.id]
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [n.name]
    if isinstance(n, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in n.names]
    if isinstance(n, ast.arg):
        return [n.arg]
    if isinstance(n, (ast.Global, ast.Nonlocal)):
        return list(n.names)
    bound = _binds(n)
    return [bound] if bound and not isinstance(n, ast.ClassDef) else []


def _attr_bindings(target: ast.AST, value: ast.AST | None, out: list[tuple[str, ast.AST | None]],
                   names: bool = False) -> None:
    """(attribute name, value) for each attribute a target binds (x.a = v; in a class body, with
    names, a = v); value None where it is not known (tuple unpacking, loops, with)."""
    if isinstance(target, ast.Attribute) or (names and isinstance(target, ast.Name)):
        out.append((target.attr if isinstance(target, ast.Attribute) else target.id, value))
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(
            value.elts) == len(target.elts) else [None] * len(target.elts)
        for t, v in zip(target.elts, values, strict=True):
            _attr_bindings(t, v, out, names)
    elif isinstance(target, ast.Starred):
        _attr_bindings(target.value, None, out, names)


class _Checker:
    def __init__(self, filename: str, tree: ast.Module, f: Facts) -> None:
        self.file = filename
        self.tree = tree
        self.f = f
        self.findings: list[Finding] = []
        self.compute: list[tuple[_Def | None, Finding]] = []  # scope-dependent findings
        self.aliases: dict[str, set[Chain]] = {}
        self.module_aliases: set[str] = set()  # names bound by `import X` / `import X as Y`
        self.classes: dict[str, _Class] = {}
        self.defs: dict[int, _Def] = {}
        self.functions: dict[str, list[_Def]] = {}  # module-level function name -> defs
        self.methods: dict[str, list[_Def]] = {}  # method name -> defs (any class)
        self.inits: dict[str, _Def] = {}  # class name -> its __init__
        self.init_attr_uses: list[_Def | None] = []  # scopes of `.__init__` loads
        self.loads: dict[int, set[str]] = {}  # scope key -> names and attribute names it loads
        self.ext_names: set[str] = set()  # names bound to a load_inline(...) module
        self.ext_attrs: set[str] = set()  # self.<attr> bound to one
        self.ext_funcs: set[str] = set()  # functions and methods that return one
        self.seen: set[tuple[int, str]] = set()
        self.nodes: list[ast.AST] = list(ast.walk(tree))  # every node, walked once
        self.assigns = [n for n in self.nodes if isinstance(n, (ast.Assign, ast.AnnAssign,
                                                                  ast.NamedExpr))]
        self.loop_vars: dict[int, set[str]] = {}
        self.own_classes: set[str] = set()  # module-level classes bound once, by their class
        self.binding_counts = _Counts({})  # how often the file binds each name
        self.bound_attrs: set[str] = set()  # attribute names the file binds (x.a = ..., class body)
        self.held: set[str] = set()  # ... to something that may be a class or module
        self.module_internals = False  # names nn.Module's _modules or calls x.insert(...)
        self.held_all = False  # the file writes some __dict__: any attribute may hold anything

    @staticmethod
    def _key(scope: _Def | None) -> int:
        return 0 if scope is None else id(scope.node)

    # -- findings --
    def add(self, node: ast.AST, code: str, message: str, scope: _Def | None = None,
            scoped: bool = False) -> None:
        line = getattr(node, "lineno", 0)
        full = len(self.findings) + len(self.compute) > 4 * MAX_FINDINGS
        if (line, message) in self.seen or full:
            return
        self.seen.add((line, message))
        finding = Finding(self.file, line, code, message)
        if scoped:
            self.compute.append((scope, finding))
        else:
            self.findings.append(finding)

    def tamper(self, node: ast.AST, what: str, why: str) -> None:
        self.add(node, TAMPERING, f"{what} is not allowed in candidate code ({why})")

    # -- pass 1: imports, aliases, classes, defs --
    def collect(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases.setdefault(a.asname, set()).add(tuple(a.name.split(".")))
                        self.module_aliases.add(a.asname)
                    else:
                        top = a.name.split(".")[0]
                        self.aliases.setdefault(top, set()).add((top,))
                        self.module_aliases.add(top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        chain = (*node.module.split("."), a.name)
                        self.aliases.setdefault(a.asname or a.name, set()).add(chain)
        for _ in range(8):  # alias assignments (F = torch.nn.functional), to a fixpoint
            grew = False
            for node in self.assigns:
                for name, value in self._alias_pairs(node):
                    for chain in self.resolve(value):
                        known = self.aliases.setdefault(name, set())
                        if chain not in known and len(known) < MAX_ALIASES:
                            known.add(chain)
                            grew = True
                        elif chain not in known:
                            self.tamper(node, f"binding {name} to this many modules",
                                        "the check follows at most "
                                        f"{MAX_ALIASES} per name")
            if not grew:
                break
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                self._collect_class(node)
        self._register(self.tree.body, None)
        self._collect_extensions()
        self._collect_held()

    def _collect_extensions(self) -> None:
        """Names, attributes and getters that hold a built extension module (ext =
        load_inline(...); self.ext = ext; a class attribute ext = load_inline(...); a def that
        returns one, such as an lru_cache'd loader): their functions are the candidate's own,
        whatever they are named."""
        getters = [d for d in self.defs.values() if not d.nested]

        def is_ext(value: ast.AST | None) -> bool:
            if isinstance(value, ast.Name):
                return value.id in self.ext_names
            if isinstance(value, ast.Attribute):
                return value.attr in self.ext_attrs
            if not isinstance(value, ast.Call):
                return False
            f = value.func
            if isinstance(f, ast.Name) and f.id in self.ext_funcs:
                return True
            if isinstance(f, ast.Attribute) and f.attr in self.ext_funcs and not self.resolve(f):
                return True
            return any(c[:3] == ("torch", "utils", "cpp_extension") and c[-1] in ("load_inline",
                                                                                   "load")
                       for c in self.resolve(f))
        class_body = {id(s) for n in self.nodes if isinstance(n, ast.ClassDef) for s in n.body}
        for _ in range(4):
            for node in self.assigns:
                if isinstance(node, ast.Assign) and is_ext(node.value):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            self.ext_names.add(t.id)
                            if id(node) in class_body:
                                self.ext_attrs.add(t.id)
                        elif isinstance(t, ast.Attribute):
                            self.ext_attrs.add(t.attr)
            for d in getters:
                returns = [n.value for n in _own_nodes(d.node) if isinstance(n, ast.Return)]
                if returns and all(is_ext(r) for r in returns):
                    self.ext_funcs.add(d.name)

    def _register(self, stmts: list[ast.stmt], cls: str | None) -> None:
        """The defs forward reachability reasons about (module-level functions, methods of
        module-level classes), made before any use is recorded."""
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                d = self._make_def(s, cls, None, False)
                if cls is None:
                    self.functions.setdefault(s.name, []).append(d)
                else:
                    self.methods.setdefault(s.name, []).append(d)
                    if s.name == "__init__":
                        self.inits[cls] = d
            elif isinstance(s, ast.ClassDef):
                if cls is None:
                    self._register(s.body, s.name)
            elif cls is None and not self._is_main_guard(s):
                for name in ("body", "orelse", "finalbody", "handlers", "cases"):
                    for sub in getattr(s, name, None) or []:
                        self._register(getattr(sub, "body", [sub]) if not isinstance(
                            sub, ast.stmt) else [sub], None)

    def _make_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None,
                  scope: _Def | None, nested: bool) -> _Def:
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        info = self.classes.get(cls) if cls is not None else None
        kind = info.methods.get(node.name) if info is not None else None
        privileged = info is not None and (kind in ("plain", "class", "property") or (
            kind == "static" and info.is_function))
        first = positional[0].arg if positional and privileged else None
        generator = isinstance(node, ast.AsyncFunctionDef) or any(
            isinstance(s, (ast.Yield, ast.YieldFrom, ast.Await)) for s in _own_nodes(node))
        d = _Def(node, node.name, cls, nested, first, generator, scope)
        d.decorated = any(not (isinstance(x, ast.Name) and x.id in _PLAIN_DECORATORS) and not (
            isinstance(x, ast.Attribute) and x.attr in ("setter", "getter", "deleter"))
            for x in node.decorator_list)
        self.defs[id(node)] = d
        return d

    def _alias_pairs(self, node: ast.AST) -> Iterable[tuple[str, ast.AST]]:
        targets: list[ast.AST] = []
        value: ast.AST | None = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Name) and value is not None:
                yield t.id, value
            elif (isinstance(t, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
                  and len(t.elts) == len(value.elts)):
                for te, ve in zip(t.elts, value.elts, strict=True):
                    if isinstance(te, ast.Name):
                        yield te.id, ve

    def _collect_class(self, node: ast.ClassDef) -> None:
        bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
        is_function = any(c[-1] == "Function" for b in node.bases for c in self.resolve(b)) or \
            any(isinstance(b, ast.Attribute) and b.attr == "Function" for b in node.bases)
        if any(c[:2] == ("torch", "Tensor") or c[:3] == ("torch", "_tensor", "Tensor")
               for b in node.bases for c in self.resolve(b)):
            self.tamper(node, f"class {node.name}, a torch.Tensor subclass",
                        "its __torch_function__ and __torch_dispatch__ would run candidate code "
                        "inside the harness's own work on the outputs; a lazy tensor can defer "
                        "work past the timed call (KernelBench's lazy_eval check)")
        methods: dict[str, str] = {}
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "plain"
                for d in item.decorator_list:
                    dn = d.id if isinstance(d, ast.Name) else d.attr if isinstance(
                        d, ast.Attribute) else ""
                    kind = {"staticmethod": "static", "classmethod": "class",
                            "property": "property"}.get(dn, kind)
                methods[item.name] = kind
        self.classes[node.name] = _Class(node.name, bases, methods, is_function)

    def resolve(self, node: ast.AST) -> set[Chain]:
        """The dotted names (module chains) an expression stands for, through imports and alias
        assignments; empty when it is not such a chain."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "getattr" and len(node.args) >= 2:
            name = _literal_name(node.args[1])
            return {(*c, name) for c in self.resolve(node.args[0])} if name else set()
        attrs, base = _flat_chain(node)
        if not isinstance(base, ast.Name) or base.id not in self.aliases:
            return set()
        return {(*c, *attrs) for c in self.aliases[base.id]}

    # -- what a chain is --
    def is_module(self, chain: Chain) -> bool:
        if len(chain) == 1:
            return chain[0] in ALLOWED_IMPORTS or chain[0] in self.module_aliases
        if chain[0] == "torch":
            path = os.path.join(self.f.torch_root, *chain[1:])
            return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path,
                                                                               "__init__.py"))
        return ".".join(chain) in _KNOWN_SUBMODULES

    def chain_issue(self, chain: Chain) -> tuple[str, str] | None:
        """(kind, message) for a chain that is refused wherever it appears: kind "tamper" or
        "deferred" (compute that runs later); None otherwise."""
        root = chain[0]
        if root not in ALLOWED_IMPORTS:
            return None
        foreign = _foreign_module(chain) if root in ("torch", "numpy", "triton") else None
        if foreign is not None:
            i, target = foreign
            return "tamper", (f"{'.'.join(chain[:i + 1])} is not allowed in candidate code (it is "
                              f"{target}, which {root} imports from elsewhere)")
        if root == "torch":
            return self._torch_issue(chain)
        rest = chain[1:]
        private = next((p for p in rest if p.startswith("_") and not _dunder(p)), None)
        if private is not None:
            return "tamper", (f"{'.'.join(chain)} is not allowed in candidate code (a module's "
                              f"private names reach what it imported: {private})")
        module = ".".join(chain[:2]) if ".".join(chain[:2]) in _MODULE_ATTRS else root
        allowed = _MODULE_ATTRS.get(module, None)
        after = chain[len(module.split(".")):]
        if module in _MODULE_ATTRS and allowed is not None and after and after[0] not in allowed:
            return "tamper", (f"{module}.{after[0]} is not allowed in candidate code (allowed "
                              f"from {module}: {', '.join(sorted(allowed))})")
        if root in ("typing", "typing_extensions") and rest and not (
                rest[0][:1].isupper() or rest[0] in _TYPING_EXTRA):
            return "tamper", (f"{'.'.join(chain)} is not allowed in candidate code (allowed from "
                              f"{root}: type names, cast, overload, final, get_args, get_origin)")
        if root == "os" and rest and rest[0] not in _OS_ALLOWED:
            return "tamper", (f"os.{rest[0]} is not allowed in candidate code (only os.environ, "
                              "os.getenv and os.path: no processes or files)")
        if root == "numpy" and any(p in _NUMPY_DENIED or p.startswith("_") for p in rest):
            return "tamper", (f"{'.'.join(chain)} is not allowed in candidate code (it reads or "
                              "writes files or raw memory)")
        if root in ("typing", "typing_extensions") and any(p in _TYPING_DENIED for p in rest):
            return "tamper", (f"{'.'.join(chain)} is not allowed in candidate code (it evaluates "
                              "strings as code)")
        return None

    def _torch_issue(self, chain: Chain) -> tuple[str, str] | None:
        name = ".".join(chain)
        for i, part in enumerate(chain[1:], 1):
            if part.startswith("_") and not _dunder(part) and not (
                    i == len(chain) - 1 and part in _TORCH_PRIVATE_OK):
                prefix = ".".join(chain[:i + 1])
                return "tamper", (f"{prefix} is not allowed in candidate code (torch's private "
                                  f"internals; {_REFUSE_WHY})")
        rest = chain[1:]
        if not rest:
            return None
        if rest in _JIT_DEFERRED:
            return "deferred", (f"{name} is torch compute (TorchScript runs the torch ops it "
                                f"compiled later, where the harness cannot refuse them): "
                                f"{_COMPUTE_HINT}")
        if rest[0] in _TORCH_DENIED:
            return "tamper", (f"torch.{rest[0]} is not allowed in candidate code "
                              f"({_TORCH_DENIED[rest[0]]})")
        if rest[0] == "utils" and len(rest) > 1 and rest[1] not in _TORCH_UTILS_OK:
            return "tamper", (f"torch.utils.{rest[1]} is not allowed in candidate code (allowed "
                              f"from torch.utils: {', '.join(sorted(_TORCH_UTILS_OK))})")
        if rest[0] == "ops" and len(rest) > 1 and rest[1] in ("load_library", "import_module"):
            return "tamper", f"{name} is not allowed in candidate code (it loads native code)"
        for key, what in _DEFERRED.items():
            if rest[:len(key)] == key:
                return "deferred", (f"{name} is torch compute ({what} runs torch ops later, where "
                                    f"the harness cannot refuse them): {_COMPUTE_HINT}")
        return None

    def is_compute(self, chain: Chain) -> bool:
        """A torch function whose call the runtime guard refuses (not an allowed one)."""
        if chain[0] != "torch" or len(chain) < 2:
            return False
        rest = chain[1:]
        if len(rest) == 1:
            return rest[0] in self.f.torch_functions and rest[0] not in self.f.allowed_torch
        if rest[0] == "Tensor" and len(rest) == 2:
            return rest[1] in self.f.tensor_methods and rest[1] not in self.f.allowed_tensor
        return any(rest[:len(p)] == p and len(rest) > len(p) for p in _COMPUTE_NAMESPACES)

    # -- pass 2: every node --
    def run(self) -> None:
        self.collect()
        self.body(self.tree.body, None)

    def body(self, stmts: list[ast.stmt], scope: _Def | None) -> None:
        for stmt in stmts:
            if scope is None and self._is_main_guard(stmt):
                assert isinstance(stmt, ast.If)
                self.body(stmt.orelse, scope)  # the `if __name__ == "__main__":` body never runs
                continue
            self.visit(stmt, scope, None, 1)

    @staticmethod
    def _is_main_guard(stmt: ast.stmt) -> bool:
        if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
            return False
        t = stmt.test
        sides = [t.left, *t.comparators]
        return (len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and len(sides) == 2
                and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
                and any(isinstance(s, ast.Constant) and s.value == _MAIN_GUARD for s in sides))

    def visit(self, node: ast.AST, scope: _Def | None, parent: ast.AST | None,
              depth: int) -> None:
        if depth > MAX_DEPTH + 10:
            return  # checked before the visit; a guard against a bug here
        if isinstance(node, (ast.Attribute, ast.Name)):
            self.chain(node, scope, parent, depth)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self.function(node, scope, depth)
            return
        if isinstance(node, ast.ClassDef):
            self.klass(node, scope, depth)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node)
            return
        if isinstance(node, ast.GeneratorExp) and not self._consumed(parent):
            inner = self._new_def(node, "<genexpr>", scope)
            for child in ast.iter_child_nodes(node):
                self.visit(child, inner, node, depth + 1)
            return
        if isinstance(node, ast.Call):
            self.call(node, scope, parent)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            self.store(node, scope)
            if isinstance(node, ast.AnnAssign):
                self.annotation(node.annotation, scope, depth)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for n in node.names:
                if _dunder(n):
                    self.tamper(node, f"declaring {n}", "dunder names are the harness's")
        bound = _binds(node)
        if bound and _dunder(bound) and bound not in _STORABLE_DUNDER_NAMES:
            self.tamper(node, f"binding {bound}", "dunder names are the harness's")
        elif isinstance(node, ast.arg) and node.annotation is not None:
            self.annotation(node.annotation, scope, depth)
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope, node, depth + 1)

    @staticmethod
    def _consumed(parent: ast.AST | None) -> bool:
        """A generator expression passed to a call (tuple(...), nn.ModuleList(...)) runs there;
        one stored or returned runs later, wherever it is consumed."""
        return isinstance(parent, ast.Call)

    def annotation(self, node: ast.AST, scope: _Def | None, depth: int) -> None:
        """String annotations are code too (typing.get_type_hints evaluates them)."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                try:
                    expr = ast.parse(sub.value, mode="eval")
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    self.tamper(sub, "an annotation string that is not an expression",
                                "annotations may be evaluated as code")
                    continue
                if _depth(expr) + depth > MAX_DEPTH:
                    self.tamper(sub, "a deeply nested annotation string", "it cannot be checked")
                    continue
                for n in ast.walk(expr):
                    ast.copy_location(n, sub)
                self.visit(expr.body, scope, None, depth + 1)

    # -- names and attribute chains --
    def chain(self, node: ast.Attribute | ast.Name, scope: _Def | None, parent: ast.AST | None,
              depth: int) -> None:
        attrs, base = _flat_chain(node)
        ctx = node.ctx
        chains = self.resolve(node)
        for c in chains:
            issue = self.chain_issue(c)
            if issue is not None:
                self.add(node, TAMPERING if issue[0] == "tamper" else COMPUTE, issue[1])
        own = isinstance(base, ast.Name) and base.id == "self"
        new = (isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
               and base.func.id == "super" and scope is not None and scope.name == "__new__")
        for i, a in enumerate(attrs):
            if not ((own and i == 0 and a in _OWN_DUNDER_ATTRS) or (new and i == 0 and
                                                                    a == "__new__")):
                self.attr_name(node, a)
        self.loads.setdefault(self._key(scope), set()).update(attrs)
        if isinstance(base, ast.Name):
            self.name(base, scope, ctx if not attrs else ast.Load(), node if attrs else parent)
            if not isinstance(ctx, ast.Store) or attrs:
                self.loads.setdefault(self._key(scope), set()).add(base.id)
        else:
            self.visit(base, scope, node, depth + 1)
        if isinstance(ctx, (ast.Store, ast.Del)) and isinstance(node, ast.Attribute):
            self.attr_store(node, scope)
        if isinstance(ctx, ast.Load):
            self.value_use(node, chains, scope, parent)
            self.record_use(node, attrs, base, scope, parent)

    def attr_name(self, node: ast.AST, a: str) -> None:
        if _dunder(a) and a not in _SAFE_DUNDER_ATTRS:
            self.tamper(node, f"the attribute {a}", "reflection reaches the harness's objects")
        elif a in _DENIED_ATTRS:
            self.tamper(node, f"the attribute .{a}", "it reaches modules, frames or code the "
                                                      "harness relies on")
        elif _GUARD_RE.search(a):
            self.tamper(node, f"the attribute .{a}", _REFUSE_WHY)

    def name(self, node: ast.Name, scope: _Def | None, ctx: ast.expr_context,
             parent: ast.AST | None) -> None:
        n = node.id
        if isinstance(ctx, ast.Load):
            if n in ("getattr", "setattr", "delattr") and isinstance(parent, ast.Call) and \
                    parent.func is node:
                return  # reflective() decides
            if n in _DANGEROUS_BUILTINS and not self.local(n, scope):
                self.tamper(node, f"{n}", "it runs, imports or reflects on code the check "
                                          "cannot see" if n not in ("open", "input") else
                            "candidate code may not read files or input")
            elif _dunder(n) and n not in _SAFE_DUNDER_NAMES:
                self.tamper(node, n, "dunder names are the harness's")
        elif _dunder(n) and n not in _STORABLE_DUNDER_NAMES:
            self.tamper(node, f"assigning {n}", "dunder names are the harness's")

    def local(self, n: str, scope: _Def | None) -> bool:
        """Whether n is local to scope or an enclosing def (so not a builtin there). Module-level
        bindings do not count: one that did not run leaves the builtin visible."""
        while scope is not None:
            if scope.bound is None:
                scope.bound = _bound_names(scope.node)
            if n in scope.bound:
                return True
            scope = scope.parent
        return False

    def value_use(self, node: ast.AST, chains: set[Chain], scope: _Def | None,
                  parent: ast.AST | None) -> None:
        """A module or a compute function used as a value (stored, passed, returned)."""
        if not chains:
            return
        if isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Call) and
                                                 parent.func is node):
            return
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and \
                parent.value is node and self._alias_target(parent):
            return  # an alias (F = torch.nn.functional): followed by resolve()
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and (
                parent.func.id in ("isinstance", "issubclass") or (
                    parent.func.id in ("getattr", "hasattr") and parent.args
                    and parent.args[0] is node)):
            return  # getattr(torch, "name") is checked as torch.name
        for c in chains:
            if self.is_module(c):
                self.tamper(node, f"using the module {'.'.join(c)} as a value",
                            "modules may only be used through their attributes, so the check "
                            "can follow them")
            elif self.is_compute(c):
                self.add(node, COMPUTE, f"{'.'.join(c)} is torch compute passed or stored as a "
                                        f"value (it would run where the harness cannot refuse "
                                        f"it): {_COMPUTE_HINT}")

    @staticmethod
    def _alias_target(parent: ast.AST) -> bool:
        if isinstance(parent, ast.Assign):
            return all(isinstance(t, ast.Name) for t in parent.targets)
        if isinstance(parent, ast.AnnAssign):
            return isinstance(parent.target, ast.Name)
        return isinstance(parent, ast.NamedExpr)

    def record_use(self, node: ast.AST, attrs: list[str], base: ast.AST, scope: _Def | None,
                   parent: ast.AST | None) -> None:
        """Uses of the file's own functions, methods and classes (for forward reachability)."""
        direct = isinstance(parent, ast.Call) and parent.func is node
        if not attrs and isinstance(base, ast.Name):
            for d in self.functions.get(base.id, []):
                d.uses.append((scope, direct))
            inert = isinstance(parent, ast.ClassDef) or (
                isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
                and parent.func.id in ("super", "isinstance", "issubclass") and node in parent.args)
            if base.id in self.classes and not inert:
                for cls in self._with_subclasses_of(base.id, reverse=True):
                    if cls in self.inits:
                        self.inits[cls].uses.append((scope, direct))
        elif attrs:
            if attrs[-1] == "__init__":
                self.init_attr_uses.append(scope)
            for d in self.methods.get(attrs[-1], []):
                d.uses.append((scope, direct))
            self.unbound_method(node, attrs, base, scope, parent)

    def _with_subclasses_of(self, name: str, reverse: bool) -> set[str]:
        """name and, with reverse, the file's classes it inherits from (whose __init__ runs when
        name is constructed), transitively."""
        out, todo = {name}, [name]
        while todo:
            cur = todo.pop()
            nxt = self.classes[cur].bases if reverse and cur in self.classes else []
            for b in nxt:
                if b not in out and b in self.classes:
                    out.add(b)
                    todo.append(b)
        return out

    def unbound_method(self, node: ast.AST, attrs: list[str], base: ast.AST, scope: _Def | None,
                       parent: ast.AST | None) -> None:
        """C.m(obj) for a method m of a file class C binds `self` to anything: only the caller's
        own self may be passed (else `self.x = ...` in m would patch obj)."""
        if len(attrs) != 1 or not isinstance(base, ast.Name) or base.id not in self.classes:
            return
        cls = self.classes[base.id]
        kind = cls.methods.get(attrs[0])
        if kind not in ("plain", "static") or (kind == "static" and not cls.is_function):
            return
        own = scope.first_param if scope is not None else None
        if isinstance(parent, ast.Call) and parent.func is node:
            first = parent.args[0] if parent.args else None
            if isinstance(first, ast.Name) and first.id == own:
                return
            if isinstance(first, ast.Constant) and first.value is None:
                return  # Fn.forward(None, x): ctx.attr = ... on None cannot patch anything
        self.tamper(node, f"{base.id}.{attrs[0]} outside a call on its own instance",
                    "it can set attributes of any object")

    def attr_store(self, node: ast.Attribute, scope: _Def | None) -> None:
        """Setting attributes: of the candidate's own objects only (self, cls, ctx; a class of
        the file; type(self); a loop variable over self's modules/parameters), and deeper only
        through objects the file makes (self.conv.weight.data = ...), not through ones that may
        be a class or module (self.ev = torch.cuda.Event; self.ev.elapsed_time = ...);
        torch.backends flags anywhere."""
        chains = self.resolve(node)
        if any(c[:2] == ("torch", "backends") and c[-1] in _BACKEND_FLAGS for c in chains):
            return
        path: list[ast.AST] = []  # the objects between the root and the one whose attr is set
        root: ast.AST = node.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            path.append(root)
            root = root.value
        what = ".".join(next(iter(chains))) if chains else ast.unparse(node)[:80]
        if not chains and self._own_root(root, scope):
            why = self._held_path(path)
            if why is None:
                return
            self.tamper(node, f"setting {what}", why)
            return
        self.tamper(node, f"setting {what}", "only attributes of the candidate's own objects "
                                             "(self, cls, ctx, its classes) may be set: "
                                             "monkeypatching changes what the harness runs")

    def _own_root(self, root: ast.AST, scope: _Def | None) -> bool:
        """The candidate's own object: self (cls, ctx) not rebound in its method, a loop variable
        over self's modules or parameters, a class of the file (bound once, by its class
        statement), or type(self)."""
        if isinstance(root, ast.Call):
            f = root.func
            return (isinstance(f, ast.Name) and f.id == "type" and not self.binding_counts["type"]
                    and len(root.args) == 1 and not root.keywords and scope is not None
                    and isinstance(root.args[0], ast.Name)
                    and root.args[0].id == scope.first_param
                    and not self._rebound(scope, scope.first_param))
        if not isinstance(root, ast.Name):
            return False
        if root.id in self.own_classes:
            return True
        if scope is None:
            return False
        if root.id == scope.first_param:
            return not self._rebound(scope, root.id)
        return root.id in self._self_loop_vars(scope)

    def _rebound(self, scope: _Def, name: str | None) -> bool:
        """Whether a def assigns name in its own body (a parameter rebound: self = other)."""
        return any(isinstance(n, ast.Name) and n.id == name and
                   isinstance(n.ctx, (ast.Store, ast.Del)) for n in _own_nodes(scope.node))

    def _held_path(self, path: list[ast.AST]) -> str | None:
        """Why a store through these objects may patch a class or module, or None: each
        attribute on the way must be bound, wherever this file binds it, to an object made there
        (a call of a torch class or function, a class of the file, load_inline, a literal); no
        item on the way (a list, a dict, even an nn.ModuleList, can be given a class)."""
        for p in path:
            if isinstance(p, ast.Subscript):
                return ("an item reached this way may be a class or module (containers can hold "
                        "any object), so setting its attributes could patch what the harness "
                        "runs")
            if isinstance(p, ast.Attribute) and (self.held_all or p.attr in self.held):
                return (f"{p.attr} is bound in this file to something that may be a class or "
                        "module (not an object made here), so setting its attributes could "
                        "patch what the harness runs")
        return None

    def _self_loop_vars(self, scope: _Def) -> set[str]:
        """Loop variables over self's own modules or parameters (for m in self.modules(), for p
        in self.conv.parameters()), bound only by their loop, in a file that does not reach
        into what those iterate (_modules, ModuleList.insert, __dict__ writes, its own
        modules() method: each could put a class there)."""
        names = self.loop_vars.get(id(scope.node))
        if names is not None:
            return names
        names = self.loop_vars[id(scope.node)] = set()
        if scope.first_param is None or self._rebound(scope, scope.first_param) or \
                self.held_all or self.module_internals:
            return names
        for sub in _own_nodes(scope.node):
            if not (isinstance(sub, ast.For) and isinstance(sub.target, ast.Name)):
                continue
            it = sub.iter
            if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and
                    it.func.attr in _OWN_ITERATORS and it.func.attr not in self.methods and
                    it.func.attr not in self.bound_attrs and not it.args and not it.keywords):
                continue
            it = it.func.value
            path: list[ast.AST] = []
            while isinstance(it, (ast.Attribute, ast.Subscript)):
                path.append(it)
                it = it.value
            if isinstance(it, ast.Name) and it.id == scope.first_param and \
                    self._held_path(path) is None and sum(
                        isinstance(n, ast.Name) and n.id == sub.target.id
                        and isinstance(n.ctx, (ast.Store, ast.Del))
                        for n in _own_nodes(scope.node)) == 1:
                names.add(sub.target.id)
        return names

    # -- what the file binds (own classes; attributes that may hold a class or module) --
    def _collect_held(self) -> None:
        counts: dict[str, int] = {}
        for n in self.nodes:
            for name in _binding_names(n):
                counts[name] = counts.get(name, 0) + 1
        self.binding_counts = _Counts(counts)
        for n in self.tree.body:
            if isinstance(n, ast.ClassDef) and counts.get(n.name) == 1 and all(
                    any(c in _SAME_CLASS_DECORATORS for c in self.resolve(
                        d.func if isinstance(d, ast.Call) else d)) for d in n.decorator_list):
                self.own_classes.add(n.name)
        bindings: list[tuple[str, ast.AST | None]] = []
        parents = {id(c): n for n in self.nodes for c in ast.iter_child_nodes(n)}
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    _attr_bindings(t, n.value, bindings)
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                _attr_bindings(n.target, n.value, bindings)
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                _attr_bindings(n.target, None, bindings)
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                _attr_bindings(n.optional_vars, None, bindings)
            elif isinstance(n, ast.ClassDef):
                for item in n.body:
                    if isinstance(item, ast.Assign):
                        for t in item.targets:
                            _attr_bindings(t, item.value, bindings, names=True)
                    elif isinstance(item, ast.AnnAssign) and item.value is not None:
                        _attr_bindings(item.target, item.value, bindings, names=True)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                    n.func.id == "setattr" and len(n.args) == 3:
                lit = _literal_name(n.args[1])
                if lit is not None:
                    bindings.append((lit, n.args[2]))
            if isinstance(n, ast.Attribute) and n.attr == "__dict__":
                self._dict_use(n, parents, bindings)
            elif isinstance(n, ast.Attribute) and (n.attr in _MODULE_INTERNALS or (
                    n.attr == "insert" and isinstance(parents.get(id(n)), ast.Call))):
                self.module_internals = True
        for name, value in bindings:
            self.bound_attrs.add(name)
            if not self._fresh(value):
                self.held.add(name)

    def _dict_use(self, node: ast.Attribute, parents: dict[int, ast.AST],
                  bindings: list[tuple[str, ast.AST | None]]) -> None:
        """x.__dict__ read (extra_repr's keys, items, get, x.__dict__[k]) or written with a
        literal key (a binding of that attribute); any other use may bind any attribute."""
        up = parents.get(id(node))
        call = parents.get(id(up))
        if isinstance(up, ast.Attribute) and up.attr in _DICT_READS and \
                isinstance(call, ast.Call) and call.func is up:
            return
        if isinstance(up, ast.Subscript) and up.value is node:
            if isinstance(up.ctx, ast.Load):
                return
            key = _literal_name(up.slice)
            assign = parents.get(id(up))
            if key is not None and isinstance(assign, ast.Assign) and up in assign.targets:
                bindings.append((key, assign.value))
                return
        if isinstance(up, (ast.comprehension, ast.For)) and up.iter is node:
            return
        if isinstance(up, ast.Compare) and node in up.comparators:
            return
        if isinstance(up, ast.Call) and node in up.args and isinstance(up.func, ast.Name) and \
                up.func.id in ("len", "sorted", "list", "dict", "set", "tuple", "repr", "str"):
            return
        self.held_all = True

    def _fresh(self, value: ast.AST | None) -> bool:
        """Whether an expression makes a new object (or a literal): never a class, module or
        function that torch or the harness shares."""
        if isinstance(value, (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Set,
                              ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                              ast.BinOp, ast.UnaryOp, ast.Lambda)):
            return True
        if isinstance(value, ast.IfExp):
            return self._fresh(value.body) and self._fresh(value.orelse)
        if not isinstance(value, ast.Call):
            return False
        f = value.func
        chains = self.resolve(f)
        if chains:
            return all(self._fresh_chain(c) for c in chains)
        if isinstance(f, ast.Name):
            return f.id in self.own_classes or (
                f.id in _FRESH_BUILTINS and not self.binding_counts[f.id])
        if isinstance(f, ast.Attribute):
            if f.attr == "__new__" and isinstance(f.value, ast.Call) and \
                    isinstance(f.value.func, ast.Name) and f.value.func.id == "super":
                return True  # super().__new__(cls) in a __new__: an instance of the file's class
            return f.attr in self.f.tensor_methods and f.attr not in self.methods
        return False

    def _fresh_chain(self, c: Chain) -> bool:
        if c[0] != "torch":
            return c[-1][:1].isupper() and c[0] in ALLOWED_IMPORTS
        if c[:3] == ("torch", "utils", "cpp_extension") and c[-1] in ("load_inline", "load"):
            return True
        return c[-1][:1].isupper() or (len(c) == 2 and c[1] in self.f.torch_functions) or (
            c[1:3] in (("nn", "functional"), ("nn", "init")))

    def store(self, node: ast.stmt, scope: _Def | None) -> None:
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    for c in self.resolve(sub.value):
                        if c[:2] != ("os", "environ"):
                            self.tamper(sub, f"changing an item of {'.'.join(c)}",
                                        "monkeypatching changes what the harness runs")

    # -- calls --
    def call(self, node: ast.Call, scope: _Def | None, parent: ast.AST | None) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "delattr") and \
                not self.local(func.id, scope):
            self.reflective(node, func.id, scope, parent)
        chains = self.resolve(func)
        for c in chains:
            if self.is_compute(c):
                self.add(node, COMPUTE, f"{'.'.join(c)}() is torch compute in code that forward() "
                                        f"can reach: {_COMPUTE_HINT}", scope, scoped=True)
        if not chains and not self._extension_call(func):
            name = None
            if isinstance(func, ast.Attribute):
                name = func.attr
            elif isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and \
                    func.func.id == "getattr" and len(func.args) >= 2:
                name = _literal_name(func.args[1])
            if name and name in self.f.tensor_methods and name not in self.f.allowed_tensor \
                    and name not in _CONTAINER_METHODS:
                self.add(node, COMPUTE, f".{name}() is a torch compute method in code that "
                                        f"forward() can reach: {_COMPUTE_HINT}", scope,
                         scoped=True)

    def _extension_call(self, func: ast.AST) -> bool:
        if not isinstance(func, ast.Attribute):
            return False
        recv = func.value
        if isinstance(recv, ast.Call):  # _load_ext().fn(x), self._ext().fn(x)
            f = recv.func
            return (isinstance(f, ast.Name) and f.id in self.ext_funcs) or (
                isinstance(f, ast.Attribute) and f.attr in self.ext_funcs)
        return (isinstance(recv, ast.Name) and recv.id in self.ext_names) or (
            isinstance(recv, ast.Attribute) and recv.attr in self.ext_attrs)

    def reflective(self, node: ast.Call, fn: str, scope: _Def | None,
                   parent: ast.AST | None) -> None:
        """getattr/setattr/delattr: only with a literal name (checked like an attribute), or
        getattr(self, f"layer{i}")."""
        args = node.args
        obj = args[0] if args else None
        lit = _literal_name(args[1]) if len(args) >= 2 else None
        own = scope.first_param if scope is not None else None
        is_own = isinstance(obj, ast.Name) and obj.id == own and own is not None
        if fn == "getattr":
            if lit is not None and len(args) in (2, 3) and not node.keywords:
                self.attr_name(node, lit)
                chains = self.resolve(node)
                for c in chains:
                    issue = self.chain_issue(c)
                    if issue is not None:
                        self.add(node, TAMPERING if issue[0] == "tamper" else COMPUTE, issue[1])
                self.value_use(node, chains, scope, parent)
                return
            arg = args[1] if len(args) >= 2 else None
            if is_own and isinstance(arg, ast.JoinedStr) and arg.values and \
                    isinstance(arg.values[0], ast.Constant) and \
                    str(arg.values[0].value)[:1].isalpha():
                return
        elif lit is not None and is_own and not lit.startswith("_") and \
                len(args) == (3 if fn == "setattr" else 2) and not node.keywords:
            return
        self.tamper(node, f"{fn}() with this name", "only a literal attribute name (or "
                                                    "getattr(self, f\"name{i}\")) can be checked")

    # -- definitions --
    def _new_def(self, node: ast.AST, name: str, scope: _Def | None) -> _Def:
        """A def that is never exempt: a lambda, a generator expression run later, a def nested
        in another or in a class that is not at module level."""
        d = _Def(node, name, None, True, None, True, scope)
        self.defs[id(node)] = d
        return d

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
                 scope: _Def | None, depth: int, cls: str | None = None) -> None:
        args = node.args
        for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(default, scope, node, depth + 1)
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs,
                  *[x for x in (args.vararg, args.kwarg) if x]]
        for a in params:
            self.visit(a, scope, node, depth + 1)
        if isinstance(node, ast.Lambda):
            self.visit(node.body, self._new_def(node, "<lambda>", scope), node, depth + 1)
            return
        for dec in node.decorator_list:
            self.visit(dec, scope, node, depth + 1)
        if node.returns is not None:
            self.annotation(node.returns, scope, depth)
            self.visit(node.returns, scope, node, depth + 1)
        if node.name == "__new__" and cls is not None and not self._new_allowed(cls):
            self.tamper(node, f"defining __new__ in {cls}",
                        "the harness constructs ModelNew, and a __new__ of ModelNew or of a class "
                        "it inherits from decides what object it gets (the reference Model, for "
                        "one); a helper class of the file may define one")
        elif _dunder(node.name) and node.name not in _SAFE_DUNDER_DEFS and not (
                node.name == "__new__" and cls is not None):
            self.tamper(node, f"defining {node.name}", "it hooks into how the harness and torch "
                                                       "use objects")
        d = self.defs.get(id(node)) or self._make_def(node, cls, scope, True)
        for stmt in node.body:
            self.visit(stmt, d, node, depth + 1)

    def _new_allowed(self, cls: str) -> bool:
        """A __new__ (a singleton loader) is the file's business in a class that ModelNew, bound
        once as a class of the file, neither is nor inherits from; every base on ModelNew's
        way up must be a class of the file or an imported one (an alias could hide one)."""
        if "ModelNew" not in self.own_classes or cls not in self.own_classes:
            return False
        lineage, todo = set(), ["ModelNew"]
        while todo:
            name = todo.pop()
            if name in lineage:
                continue
            lineage.add(name)
            node = next((n for n in self.tree.body
                         if isinstance(n, ast.ClassDef) and n.name == name), None)
            if node is None:
                return False
            for b in node.bases:
                if isinstance(b, ast.Name) and b.id in self.own_classes:
                    todo.append(b.id)
                elif not self.resolve(b):
                    return False
        return cls not in lineage

    def klass(self, node: ast.ClassDef, scope: _Def | None, depth: int) -> None:
        if _dunder(node.name):
            self.tamper(node, f"binding {node.name}", "dunder names are the harness's")
        for expr in [*node.bases, *[k.value for k in node.keywords], *node.decorator_list]:
            self.visit(expr, scope, node, depth + 1)
        for k in node.keywords:
            if k.arg == "metaclass":
                self.tamper(node, "a metaclass", "it runs code when classes are made and used")
        for stmt in node.body:  # the class body runs at import time, in the enclosing scope
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and scope is None:
                self.function(stmt, scope, depth + 1, cls=node.name)
            else:
                self.visit(stmt, scope, node, depth + 1)

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                self.tamper(node, "a relative import", "only torch, math and a few standard "
                                                       "modules may be imported")
                return
            modules = [node.module]
            names = [(*node.module.split("."), a.name) for a in node.names if a.name != "*"]
            if any(a.name == "*" for a in node.names) and node.module not in _STAR_OK:
                self.tamper(node, f"from {node.module} import *",
                            "the check cannot see what a star import binds")
        else:
            modules = [a.name for a in node.names]
            names = [tuple(m.split(".")) for m in modules]
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if _dunder(bound) and bound not in _STORABLE_DUNDER_NAMES:
                self.tamper(node, f"binding {bound}", "dunder names are the harness's")
        for m in modules:
            if m.split(".")[0] not in ALLOWED_IMPORTS:
                self.tamper(node, f"import of {m}",
                            f"allowed: {', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}")
        for chain in names:
            issue = self.chain_issue(chain)
            if issue is not None:
                self.add(node, TAMPERING if issue[0] == "tamper" else COMPUTE, issue[1])
            for a in chain[1:]:
                self.attr_name(node, a)

    # -- forward reachability --
    def exempt(self) -> set[int]:
        """ids of the defs whose compute is allowed: __init__ methods and helpers that only
        code run at import time or by __init__ calls, directly (a fixpoint from above)."""
        cand: set[int] = set()
        for d in self.defs.values():
            if d.nested or d.generator or d.name == "forward":
                continue
            if d.cls is not None and d.name != "__init__" and (
                    _dunder(d.name) or self.classes.get(d.cls, None) is None
                    or self.classes[d.cls].methods.get(d.name) == "property"):
                continue
            if d.name == "__init__" or d.uses or (d.cls is not None and d.name in _INIT_HOOKS):
                cand.add(id(d.node))
        if any(s is not None and id(s.node) not in cand for s in self.init_attr_uses):
            cand -= {id(d.node) for d in self.inits.values()}
        changed = True
        while changed:
            changed = False
            for d in self.defs.values():
                if id(d.node) not in cand:
                    continue
                bad = any(not direct or (s is not None and id(s.node) not in cand)
                          for s, direct in d.uses)
                if bad:
                    cand.discard(id(d.node))
                    changed = True
            if any(s is not None and id(s.node) not in cand for s in self.init_attr_uses):
                before = len(cand)
                cand -= {id(d.node) for d in self.inits.values()}
                changed = changed or len(cand) != before
        return cand

    def reachable(self) -> set[int] | None:
        """ids of the defs the harness can reach from class ModelNew (its methods, what they
        name, and what import-time code names), or None (all of them) when ModelNew is not one
        module-level class. Code nothing names (a copy of the task's Model, get_inputs) is not
        run by the harness."""
        classes = [n for n in self.tree.body
                   if isinstance(n, ast.ClassDef) and n.name == "ModelNew"]
        bound = [n for n in self.nodes if (
            isinstance(n, ast.Name) and n.id == "ModelNew" and not isinstance(n.ctx, ast.Load)) or (
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == "ModelNew") or (isinstance(n, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name) == "ModelNew" for a in n.names))]
        if len(classes) != 1 or len(bound) != 1:
            return None
        by_class: dict[str, list[_Def]] = {}
        children: dict[int, list[_Def]] = {}
        for d in self.defs.values():
            if d.cls is not None and not d.nested:
                by_class.setdefault(d.cls, []).append(d)
            children.setdefault(self._key(d.parent), []).append(d)
        reached: set[int] = set()
        seen_classes: set[str] = set()
        todo: list[int] = [0]

        def reach(d: _Def) -> None:
            if id(d.node) not in reached:
                reached.add(id(d.node))
                todo.append(id(d.node))

        def reach_class(name: str) -> None:
            if name in self.classes and name not in seen_classes:
                seen_classes.add(name)
                for d in by_class.get(name, []):
                    reach(d)
                for b in self.classes[name].bases:
                    reach_class(b)

        reach_class("ModelNew")
        for d in self.defs.values():
            if d.decorated or (d.nested and d.parent is None):
                reach(d)
        while todo:
            key = todo.pop()
            for name in self.loads.get(key, ()):
                for d in [*self.functions.get(name, []), *self.methods.get(name, [])]:
                    reach(d)
                reach_class(name)
            for d in children.get(key, []) if key else []:
                reach(d)
        return reached

    def result(self, profile: str) -> tuple[list[Finding], list[str]]:
        """The findings that refuse under the profile, and notes on what it allows."""
        out = list(self.findings)
        ok = self.exempt()
        live = self.reachable()
        compute = [f for s, f in self.compute if s is not None and id(s.node) not in ok
                   and (live is None or id(s.node) in live)]
        notes: list[str] = []
        if profile == "cuda-agent":
            out += compute
        else:
            notes = [f"{f.file}:{f.line}: {f.message.split(':')[0]} (allowed under the "
                     "kernelbench rules)"
                     for f in [*[f for f in out if f.code == COMPUTE], *compute]]
            out = [f for f in out if f.code != COMPUTE] + self.bypasses(live)
        out.sort(key=lambda f: (_SEVERITY[f.code], f.line))
        return out, notes

    def bypasses(self, live: set[int] | None) -> list[Finding]:
        """KernelBench's code_bypass: a try statement in a def forward() can reach (an
        extension call that fails would fall back to other code: a kernel that fails must
        fail), and a ModelNew whose forward is inherited from a class named Model (the
        reference's own forward runs)."""
        found: list[Finding] = []
        for d in self.defs.values():
            if live is not None and id(d.node) not in live:
                continue
            where = {"forward": "", "__init__": ", which builds what forward() runs"}.get(
                d.name, ", which forward() can reach")
            for n in _own_nodes(d.node):
                if isinstance(n, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                    found.append(Finding(
                        self.file, getattr(n, "lineno", 0), FALLBACK,
                        f"a try statement in {d.name}(){where}: "
                        "under the kernelbench rules a kernel that fails must fail, not fall "
                        "back to other code (KernelBench's code_bypass check)"))
                    break
        owner, seen, todo = None, set(), ["ModelNew"]
        while todo and owner is None:
            name = todo.pop(0)
            cls = self.classes.get(name)
            if cls is None or name in seen:
                continue
            seen.add(name)
            if "forward" in cls.methods:
                owner = name
            todo += cls.bases
        if owner == "Model":
            node = next(n for n in self.nodes
                        if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
            found.append(Finding(
                self.file, node.lineno, FALLBACK,
                "ModelNew's forward() is the one it inherits from class Model: the reference's "
                "own code would run (KernelBench's code_bypass check, inheritance)"))
        return found


_SEVERITY = {TAMPERING: 0, FALLBACK: 1, COMPUTE: 2}


def _own_nodes(fn: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a def's body, not those of defs, lambdas or classes nested in it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))


def _binds(node: ast.AST) -> str | None:
    """The name a node binds that is not an ast.Name target (except, match, class, def)."""
    if isinstance(node, ast.ExceptHandler):
        return node.name
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    if isinstance(node, ast.ClassDef):
        return node.name
    return None


def _bound_names(fn: ast.AST) -> set[str]:
    """Names a def binds in its own scope: parameters, assignment targets, defs, classes,
    imports, except/with/for/match targets, less those declared global or nonlocal."""
    names: set[str] = set()
    declared: set[str] = set()
    args = getattr(fn, "args", None)
    if isinstance(args, ast.arguments):
        names |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                  *[x for x in (args.vararg, args.kwarg) if x]]}
    for n in _own_nodes(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared |= set(n.names)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
    return names - declared


def _size(tree: ast.AST) -> tuple[int, int]:
    """(nodes, deepest nesting), stopping once either passes its cap."""
    count, deepest, todo = 0, 0, [(tree, 1)]
    while todo:
        n, d = todo.pop()
        count += 1
        deepest = max(deepest, d)
        if count > MAX_NODES or deepest > MAX_DEPTH:
            break
        todo.extend((c, d + 1) for c in ast.iter_child_nodes(n))
    return count, deepest


def _depth(tree: ast.AST) -> int:
    return _size(tree)[1]


def _encoding(data: bytes) -> str:
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise ValueError(str(exc)) from None
    return enc


def check_source(data: bytes, filename: str, profile: str = "cuda-agent") -> Verdict:
    """The verdict on one Python source (bytes, as Python would import them)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {profile!r}")
    if len(data) > MAX_FILE_BYTES:
        return _invalid(f"{filename} has {len(data)} bytes (at most {MAX_FILE_BYTES})")
    try:
        if _encoding(data) not in ("utf-8", "utf-8-sig"):
            return _invalid(f"{filename}: only UTF-8 source is accepted")
        with warnings.catch_warnings():  # invalid escapes and the like: Python's business
            warnings.simplefilter("ignore")
            tree = ast.parse(data, filename=filename)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        why = getattr(exc, "msg", None) or str(exc)
        if line:
            return _invalid(f"{filename}:{line}: not valid Python (line {line}: {why})")
        return _invalid(f"{filename}: not valid Python ({why})")
    except (RecursionError, MemoryError, OverflowError):
        return _invalid(f"{filename}: too deeply nested to check")
    count, depth = _size(tree)
    if count > MAX_NODES:
        return _invalid(f"{filename} has more than {MAX_NODES} syntax nodes")
    if depth > MAX_DEPTH:
        return _invalid(f"{filename} nests code more than {MAX_DEPTH} levels deep")
    checker = _Checker(filename, tree, facts())
    checker.run()
    findings, notes = checker.result(profile)
    return _verdict(findings, 1, notes)


def _verdict(findings: list[Finding], files: int, notes: Sequence[str] = ()) -> Verdict:
    if not findings:
        return Verdict("ok", files=files, notes=list(notes))
    worst = min((f.code for f in findings), key=_SEVERITY.__getitem__)
    first = next(f for f in findings if f.code == worst)
    return Verdict("refused", worst, first.text(), findings, list(notes), files)


def _read_candidate(path: str, cap: int = MAX_FILE_BYTES + 1) -> bytes:
    """Up to cap bytes of a regular file (a FIFO or device is refused before it is read, so it
    cannot block the check); ValueError (one line) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        left = cap
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _bytecode_notes(path: str, display: str) -> tuple[list[str], bool]:
    """Compiled files Python could load instead of the source: (notes, refused). An unchecked
    hash-based .pyc (never written by a normal import) is refused outright."""
    notes: list[str] = []
    stem = os.path.splitext(os.path.basename(path))[0]
    cache = os.path.join(os.path.dirname(path), "__pycache__")
    try:
        entries = sorted(os.listdir(cache))
    except OSError:
        return notes, False
    refused = False
    for entry in entries:
        if not (entry.startswith(stem + ".") and entry.endswith(".pyc")):
            continue
        try:
            head = _read_candidate(os.path.join(cache, entry), 16)
        except ValueError:
            continue
        flags = int.from_bytes(head[4:8], "little") if len(head) >= 8 else 0
        if flags & 0b11 == 0b01:
            refused = True
        notes.append(f"__pycache__/{entry} beside {display}: Python may load it instead of the "
                     "checked source (the runner must ignore bytecode caches)")
    return notes, refused


def check_kernelbench(path: str, profile: str = "cuda-agent") -> Verdict:
    """A KernelBench ModelNew file."""
    display = os.path.basename(path)
    try:
        data = _read_candidate(path)
    except ValueError as exc:
        return _invalid(str(exc))
    verdict = check_source(data, display, profile)
    notes, refused = _bytecode_notes(path, display)
    verdict.notes += notes
    if refused:
        finding = Finding(display, 0, TAMPERING, "an unchecked compiled __pycache__ file is not "
                                                 "allowed beside candidate code (Python would "
                                                 "run it instead of the source)")
        verdict = _verdict([finding, *verdict.findings], 1, verdict.notes)
    return verdict


def check_workdir(directory: str, profile: str = "cuda-agent") -> Verdict:
    """The published CUDA-Agent workdir: model_new.py (its only Python that runs: local imports
    are refused), plus notes on top-level files Python could import in its place."""
    path = os.path.join(directory, "model_new.py")
    if not os.path.exists(path):
        return _invalid(f"workdir {directory} has no model_new.py")
    verdict = check_kernelbench(path, profile)
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        entries = []
    for entry in entries:
        stem, ext = os.path.splitext(entry)
        full = os.path.join(directory, entry)
        importable = (ext in (".py", ".pyc", ".so", ".pyd") and entry != "model_new.py") or (
            os.path.isdir(full) and os.path.isfile(os.path.join(full, "__init__.py")))
        if importable and stem.split(".")[0] != "model":
            verdict.notes.append(f"{entry}: the workdir is on sys.path while the runner runs, so "
                                 f"an import of {stem.split('.')[0]!r} (by anyone) would load it")
    return verdict


# ---- CLI ----------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cuda_agent_bridge.static_check",
                                description="Checks a PyTorch-format candidate's Python without "
                                            "running it; prints one JSON line.")
    p.add_argument("path", help="a kernelbench .py file, or a workdir with --workdir")
    p.add_argument("--workdir", action="store_true", help="path is a CUDA-Agent workdir")
    p.add_argument("--profile", default="cuda-agent", choices=PROFILES)
    args = p.parse_args(argv)
    start = time.monotonic()
    try:
        verdict = (check_workdir if args.workdir else check_kernelbench)(args.path, args.profile)
    except CheckerError as exc:
        verdict = Verdict("internal", "", f"the static check cannot run: {exc}")
    out = verdict.to_json(args.profile, time.monotonic() - start)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
