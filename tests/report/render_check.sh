#!/usr/bin/env bash
# The benchmark report in headless Chromium (no GPU needed). Builds the report of
# tests/report/fixture.jsonl with `cuda-agent report --html`, has Chromium dump its DOM and take a
# 1280x2000 screenshot, and checks with tests/report/check_render.py (standard-library Python)
# that the DOM holds every chart element with the fixture's hand-computed numbers
# (fixture.expect.json) and that the screenshot shows each chart: the exact fill colours, one run
# of columns per bar, pixel counts matching the bars' areas, the fast_p lines across the plot, the
# charts in order. Two negative controls must fail those checks: the same page with its charts
# hidden by CSS (a chart that does not render), and one without its fast_p lines.
# Also checks the report command's table, JSON, escaping and errors.
# Needs chromium (scripts/setup.sh installs it; $CHROMIUM overrides). Prints "N passed, N failed"
# last; exits nonzero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
here=tests/report
fixture="$here/fixture.jsonl"
expect="$here/fixture.expect.json"
tmp="$(mktemp -d /tmp/ca-report.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/lib.sh
. tests/lib.sh
t0=$(date +%s%N)

[ -x "$cli" ] || { echo "missing $cli: run make first"; exit 1; }
browser="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}"

# chrome shot|dom HTML OUT: a screenshot (PNG) or the DOM after parsing, at 1280x2000.
runs=0
chrome() {
  local mode="$1" html="$2" out="$3"
  runs=$((runs + 1))
  # shellcheck disable=SC2054 # the comma belongs to --window-size=1280,2000
  local flags=(--headless --no-sandbox --disable-gpu --force-color-profile=srgb
    --force-device-scale-factor=1 --hide-scrollbars --no-first-run --disable-extensions
    --disable-dev-shm-usage
    --user-data-dir="$tmp/profile-$runs" --window-size=1280,2000)
  if [ "$mode" = shot ]; then
    timeout 120 "$browser" "${flags[@]}" --screenshot="$out" "file://$html" \
      >"$tmp/chrome.log" 2>&1 && [ -s "$out" ]
  else
    timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$html" >"$out" 2>"$tmp/chrome.log" &&
      [ -s "$out" ]
  fi
}

# checks dom|png ARGS...: runs check_render.py, counting each of its ok/FAIL lines here.
checks() {
  "$py" "$here/check_render.py" "$@" >"$tmp/checks" 2>&1
  local rc=$? line
  while IFS= read -r line; do
    case "$line" in
      "ok "*) ok "${line#ok }" ;;
      "FAIL "*) bad "${line#FAIL }" ;;
    esac
  done <"$tmp/checks"
  # a crash (a traceback exits 1 too) must not pass for a run without failures
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/checks"; then
    bad "check_render.py $1 ran" "exit $rc: $(tail -c 800 "$tmp/checks")"
  fi
}

