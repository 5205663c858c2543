#!/usr/bin/env bash
# `cuda-agent solve` against the scripted OpenAI-compatible server (tests/agent/scripted_server.py,
# a test double): a replayed trajectory that writes a correct kernel, compiles, verifies and
# stops, with a malformed tool call, an unknown tool, a repeated call and a server error on
# the way; a failing kernel (reward -1); the turn limit; an endpoint that keeps failing.
# Without a GPU the final evaluation stops at env.no_gpu after compiling (exit 4); on a GPU
# machine (CA_GPU=1) the good trajectory must end with reward 2 or 3.
# Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d /tmp/ca-solve.XXXXXX)"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
. tests/lib.sh
gpu="${CA_GPU:-0}"

# script NAME: writes $tmp/NAME.jsonl from the Python below (argument: the scenario)
script() {
  "$py" - "$1" "$tmp/$1.jsonl" <<'PY'
import json, sys
scenario, out = sys.argv[1], sys.argv[2]
good = open("tests/data/candidates/good/kernels/axpb.cu").read()
bad = good.replace("return 0;", "return 0 /* missing semicolon */", 1) + "\nthis is not C\n"

def call(i, name, args):
    text = args if isinstance(args, str) else json.dumps(args)
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": text}}

def turn(*calls, content=None, usage=(1000, 50)):
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = list(calls)
    return {"message": msg, "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                      "total_tokens": usage[0] + usage[1]},
            "finish_reason": "tool_calls" if calls else "stop"}

lines = []
if scenario == "good":
    lines = [
        {"status": 503, "body": "{\"error\": {\"message\": \"overloaded\"}}"},
        turn(call(1, "read_file", {"path": "INTERFACE.md"})),
        turn(call(2, "write_file", {"path": "kernels/kernel.cu", "content": good})),
        turn(call(3, "bash", "{not json")),                      # malformed arguments
        turn(call(4, "rm_everything", {"path": "."})),           # unknown tool
        turn(call(5, "bash", {"command": "cuda-agent compile"})),
        turn(call(6, "bash", {"command": "cuda-agent compile"})),  # repeated
        turn(call(7, "bash", {"command": "cuda-agent verify --json"})),
        # cuda-agent inside a longer bash command (the shim): piped, from another directory
        turn(call(8, "glob", {"pattern": "kernels/*.cu"}),
             call(9, "bash", {"command": "ls kernels && cd kernels && cuda-agent compile | head -5; echo compile-exit=${PIPESTATUS[0]}"})),
        turn(content="The kernel is correct; I am done."),
    ]
elif scenario == "bad":
    lines = [
        turn(call(1, "write_file", {"path": "kernels/kernel.cu", "content": bad})),
        turn(call(2, "bash", {"command": "cuda-agent compile"})),
        turn(content="Done."),
    ]
elif scenario == "loop":
    lines = [turn(call(i, "bash", {"command": f"echo turn {i}"})) for i in range(1, 20)]
elif scenario == "batch":
    lines = [turn(content="Nothing to do.")] * 2
elif scenario == "down":
    lines = [{"status": 500}] * 10
with open(out, "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
PY
}

# serve NAME: starts the scripted server on $tmp/NAME.jsonl, sets $url
serve() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -f "$tmp/$1.requests.jsonl" "$tmp/port"
  "$py" tests/agent/scripted_server.py --script "$tmp/$1.jsonl" --log "$tmp/$1.requests.jsonl" >"$tmp/port" 2>"$tmp/server.err" &
  server_pid=$!
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  url="http://127.0.0.1:$("$py" -c "import json; print(json.loads(open('$tmp/port').readline())['port'])")/v1"
}

# traj NAME FILE PYEXPR: evaluates PYEXPR with t = the trajectory's objects (list), by = by type
traj() {
  if "$py" - "$2" "$3" <<'PY'
import json, sys
t = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for o in t:
    by.setdefault(o["type"], []).append(o)
sys.exit(0 if eval(sys.argv[2], {"t": t, "by": by}) else 1)
PY
  then ok "$1"; else bad "$1" "assertion $3 failed on: $(tail -c 1500 "$2")"; fi
}

task=tests/data/candidates/tiny_task
want_final=4; [ "$gpu" = 1 ] && want_final=0
want_template=4; [ "$gpu" = 1 ] && want_template=1  # the template kernel: not implemented

