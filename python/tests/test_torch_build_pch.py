"""torch_build's precompiled torch headers (torch_pch, docs/torch-build.md "Precompiled
headers"): the prefix scan and the key, then real builds (g++ in the build sandbox where it
runs): a header is built once and reused, is built the second time a key is seen, a damaged or
stale one never breaks a build, concurrent builders publish one, and an object made with it is
the object made without it, byte for byte.

Most builds use a light prefix (``<pybind11/pybind11.h>``, one of torch's headers: seconds);
one builds torch/extension.h's (about a minute and 750 MB here)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_torch_build import run_module

from cuda_agent_bridge import torch_build as tb
from cuda_agent_bridge import torch_pch as tp

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARCH = "sm_90"
LIGHT_SOURCE = """#include <pybind11/pybind11.h>
int add_ints(int a, int b) { return a + b; }
"""


def light_spec(name: str = "light_pch", extra: str = "", **flags: Any) -> dict[str, Any]:
    return tb.inline_spec(name=name, cpp_sources=[LIGHT_SOURCE + extra], functions=["add_ints"],
                          no_implicit_headers=True, with_pytorch_error_handling=False, **flags)


def planned(spec: dict[str, Any]) -> tb._Unit:
    module = tb._inline_module(0, spec, 1)
    tb._plan(module, ARCH)
    [unit] = [u for u in module.units if not u.cuda]
    return unit


def entries(cache: Path) -> list[Path]:
    root = cache / "torch" / "pch"
    return sorted(p for p in root.iterdir() if tp._KEY_RE.match(p.name)) if root.is_dir() else []


def leftovers(cache: Path) -> list[str]:
    root = cache / "torch" / "pch"
    return [p.name for p in root.iterdir() if p.name.startswith((".tmp", ".old"))]


def build(cache: Path, *specs: dict[str, Any], jobs: int = 0) -> dict[str, Any]:
    r = tb.build_inline(list(specs), str(cache), ARCH, jobs=jobs)
    assert r["status"] == "ok", r
    return r


def unique(tag: str = "") -> str:
    return f"// {tag} {time.time_ns()}\n"


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tp.PCH_ENV, "eager")


@pytest.fixture(autouse=True)
def _remove_caches(tmp_path: Path) -> Iterator[None]:
    """Precompiled headers take 100-750 MB each: not left for pytest's kept temporaries."""
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)


# ---- the scan, the deps, the key (no compiling) -------------------------------------------------

@pytest.mark.parametrize("text, names", [
    (b"#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x);", ["torch/extension.h"]),
    (b"// lead\n\n#include <torch/extension.h>\r\n  #  include <vector>\n#include \"x.h\"\n",
     ["torch/extension.h", "vector"]),
    (b"#define X 1\n#include <torch/extension.h>\n", []),           # a macro first: none
    (b"// comment \\\n#include <torch/extension.h>\n", []),          # a continued comment
    (b"// ??/\n#include <torch/extension.h>\n", []),                  # a trigraph backslash
    (b"/* block */\n#include <torch/extension.h>\n", []),
    (b"#include <torch/extension.h> // trailing\n", []),
    (b"#include <../etc/passwd>\n", []),
    (b"#include <a/../b.h>\n", []),
    (b"#include <torch/extension.h>\n#if 1\n#include <vector>\n#endif\n", ["torch/extension.h"]),
])
def test_scan_prefix(text: bytes, names: list[str]) -> None:
    assert tp.scan_prefix(text) == names


def test_header_text_holds_only_include_lines() -> None:
    assert tp.header_text(["torch/extension.h", "vector"]) == (
        b"#include <torch/extension.h>\n#include <vector>\n")


def test_parse_deps() -> None:
    text = ("/s/prefix.h.gch: prefix.h /usr/include/stdc-predef.h \\\n /opt/a\\ b/c.h "
            "/x/$$y.h \\\n /z.h\n")
    assert tp.parse_deps(text) == ["prefix.h", "/usr/include/stdc-predef.h", "/opt/a b/c.h",
                                   "/x/$y.h", "/z.h"]


