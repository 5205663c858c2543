#!/usr/bin/env bash
# CLI integration tests that need no GPU: real nvcc builds, the real torch bridge on CPU torch,
# real result JSON. Prints "N passed, N failed" last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
build="${CA_BUILD:-$PWD/build}"
cli="$build/cuda-agent"
py="${PYTHON:-${CUDA_AGENT_PYTHON:-python3}}"
export CUDA_AGENT_PYTHON="$py"
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

finish
