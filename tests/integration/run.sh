#!/usr/bin/env bash
# CLI integration tests that need no GPU: real nvcc builds, the real torch bridge on CPU torch,
# real result JSON. Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-it-cache.XXXXXX)"
data=tests/data/candidates
tmp="$(mktemp -d /tmp/ca-it.XXXXXX)"
trap 'rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh

# ---- the command line itself
run "help" 0 "$cli" --help
grep_out "help lists compile" "compile \[DIR\]"
run "no arguments is a usage error" 2 "$cli"
run "unknown command" 2 "$cli" frobnicate
run "version" 0 "$cli" version
for sub in compile verify profile eval; do
  run "$sub --help" 0 "$cli" "$sub" --help
done
run "eval needs a candidate" 2 "$cli" eval "$data/tiny_task"
run "bad --trials" 2 "$cli" verify --trials 0 "$data/good"
run "bad --device" 2 "$cli" verify --device tpu "$data/good"

# ---- compile (no GPU needed)
run "compile a good candidate" 0 "$cli" compile --json --task "$data/tiny_task" "$data/good"
field "compile result says compiled" 'r["compiled"] is True and r["reason"]["code"] == "ok"'
field "compile result has schema and task hash" 'r["schema"] == "cuda-agent.result/1" and len(r["task"]["hash"]) == 32'
field "compile reports ptxas resources" 'any("registers" in x for x in r["build"]["resources"])'
run "compile again hits the cache" 0 "$cli" compile --json --task "$data/tiny_task" "$data/good"
field "second compile is cached" 'r["build"]["cached"] is True and r["build"]["units_compiled"] == 0'
run "compile a syntax error" 1 "$cli" compile --json --task "$data/tiny_task" "$data/broken_syntax"
field "syntax error: build.error with file:line" 'r["reason"]["code"] == "build.error" and "kernels/bad.cu:" in r["reason"]["message"]'
run "eval a syntax error gives reward -1" 1 "$cli" eval --json "$data/tiny_task" "$data/broken_syntax"
field "syntax error reward is -1" 'r["reward"] == -1 and r["compiled"] is False'
run "eval --task: every argument is a candidate" 1 "$cli" eval --json --task "$data/tiny_task" "$data/broken_syntax" "$data/broken_syntax"
if [ "$(grep -c '^{' "$tmp/out")" -eq 2 ]; then ok "eval --task T C C: two results"; else bad "eval --task T C C gave $(grep -c '^{' "$tmp/out") results, not 2"; fi
run "empty kernels/" 1 "$cli" compile --json --task "$data/tiny_task" "$data/empty"
field "empty kernels/: build.no_sources" 'r["reason"]["code"] == "build.no_sources"'
run "no ca_forward" 1 "$cli" compile --json --task "$data/tiny_task" "$data/no_forward"
field "no ca_forward is named" '"ca_forward" in r["reason"]["message"]'
run "driver API is forbidden" 1 "$cli" compile --json --task "$data/tiny_task" "$data/forbidden_driver"
field "forbidden symbol named" 'r["reason"]["code"] == "build.forbidden_symbol" and "cuDeviceGet" in r["reason"]["message"]'
run "missing candidate directory" 1 "$cli" compile --task "$data/tiny_task" "$tmp/nope"
grep_out "missing candidate: one-line message" "does not exist"
run "missing task directory" 3 "$cli" compile --task "$tmp/nope" "$data/good"
grep_out "missing task: one-line message" "does not exist"
mkdir -p "$tmp/nokernels"
run "candidate without kernels/" 1 "$cli" compile --json --task "$data/tiny_task" "$tmp/nokernels"
field "no kernels/ named" 'r["reason"]["code"] == "candidate.missing" and "kernels/" in r["reason"]["message"]'

