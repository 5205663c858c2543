#!/usr/bin/env bash
# Builds bench/l2state.cu and runs it alone and under ncu (--cache-control none, then all);
# prints one table: per L2 preparation and access hint, our event median and ncu's
# gpu__time_duration medians. Needs a GPU, nvcc and ncu. Usage: bench/l2state.sh [reps]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
reps="${1:-30}"
work="$(mktemp -d "${TMPDIR:-/tmp}/ca-l2state.XXXXXX")"
trap 'rm -rf "$work"' EXIT
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
nvcc -O3 -std=c++17 -arch="sm_${arch}" -o "$work/l2state" "$here/l2state.cu"
"$work/l2state" "$reps" > "$work/events.tsv"
ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
for cc in none all; do
	"$ncu" --clock-control none --cache-control "$cc" --metrics gpu__time_duration.sum --csv \
		--kernel-name regex:^K "$work/l2state" "$(( reps < 12 ? reps : 12 ))" \
		> "$work/ncu_$cc.csv" 2> "$work/ncu_$cc.err" ||
		{ echo "l2state.sh: ncu --cache-control $cc failed:" >&2; tail -5 "$work/ncu_$cc.err" >&2; exit 1; }
done
python3 - "$work" <<'PY'
import csv, io, re, statistics, sys
work = sys.argv[1]
scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}
def ncu(cc):
    rows = [l for l in open(f"{work}/ncu_{cc}.csv") if l.startswith('"')]
    per = {}
    for r in csv.DictReader(io.StringIO("".join(rows))):
        m = re.search(r"K<(\d+), (\d+)>", r.get("Kernel Name", ""))
        if m and r.get("Metric Name") == "gpu__time_duration.sum":
            value = float(r["Metric Value"].replace(",", "")) * scale.get(r.get("Metric Unit", "ns"), 1e-6)
            per.setdefault((int(m[1]), int(m[2])), []).append(value)
    return {k: statistics.median(v) for k, v in per.items()}
none, full = ncu("none"), ncu("all")
hints = ["plain", "__ldcs", "__stcs", "__ldcs+__stcs"]
lines = open(f"{work}/events.tsv").read().splitlines()
print("\n".join(l for l in lines if l.startswith("#")))
print(f"{'preparation':52} {'hint':14} {'events':>8} {'ncu none':>9} {'ncu all':>8} {'vs all':>7}")
for l in lines:
    if l.startswith("#") or l.startswith("prep"):
        continue
    p, hint, med, _mn, desc = l.split("\t")
    key = (int(p), hints.index(hint))
    ours, a, n = float(med), full.get(key), none.get(key)
    fmt = lambda v: f"{v:.4f}" if v is not None else "n/a"
    rel = f"{100 * (ours / a - 1):+.1f}%" if a else "n/a"
    print(f"{desc:52} {hint:14} {ours:8.4f} {fmt(n):>9} {fmt(a):>8} {rel:>7}")
PY