def test_pch_key_follows_everything_that_changes_the_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    base = planned(light_spec())
    assert base.pch is not None and base.pch.names == ["pybind11/pybind11.h"]
    key = base.pch.key
    # the module's name and the unit's text after the prefix do not change the header
    assert planned(light_spec("another_name", unique())).pch.key == key  # type: ignore[union-attr]
    assert "-DTORCH_EXTENSION_NAME=light_pch" in base.argv
    assert not any(f.startswith("-DTORCH_EXTENSION_NAME") for f in base.pch.argv)
    # every flag does
    for flags in ({"extra_cflags": ["-O2"]}, {"extra_cflags": ["-DFOO=1"]},
                  {"extra_cflags": ["-std=c++20"]}, {"extra_cflags": ["-fno-rtti"]}):
        other = planned(light_spec(**flags)).pch
        assert other is not None and other.key != key, flags
    # a module with CUDA sources compiles its C++ units with the CUDA include directories
    cuda = planned(light_spec(cuda_sources=["__global__ void k() {}"])).pch
    assert cuda is not None and cuda.key != key
    # the prefix
    longer = planned(tb.inline_spec(name="light_pch", cpp_sources=[
        "#include <pybind11/pybind11.h>\n#include <vector>\nint add_ints(int a, int b);"],
        no_implicit_headers=True)).pch
    assert longer is not None and longer.key != key and longer.names[-1] == "vector"
    # the environment the compiler reads
    monkeypatch.setenv("CPLUS_INCLUDE_PATH", "/usr/include")
    assert planned(light_spec()).pch.key != key  # type: ignore[union-attr]
    monkeypatch.delenv("CPLUS_INCLUDE_PATH")
    # off, or nothing of torch's in the prefix: no header
    monkeypatch.setenv(tp.PCH_ENV, "0")
    assert planned(light_spec()).pch is None
    monkeypatch.delenv(tp.PCH_ENV)
    plain = tb.inline_spec(name="p", cpp_sources=["#include <vector>\nint f() { return 1; }"],
                           no_implicit_headers=True)
    assert planned(plain).pch is None
    # the unit's object keys: its own, and the one made with the header
    assert base.pch_obj_key() not in ("", base.key)


def test_workdir_prefix_stops_at_the_candidates_own_header(tmp_path: Path) -> None:
    copy = tmp_path / "w"
    shutil.copytree(FIXTURES / "workdir", copy)

    def binding() -> tb._Unit:
        module = tb._workdir_module(str(copy))
        tb._plan(module, ARCH)
        assert module.units[0].pch is None  # binding.cpp starts with a quoted include
        return module.units[1]

    unit = binding()
    assert unit.rel == "kernels/relu_scale_bias_binding.cpp" and unit.pch is not None
    assert unit.pch.names == ["torch/types.h", "torch/csrc/utils/pybind.h"]
    assert "-I." in unit.argv and "-I." not in unit.pch.argv  # its own directories are not read
    assert "-Ikernels" in unit.argv and "-Ikernels" not in unit.pch.argv
    # a header of the candidate's that an include of the prefix would find (through -Ikernels
    # here): the prefix ends before that include
    (copy / "kernels" / "torch" / "csrc" / "utils").mkdir(parents=True)
    (copy / "kernels" / "torch" / "csrc" / "utils" / "pybind.h").write_text("#pragma once\n")
    unit = binding()
    assert unit.pch is not None and unit.pch.names == ["torch/types.h"]
    (copy / "torch").mkdir()
    (copy / "torch" / "types.h").write_text("#pragma once\n")
    assert binding().pch is None


def test_shadowed() -> None:
    deps = ["/t/include/torch/extension.h", "/t/include/c10/macros/Macros.h"]
    assert tp.shadowed(deps, ["c10/macros/Macros.h"], ["."]) == "c10/macros/Macros.h"
    assert tp.shadowed(deps, ["kernels/c10/macros/Macros.h"], [".", "kernels"]) != ""
    assert tp.shadowed(deps, ["kernels/c10/macros/Macros.h"], ["."]) == ""
    assert tp.shadowed(deps, ["binding_registry.h"], [".", "kernels"]) == ""


# ---- real builds ---------------------------------------------------------------------------------

def test_pch_is_built_once_and_reused(tmp_path: Path, eager: None) -> None:
    cache = tmp_path / "cache"
    first = build(cache, light_spec(extra=unique("a")))
    assert first["pch"] == {"mode": "eager", "used": 1, "built": 1, "fallbacks": 0}
    [entry] = entries(cache)
    assert sorted(p.name for p in entry.iterdir()) == ["manifest.json", "prefix.h",
                                                      "prefix.h.gch"]
    assert (entry / "prefix.h").read_bytes() == b"#include <pybind11/pybind11.h>\n"
    gch = (entry / "prefix.h.gch").stat()
    man = json.loads((entry / "manifest.json").read_text())
    assert man["key"] == entry.name and man["includes"] == ["pybind11/pybind11.h"]
    assert any(d[0].endswith("/pybind11/pybind11.h") for d in man["deps"])
    second = build(cache, light_spec("other_name", extra=unique("b")))
    assert second["pch"] == {"mode": "eager", "used": 1, "built": 0, "fallbacks": 0}
    assert entries(cache) == [entry]
    again = (entry / "prefix.h.gch").stat()
    assert (again.st_ino, again.st_mtime_ns) == (gch.st_ino, gch.st_mtime_ns)  # not rebuilt
    out = run_module(second["modules"][0]["library"], "other_name", "print(m.add_ints(2, 3))")
    assert out.strip() == "5"
    again = build(cache, light_spec("third", extra=unique("c")))
    assert again["units_compiled"] == 1 and again["pch"]["built"] == 0
    assert leftovers(cache) == []