# ---- how nvcc runs (issue 18): plain (one step at a time), --threads 2, and its steps split by
# build/nvcc_split.h (the first compile learns the module id's tag, the next ones predict it,
# and a wrong tag is found and learned again). Every object is plain nvcc's byte for byte but
# for nvcc's temporary file name (which differs between any two builds). `--threads 2` links
# with `nvcc -shared` too, so its library is plain nvcc's the same way; the split links with
# nvcc's host link line alone (build/host_link.h), so its library's device code (the
# fatbinary: SASS and PTX) is plain nvcc's less the device link's image that nvcc puts first
same_but_tmpname() {
  "$py" - "$1" "$2" <<'PY'
import re, sys
a, b = (re.sub(rb"tmpxft_[0-9a-f]{8}_", b"tmpxft_XXXXXXXX_", open(p, "rb").read())
        for p in sys.argv[1:3])
sys.exit(0 if a and a == b else 1)
PY
}
nvcc_mode() { # name, env..., then the compile's log in $tmp/err and its library in $tmp/lib.$name
  local name="$1"; shift
  env "$@" CUDA_AGENT_LOG=debug "$cli" compile --json --no-cache --task tests/adversarial/tasks/gemm \
    tests/adversarial/honest/smem_tiled_gemm >"$tmp/out" 2>"$tmp/err"
  local rc=$? lib
  lib="$(find "$tmp/nvcc_$name" -name '*.so' 2>/dev/null | head -1)"
  cat $(find "$tmp/nvcc_$name" -name '*.o' 2>/dev/null | sort) > "$tmp/obj.$name" 2>/dev/null
  if [ $rc -eq 0 ] && [ -n "$lib" ]; then cp "$lib" "$tmp/lib.$name"; ok "compile with nvcc $name"
  else bad "compile with nvcc $name: exit $rc" "$(tail -c 300 "$tmp/err")"; fi
}
split_cache="$tmp/nvcc_split"
nvcc_mode plain CUDA_AGENT_CACHE="$tmp/nvcc_plain" CUDA_AGENT_NVCC_THREADS=1 CUDA_AGENT_NVCC_SPLIT=0
nvcc_mode threads2 CUDA_AGENT_CACHE="$tmp/nvcc_threads2" CUDA_AGENT_NVCC_THREADS=2 CUDA_AGENT_NVCC_SPLIT=0
nvcc_mode split CUDA_AGENT_CACHE="$split_cache" CUDA_AGENT_NVCC_SPLIT=1
if grep -q "the steps ran one after the other" "$tmp/err"; then ok "split: the first compile learns the tag"; else bad "split: the first compile did not learn" "$(tail -c 300 "$tmp/err")"; fi
tag="$(find "$split_cache" -name '*.tag' | head -1)"
learned="$(cat "$tag" 2>/dev/null)"
if [ -n "$learned" ]; then ok "split: tag $learned kept"; else bad "split: no tag kept"; fi
rm -rf "$tmp/nvcc_split2"; mkdir -p "$tmp/nvcc_split2/build"; cp -r "$split_cache/build/nvcc-split" "$tmp/nvcc_split2/build/"
nvcc_mode split2 CUDA_AGENT_CACHE="$tmp/nvcc_split2" CUDA_AGENT_NVCC_SPLIT=1
if grep -q "the branches ran at once" "$tmp/err"; then ok "split: the next compile runs the branches at once"; else bad "split: the next compile did not predict" "$(tail -c 300 "$tmp/err")"; fi
# nvcc's dry run is kept (tokenized private directory and output) and read back by the next
# compile: objects byte for byte as above, one nvcc start fewer
if [ -n "$(find "$split_cache" -path '*/dryrun/*.txt' | head -1)" ] && ! grep -q "dry run asked" "$tmp/err"; then
  ok "split: the next compile reads the kept dry run"
