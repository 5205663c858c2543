#!/usr/bin/env bash
# PyTorch-format candidates without a GPU: format detection, the workdir build through
# torch_build (real nvcc and g++ with torch's headers, content-addressed units: a copy is fully
# cached, one changed kernel recompiles one unit), the KernelBench build (load_inline calls
# recorded in the sandbox, then built), and the errors: compiler errors with file:line, a file
# that does not import, import-time code the static check refuses, refused flags, a format
# mismatch.
# eval on this machine stops at env.no_gpu after the build. Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-torchfmt-cache.XXXXXX)"
tmp="$(mktemp -d /tmp/ca-torchfmt.XXXXXX)"
trap 'rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh

# ---- the CUDA-Agent workdir (axpby): task and candidate in one directory
wd="$tmp/axpby"
cp -r examples/workdir/axpby "$wd"
run "workdir compiles" 0 "$cli" compile --json "$wd"
field "workdir: format and units" 'r["candidate"]["format"] == "workdir" and r["build"]["status"] == "ok" and r["build"]["units_compiled"] == 3 and r["build"]["library"].endswith("cuda_extension.so")'
run "workdir compiles again" 0 "$cli" compile --json "$wd"
field "workdir: fully cached" 'r["build"]["cached"] is True and r["build"]["units_compiled"] == 0'
cp -r "$wd" "$tmp/axpby_copy"
run "a copy elsewhere" 0 "$cli" compile --json "$tmp/axpby_copy"
field "workdir copy: cached by content" 'r["build"]["units_compiled"] == 0'
printf '\n// changed\n' >>"$tmp/axpby_copy/kernels/axpby.cu"
run "one kernel changed" 0 "$cli" compile --json "$tmp/axpby_copy"
field "workdir: one unit recompiled" 'r["build"]["units_compiled"] == 1 and r["build"]["units_cached"] == 2'
"$py" -c "import json; r=json.load(open('$tmp/out')); print('     recompile after one kernel changed: %.2f s' % r['build']['seconds'])"
sed -i 's/return /retrun /' "$tmp/axpby_copy/kernels/axpby.cu"
run "workdir with a syntax error" 1 "$cli" compile --json "$tmp/axpby_copy"
field "syntax error: build.error naming kernels/axpby.cu:line" 'r["reason"]["code"] == "build.error" and "kernels/axpby.cu:" in r["reason"]["message"] and r["compiled"] is False'
run "eval without a GPU" 4 "$cli" eval --json "$wd" "$wd"
field "eval: built, then env.no_gpu" 'r["reason"]["code"] == "env.no_gpu" and r["compiled"] is True and r["candidate"]["format"] == "workdir"'
run "format mismatch" 1 "$cli" compile --json --format kernelbench "$wd"
field "format mismatch: candidate.missing naming both formats" 'r["reason"]["code"] == "candidate.missing" and "kernelbench" in r["reason"]["message"] and "workdir" in r["reason"]["message"]'
run "unknown format" 2 "$cli" compile --format triton "$wd"
grep -q "auto, native, workdir or kernelbench" "$tmp/err" && ok "unknown format: one line naming the accepted ones" || bad "unknown format: one line naming the accepted ones" "$(head -c 300 "$tmp/err")"

# ---- KernelBench files: our tree, imported
store="$tmp/store"
run "import our KernelBench tree" 0 "$cli" tasks import kernelbench --store "$store" examples/kernelbench/KernelBench
relu="$store/kernelbench/level1/19_ReLU"
run "load_inline candidate compiles" 0 "$cli" compile --json --task "$relu" examples/kernelbench/candidates/level1/19_ReLU.py
field "kernelbench: recorded in the sandbox, then built" 'r["candidate"]["format"] == "kernelbench" and r["build"]["status"] == "ok" and r["seconds"]["record"] > 0 and r["build"]["units_compiled"] >= 1'
run "load_inline candidate again" 0 "$cli" compile --json --task "$relu" examples/kernelbench/candidates/level1/19_ReLU.py
field "kernelbench: cached" 'r["build"]["cached"] is True and r["build"]["units_compiled"] == 0'

# A directory holding only model_new.py is a KernelBench candidate too.
mkdir -p "$tmp/kbdir"
cp examples/kernelbench/candidates/level1/19_ReLU.py "$tmp/kbdir/model_new.py"
run "model_new.py in a directory" 0 "$cli" compile --json --task "$relu" "$tmp/kbdir"
field "directory with model_new.py: kernelbench" 'r["candidate"]["format"] == "kernelbench" and r["build"]["cached"] is True'

bad_cuda="$tmp/bad_cuda.py"
"$py" - examples/kernelbench/candidates/level1/19_ReLU.py "$bad_cuda" <<'PY'
import sys
src = open(sys.argv[1]).read()
i = src.index("__global__")
open(sys.argv[2], "w").write(src[:i] + "this is not CUDA;\n" + src[i:])
PY
run "load_inline source with a compile error" 1 "$cli" compile --json --task "$relu" "$bad_cuda"
field "inline compile error: build.error in cuda.cu with a line" 'r["reason"]["code"] == "build.error" and "cuda.cu:" in r["reason"]["message"]'

printf 'import torch\nclass ModelNew(torch.nn.Module:\n    pass\n' >"$tmp/syntax.py"
run "candidate file with a syntax error" 1 "$cli" compile --json --task "$relu" "$tmp/syntax.py"
field "syntax error: candidate.load_failed with its line" 'r["reason"]["code"] == "candidate.load_failed" and "line 2" in r["reason"]["message"]'

