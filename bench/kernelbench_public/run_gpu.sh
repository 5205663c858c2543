#!/usr/bin/env bash
# The corpus on a GPU, ours beside KernelBench's own harness, in as many calls as it takes
# (README.md here, "On a GPU"): every set of CANDS judged by `cuda-agent bench --skip-missing
# --kernelbench-harness KB` into RUNS/set_<k>, within SECONDS of this call (default 540); a call
# again resumes where the last one stopped (bench and the harness both keep what they judged).
# At the end: the corpus-wide agreement table (corpus.py summarize), and, with $OUT set, a
# tarball of RUNS' results (no builds) at $OUT/kb_runs.tar.gz.
#
#   bash bench/kernelbench_public/run_gpu.sh KB CANDS RUNS [SECONDS]
#
# KB: the KernelBench checkout (corpus.py kernelbench), CANDS: the fetched corpus (corpus.py
# fetch), RUNS: where the runs go (kept between calls). $CLI: the cuda-agent binary (default
# build/cuda-agent); extra bench options in $BENCH_OPTS (e.g. "--kernelbench-timeout 300").
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
[ $# -ge 3 ] || { sed -n 2,14p "$0"; exit 2; }
kb="$1" cands="$2" runs="$3" budget="${4:-540}"
cli="${CLI:-build/cuda-agent}"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
mkdir -p "$runs"
store="$runs/store"
if [ ! -d "$store/kernelbench" ]; then
  "$cli" tasks import kernelbench --store "$store" "$kb" -q || exit $?
fi
status=0
for set in "$cands"/set_*; do
  k="${set##*/}"
  t=$(left)
  if [ "$t" -lt 30 ]; then
    echo "run_gpu: out of time before $k; run again to resume" >&2
    status=124
    break
  fi
  echo "run_gpu: $k (${t}s left)" >&2
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after=30 "$t" "$cli" bench --skip-missing \
    --kernelbench-harness "$kb" ${BENCH_OPTS:-} --out "$runs/$k" "$store/kernelbench" "$set" \
    >"$runs/$k.report.txt" 2>"$runs/$k.stderr.txt"
  rc=$?
  tail -n 3 "$runs/$k.stderr.txt" >&2
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 130 ] || [ "$rc" -eq 137 ]; then
    echo "run_gpu: $k stopped at the time limit; run again to resume" >&2
    status=124
    break
  fi
  [ "$rc" -eq 0 ] || { echo "run_gpu: $k: bench exit $rc (see $runs/$k.stderr.txt)" >&2; status=$rc; }
done
python3 bench/kernelbench_public/corpus.py summarize "$cands" "$runs" | tee "$runs/summary.txt"
python3 bench/kernelbench_public/corpus.py summarize --json "$cands" "$runs" >"$runs/summary.json"
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/kb_runs.tar.gz" --exclude='*.build' --exclude='store' --exclude='*.sqlite-*' \
    -C "$(dirname "$runs")" "$(basename "$runs")"
fi
exit "$status"