else bad "split: the dry run was not kept, or asked again" "$(grep 'dry run' "$tmp/err" | tail -2)"; fi
# the host compile's precompiled header (build/host_pch.h): the first compile saw the prefix, the
# second built the header beside its host compile, the third uses it
if grep -q "host pch: kept" "$tmp/err"; then ok "host pch: the second sighting builds and keeps the header"; else bad "host pch: no header kept" "$(grep 'host pch' "$tmp/err" | tail -3)"; fi
rm -rf "$tmp/nvcc_split4"; mkdir -p "$tmp/nvcc_split4/build"; cp -r "$tmp/nvcc_split2/build/nvcc-split" "$tmp/nvcc_split4/build/"
nvcc_mode split4 CUDA_AGENT_CACHE="$tmp/nvcc_split4" CUDA_AGENT_NVCC_SPLIT=1
if grep -q "host pch: hit" "$tmp/err"; then ok "host pch: the next compile uses the header"; else bad "host pch: the next compile did not use the header" "$(grep 'host pch' "$tmp/err" | tail -3)"; fi
rm -rf "$tmp/nvcc_split3"; mkdir -p "$tmp/nvcc_split3/build"; cp -r "$split_cache/build/nvcc-split" "$tmp/nvcc_split3/build/"
printf 'deadbeef' > "$(find "$tmp/nvcc_split3" -name '*.tag' | head -1)"
nvcc_mode split3 CUDA_AGENT_CACHE="$tmp/nvcc_split3" CUDA_AGENT_NVCC_SPLIT=1
if grep -q "not the predicted" "$tmp/err" && [ "$(cat "$(find "$tmp/nvcc_split3" -name '*.tag' | head -1)")" = "$learned" ]; then
  ok "split: a wrong tag is found, the device steps rerun and the tag learned again"
else bad "split: a wrong tag was not found and learned again" "$(tail -c 300 "$tmp/err")"; fi
if same_but_tmpname "$tmp/lib.plain" "$tmp/lib.threads2"; then ok "nvcc threads2: plain nvcc's library but for the temporary name"
else bad "nvcc threads2 made a library that is not plain nvcc's"; fi
objcopy -O binary --only-section=.nv_fatbin "$tmp/lib.plain" "$tmp/fatbin.plain" 2>/dev/null || true
for m in threads2 split split2 split3 split4; do
  if same_but_tmpname "$tmp/obj.plain" "$tmp/obj.$m"; then ok "nvcc $m: plain nvcc's objects but for the temporary name"
  else bad "nvcc $m made objects that are not plain nvcc's"; fi
  objcopy -O binary --only-section=.nv_fatbin "$tmp/lib.$m" "$tmp/fatbin.$m" 2>/dev/null || true
  if [ "$m" = threads2 ]; then
    if [ -s "$tmp/fatbin.plain" ] && cmp -s "$tmp/fatbin.plain" "$tmp/fatbin.$m"; then
      ok "nvcc $m and plain nvcc: the same fatbinary ($(stat -c %s "$tmp/fatbin.plain") bytes)"
    else bad "nvcc $m and plain nvcc made different device code (or none)"; fi
  elif "$py" - "$tmp/fatbin.plain" "$tmp/fatbin.$m" <<'PY'
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
sys.exit(0 if b and len(a) > len(b) and a.endswith(b) else 1)
PY
  then ok "nvcc $m (host link): plain nvcc's fatbinary less the device link's image ($(stat -c %s "$tmp/fatbin.$m") of $(stat -c %s "$tmp/fatbin.plain") bytes)"
  else bad "nvcc $m (host link): device code that is not plain nvcc's"; fi
done
for m in 0 1; do # a compile error reads the same
  CUDA_AGENT_CACHE="$split_cache" CUDA_AGENT_NVCC_SPLIT=$m run "syntax error with split=$m" 1 \
    "$cli" compile --json --no-cache --task "$data/tiny_task" "$data/broken_syntax"
  "$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["reason"]["message"])' "$tmp/out" >"$tmp/syntax$m"
done
if [ -s "$tmp/syntax0" ] && cmp -s "$tmp/syntax0" "$tmp/syntax1"; then ok "a compile error reads the same split or not"
else bad "a compile error differs split or not" "$(diff "$tmp/syntax0" "$tmp/syntax1" | head -5)"; fi
CUDA_AGENT_NVCC_THREADS=9 run "a bad CUDA_AGENT_NVCC_THREADS warns and builds" 0 "$cli" compile --json --no-cache --task "$data/tiny_task" "$data/good"
if grep -q "CUDA_AGENT_NVCC_THREADS=9 is not a number 1-8" "$tmp/err"; then ok "bad CUDA_AGENT_NVCC_THREADS named"; else bad "bad CUDA_AGENT_NVCC_THREADS not named" "$(tail -c 300 "$tmp/err")"; fi
run "--verify-only is eval's" 2 "$cli" verify --verify-only "$data/good"
if grep -q "is an option of eval" "$tmp/err"; then ok "--verify-only elsewhere: named"; else bad "--verify-only elsewhere: not named" "$(tail -c 300 "$tmp/err")"; fi

