"""Evaluate a native candidate through `cuda-agent serve` (docs/service.md); stdlib only.

Usage: python3 examples/serve_client.py URL TASK_DIR CANDIDATE_DIR
  e.g. python3 examples/serve_client.py http://127.0.0.1:8040 examples/tasks/layernorm DIR
Sends the task's files inline and the candidate's kernels/, retries on 429/503 after the
server's Retry-After, and prints the reward and the reason.
"""
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

url, task, cand = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
body = json.dumps({
    "task": {"files": {p.name: p.read_text() for p in task.iterdir() if p.is_file()}},
    "candidate": {"format": "native", "files": {
        f"kernels/{p.name}": p.read_text() for p in (cand / "kernels").iterdir()}},
    "idempotency_key": str(uuid.uuid4()),  # a retry is answered once, not evaluated twice
}).encode()
for attempt in range(5):
    req = urllib.request.Request(url + "/v1/evaluate", body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            result = json.load(r)
        break
    except urllib.error.HTTPError as e:
        if e.code not in (429, 503):
            sys.exit(f"{e.code}: {json.load(e)['error']['message']}")
        time.sleep(float(e.headers.get("Retry-After", "5")))
else:
    sys.exit("the service stayed busy")
print(f"reward {result['reward']}: {result['reason']['code']}: {result['reason']['message']}")
