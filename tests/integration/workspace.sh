#!/usr/bin/env bash
# `cuda-agent workspace new` without a GPU: workspaces for examples/tasks/layernorm (parents
# created) and examples/tasks/scaled_residual_params_scalar (params, a buffer and Python scalars;
# into an existing empty directory), with the real bridge on CPU torch and real nvcc. Checks every
# file and its mode, that INTERFACE.md lists exactly the spec `cuda-agent verify --json` reports
# (and that this comparison catches a wrong row), that the template compiles and `verify` stops at
# env.no_gpu after compiling, that a non-empty DIR is refused untouched, that a broken task exits 3
# and leaves nothing behind, and the usage errors.
# Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CUDA_AGENT_CACHE="$(mktemp -d /tmp/ca-ws-cache.XXXXXX)"
tmp="$(mktemp -d /tmp/ca-ws.XXXXXX)"
trap 'rm -rf "$tmp" "$CUDA_AGENT_CACHE"' EXIT
. tests/lib.sh

# interface_matches NAME WS RESULT_JSON: INTERFACE.md's three tables equal the result's spec
# (index, name, dtype, shape, row-major strides, device, the C access expression), in order.
check_interface() {
  "$py" - "$1" "$2" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
spec = json.loads(open(sys.argv[2]).readline())["spec"]
ctype = {"float64": "double", "float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16",
         "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t",
         "uint8": "uint8_t", "bool": "bool"}
def rows(group):
    m = re.search(r"^## " + group + r":.*?\n\n(.*?)(?:\n\n|\Z)", text, re.S | re.M)
    if not m:
        sys.exit(f"no '## {group}:' section")
    lines = [l for l in m.group(1).splitlines() if l.startswith("| ") and not l.startswith("| index") and not l.startswith("| ---")]
    return [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines]
for group in ("args", "params", "outputs"):
    got, want = rows(group), spec[group]
    if len(got) != len(want):
        sys.exit(f"{group}: {len(got)} rows, spec has {len(want)}")
    for row, t in zip(got, want):
        strides, s = [], 1
        for n in reversed(t["shape"]):
            strides.insert(0, s)
            s *= n
        const = "" if group == "outputs" else "const "
        access = (f"`*(const {ctype[t['dtype']]} *){group}[{t['index']}].data` on the host" if t["device"] == "cpu"
                  else f"`({const}{ctype[t['dtype']]} *){group}[{t['index']}].data`")
        expect = [str(t["index"]), f"`{t['name']}`", t["dtype"], str(t["shape"]), str(strides), t["device"], access]
        if row != expect:
            sys.exit(f"{group}: row {row} != {expect}")
    n = len(want)
    if f"num_{group} == {n} */" not in text:
        sys.exit(f"the signature does not say num_{group} == {n}")
PY
}

