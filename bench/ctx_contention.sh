#!/usr/bin/env bash
# Builds bench/ctx_contention.cu and times one process's driver calls alone, beside 1 and 3
# processes that make and end CUDA contexts one after the other, and beside 12 idle contexts;
# prints, per case, the calls' latency split by what the others were doing when each call began
# (making a context, ending one, neither). Needs a GPU and nvcc (docs/service.md, "Scheduling").
# Usage: bench/ctx_contention.sh [seconds per case, default 2]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
secs="${1:-2}"
work="$(mktemp -d "${TMPDIR:-/tmp}/ca-ctx.XXXXXX")"
trap 'rm -rf "$work"' EXIT
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)"
nvcc -O2 -arch="sm_${arch}" -o "$work/ctx" "$here/ctx_contention.cu"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
split() { python3 "$here/ctx_contention.py" "$@"; }
for mode in victim work; do
	echo "== $mode alone"
	"$work/ctx" "$mode" "$secs" "$work/v.txt"
	split "$work/v.txt"
	for k in 1 3; do
		pids=()
		for i in $(seq "$k"); do
			"$work/ctx" churn "$(awk "BEGIN { print $secs + 0.6 }")" 0.15 "$work/c$i.txt" & pids+=($!)
		done
		sleep 0.3
		echo "== $mode beside $k processes making and ending contexts"
		"$work/ctx" "$mode" "$secs" "$work/v.txt"
		wait "${pids[@]}"
		split "$work/v.txt" $(seq -f "$work/c%g.txt" 1 "$k")
	done
	pids=()
	for i in $(seq 12); do "$work/ctx" churn 0.01 "$(awk "BEGIN { print $secs + 4 }")" "$work/i$i.txt" & pids+=($!); done
	sleep 2.5
	echo "== $mode beside 12 idle contexts"
	"$work/ctx" "$mode" "$secs" "$work/v.txt"
	split "$work/v.txt"
	wait "${pids[@]}"
done
