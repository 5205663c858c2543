#!/usr/bin/env python3
"""Summary of wxprobe logs (tests/sandbox/wxprobe.c): per kind of process, every call the
sandbox's W^X layers (src/sandbox/sandbox.h: seccomp_wx, mdwe, noexec, landlock) would kill or
refuse, with the object that made it and a count, then what was seen and is allowed.

Usage: wxprobe-summary.py DIR [--writable PREFIX ...] [--all]
  DIR         the WXPROBE_DIR the probe wrote wxprobe.<pid>.log files into
  --writable  more places the program may write to in the sandbox, besides /tmp, /dev/shm
              and /dev (the run's work/ directory when it does not lie under those)
  --all       also list the allowed calls one by one (default: counted)
Exit status: 0 when nothing would be refused, 1 when something would, 2 on usage errors.
Python 3.8+, standard library only (the GPU host's python3 will do)."""
from __future__ import annotations

import argparse
import collections
import glob
import os
import sys

PROT_EXEC = "X"


def parse_line(line: str) -> dict[str, str]:
    out = {}
    for field in line.rstrip("\n").split("\t"):
        k, sep, v = field.partition("=")
        if sep:
            out[k] = v
    return out


def role(start: dict[str, str]) -> str:
    exe = os.path.basename(start.get("exe", "?"))
    cmd = start.get("cmd", "")
    if exe.startswith("python"):
        for runner in ("cuda_agent_bridge.candidate", "cuda_agent_bridge.runner"):
            if runner in cmd:
                return f"{exe} (PyTorch runner: {runner})"
        if "cuda_agent_bridge" in cmd:
            return f"{exe} (torch bridge: trusted, not sandboxed)"
    return exe


def short(obj: str) -> str:
    """'/usr/lib/x86_64-linux-gnu/libcuda.so.1+0x1234' -> 'libcuda.so.1+0x1234'"""
    return os.path.basename(obj) if obj else "?"


def under(path: str, prefixes: list[str]) -> bool:
    p = os.path.normpath(path)
    return any(p == q or p.startswith(q.rstrip("/") + "/") for q in prefixes)


