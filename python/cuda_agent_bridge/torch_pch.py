"""Precompiled torch headers for the C++ units of torch_build (docs/torch-build.md, "Precompiled
headers").

A C++ unit of a PyTorch extension (load_inline's ``main.cpp`` starts with ``#include
<torch/extension.h>``) spends most of its compile parsing torch's headers. Where a unit starts
with ``#include <...>`` lines naming at least one of torch's headers (``scan_prefix``), those
lines are precompiled once into a gcc precompiled header (``prefix.h.gch``) and the unit is
compiled with ``-include <entry>/prefix.h -Winvalid-pch``: gcc reads the same headers, in the
same order, before the unit's first line, so the unit's own ``#include`` lines find them already
included. The header is made from the include names only (never the candidate's text), by the
unit's own compiler and flags less ``-DTORCH_EXTENSION_NAME`` and the candidate's own directories
(so modules of any name share it), in the build sandbox; the trusted side checks what it wrote
and publishes it here:

    <cache>/torch/pch/<key>/prefix.h            the include lines
    <cache>/torch/pch/<key>/prefix.h.gch        gcc's precompiled header
    <cache>/torch/pch/<key>/manifest.json       the key's inputs, the headers it read, stamps
    <cache>/torch/pch/seen/<key>                a key seen once (built the second time)
    <cache>/torch/pch/failed/<key>              a key whose header did not compile (not retried)
    <cache>/torch/pch/.tmp-*, .old-*            in-flight writes, entries being removed

An entry is written under ``.tmp-*`` and renamed to its key (atomic; a concurrent builder's
entry wins). ``Store.ready`` vouches for an entry before each build uses it: the manifest's key,
the ``.gch``'s inode, size, mtime and ctime as published (an edit in place changes ctime, which
no one can set back), and every header it read unchanged (size, mtime); anything else discards
the entry. gcc checks the rest (its own version and executable, the options that matter,
macros) and, with ``-Winvalid-pch``, compiles the header text instead when they differ.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PCH_ENV = "CUDA_AGENT_TORCH_PCH"  # 0: off; eager: built the first time a key is seen
MANIFEST_VERSION = 1
MAX_ENTRIES = 6  # precompiled headers kept (torch/extension.h's is ~750 MB), least recent go
MAX_PCH_BYTES = 2 << 30  # one precompiled header (the build sandbox's RLIMIT_FSIZE)
MAX_PREFIX = 64  # include lines of one prefix
MAX_DEPS = 20000  # headers one precompiled header may have read
STALE_TMP_S = 3600.0  # a .tmp-*/.old-* older than this is a killed builder's
GCH_MAGIC = b"gpch+"  # gcc's precompiled C++ header
_KEY_RE = re.compile(r"[0-9a-f]{64}\Z")
# `#include <name>` alone on its line; the name a plain relative path.
_INCLUDE = re.compile(rb"[ \t]*#[ \t]*include[ \t]*<([A-Za-z0-9_][A-Za-z0-9_.+/-]*)>[ \t]*\Z")
_LINE_COMMENT = re.compile(rb"[ \t]*//[^\\]*\Z")


def mode() -> str:
    """``off`` (CUDA_AGENT_TORCH_PCH=0), ``eager`` (=eager: a key's header is built the first
    time the key is seen) or ``on`` (anything else: the second time)."""
    v = os.environ.get(PCH_ENV, "")
    return "off" if v == "0" else "eager" if v == "eager" else "on"


def scan_prefix(data: bytes) -> list[str]:
    """The names of the ``#include <name>`` lines the unit starts with, before anything else
    (blank lines and ``//`` comments may come between them). A line that could mean more than
    it shows ends the scan: a backslash anywhere (a continued line), ``??`` (a trigraph), a
    block comment, any other directive or code. ``..`` in a name ends it too."""
    names: list[str] = []
    for line in data.split(b"\n"):
        line = line.removesuffix(b"\r")
        if b"\\" in line or b"??" in line or len(names) >= MAX_PREFIX:
            break
        m = _INCLUDE.match(line)
        if m is not None:
            name = m.group(1).decode("ascii")
            if ".." in name.split("/"):
                break
            names.append(name)
        elif line.strip() and not _LINE_COMMENT.match(line):
            break
    return names


def header_text(names: Sequence[str]) -> bytes:
    """prefix.h: the include lines, nothing of the candidate's text."""
    return "".join(f"#include <{n}>\n" for n in names).encode("ascii")


def parse_deps(text: str) -> list[str]:
    """The prerequisites of a make rule as gcc's -MD writes it (``target: a b \\`` lines,
    spaces in names escaped)."""
    text = text.replace("\\\n", " ")
    colon = re.search(r":(\s|$)", text)
    if colon is None:
        return []
    out: list[str] = []
    word = ""
    body = text[colon.end():]
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] in " #":
            word += body[i + 1]
            i += 2
            continue
        if c == "$" and i + 1 < len(body) and body[i + 1] == "$":
            word += "$"
            i += 2
            continue
        if c.isspace():
            if word:
                out.append(word)
            word = ""
        else:
            word += c
        i += 1
    if word:
        out.append(word)
    return out


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns]