# control NAME dom|png ARGS... PATTERN...: the checker must fail, with a FAIL line for each
# PATTERN (a negative control: proves those checks can fail).
control() {
  local name="$1" mode="$2" nargs=2
  [ "$mode" = png ] && nargs=3
  shift 2
  local args=("${@:1:$nargs}")
  shift "$nargs"
  "$py" "$here/check_render.py" "$mode" "${args[@]}" >"$tmp/control" 2>&1
  local rc=$? missing=()
  for pat in "$@"; do grep -q "^FAIL $pat" "$tmp/control" || missing+=("$pat"); done
  if [ $rc -eq 1 ] && [ ${#missing[@]} -eq 0 ]; then
    ok "negative control: $name fails the checks ($(grep -c '^FAIL' "$tmp/control") FAIL)"
  else
    bad "negative control: $name" "exit $rc, no FAIL for: ${missing[*]}; $(head -c 600 "$tmp/control")"
  fi
}

# ---- the report command
run "report --help" 0 "$cli" report --help
grep_out "help names --html" "--html FILE"
run "report without files is a usage error" 2 "$cli" report
run "report of the fixture" 0 "$cli" report "$fixture"
grep_out "table header" "level  tasks  pass %  faster than eager %  faster than compile %"
grep_out "overall row: 12 tasks, 75% pass, 58.3% / 41.7% faster" \
  "^all  *12  *75.0  *58.3  *41.7  *1.822x (8)  *1.400x (7)$"
grep_out "level 3 row (geomean of 0.75 and 1.25 vs eager)" "^3  *2  *100.0  *50.0  *50.0  *0.968x (2)"
grep_out "replaced duplicates are counted" "12 tasks from 13 results (1 replaced"
run "report --json" 0 "$cli" report --json "$fixture"
field "json: levels 1, 2, 3, other" '[l["level"] for l in r["levels"]] == [1, 2, 3, "other"]'
field "json: overall numbers" 'r["all"]["tasks"] == 12 and r["all"]["passed"] == 9 and r["all"]["n_compile"] == 7 and abs(r["all"]["geomean_compile"] - 1.4) < 1e-3'
field "json: fast_p at p = 2 excludes speed-ups of exactly 2" 'r["fast_p"]["p"][20] == 2.0 and abs(r["fast_p"]["compile"][20] - 1 / 12) < 1e-9'
printf '%s\n' "$(head -n 2 "$fixture")" '{"schema": "cuda-agent.result/1", "task": ' >"$tmp/bad.jsonl"
run "a line that is not JSON" 2 "$cli" report "$tmp/bad.jsonl"
if grep -q "bad.jsonl:3: not JSON" "$tmp/err"; then ok "the bad line is named (file:3)"; else
  bad "the bad line is named (file:3)" "$(cat "$tmp/err")"; fi
printf '%s\n' '{"schema": "other/9", "task": {"id": "x"}}' >"$tmp/schema.jsonl"
run "a result of another schema" 2 "$cli" report "$tmp/schema.jsonl"
if grep -q "schema.jsonl:1: schema is 'other/9'" "$tmp/err"; then ok "the schema is named"; else
  bad "the schema is named" "$(cat "$tmp/err")"; fi
printf '%s\n' '{"schema": "cuda-agent.result/1", "task": {"id": "x", "level": "one"}}' >"$tmp/level.jsonl"
run "a level that is not a number" 2 "$cli" report "$tmp/level.jsonl"
if grep -q "level.jsonl:1: task.level" "$tmp/err"; then ok "task.level is named"; else
  bad "task.level is named" "$(cat "$tmp/err")"; fi
run "a missing results file" 2 "$cli" report "$tmp/nope.jsonl"

# ---- the HTML report
mkdir -p "$tmp/site"
html="$tmp/site/report.html"
run "report --html" 0 "$cli" report --html "$html" --title 'Fixture <b>report</b> & "co"' "$fixture"
if [ "$(ls "$tmp/site")" = report.html ]; then ok "written atomically (no temporary file left)"; else
  bad "written atomically" "$(ls "$tmp/site")"; fi
if grep -q '<h1 id="title">Fixture &lt;b&gt;report&lt;/b&gt; &amp; &quot;co&quot;</h1>' "$html"; then
  ok "the title is escaped"; else bad "the title is escaped" "$(grep -m1 '<h1' "$html")"; fi
urls="$(grep -oE 'https?://[^" ]+' "$html" | sort -u)"
active="$(grep -oiE '<script|<link|<img|<iframe|@import|url\(' "$html" | sort -u)"
if [ "$urls" = "http://www.w3.org/2000/svg" ] && [ -z "$active" ]; then
  ok "self-contained: no script, link, image, import or URL but the SVG namespace"
else
  bad "self-contained" "URLs: $urls; active: $active"
fi

if [ -z "$browser" ] || ! "$browser" --version >/dev/null 2>&1; then
  bad "chromium is installed" "no chromium, chromium-browser or google-chrome (scripts/setup.sh installs chromium; or set CHROMIUM)"
  finish
  exit
fi
ok "browser: $("$browser" --version 2>/dev/null | head -n 1)"
if chrome dom "$html" "$tmp/dom.html"; then ok "chromium --dump-dom"; else
  bad "chromium --dump-dom" "$(tail -c 600 "$tmp/chrome.log")"; fi
if chrome shot "$html" "$tmp/shot.png"; then ok "chromium --screenshot"; else
  bad "chromium --screenshot" "$(tail -c 600 "$tmp/chrome.log")"; fi
checks dom "$tmp/dom.html" "$expect"
checks png "$tmp/shot.png" "$tmp/dom.html" "$expect"

# ---- negative controls: a page whose charts do not render, one without fast_p lines
sed 's#</style>#svg.chart{display:none}\n</style>#' "$html" >"$tmp/site/hidden.html"
chrome shot "$tmp/site/hidden.html" "$tmp/hidden.png" || bad "chromium --screenshot (hidden charts)"
control "charts hidden by CSS" png "$tmp/hidden.png" "$tmp/dom.html" "$expect" \
  "bar-pass (#2f6fd0)" "hist-faster (#0f8b8d)" "fastp-eager (#c2410c)"
sed 's#<polyline[^>]*>##g' "$html" >"$tmp/site/nolines.html"
chrome dom "$tmp/site/nolines.html" "$tmp/nolines.dom.html" || bad "chromium --dump-dom (no lines)"
control "fast_p lines removed" dom "$tmp/nolines.dom.html" "$expect" \
  "fast_p eager: one polyline" "fast_p compile: one polyline"

ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "render test: ${ms} ms (${runs} chromium runs)"
finish