def test_pch_by_default_is_built_the_second_time(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    flags = {"extra_cflags": ["-DPCH_SECOND=1"]}
    first = light_spec(extra=unique(), **flags)
    a = build(cache, first)
    assert a["pch"] == {"mode": "on", "used": 0, "built": 0, "fallbacks": 0}
    assert entries(cache) == [] and len(list((cache / "torch" / "pch" / "seen").iterdir())) == 1
    b = build(cache, light_spec(extra=unique(), **flags))
    assert b["pch"] == {"mode": "on", "used": 1, "built": 1, "fallbacks": 0}
    c = build(cache, light_spec(extra=unique(), **flags))
    assert c["pch"] == {"mode": "on", "used": 1, "built": 0, "fallbacks": 0}
    # the unit compiled before the header existed is not compiled again now that it does
    again = build(cache, first)
    assert again["cached"] is True and again["modules"] == a["modules"]


def test_object_with_the_pch_is_the_object_without(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    spec = light_spec(extra=unique("same"))
    monkeypatch.setenv(tp.PCH_ENV, "0")
    plain = build(tmp_path / "plain", spec)
    monkeypatch.setenv(tp.PCH_ENV, "eager")
    with_pch = build(tmp_path / "pch", spec)
    assert with_pch["pch"]["used"] == 1
    [a] = (tmp_path / "plain" / "torch" / "obj").glob("*.o")
    [b] = (tmp_path / "pch" / "torch" / "obj").glob("*.o")
    assert a.name != b.name  # the key says how it was made
    assert a.read_bytes() == b.read_bytes()
    assert plain["hash"] == with_pch["hash"]  # what the module was built from
    lib_a, lib_b = (Path(r["modules"][0]["library"]) for r in (plain, with_pch))
    assert lib_a.parent.name == lib_b.parent.name  # the library's key too


def test_damaged_pch_is_discarded_and_rebuilt(tmp_path: Path, eager: None,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    build(cache, light_spec(extra=unique()))
    [entry] = entries(cache)
    gch = entry / "prefix.h.gch"
    size = gch.stat().st_size
    with open(gch, "r+b") as f:  # garbage in the middle: gcc itself would take it (and crash)
        f.seek(size // 2)
        f.write(os.urandom(4096))
    r = build(cache, light_spec("damaged", extra=unique()))
    assert r["pch"] == {"mode": "eager", "used": 1, "built": 1, "fallbacks": 0}
    assert "prefix.h.gch changed since it was published" in capfd.readouterr().err
    assert run_module(r["modules"][0]["library"], "damaged", "print(m.add_ints(1, 1))") == "2\n"
    # a header it read changed: discarded too
    man = json.loads((entry / "manifest.json").read_text())
    man["deps"][-1][2] += 1
    (entry / "manifest.json").write_text(json.dumps(man))
    r = build(cache, light_spec(extra=unique()))
    assert r["pch"]["built"] == 1 and "changed" in capfd.readouterr().err
    assert leftovers(cache) == []


def forge_stamp(entry: Path) -> None:
    """The manifest made to vouch for whatever prefix.h.gch now is (what no builder does)."""
    man = json.loads((entry / "manifest.json").read_text())
    man["gch"] = tp._gch_stamp(os.lstat(entry / "prefix.h.gch"))
    (entry / "manifest.json").write_text(json.dumps(man))


def test_stale_pch_that_passes_the_checks_still_builds_right(tmp_path: Path, eager: None) -> None:
    cache = tmp_path / "cache"
    build(cache, light_spec(extra=unique()))
    build(cache, light_spec(extra=unique(), extra_cflags=["-O2"]))
    first, second = entries(cache)
    good = tmp_path / "good.gch"
    shutil.copyfile(first / "prefix.h.gch", good)
    # another key's header (made with other flags) in its place: gcc refuses it
    # (-Winvalid-pch) and reads prefix.h as text
    shutil.copyfile(second / "prefix.h.gch", first / "prefix.h.gch")
    forge_stamp(first)
    target = first.name
    spec = next(s for s in (light_spec("stale", extra=unique()),
                            light_spec("stale", extra=unique(), extra_cflags=["-O2"]))
                if planned(s).pch.key == target)  # type: ignore[union-attr]
    r = build(cache, spec)
    assert r["pch"]["fallbacks"] == 0
    assert run_module(r["modules"][0]["library"], "stale", "print(m.add_ints(2, 2))") == "4\n"
    # its own header truncated: gcc stops ("cannot read PCH file"); the unit compiles without
    shutil.copyfile(good, first / "prefix.h.gch")
    with open(first / "prefix.h.gch", "r+b") as f:
        f.truncate(1 << 20)
    forge_stamp(first)
    r = build(cache, spec | {"cpp_sources": [LIGHT_SOURCE + unique()]})
    assert r["pch"] == {"mode": "eager", "used": 0, "built": 0, "fallbacks": 1}
    assert run_module(r["modules"][0]["library"], "stale", "print(m.add_ints(3, 3))") == "6\n"


def test_concurrent_builders_publish_one_pch(tmp_path: Path, eager: None) -> None:
    cache = tmp_path / "cache"
    specs = [light_spec(f"conc_{i}", extra=unique(str(i))) for i in range(3)]
    reports: list[dict[str, Any]] = []

    def one(spec: dict[str, Any]) -> None:
        reports.append(tb.build_inline([spec], str(cache), ARCH, jobs=1))

    threads = [threading.Thread(target=one, args=(s,)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["status"] for r in reports] == ["ok"] * 3, reports
    assert sum(r["pch"]["used"] for r in reports) == 3
    assert 1 <= sum(r["pch"]["built"] for r in reports) <= 3
    assert len(entries(cache)) == 1 and leftovers(cache) == []
    assert tp.Store(str(cache / "torch" / "pch")).ready(entries(cache)[0].name) is not None
    for r in reports:
        name = r["modules"][0]["name"]
        assert run_module(r["modules"][0]["library"], name, "print(m.add_ints(4, 5))") == "9\n"


def test_a_pch_that_does_not_compile_is_not_tried_again(
        tmp_path: Path, eager: None, capfd: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    # an error in the header under this macro: the header fails, the unit too (the same text)
    flags = {"extra_cflags": ["-DPYBIND11_NAMESPACE=1"]}
    r = tb.build_inline([light_spec(extra=unique(), **flags)], str(cache), ARCH)
    assert r["status"] == "build.error", r
    assert r["pch"] == {"mode": "eager", "used": 0, "built": 0, "fallbacks": 0}
    assert "precompiling pybind11/pybind11.h failed" in capfd.readouterr().err
    assert len(list((cache / "torch" / "pch" / "failed").iterdir())) == 1
    assert entries(cache) == []
    r = tb.build_inline([light_spec(extra=unique(), **flags)], str(cache), ARCH)
    assert r["status"] == "build.error" and r["errors"], r
    assert "precompiling" not in capfd.readouterr().err  # the unit alone failed this time


def test_eviction_keeps_the_most_recent(tmp_path: Path) -> None:
    store = tp.Store(str(tmp_path))
    keys = [f"{i:064x}" for i in range(tp.MAX_ENTRIES + 2)]
    for i, key in enumerate(keys):
        (tmp_path / key).mkdir()
        (tmp_path / key / "manifest.json").write_text("{}")
        os.utime(tmp_path / key / "manifest.json", (1000 + i, 1000 + i))
    old_tmp = tmp_path / ".tmp-x"
    old_tmp.mkdir()
    os.utime(old_tmp, (1, 1))
    store.evict(keep=keys[0])
    left = sorted(p.name for p in tmp_path.iterdir())
    assert keys[0] in left and keys[1] not in left and keys[2] not in left
    assert len([n for n in left if tp._KEY_RE.match(n)]) == tp.MAX_ENTRIES
    assert ".tmp-x" not in left


def test_torch_extension_pch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_inline's main.cpp (#include <torch/extension.h> first): the header is built once,
    the object is the one made without it, and the module works."""
    kwargs = {"name": "pch_torch_add",
              "cpp_sources": "torch::Tensor add_scaled(torch::Tensor a, torch::Tensor b, "
                             "double s) { return a + b * s; }",
              "functions": ["add_scaled"]}
    monkeypatch.setenv(tp.PCH_ENV, "eager")
    r = build(tmp_path / "pch", tb.inline_spec(**kwargs))
    assert r["pch"] == {"mode": "eager", "used": 1, "built": 1, "fallbacks": 0}
    [entry] = entries(tmp_path / "pch")
    assert (entry / "prefix.h").read_bytes() == b"#include <torch/extension.h>\n"
    out = run_module(r["modules"][0]["library"], "pch_torch_add",
                     "print(m.add_scaled(torch.ones(3), torch.arange(3.0), 2.0).tolist())\n")
    assert json.loads(out) == [1.0, 3.0, 5.0]
    monkeypatch.setenv(tp.PCH_ENV, "0")
    build(tmp_path / "plain", tb.inline_spec(**kwargs))
    [a] = (tmp_path / "plain" / "torch" / "obj").glob("*.o")
    [b] = (tmp_path / "pch" / "torch" / "obj").glob("*.o")
    assert a.read_bytes() == b.read_bytes()