# ---- every example solution compiles and passes the library checks
for sol in examples/solutions/*/; do
  name="$(basename "$sol")"
  [ -d "$sol/kernels" ] || continue
  run "example $name compiles" 0 "$cli" compile --json --task "examples/tasks/$name" "$sol"
done

# ---- the torch bridge on CPU: tasks are validated, verification says it needs a GPU
run "verify on a CPU-only machine" 4 "$cli" verify --json --device cpu --task "$data/tiny_task" "$data/good"
field "no GPU: env.no_gpu and the task was described" 'r["reason"]["code"] == "env.no_gpu" and r["spec"]["outputs"][0]["shape"] == [64, 33]'
for t in syntax raises not_tensor forward_raises; do
  run "broken task: $t" 3 "$cli" verify --json --device cpu --task "$data/broken_tasks/$t" "$data/good"
done
run "broken task message" 3 "$cli" verify --device cpu --task "$data/broken_tasks/raises" "$data/good"
grep_out "get_inputs raising is named" "get_inputs"
for task in examples/tasks/*/; do
  name="$(basename "$task")"
  [ -d "examples/solutions/$name/kernels" ] || continue
  run "example task $name is valid on CPU torch" 4 "$cli" verify --json --device cpu --task "$task" "examples/solutions/$name"
  field "example task $name described" 'r["reason"]["code"] == "env.no_gpu" and len(r["spec"]["outputs"]) >= 1'
done


# ==== tasks: import, list, show (docs/tasks.md) ===============================================
kb=tests/data/kernelbench_mini
ops=tests/data/ops6k_mini.jsonl
store="$tmp/task-store"
# count_lines NAME N: stdout of the last run has N lines
count_lines() {
  local n; n=$(wc -l <"$tmp/out")
  if [ "$n" -eq "$2" ]; then ok "$1"; else bad "$1" "$n lines, expected $2: $(head -c 600 "$tmp/out")"; fi
}
# grep_err NAME PATTERN: stderr of the last run contains PATTERN
grep_err() {
  if grep -q -- "$2" "$tmp/err"; then ok "$1"; else bad "$1" "no '$2' in stderr: $(head -c 600 "$tmp/err")"; fi
}

run "tasks --help" 0 "$cli" tasks --help
grep_out "tasks --help names import" "import kernelbench DIR"
for sub in import list show; do
  run "tasks $sub --help" 0 "$cli" tasks "$sub" --help
done
run "tasks without a subcommand" 2 "$cli" tasks
run "tasks: unknown subcommand" 2 "$cli" tasks frobnicate
run "tasks import without arguments" 2 "$cli" tasks import
run "tasks import: unknown source" 2 "$cli" tasks import torchbench "$kb" --store "$store"
run "tasks list --level 100" 2 "$cli" tasks list --level 100 --store "$store"
run "tasks list: an option of import" 2 "$cli" tasks list --python python3 --store "$store"
run "tasks show without an id" 2 "$cli" tasks show --store "$store"

run "tasks list: no store yet" 0 "$cli" tasks list --store "$store"
count_lines "no store: only the header" 1
run "tasks show: no store yet" 3 "$cli" tasks show kernelbench/level1/19_ReLU --store "$store"
run "import a missing KernelBench dir" 3 "$cli" tasks import kernelbench "$tmp/nope" --store "$store"
grep_err "missing dir: one-line message" "does not exist"
if [ -e "$store" ]; then bad "a failed import creates no store"; else ok "a failed import creates no store"; fi
run "import ops6k: a directory" 3 "$cli" tasks import ops6k "$kb" --store "$store"
grep_err "directory named" "is a directory"

