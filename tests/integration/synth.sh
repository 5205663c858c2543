#!/usr/bin/env bash
# `cuda-agent synth` end to end on CPU torch (docs/synth.md): crawl, compose, filter (with
# torch.compile on a few tasks, decontaminated against tests/data/kernelbench_mini), export,
# and the exported set imported back with `cuda-agent tasks import ops6k`, JSONL and parquet,
# each task's model.py the code that was exported. Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d /tmp/ca-synth.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
. tests/lib.sh
d="$tmp/work"

run "synth crawl" 0 "$cli" synth crawl --dir "$d"
grep_out "crawl counts the usable operators" "usable"
"$py" - "$d/catalog.json" <<'PY' && ok "the catalog has at least 300 usable operators" || bad "fewer than 300 usable operators"
import json, sys
c = json.load(open(sys.argv[1]))
sys.exit(0 if c["usable"] >= 300 else 1)
PY
run "synth compose -n 6" 0 "$cli" synth compose --dir "$d" -n 6 --seed 11
run "synth filter, with torch.compile" 0 "$cli" synth filter --dir "$d" --jobs 2 \
  --kernelbench tests/data/kernelbench_mini/KernelBench
grep_out "filter says where its time went" "task-seconds by stage: checks"
"$py" - "$d/verdicts.jsonl" <<'PY' && ok "every verdict names its stage, and torch.compile ran" || bad "verdicts: $(head -c 400 "$d/verdicts.jsonl")"
import json, sys
vs = [json.loads(l) for l in open(sys.argv[1])]
assert len(vs) == 6 and all("kept" in v and (v["kept"] == (v["stage"] is None)) for v in vs)
assert any(v["kept"] for v in vs) and all(v.get("compiled") for v in vs if v["kept"])
assert all(v["seconds"]["checks"] >= 0 and "compile" in v["seconds"] for v in vs if v["kept"])
sys.exit(0)
PY
# Resumed after an interruption, through the sandbox: the staged verdicts file is the caller's,
# its last line cut; the filter redoes that task and writes whole lines (run as root, the sandbox
# runs the step under another uid, which may not write the caller's file in place).
head -n 4 "$d/verdicts.jsonl" > "$tmp/v" && head -n 5 "$d/verdicts.jsonl" | tail -n 1 | head -c 20 >> "$tmp/v"
cp "$tmp/v" "$d/verdicts.jsonl"
run "synth filter resumes after an interruption" 0 "$cli" synth filter --dir "$d" --jobs 2 \
  --kernelbench tests/data/kernelbench_mini/KernelBench
"$py" - "$d/verdicts.jsonl" <<'PY' && ok "the resumed run redid the cut task and the missing one, nothing twice" || bad "after resume: $(cut -c1-80 "$d/verdicts.jsonl")"
import json, sys
vs = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if len(vs) == 6 and len({v["id"] for v in vs}) == 6 else 1)
PY
run "synth export" 0 "$cli" synth export --dir "$d"
grep_out "export prints the funnel" "decontaminated"
if grep -q "<svg" "$d/funnel.html" && grep -q "Tasks left after each stage" "$d/funnel.html"; then ok "funnel.html has its charts"; else bad "funnel.html lacks its charts"; fi
run "the export imports back (JSONL)" 0 "$cli" tasks import ops6k "$d/ops.jsonl" --store "$tmp/store"
run "the export imports back (parquet)" 0 "$cli" tasks import ops6k "$d/ops.parquet" --store "$tmp/store2"
"$py" - "$d/ops.jsonl" "$tmp/store" <<'PY' && ok "each imported model.py is the exported code" || bad "the round trip changed a task"
import json, sys
from pathlib import Path
rows = [json.loads(l) for l in open(sys.argv[1])]
found = {p.read_text() for p in Path(sys.argv[2]).rglob("model.py")}
sys.exit(0 if rows and all(r["code"] in found for r in rows) and len(found) == len(rows) else 1)
PY
run "synth export --store: into the task store as source synth" 0 "$cli" synth export --dir "$d" --store "$tmp/store3"
grep_out "export --store prints the import's summary" "imported"
run "the store lists them under source synth" 0 "$cli" tasks list --store "$tmp/store3" --source synth --json
n_rows=$(wc -l < "$d/ops.jsonl")
n_listed=$(grep -c "\"source\": *\"synth\"" "$tmp/out" || true)
[ "$n_rows" -gt 0 ] && [ "$n_rows" = "$n_listed" ] && ok "every exported task is in the store ($n_listed)" || bad "$n_rows exported, $n_listed listed"
run "a second set under its own name does not replace the first" 0 "$cli" synth export --dir "$d" --store "$tmp/store3" --source other_set
grep_out "the second set is imported, not updated" "imported $n_rows, unchanged 0, updated 0"
run "--store is export's option only" 2 "$cli" synth filter --dir "$d" --store "$tmp/store3"
# Baselines at export: measured into the baseline cache where a GPU is; here (no GPU) the export
# says so and exits 4 after the first task; with the CPU protocol the path runs for real.
run "export --baselines without a GPU: the tasks are exported, the baselines said not measured" 4 \
  env CUDA_AGENT_CACHE="$tmp/bcache" "$cli" synth export --dir "$d" --store "$tmp/store4" --baselines
grep_out "no GPU: it says so, once" "no CUDA GPU here"
run "--baselines needs --store" 2 "$cli" synth export --dir "$d" --baselines
run "baselines measure --store: the same, for the store's tasks of one source" 4 \
  env CUDA_AGENT_CACHE="$tmp/bcache" "$cli" baselines measure --store "$tmp/store4" --source synth