# ---- a good trajectory, with the faults a real model makes on the way
script good; serve good
run "solve replays a good trajectory" "$want_final" "$cli" solve --json --workspace "$tmp/ws" --retries 3 "$task" --llm-url "$url" --model scripted
tj="$tmp/ws/trajectory.jsonl"
[ -s "$tj" ] && ok "trajectory written" || bad "trajectory written"
traj "trajectory: start, 9 turns, final, summary" "$tj" '[o["type"] for o in t][0] == "start" and len(by["turn"]) == 9 and len(by["final"]) == 1 and t[-1]["type"] == "summary"'
traj "start lists the tools and the first messages" "$tj" '{x["function"]["name"] for x in by["start"][0]["tools"]} >= {"bash", "read_file", "write_file", "edit", "multi_edit", "glob", "grep"} and by["start"][0]["messages"][0]["role"] == "system"'
traj "the server error was retried" "$tj" 'by["turn"][0]["attempts"] == 2'
traj "malformed arguments: a schema violation answered with an error" "$tj" 'any(o["violation"] and o["name"] == "bash" and "JSON object" in o["output"] for o in by["tool"])'
traj "unknown tool: a schema violation" "$tj" 'any(o["violation"] and o["name"] == "rm_everything" for o in by["tool"])'
traj "repeated call counted" "$tj" 'by["summary"][0]["repeated_calls"] == 1 and by["summary"][0]["schema_violations"] == 2 and by["summary"][0]["tool_calls"] == 9'
traj "compile ran outside the sandbox and passed" "$tj" 'any(o["arguments"] == "{\"command\": \"cuda-agent compile\"}" and o["ok"] and "build" in o["output"] for o in by["tool"])'
traj "read_file returned INTERFACE.md" "$tj" '"ca_forward" in by["tool"][0]["output"] and by["tool"][0]["ok"]'
traj "bash ran in the workspace, cuda-agent inside it through the shim" "$tj" 'any(o["name"] == "bash" and "ls kernels &&" in o["arguments"] and "kernel.cu" in o["output"] and "compile-exit=0" in o["output"] and "compiled" in o["output"] for o in by["tool"])'
traj "token usage and stop reason recorded" "$tj" 'by["summary"][0]["stop_reason"] == "done" and by["summary"][0]["completion_tokens"] == 450 and by["turn"][1]["prompt_tokens"] == 1000'
if [ "$gpu" = 1 ]; then
  traj "final evaluation: correct, reward 2 or 3" "$tj" 'by["final"][0]["result"]["correct"] is True and by["final"][0]["result"]["reward"] in (2, 3)'
else
  traj "final evaluation: compiled, then env.no_gpu, no reward (not the candidate's failure)" "$tj" 'by["final"][0]["result"]["compiled"] is True and by["final"][0]["result"]["reason"]["code"] == "env.no_gpu" and by["final"][0]["result"]["reward"] is None'
fi
"$py" - "$tj" <<'PY'
import json, sys
f = [json.loads(l) for l in open(sys.argv[1]) if '"final"' in l][0]["result"]
t = f.get("timing") or {}
ms = lambda k: (t.get(k) or {}).get("median_ms")
print(f"     figure: replayed good trajectory: final {f['reason']['code']}, reward {f.get('reward')}, "
      f"candidate {ms('candidate')} ms, eager {ms('eager')} ms, compile {ms('compile')} ms")
PY
traj "the loop's own time per turn is under 5 ms" "$tj" 'by["summary"][0]["overhead_ms_per_turn"] < 5'
"$py" -c "import json; s=[json.loads(l) for l in open('$tj')][-1]; print('     loop overhead %.3f ms/turn over %d turns' % (s['overhead_ms_per_turn'], s['turns']))"
if "$py" - "$tmp/good.requests.jsonl" <<'PY'
import json, sys
reqs = [json.loads(l)["body"] for l in open(sys.argv[1])]
assert len(reqs) == 10, len(reqs)  # the 503 and 9 answered turns
assert all(r["model"] == "scripted" and r["tools"] for r in reqs)
last = reqs[-1]["messages"]
tool_msgs = [m for m in last if m["role"] == "tool"]
assert len(tool_msgs) == 9 and all(m["tool_call_id"].startswith("call_") for m in tool_msgs)
PY
then ok "the server saw the conversation grow with every tool answer"; else bad "the server saw the conversation grow with every tool answer"; fi
stat -c %a "$tmp/ws/model.py" | grep -q 444 && ok "infrastructure files stay read-only" || bad "infrastructure files stay read-only"