run "import KernelBench" 0 "$cli" tasks import kernelbench "$kb" --store "$store"
grep_out "KernelBench summary" "^imported 5, unchanged 0, updated 0, skipped 2 (first: level1/7_NoInitInputs.py: "
grep_err "each skip is reported" "skipped level1/notes.py: not named <N>_<Name>.py"
run "import KernelBench again" 0 "$cli" tasks import kernelbench "$kb" --store "$store"
grep_out "re-import is idempotent" "^imported 0, unchanged 5, updated 0, skipped 2"
run "import KernelBench --json" 0 "$cli" tasks import kernelbench "$kb/KernelBench" --store "$store" --json -q
field "import --json counts" 'r["unchanged"] == 5 and r["imported"] == 0 and r["skipped"] == 2 and r["rows"] == 7 and r["error"] is None and "7_NoInitInputs" in r["first_skip"]'
if [ -s "$tmp/err" ]; then bad "-q prints nothing on stderr" "$(head -c 300 "$tmp/err")"; else ok "-q prints nothing on stderr"; fi
run "import Ops-6K JSONL" 0 "$cli" tasks import ops6k "$ops" --store "$store"
grep_out "Ops-6K summary" "^imported 5, unchanged 0, updated 0, skipped 2 (first: row 3 (line 4): model.py defines no 'class Model')"
grep_err "bad JSON line named" "row 4 (line 5): invalid JSON"

run "tasks list" 0 "$cli" tasks list --store "$store"
count_lines "list: header and 10 tasks" 11
grep_out "list shows a KernelBench task" "^kernelbench/level1/19_ReLU  *kernelbench  *1 "
grep_out "list shows ops (CHECK '-': never checked)" "^ops6k/000001_conv2d_relu  *ops6k  *-  *-  *torch.nn.Conv2d, torch.relu"
run "tasks list --level 1 --json" 0 "$cli" tasks list --level 1 --json --store "$store"
count_lines "level 1: three tasks" 3
field "list --json fields" 'r["id"] == "kernelbench/level1/2_Scale_rows" and r["level"] == 1 and r["source"] == "kernelbench" and r["dir"].endswith("/kernelbench/level1/2_Scale_rows") and len(r["hash"]) == 32 and r["ops"] == [] and r["data_source"] is None'
run "tasks list --source ops6k --json" 0 "$cli" tasks list --source ops6k --json --store "$store"
count_lines "ops6k: five tasks" 5
field "ops6k task fields" 'r["id"] == "ops6k/000000_relu_add" and r["level"] is None and r["ops"] == ["torch.relu", "torch.add"] and r["data_source"] == "synthetic-a"'
CUDA_AGENT_TASKS="$store" run "the store from \$CUDA_AGENT_TASKS" 0 "$cli" tasks list --json
count_lines "\$CUDA_AGENT_TASKS: ten tasks" 10

run "tasks show" 0 "$cli" tasks show kernelbench/level1/19_ReLU --store "$store"
grep_out "show: level" "^level        1$"
grep_out "show: model.py" "return torch.relu(x)"
run "tasks show by name --json" 0 "$cli" tasks show 1_Matmul_Add_ReLU --json --store "$store"
field "show --json" 'r["id"] == "kernelbench/level2/1_Matmul_Add_ReLU" and r["level"] == 2 and "class Model" in r["model_py"]'
run "tasks show: unknown id" 3 "$cli" tasks show kernelbench/level1/99_Nope --store "$store"
grep_err "unknown id: one line" "no task 'kernelbench/level1/99_Nope'"
mkdir -p "$tmp/kb2/level5"
cp "$kb/KernelBench/level1/19_ReLU.py" "$tmp/kb2/level5/"
run "import one level folder" 0 "$cli" tasks import kernelbench "$tmp/kb2/level5" --store "$store" -q
run "tasks show: an ambiguous name" 2 "$cli" tasks show 19_ReLU --store "$store"
grep_err "ambiguous name lists the ids" "kernelbench/level1/19_ReLU"