# check_workspace LABEL TASK WS COUNTS: the files, modes, contents and the template's build.
check_workspace() {
  local label="$1" task="$2" ws="$3" counts="$4"
  grep -q "^workspace $ws: model.py, task.json, SKILL.md, INTERFACE.md ($counts), kernels/kernel.cu; next: cd $ws && cuda-agent compile\$" "$tmp/out" \
    && ok "$label: the summary line" || bad "$label: the summary line" "$(cat "$tmp/out")"
  local listing
  listing="$(cd "$ws" && find . | LC_ALL=C sort | tr '\n' ' ')"
  [ "$listing" = ". ./INTERFACE.md ./SKILL.md ./kernels ./kernels/kernel.cu ./model.py ./task.json " ] \
    && ok "$label: exactly the expected files" || bad "$label: exactly the expected files" "$listing"
  cmp -s "$task/model.py" "$ws/model.py" && ok "$label: model.py is the task's" || bad "$label: model.py is the task's"
  cmp -s "$task/task.json" "$ws/task.json" && ok "$label: task.json is the task's" || bad "$label: task.json is the task's"
  cmp -s skills/native/SKILL.md "$ws/SKILL.md" && ok "$label: SKILL.md is skills/native/SKILL.md" || bad "$label: SKILL.md is skills/native/SKILL.md"
  local f modes=""
  for f in model.py task.json SKILL.md INTERFACE.md; do modes="$modes$f=$(stat -c %a "$ws/$f") "; done
  [ "$modes" = "model.py=444 task.json=444 SKILL.md=444 INTERFACE.md=444 " ] \
    && ok "$label: infrastructure files are 0444" || bad "$label: infrastructure files are 0444" "$modes"
  local km dm
  km=$(stat -c %a "$ws/kernels/kernel.cu") dm=$(stat -c %a "$ws/kernels")
  (( (8#$km & 8#200) && (8#$dm & 8#200) )) && ok "$label: kernels/ and kernel.cu are writable ($dm, $km)" \
    || bad "$label: kernels/ and kernel.cu are writable" "kernels $dm, kernel.cu $km"
  grep -q 'extern "C" int ca_forward' "$ws/kernels/kernel.cu" && grep -q "TODO" "$ws/kernels/kernel.cu" \
    && grep -q "abi.forward_failed" "$ws/kernels/kernel.cu" \
    && ok "$label: kernel.cu exports ca_forward with a TODO" || bad "$label: kernel.cu exports ca_forward with a TODO"

  run "$label: the template compiles" 0 "$cli" compile --json "$ws"
  field "$label: compile says ok" 'r["compiled"] is True and r["reason"]["code"] == "ok"'
  local hash
  hash=$(sed -n 's/^- task hash `\([0-9a-f]*\)`.*/\1/p' "$ws/INTERFACE.md")
  field "$label: INTERFACE.md's task hash is the workspace's" "r['task']['hash'] == '$hash' and len('$hash') == 32"

  run "$label: verify stops at env.no_gpu (exit 4)" 4 "$cli" verify --json --device cpu "$ws"
  field "$label: verify compiled first, then env.no_gpu" 'r["compiled"] is True and r["reason"]["code"] == "env.no_gpu"'
  cp "$tmp/out" "$tmp/$label.result.json"
  if err=$(check_interface "$ws/INTERFACE.md" "$tmp/$label.result.json" 2>&1); then
    ok "$label: INTERFACE.md lists every spec tensor (index, name, dtype, shape, strides, device)"
  else
    bad "$label: INTERFACE.md lists every spec tensor" "$err"
  fi
}

# ---- usage ----------------------------------------------------------------------------------
run "workspace --help" 0 "$cli" workspace --help
grep_out "workspace --help shows the usage" "usage: cuda-agent workspace new \[options\] TASK DIR"
run "workspace new --help" 0 "$cli" workspace new --help
grep_out "workspace new --help names --python" "--python PATH"
run "cuda-agent --help lists workspace" 0 "$cli" --help
grep_out "cuda-agent --help lists workspace" "workspace new TASK DIR"
run "workspace without a subcommand" 2 "$cli" workspace
run "workspace: unknown subcommand" 2 "$cli" workspace make examples/tasks/layernorm "$tmp/x"
run "workspace new without DIR" 2 "$cli" workspace new examples/tasks/layernorm
run "workspace new: bad --device" 2 "$cli" workspace new --device tpu examples/tasks/layernorm "$tmp/x"
run "workspace new: bad option" 2 "$cli" workspace new --frobnicate examples/tasks/layernorm "$tmp/x"
[ ! -e "$tmp/x" ] && ok "usage errors create nothing" || bad "usage errors create nothing"

# ---- two real workspaces --------------------------------------------------------------------
ln_ws="$tmp/deep/er/ws-layernorm"
run "workspace new layernorm (parents created)" 0 "$cli" workspace new --device cpu examples/tasks/layernorm "$ln_ws"
check_workspace layernorm examples/tasks/layernorm "$ln_ws" "1 arg, 2 params, 1 output"

sr_ws="$tmp/empty-ws"
mkdir "$sr_ws"
run "workspace new scaled_residual_params_scalar (an existing empty DIR)" 0 \
  "$cli" workspace new -q --device cpu examples/tasks/scaled_residual_params_scalar "$sr_ws"
check_workspace scaled_residual examples/tasks/scaled_residual_params_scalar "$sr_ws" "3 args, 2 params, 1 output"
grep -q '| 1 | `alpha` | float64 | \[\] | \[\] | cpu | `\*(const double \*)args\[1\].data` on the host |' "$sr_ws/INTERFACE.md" \
  && ok "scaled_residual: alpha is a host float64 scalar" || bad "scaled_residual: alpha is a host float64 scalar" "$(grep alpha "$sr_ws/INTERFACE.md")"

# The comparison itself can fail: a copy of INTERFACE.md with one dtype changed must not pass.
sed 's/| 2 | `steps` | int64 |/| 2 | `steps` | int32 |/' "$sr_ws/INTERFACE.md" >"$tmp/tampered.md"
if ! cmp -s "$sr_ws/INTERFACE.md" "$tmp/tampered.md" && ! check_interface "$tmp/tampered.md" "$tmp/scaled_residual.result.json" >/dev/null 2>&1; then
  ok "the INTERFACE.md check rejects a wrong dtype"
else
  bad "the INTERFACE.md check rejects a wrong dtype"
fi

# ---- refusals: nothing is overwritten, nothing is left behind --------------------------------
full="$tmp/full"
mkdir "$full"
echo "mine" >"$full/notes.txt"
run "a non-empty DIR is refused (exit 2)" 2 "$cli" workspace new --device cpu examples/tasks/layernorm "$full"
grep -q "exists and is not empty" "$tmp/err" && ok "says the DIR is not empty" || bad "says the DIR is not empty" "$(cat "$tmp/err")"
[ "$(ls -A "$full")" = "notes.txt" ] && [ "$(cat "$full/notes.txt")" = "mine" ] \
  && ok "the non-empty DIR is left untouched" || bad "the non-empty DIR is left untouched" "$(ls -A "$full")"
echo "a file" >"$tmp/afile"
run "a DIR that is a file is refused (exit 2)" 2 "$cli" workspace new --device cpu examples/tasks/layernorm "$tmp/afile"
[ "$(cat "$tmp/afile")" = "a file" ] && ok "the file is left untouched" || bad "the file is left untouched"

broken="$tmp/broken-task"
mkdir "$broken"
cat >"$broken/model.py" <<'EOF'
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x)
        return x * 2


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
EOF
run "a task with a syntax error (exit 3)" 3 "$cli" workspace new -q --device cpu "$broken" "$tmp/nothere/ws"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^cuda-agent: task.syntax_error: " "$tmp/err" \
  && ok "one line naming task.syntax_error" || bad "one line naming task.syntax_error" "$(cat "$tmp/err")"
[ ! -e "$tmp/nothere" ] && ok "the broken task leaves no DIR (nor its parent) behind" || bad "the broken task leaves no DIR behind" "$(find "$tmp/nothere")"
mkdir "$tmp/empty2"
run "a broken task into an existing empty DIR (exit 3)" 3 "$cli" workspace new -q --device cpu "$broken" "$tmp/empty2"
[ -d "$tmp/empty2" ] && [ -z "$(ls -A "$tmp/empty2")" ] && ok "the existing empty DIR stays, empty" || bad "the existing empty DIR stays, empty" "$(ls -A "$tmp/empty2")"
run "a task directory without model.py (exit 3)" 3 "$cli" workspace new --device cpu "$tmp/empty2" "$tmp/nothere2"
grep -q "task.invalid" "$tmp/err" && ok "says task.invalid" || bad "says task.invalid" "$(cat "$tmp/err")"
[ ! -e "$tmp/nothere2" ] && ok "no DIR left behind" || bad "no DIR left behind"

# Creating fails after the parents were made (a last component longer than NAME_MAX): the parents
# this call created are removed again.
long=$(printf 'w%.0s' $(seq 1 300))
run "a DIR that cannot be created (exit 4)" 4 "$cli" workspace new -q --device cpu examples/tasks/layernorm "$tmp/madeparent/sub/$long"
grep -q "cannot create" "$tmp/err" && ok "says it cannot create the DIR" || bad "says it cannot create the DIR" "$(cat "$tmp/err")"
[ ! -e "$tmp/madeparent" ] && ok "the parents it made are removed again" || bad "the parents it made are removed again" "$(find "$tmp/madeparent")"

# An installation without skills/native/SKILL.md is an environment problem, found before any DIR.
mkdir -p "$tmp/root/python"
run "no SKILL.md in the installation (exit 4)" 4 env CUDA_AGENT_ROOT="$tmp/root" "$cli" workspace new --device cpu examples/tasks/layernorm "$tmp/nothere3"
grep -q "SKILL.md" "$tmp/err" && ok "names SKILL.md" || bad "names SKILL.md" "$(cat "$tmp/err")"
[ ! -e "$tmp/nothere3" ] && ok "no DIR left behind" || bad "no DIR left behind"

finish
