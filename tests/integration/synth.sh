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
"$py" - "$d/verdicts.jsonl" <<'PY' && ok "every verdict names its stage, and torch.compile ran" || bad "verdicts: $(head -c 400 "$d/verdicts.jsonl")"
import json, sys
vs = [json.loads(l) for l in open(sys.argv[1])]
assert len(vs) == 6 and all("kept" in v and (v["kept"] == (v["stage"] is None)) for v in vs)
assert any(v["kept"] for v in vs) and all(v.get("compiled") for v in vs if v["kept"])
sys.exit(0)
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
run "import --source rejects a bad name" 2 "$cli" tasks import ops6k "$d/ops.jsonl" --store "$tmp/store3" --source "Bad/Name"
run "import --source is for ops6k only" 2 "$cli" tasks import kernelbench tests/data/kernelbench_mini --store "$tmp/store3" --source x
run "synth with no step is a usage error" 2 "$cli" synth
run "a step before its input is a usage error" 2 "$cli" synth export --dir "$tmp/empty"
finish