def _gch_stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


@dataclass
class Entry:
    """A published precompiled header: ``include`` is the path given to ``-include``."""

    key: str
    dir: str
    include: str
    deps: list[str]


class Store:
    """The precompiled headers under ``<cache>/torch/pch``."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _marker(self, kind: str, key: str) -> str:
        return self._path(kind, key)

    def seen(self, key: str) -> bool:
        return os.path.exists(self._marker("seen", key))

    def failed(self, key: str) -> bool:
        return os.path.exists(self._marker("failed", key))

    def mark(self, kind: str, key: str) -> None:
        """A seen or failed marker (best effort)."""
        try:
            os.makedirs(self._path(kind), exist_ok=True)
            with open(self._marker(kind, key), "a"):
                pass
        except OSError:
            pass

    def ready(self, key: str) -> Entry | None:
        """The entry of key when it is complete and unchanged since it was published (see the
        module's docstring); a stale or damaged entry is removed and None returned."""
        d = self._path(key)
        try:
            with open(os.path.join(d, "manifest.json"), encoding="utf-8") as f:
                man = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self.discard(key, "an unreadable manifest")
            return None
        why = _invalid(man, key, d)
        if why:
            self.discard(key, why)
            return None
        try:
            os.utime(os.path.join(d, "manifest.json"))  # most recently used, for eviction
        except OSError:
            pass
        return Entry(key, d, os.path.join(d, "prefix.h"), [str(p) for p, _, _ in man["deps"]])

    def discard(self, key: str, why: str = "") -> None:
        """Removes an entry: renamed away first, so no builder sees half of it."""
        d = self._path(key)
        if not os.path.isdir(d):
            return
        if why:
            print(f"torch_build: precompiled header {key[:16]} discarded: {why}", file=sys.stderr)
        try:
            old = tempfile.mkdtemp(prefix=f".old-{key[:16]}-", dir=self.root)
            os.rename(d, os.path.join(old, "entry"))
        except OSError:
            return
        shutil.rmtree(old, ignore_errors=True)

    def new_tmp(self, key: str) -> str:
        os.makedirs(self.root, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=self.root)
        os.chmod(tmp, 0o755)
        return tmp

    def publish(self, key: str, tmp: str) -> Entry | None:
        """Renames a complete entry directory into place; a concurrent builder's wins. Then
        keeps at most MAX_ENTRIES entries and removes stale temporaries."""
        try:
            os.rename(tmp, self._path(key))
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        self.evict(keep=key)
        return self.ready(key)

    def entries(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.root) if _KEY_RE.match(n)]
        except OSError:
            return []

    def evict(self, keep: str = "") -> None:
        def used(key: str) -> float:
            try:
                return os.stat(self._path(key, "manifest.json")).st_mtime
            except OSError:
                return 0.0

        keys = sorted((k for k in self.entries() if k != keep), key=used, reverse=True)
        for key in keys[MAX_ENTRIES - (1 if keep else 0):]:
            self.discard(key)
        now = time.time()
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            if name.startswith((".tmp-", ".old-")):
                path = self._path(name)
                try:
                    if now - os.lstat(path).st_mtime > STALE_TMP_S:
                        shutil.rmtree(path, ignore_errors=True)
                except OSError:
                    pass