# ---- a failing kernel ends with reward -1
script bad; serve bad
run "solve with a kernel that does not compile" 1 "$cli" solve --json --workspace "$tmp/ws_bad" "$task" --llm-url "$url" --model scripted
field "failing kernel: build.error, reward -1" 'r["reason"]["code"] == "build.error" and r["reward"] == -1'
traj "failing kernel: the trajectory ends with reward -1" "$tmp/ws_bad/trajectory.jsonl" 'by["summary"][0]["reward"] == -1'
"$py" -c "import json; r=json.loads(open('$tmp/out').readline()); print('     figure: replayed failing trajectory: %s, reward %s' % (r['reason']['code'], r['reward']))"

# ---- the turn limit
script loop; serve loop
run "solve stops at the turn limit" "$want_template" "$cli" solve --json --workspace "$tmp/ws_loop" --max-turns 3 "$task" --llm-url "$url" --model scripted
traj "turn limit: 3 turns, stop_reason turn_limit" "$tmp/ws_loop/trajectory.jsonl" 'by["summary"][0]["stop_reason"] == "turn_limit" and by["summary"][0]["turns"] == 3'

# ---- an endpoint that keeps failing: the loop ends, the workspace is still evaluated
script down; serve down
run "solve with a failing endpoint" "$want_template" "$cli" solve --json --workspace "$tmp/ws_down" --retries 1 "$task" --llm-url "$url" --model scripted
traj "failing endpoint: llm_error after the retries" "$tmp/ws_down/trajectory.jsonl" 'by["summary"][0]["stop_reason"] == "llm_error" and by["turn"][0]["attempts"] == 2'

# ---- batch mode: two tasks, two at once, then a re-run that resumes
mkdir -p "$tmp/tasks/a" "$tmp/tasks/b"
cp "$task"/* "$tmp/tasks/a/"; cp "$task"/* "$tmp/tasks/b/"
script batch; serve batch
run "solve --batch over two tasks" 0 "$cli" solve --batch "$tmp/tasks" --out "$tmp/bout" --concurrency 2 --llm-url "$url" --model scripted
[ -s "$tmp/bout/a/result.json" ] && [ -s "$tmp/bout/b/result.json" ] && ok "batch: a result per task" || bad "batch: a result per task" "$(ls -R "$tmp/bout" | head -20); $(tail -c 600 "$tmp/err")"
[ "$(wc -l <"$tmp/bout/results.jsonl")" -eq 2 ] && ok "batch: results.jsonl has both" || bad "batch: results.jsonl has both"
traj "batch: each task has its trajectory" "$tmp/bout/b/trajectory.jsonl" 'by["summary"][0]["stop_reason"] == "done" and by["summary"][0]["turns"] == 1'
grep -q "\[2/2\]" "$tmp/err" && ok "batch: progress lines" || bad "batch: progress lines" "$(tail -c 400 "$tmp/err")"
run "solve --batch again" 0 "$cli" solve --batch "$tmp/tasks" --out "$tmp/bout" --llm-url "$url" --model scripted
grep -q "0 solved now, 2 already done" "$tmp/err" && ok "batch: the re-run resumes" || bad "batch: the re-run resumes" "$(tail -c 400 "$tmp/err")"
run "--batch with a TASK too" 2 "$cli" solve --batch "$tmp/tasks" "$task" --llm-url "$url" --model scripted

run "solve without --model" 2 "$cli" solve "$task" --llm-url "$url"
# ---- rft over the trajectories of the runs above (docs/rl.md)
run "rft over the scripted runs' trajectories" 0 "$cli" rft "$tmp" --out "$tmp/rft/sft.parquet"
n_traj=$(find "$tmp" -name trajectory.jsonl | wc -l)
grep_out "rft counts every trajectory" "of $n_traj trajectories"
"$py" - "$tmp/out" "$tmp" <<'PY' && ok "rft's kept and dropped add up, each dropped one with its reason" || bad "rft: $(cat "$tmp/out")"
import json, re, sys
from pathlib import Path
text = open(sys.argv[1]).read()
kept, total = map(int, re.search(r"kept (\d+) of (\d+)", text).groups())
dropped = sum(int(n) for n in re.findall(r"dropped (\d+):", text))
rows = [json.loads(l) for l in (Path(sys.argv[2]) / "rft/sft.jsonl").read_text().splitlines()]
assert kept + dropped == total and len(rows) == kept, (kept, dropped, total)
assert all(r["extra_info"]["reward"] >= 1 for r in rows)
PY
run "rft of a file that is no trajectory" 3 "$cli" rft "$tmp/out" --out "$tmp/rft/x.parquet"
run "rft without --out" 2 "$cli" rft "$tmp"
finish