# an imported task is a normal task
run "compile against an imported KernelBench task" 0 "$cli" compile --json --task "$store/kernelbench/level1/19_ReLU" "$data/good"
field "result.task has source and level" 'r["task"]["source"] == "kernelbench" and r["task"]["level"] == 1 and r["task"]["id"] == "kernelbench/level1/19_ReLU"'
run "compile against an imported Ops-6K task" 0 "$cli" compile --json --task "$store/ops6k/000006_sum_mul" "$data/good"
field "Ops-6K task: level null" 'r["task"]["source"] == "ops6k" and r["task"]["level"] is None'
run "compile against a local task" 0 "$cli" compile --json --task "$data/tiny_task" "$data/good"
field "local task: level null" '"level" in r["task"] and r["task"]["level"] is None'
run "eval an imported task on CPU torch" 4 "$cli" eval --json --device cpu "$store/kernelbench/level2/1_Matmul_Add_ReLU" "$data/good"
field "imported task described by the bridge" 'r["reason"]["code"] == "env.no_gpu" and r["task"]["level"] == 2 and len(r["spec"]["params"]) == 3'

# degeneracy at import (docs/evaluation.md, "Degenerate tasks"): the bridge's survey, stored
mkdir -p "$tmp/kbdeg/level2"
cat >"$tmp/kbdeg/level2/9_X_minus_X.py" <<'PY'
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x - x


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
PY
cp "$kb/KernelBench/level2/1_Matmul_Add_ReLU.py" "$tmp/kbdeg/level2/"
run "import with --check" 0 "$cli" tasks import kernelbench "$tmp/kbdeg" --check --device cpu --store "$store" -q
grep_out "the degenerate task is named with its kind" "^kernelbench/level2/9_X_minus_X: zeros"
grep_out "check summary: counted per level (every unchecked task of the source)" "^checked [0-9]* tasks: 1 degenerate (level 2: 1), 0 could not run"
run "tasks list --level 2 --json" 0 "$cli" tasks list --level 2 --json --store "$store"
field "list --json: checked, not degenerate" 'r["id"] == "kernelbench/level2/1_Matmul_Add_ReLU" and r["checked"] is True and r["degenerate"] is None'
run "tasks list: the CHECK column" 0 "$cli" tasks list --level 2 --store "$store"
grep_out "list shows the degenerate kind" "^kernelbench/level2/9_X_minus_X  *kernelbench  *2  *degenerate:zeros"
run "tasks check skips what is checked" 0 "$cli" tasks check --level 2 --device cpu --store "$store" -q
grep_out "nothing left to check" "^checked 0 tasks: 0 degenerate"
run "tasks check --again --json" 0 "$cli" tasks check --level 2 --again --json --device cpu --store "$store" -q
field "check --json: the degenerate task first, with its numbers" 'r["id"] == "kernelbench/level2/9_X_minus_X" and r["degenerate"]["kind"] == "zeros" and r["degenerate"]["max_abs"] == 0'
run "tasks check: an option of import" 2 "$cli" tasks check --check --store "$store"

printf 'not json\n{"code": 5}\n' >"$tmp/allbad.jsonl"
run "JSONL where every row is bad" 3 "$cli" tasks import ops6k "$tmp/allbad.jsonl" --store "$store"
grep_out "all bad: summary still printed" "^imported 0, unchanged 0, updated 0, skipped 2 (first: row 0 (line 1): invalid JSON"
grep_err "all bad: says so" "no task in"

# parquet: through pyarrow when this Python has it; without it, a clear message (exit 4)
mkdir -p "$tmp/shim/pyarrow"
echo 'raise ImportError("no pyarrow here")' >"$tmp/shim/pyarrow/__init__.py"
printf 'PAR1 anything' >"$tmp/fake.parquet"
PYTHONPATH="$tmp/shim" run "parquet without pyarrow" 4 "$cli" tasks import ops6k "$tmp/fake.parquet" --store "$store"
grep_err "no pyarrow: how to fix" "parquet needs pyarrow: pip install pyarrow, or convert to JSONL"
if "$py" -c 'import pyarrow' 2>/dev/null; then
  "$py" - "$ops" "$tmp/ops.parquet" <<'PY'
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except ValueError:
        pass  # the fixture's bad and blank lines