def classify(ev: dict[str, str], writable: list[str]) -> tuple[str, str] | None:
    """(verdict, what) for one event; verdict is the layer that refuses it, or 'allowed:' ..."""
    name = ev.get("ev", "")
    raw = name.startswith("raw-")
    call = name[4:] if raw else name
    via = " (raw syscall, outside libc)" if raw else ""
    prot = ev.get("prot", "")
    if call in ("mmap-exec", "mmap"):
        f = ev.get("file", "")
        if "W" in prot and "X" in prot:
            return "killed by seccomp_wx (and refused by mdwe)", f"mmap {prot} {ev.get('flags', '')}{via}"
        if raw and "X" not in prot:
            return "allowed", f"mmap {prot}{via}"
        if f.startswith("/memfd:"):
            return "killed by seccomp_wx (memfd_create)", f"mmap {prot} of a memfd{via}"
        if f == "anon":
            return "allowed", f"mmap {prot} anonymous (no write: nothing to run)"
        if under(f, ["/tmp", "/dev/shm"] + writable):
            return "refused by noexec (EPERM)", f"mmap {prot} of {f}{via}"
        return "allowed", f"mmap {prot} of a file on a read-only mount ({os.path.basename(f)})"
    if call in ("mprotect-exec", "pkey_mprotect-exec", "mprotect", "pkey_mprotect"):
        base = call.split("-")[0]
        if "W" in prot and "X" in prot:
            return "killed by seccomp_wx (and refused by mdwe)", f"{base} {prot}{via}"
        if "X" in prot:
            return ("refused by mdwe if the pages were not executable (EACCES); killed by "
                    "seccomp_wx where MDWE is off"), f"{base} {prot}{via}"
        return "allowed", f"{base} {prot}{via}"
    if call.endswith("-code-write"):
        return ("allowed, but the pages can never be executable again (mdwe)",
                f"{call.split('-')[0]} {prot} on a loaded object's code")
    if call in ("mremap-alias", "mremap"):
        if raw and ev.get("a1") not in ("0x0",) and not (int(ev.get("a3", "0x0"), 16) & 4):
            return "allowed", f"mremap{via}"
        return "killed by seccomp_wx", f"mremap duplicating a mapping (old_size 0 or MREMAP_DONTUNMAP){via}"
    if call in ("remap_file_pages", "memfd_create", "memfd_secret"):
        return "killed by seccomp_wx", f"{call}{via}"
    if call == "shmat":
        exec_ = ev.get("exec") == "1" or (raw and int(ev.get("a2", "0x0"), 16) & 0o100000)
        if exec_:
            return "killed by seccomp_wx", f"shmat(SHM_EXEC){via}"
        return "allowed", f"shmat without SHM_EXEC{via}"
    if call == "personality":
        if raw and ev.get("a0") == "0xffffffff":
            return "allowed", f"personality query{via}"
        return "killed by seccomp_wx", f"personality({ev.get('persona', ev.get('a0', '?'))}){via}"
    if call in ("open-write", "open", "openat", "openat2", "creat"):
        if raw:
            return "allowed", f"{call}{via} (flags not decoded: see the log)"
        path = ev.get("path", "?")
        full = os.path.normpath(path if path.startswith("/") else os.path.join(ev.get("dir", "?"), path))
        if under(full, ["/tmp", "/dev/shm", "/dev"] + writable):
            return "allowed", f"open for writing under /{full.split('/')[1]}"
        if under(full, ["/proc"]):
            # sandbox.h, "landlock": files under /proc stay writable where the GPU nodes are
            # bound (the CUDA driver names its threads through /proc/self/task/<tid>/comm)
            what = "/proc/self/task/*/comm" if full.endswith("/comm") else full
            return ("allowed with the GPU nodes bound (landlock leaves files under /proc "
                    "writable); refused by landlock (EACCES) without them"), f"open for writing {what}"
        return "refused by landlock (EACCES)", f"open for writing {full}"
    if call in ("fork", "vfork"):
        return "killed by seccomp (process creation; the worker's filter)", f"fork{via}"
    if call in ("exec", "execve", "execveat"):
        return "killed by seccomp (exec; the worker's filter)", f"exec {ev.get('path', '')}{via}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--writable", action="append", default=[])
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "wxprobe.*.log")))
    if not files:
        print(f"wxprobe: no wxprobe.*.log in {a.dir} (was WXPROBE_DIR set, the probe preloaded, "
              "WXPROBE_ONLY matching?)", file=sys.stderr)
        return 2
    # events per process (a pid can hold several images after an exec: the start line splits)
    groups: dict[str, list] = collections.defaultdict(list)
    procs: dict[str, set] = collections.defaultdict(set)
    notes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for path in files:
        current = "?"
        with open(path, errors="replace") as f:
            for line in f:
                ev = parse_line(line)
                if ev.get("ev") == "start":
                    current = role(ev)
                    procs[current].add((ev.get("pid"), ev.get("cmd", "")[:160]))
                    continue
                if ev.get("ev") == "note":
                    notes[current][f"raw catcher: {ev.get('raw')}" + (f" ({ev['why']})" if ev.get("why") else "")] += 1
                    continue
                groups[current].append(ev)
    refused_kinds = 0
    print(f"wxprobe: {sum(len(p) for p in procs.values())} processes, {len(files)} logs in {a.dir}")
    for who in sorted(procs):
        evs = groups.get(who, [])
        refused: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        noted: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        allowed: collections.Counter = collections.Counter()
        objects = [e for e in evs if e.get("ev") == "object"]
        bad_objects = []
        for o in objects:
            why = [k for k in ("rwx_segment", "execstack", "textrel") if o.get(k) == "1"]
            if why:
                bad_objects.append((o.get("path", "?"), why))
        for ev in evs:
            c = classify(ev, a.writable)
            if not c:
                continue
            verdict, what = c
            caller = short(ev.get("caller", ""))
            if verdict == "allowed":
                allowed[(verdict, what, caller if a.all else "")] += 1
            elif verdict.startswith("allowed"):
                noted[verdict][(what, caller)] += 1  # allowed, with a caveat worth reading
            else:
                refused[verdict][(what, caller)] += 1
        print()
        print(f"== {who}: {len(procs[who])} process(es), e.g. {sorted(procs[who])[0][1]}")
        for n, c in notes[who].items():
            print(f"   {n} x{c}")
        if not refused and not bad_objects:
            print("   nothing the W^X layers refuse")
        for verdict in sorted(refused):
            print(f"   {verdict}:")
            for (what, caller), c in refused[verdict].most_common():
                print(f"     {what:<70} x{c:<5} from {caller}")
                refused_kinds += 1
        for verdict in sorted(noted):
            print(f"   {verdict}:")
            for (what, caller), c in noted[verdict].most_common():
                print(f"     {what:<70} x{c:<5} from {caller}")
        for path, why in bad_objects:
            print(f"   object the loader cannot map under W^X ({', '.join(why)}): {path}")
            refused_kinds += 1
        seen = "; ".join(f"{what}{(' from ' + caller) if caller else ''} x{c}"
                         for (verdict, what, caller), c in allowed.most_common(None if a.all else 12))
        print(f"   allowed: {len(objects)} objects loaded; {seen or 'nothing else logged'}")
    print()
    if refused_kinds:
        print(f"verdict: {refused_kinds} kind(s) of calls or objects would be killed or refused "
              "in the sandbox (above)")
        return 1
    print("verdict: nothing these programs did would be killed or refused by the W^X layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
