"""inductor's vector-ISA probe, run once per `synth filter` and replayed in its pool processes.

torch.compile on the CPU picks a vector ISA (AVX512, AVX2, ...) on its first compile in a process:
``torch._inductor.cpu_vec_isa.valid_vec_isa_list`` builds a test program per ISA and runs a
Python subprocess that imports torch and loads it (``VecISA.check_build``). That costs about 9 s
per process on a 2-CPU machine, and `synth filter` starts `--jobs` processes at once, each
paying it on its first task (6 subprocesses each: 84 imports of torch at once with 14 jobs).

``probe`` runs the probe here, recording each ``check_build`` verdict under its exact inputs
(the ISA's class, its compiler flags, the test program); ``install``, in a pool process, answers
``check_build`` from those verdicts and calls the real probe for any input not recorded. The same
host and toolchain give the same verdicts, so only the time changes. Both touch a private
inductor API: if it is not there (another torch), probe returns None and nothing is replayed.
"""

from __future__ import annotations

import hashlib
from typing import Any

Verdicts = dict[str, bool]


def _key(isa: Any, code: str) -> str:
    flags = str(getattr(isa, "_arch_flags", ""))
    digest = hashlib.sha256(code.encode()).hexdigest()
    return f"{type(isa).__name__}|{flags}|{digest}"


def probe() -> Verdicts | None:
    """The probe's verdicts on this host (None when this torch has no such probe)."""
    try:
        from torch._inductor import cpu_vec_isa as m

        real = m.VecISA.check_build
    except (ImportError, AttributeError):
        return None
    seen: Verdicts = {}

    def record(self: Any, code: str) -> bool:
        ok = bool(real(self, code))
        seen[_key(self, code)] = ok
        return ok

    m.VecISA.check_build = record  # type: ignore[method-assign]
    try:
        m.valid_vec_isa_list()
    except Exception:  # noqa: BLE001 - the workers probe for themselves
        return None
    finally:
        m.VecISA.check_build = real  # type: ignore[method-assign]
    return seen


def install(verdicts: Verdicts | None) -> None:
    """Replays `verdicts` in this process's probe (a pool initializer's part)."""
    if not verdicts:
        return
    try:
        from torch._inductor import cpu_vec_isa as m

        real = m.VecISA.check_build
    except (ImportError, AttributeError):
        return

    def replay(self: Any, code: str) -> bool:
        got = verdicts.get(_key(self, code))
        return bool(real(self, code)) if got is None else got

    m.VecISA.check_build = replay  # type: ignore[method-assign]