ops = [r.get("ops") if isinstance(r.get("ops"), list) else None for r in rows]
pq.write_table(pa.table({"code": [r["code"] for r in rows], "ops": ops,
                         "data_source": [r.get("data_source") for r in rows]}), sys.argv[2])
PY
  run "import Ops-6K parquet" 0 "$cli" tasks import ops6k "$tmp/ops.parquet" --store "$tmp/pq-store" --json
  field "parquet: rows and skips" 'r["rows"] == 6 and r["imported"] == 5 and r["skipped"] == 1 and r["first_skip"].startswith("row 3: ")'
  run "parquet task listed with its ops" 0 "$cli" tasks show ops6k/000000_relu_add --json --store "$tmp/pq-store"
  field "parquet ops kept" 'r["ops"] == ["torch.relu", "torch.add"] and r["data_source"] == "synthetic-a"'
  printf 'PAR1 not really' >"$tmp/junk.parquet"
  run "a broken parquet file" 3 "$cli" tasks import ops6k "$tmp/junk.parquet" --store "$tmp/pq-store"
  grep_err "broken parquet: one line" "not a readable parquet file"
else
  echo "skip parquet import: $py has no pyarrow (pip install pyarrow)"
fi

# ---- baselines export|import (the shared baseline table, docs/evaluation.md) ----
bl="$tmp/bl"
mkdir -p "$bl"
run "baselines export of an empty table" 0 "$cli" baselines export --cache "$bl/a.sqlite"
grep_err "empty export counted" "exported 0 baseline entries"
cat >"$bl/in.jsonl" <<'JL'
{"task_hash": "3b12b5ad3c7c237601b21b68f097cad7", "gpu_name": "NVIDIA H200", "torch_version": "2.11.0+cu130", "protocol_version": 4, "measured_at": 1764614400.5, "timing": {"eager": {"median_ms": 0.0122}, "compile": {"median_ms": 0.0984}}}

{"task_hash": "3b12b5ad3c7c237601b21b68f097cad7", "gpu_name": "NVIDIA H100", "torch_version": "2.11.0+cu130", "protocol_version": 4, "measured_at": 1764614400.5, "timing": {"eager": {"median_ms": 0.02}}}
JL
run "baselines import" 0 "$cli" baselines import --cache "$bl/a.sqlite" "$bl/in.jsonl"
grep_err "import counted" "2 entries imported, 0 kept"
run "baselines export to a file" 0 "$cli" baselines export --cache "$bl/a.sqlite" "$bl/out.jsonl"
if "$py" - "$bl/in.jsonl" "$bl/out.jsonl" <<'PY'
import json, sys
a = sorted((json.loads(l) for l in open(sys.argv[1]) if l.strip()), key=lambda r: r["gpu_name"])
b = sorted((json.loads(l) for l in open(sys.argv[2]) if l.strip()), key=lambda r: r["gpu_name"])
sys.exit(0 if a == b else 1)
PY
then ok "baselines round trip: the same entries"; else bad "baselines round trip" "$(cat "$bl/out.jsonl")"; fi
printf '{"task_hash": "h", "gpu_name": "g", "torch_version": "t", "protocol_version": 4, "measured_at": 2e9, "timing": {}}\n{"task_hash": 7}\n' >"$bl/bad.jsonl"
run "baselines import of a bad file" 2 "$cli" baselines import --cache "$bl/b.sqlite" "$bl/bad.jsonl"
grep_err "bad import names the line" "bad.jsonl:2: 'task_hash' must be a string"
run "baselines: nothing of the bad file imported" 0 "$cli" baselines export --cache "$bl/b.sqlite"
grep_err "bad import left nothing" "exported 0 baseline entries"
run "baselines without a subcommand" 2 "$cli" baselines
run "baselines export --replace" 2 "$cli" baselines export --replace
run "baselines import without files" 2 "$cli" baselines import --cache "$bl/a.sqlite"

finish