printf 'import torch\nfrom torch import nn\nclass Model2(nn.Module):\n    pass\n' >"$tmp/no_model_new.py"
run "candidate without ModelNew" 1 "$cli" compile --json --task "$relu" "$tmp/no_model_new.py"
field "no ModelNew: candidate.load_failed" 'r["reason"]["code"] == "candidate.load_failed" and "ModelNew" in r["reason"]["message"]'

printf 'import os\nos.system("echo hi > /tmp/escaped")\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n' >"$tmp/spawns.py"
run "import-time code that starts a process" 1 "$cli" compile --json --task "$relu" "$tmp/spawns.py"
# The static check reads the file before the sandboxed import runs it (docs/torch-rules.md); the
# sandbox's seccomp is the wall behind it (tests/unit/test_sandbox.c).
field "starting a process at import: refused by the static check, named with its line" 'r["reason"]["code"] == "hack.harness_tampering" and "spawns.py:2" in r["reason"]["message"] and r["compiled"] is False'

"$py" - examples/kernelbench/candidates/level1/19_ReLU.py "$tmp/flags.py" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
src, n = re.subn(r"load_inline\(", "load_inline(extra_cuda_cflags=['-Xcompiler', '-wrapper', '-Xcompiler', 'sh,-c,touch /tmp/pwned'], ", src, count=1)
src = re.sub(r",\s*extra_cuda_cflags=\[[^\]]*\]", "", src)  # drop the file's own, if any
assert n == 1
open(sys.argv[2], "w").write(src)
PY
run "load_inline with a flag that runs a program" 1 "$cli" compile --json --task "$relu" "$tmp/flags.py"
field "refused flag: build.error" 'r["reason"]["code"] == "build.error" and "not allowed" in r["reason"]["message"]'
# issue 45's found attack: nvcc's --time and ld's --dependency-file write files where they say
# (as root, on the host, before the allow list and the build sandbox).
"$py" - examples/kernelbench/candidates/level1/19_ReLU.py "$tmp/writes.py" "$tmp/p1" "$tmp/p2" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
src = re.sub(r",\s*extra_(cuda_cflags|ldflags)=\[[^\]]*\]", "", src)  # the file's own, if any
src, n = re.subn(r"load_inline\(", f"load_inline(extra_cuda_cflags=['-O3', '--time', {sys.argv[3]!r}], "
                 f"extra_ldflags=['-Wl,--dependency-file={sys.argv[4]}'], ", src, count=1)
assert n == 1
open(sys.argv[2], "w").write(src)
PY
run "load_inline with flags that write files (issue 45)" 1 "$cli" compile --json --no-cache --task "$relu" "$tmp/writes.py"
field "writing flags: build.error naming --time, pointing to the list" 'r["reason"]["code"] == "build.error" and "--time" in r["reason"]["message"] and "docs/torch-build.md" in r["reason"]["message"]'
[ ! -e "$tmp/p1" ] && [ ! -e "$tmp/p2" ] && ok "writing flags: neither file exists" || bad "writing flags: neither file exists" "$(ls -l "$tmp"/p1 "$tmp"/p2 2>&1)"

# ---- the rules profiles (docs/torch-rules.md, "Rules profiles")
run "the KernelBench candidate under the kernelbench rules" 0 "$cli" compile --json --rules kernelbench --task "$relu" examples/kernelbench/candidates/level1/19_ReLU.py
field "kernelbench rules: named in the result, cached build reused" 'r["rules"] == "kernelbench" and r["build"]["status"] == "ok" and r["build"]["cached"] is True'
"$py" - examples/kernelbench/candidates/level1/19_ReLU.py "$tmp/fallback.py" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
src, n = re.subn(r"(\n    def forward\(self, (\w+)[^)]*\)[^:]*:\n)(\s+)return (.*)\n",
                 r"\1\3try:\n\3    return \4\n\3except RuntimeError:\n\3    return torch.relu(\2)\n",
                 src, count=1)
assert n == 1, src
open(sys.argv[2], "w").write(src)
PY
run "a try/except fallback under the kernelbench rules" 1 "$cli" compile --json --rules kernelbench --task "$relu" "$tmp/fallback.py"
field "fallback: hack.fallback with its line" 'r["reason"]["code"] == "hack.fallback" and "fallback.py:" in r["reason"]["message"] and "code_bypass" in r["reason"]["message"]'
run "the same fallback under the cuda-agent rules" 1 "$cli" compile --json --task "$relu" "$tmp/fallback.py"
field "cuda-agent rules: the torch in the fallback is torch compute" 'r["rules"] == "cuda-agent" and r["reason"]["code"] == "hack.torch_compute"'
run "C++ without a kernel under the kernelbench rules" 1 "$cli" compile --json --rules kernelbench --task tests/data/protocol_cpu/task tests/data/protocol_cpu/operator.py
field "no __global__: build.no_sources saying so" 'r["reason"]["code"] == "build.no_sources" and "no CUDA kernel" in r["reason"]["message"]'
run "native candidate under the kernelbench rules" 1 "$cli" compile --json --rules kernelbench --task examples/tasks/elementwise_chain examples/solutions/elementwise_chain
field "native: judged under cuda-agent only, said plainly" 'r["reason"]["code"] == "candidate.missing" and "native" in r["reason"]["message"]'
run "unknown rules" 2 "$cli" compile --rules lenient "$wd"
grep -q "cuda-agent or kernelbench" "$tmp/err" && ok "unknown rules: one line naming the accepted ones" || bad "unknown rules: one line naming the accepted ones" "$(head -c 300 "$tmp/err")"

finish