def _invalid(man: Any, key: str, d: str) -> str:
    """Why the manifest does not vouch for the entry, or ""."""
    if (not isinstance(man, dict) or man.get("version") != MANIFEST_VERSION
            or man.get("key") != key):
        return "a manifest of another key or version"
    deps = man.get("deps")
    gch = man.get("gch")
    if not isinstance(deps, list) or not isinstance(gch, list):
        return "a malformed manifest"
    try:
        st = os.lstat(os.path.join(d, "prefix.h.gch"))
        if not stat.S_ISREG(st.st_mode) or _gch_stamp(st) != gch:
            return "prefix.h.gch changed since it was published"
        if not stat.S_ISREG(os.lstat(os.path.join(d, "prefix.h")).st_mode):
            return "prefix.h is missing"
    except OSError:
        return "prefix.h.gch or prefix.h is missing"
    for dep in deps:
        if not (isinstance(dep, list) and len(dep) == 3 and isinstance(dep[0], str)):
            return "a malformed manifest"
        try:
            if _stamp(os.stat(dep[0])) != dep[1:]:
                return f"{dep[0]} changed"
        except OSError:
            return f"{dep[0]} is gone"
    return ""


def write_entry(tmp: str, key: str, names: Sequence[str], staged_gch: str, deps: Sequence[str],
                inputs: dict[str, Any]) -> None:
    """Fills the entry directory tmp: prefix.h, a checked copy of what the sandboxed compiler
    left at staged_gch (a regular file, not a link, at most MAX_PCH_BYTES, a gcc precompiled
    C++ header), and the manifest with the stamps of the headers it read. ValueError when the
    staged file is not acceptable, OSError when something cannot be read or written."""
    header = os.path.join(tmp, "prefix.h")
    with open(header, "wb") as f:
        f.write(header_text(names))
    os.chmod(header, 0o644)
    fd = os.open(staged_gch, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    dest = os.path.join(tmp, "prefix.h.gch")
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("the precompiled header is not a regular file")
        if st.st_size > MAX_PCH_BYTES:
            raise ValueError(f"the precompiled header has {st.st_size} bytes (at most "
                             f"{MAX_PCH_BYTES})")
        if src.read(len(GCH_MAGIC)) != GCH_MAGIC:
            raise ValueError("the file is not a gcc precompiled C++ header")
        src.seek(0)
        with open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
            os.fchmod(dst.fileno(), 0o644)
    stamped = []
    for dep in deps:
        stamped.append([dep, *_stamp(os.stat(dep))])
    man = {"version": MANIFEST_VERSION, "key": key, "includes": list(names), **inputs,
           "deps": stamped, "gch": _gch_stamp(os.lstat(dest)), "created": time.time()}
    path = os.path.join(tmp, "manifest.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(man, f)
    os.chmod(path, 0o644)


def shadowed(deps: Sequence[str], headers: Sequence[str], dirs: Sequence[str]) -> str:
    """A candidate header (a path relative to the module's directory) that the module's own
    include directories (``dirs``, relative to the same directory) could find under the name
    by which some header of the precompiled one was included: the first such, or ""."""
    names = set()
    for rel in headers:
        for d in dirs:
            base = os.path.normpath(d)
            if base == ".":
                names.add(rel)
            elif rel.startswith(base + "/"):
                names.add(rel[len(base) + 1:])
    for dep in deps:
        for name in names:
            if dep.endswith("/" + name):
                return name
    return ""