grep_out "measure --store: no GPU, said once" "no CUDA GPU here"
if grep -q "the other $((n_rows - 1)) tasks are not measured" "$tmp/err"; then ok "the other tasks are not tried"; else bad "no GPU: $(tail -c 300 "$tmp/err")"; fi
run "baselines measure: a task directory that does not exist" 3 "$cli" baselines measure "$tmp/nonexistent"
run "baselines measure: --source without --store" 2 "$cli" baselines measure --source synth "$d"
run "import --source rejects a bad name" 2 "$cli" tasks import ops6k "$d/ops.jsonl" --store "$tmp/store3" --source "Bad/Name"
run "import --source is for ops6k only" 2 "$cli" tasks import kernelbench tests/data/kernelbench_mini --store "$tmp/store3" --source x

# Composition by an LLM (the scripted server): one good task, one hostile task that writes a
# file on the host when run, one reply that is no task, one failed request. The hostile task's
# file appears without the sandbox (the control) and not with it.
L="$tmp/llm"; mkdir -p "$L"; cp "$d/catalog.json" "$L/"
"$py" - "$tmp" > "$tmp/script.jsonl" <<'PY'
import json, sys
good = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


batch_size = 1048576


def get_inputs():
    return [torch.randn(batch_size, 256)]


def get_init_inputs():
    return [256]
"""
hostile = good.replace("return torch.relu(self.lin(x)) * 2",
                       f"torch.save(x, '{sys.argv[1]}/pwned.pt')\n        return torch.relu(self.lin(x)) * 2")
for content in ("Here it is:\n```python\n" + good + "```\n", "```python\n" + hostile + "```",
                "I cannot do that."):
    print(json.dumps({"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}))
print(json.dumps({"status": 400, "body": json.dumps({"error": {"message": "bad request"}})}))
PY
"$py" tests/agent/scripted_server.py --script "$tmp/script.jsonl" --log "$tmp/llm.log" \
  > "$tmp/port" 2>"$tmp/server.err" &
srv=$!
trap 'kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$tmp/port")
url="http://127.0.0.1:$port/v1"
run "synth compose --llm-url (4 prompts, one at a time)" 0 "$cli" synth compose --dir "$L" -n 4 \
  --seed 5 --llm-url "$url" --model scripted --llm-concurrency 1
grep_out "the replies become tasks or are rejected" "llm: 2 tasks from 4 new replies"
"$py" - "$L" <<'PY' && ok "tasks, rejections and the failed request are recorded" || bad "llm files: $(head -c 600 "$L/llm_replies.jsonl")"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
rows = lambda n: [json.loads(l) for l in (d / n).read_text().splitlines()]
tasks, rej, rep = rows("tasks.jsonl"), rows("llm_rejected.jsonl"), rows("llm_replies.jsonl")
assert len(rep) == 4 and sum("error" in r for r in rep) == 1, rep
assert len(tasks) == 2 and all(t["source"] == "llm" and t["estimated_ms"] is None for t in tasks)
assert len(rej) == 2 and any("not Python" in r["why"] for r in rej) and any("request failed" in r["why"] for r in rej)
PY
run "compose --llm-url again asks nothing it has an answer to" 0 "$cli" synth compose --dir "$L" -n 4 \
  --seed 5 --llm-url "$url" --model scripted
[ "$(wc -l < "$tmp/llm.log")" = 4 ] && ok "no request was sent again" || bad "$(wc -l < "$tmp/llm.log") requests logged"
kill "$srv" 2>/dev/null
cp -r "$L" "$tmp/llm_open"
CUDA_AGENT_SANDBOX=0 run "the control: filter without the sandbox" 0 "$cli" synth filter --dir "$tmp/llm_open" --no-compile --jobs 1
[ -e "$tmp/pwned.pt" ] && ok "without the sandbox the hostile task writes on the host (the test can fail)" || bad "the control wrote nothing: the hostile task does not do what the test assumes"
rm -f "$tmp/pwned.pt"
run "synth filter in the sandbox" 0 "$cli" synth filter --dir "$L" --no-compile --jobs 1
[ ! -e "$tmp/pwned.pt" ] && ok "in the sandbox the hostile task wrote nothing on the host" || bad "the hostile task wrote $tmp/pwned.pt through the sandbox"
"$py" - "$L/verdicts.jsonl" <<'PY' && ok "the good LLM task is kept (its runtime estimated), the hostile one dropped at runs" || bad "verdicts: $(cat "$L/verdicts.jsonl" | head -c 800)"
import json, sys
vs = [json.loads(l) for l in open(sys.argv[1])]
assert len(vs) == 2, vs
assert vs[0]["kept"] and 1 <= vs[0]["runtime_ms"] <= 100 and vs[0]["measured"] is False, vs[0]
assert vs[1]["stage"] == "runs", vs[1]  # its host path is not there in the sandbox
PY
run "export counts the LLM's part" 0 "$cli" synth export --dir "$L"
grep_out "the funnel's LLM line" "LLM: 4 prompts, 3 replies, 1 failed requests, 2 replies not a task"
grep -q '"data_source": "cuda-agent-synth-llm"' "$L/ops.jsonl" && ok "an LLM task's data_source says so" || bad "no cuda-agent-synth-llm row"
run "--llm-url without --model is a usage error" 2 "$cli" synth compose --dir "$L" -n 1 --llm-url "$url"
run "--llm-url is compose's option" 2 "$cli" synth filter --dir "$L" --llm-url "$url" --model m

run "synth with no step is a usage error" 2 "$cli" synth
run "a step before its input is a usage error" 2 "$cli" synth export --dir "$tmp/empty"
finish
