#!/usr/bin/env bash
# Renders `lpdiag report` output in headless Chromium and checks that every plot was drawn:
# check_report.sh LPDIAG WORKDIR. A copy of the report gets a checking script appended (the
# report itself has none); Chromium lays the page out and the script writes what it measured.
set -euo pipefail
lpdiag=$1 work=$2
chrome=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$chrome" ]]; then echo "SKIP: chromium is not installed (scripts/run-tests installs it)"; exit 77; fi
rm -rf "$work" && mkdir -p "$work"
"$lpdiag" synth "$work/run.h5" --kind chain --seed 5 >/dev/null
"$lpdiag" report "$work/run.h5" -o "$work/report.html"
if grep -Eq "(src|href|url)[=(][\"']?https?:" "$work/report.html"; then echo "FAIL: the report loads something from the network"; exit 1; fi
cp "$work/report.html" "$work/checked.html"
cat >> "$work/checked.html" <<'JS'
<script>
const plots = [...document.querySelectorAll('svg.plot')];
let drawn = 0, empty = 0;
for (const svg of plots) {
  const r = svg.getBoundingClientRect();
  const lengths = [...svg.querySelectorAll('path.series')].map(p => p.getTotalLength());
  if (r.width > 100 && r.height > 100 && lengths.some(l => l > 100)) drawn++; else empty++;
}
const onsets = document.querySelectorAll('line.onset').length;
const ticks = document.querySelectorAll('#timeline .tick').length;
document.body.insertAdjacentHTML('beforeend', `<pre id="render-check">render-check plots=${plots.length} drawn=${drawn} empty=${empty} onsets=${onsets} ticks=${ticks}</pre>`);
</script>
JS
dom=$(timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$work/profile" \
  --virtual-time-budget=5000 --dump-dom "file://$work/checked.html" 2>/dev/null)
line=$(grep -o 'render-check[^<]*' <<<"$dom" || true)
echo "$line"
[[ "$line" =~ plots=([0-9]+)\ drawn=([0-9]+)\ empty=0\ onsets=([0-9]+)\ ticks=5 ]] || { echo "FAIL: plots did not render"; exit 1; }
plots=${BASH_REMATCH[1]} drawn=${BASH_REMATCH[2]} onsets=${BASH_REMATCH[3]}
# loss, max logit, sigma_1 per head, repeated-max rates, z, driver D, updates
(( plots >= 7 && drawn == plots )) || { echo "FAIL: $drawn of $plots plots drawn (7 expected)"; exit 1; }
(( onsets >= 25 )) || { echo "FAIL: onset markers missing"; exit 1; }
timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$work/profile" --window-size=960,2400 \
  --screenshot="$work/report.png" "file://$work/report.html" >/dev/null 2>&1 || true
echo "screenshot: $work/report.png"

# Each plot by its title: drawn (a series path longer than 100 px) or not, and the "no data" notes.
render() {  # render HTML -> prints one line per plot: "title|drawn|nodata"
  cp "$1" "$1.checked.html"
  cat >> "$1.checked.html" <<'JS'
<script>
const out = [...document.querySelectorAll('svg.plot')].map(svg => {
  const title = svg.querySelector('text').textContent;
  const drawn = [...svg.querySelectorAll('path.series')].some(p => p.getTotalLength() > 100);
  const nodata = [...svg.querySelectorAll('text')].filter(t => t.textContent.includes('no data')).map(t => t.textContent).join(';');
  return `plot-check ${title}|${drawn}|${nodata}`;
});
document.body.insertAdjacentHTML('beforeend', `<pre id="plot-check">${out.join('\n')}</pre>`);
</script>
JS
  timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$work/profile" --virtual-time-budget=5000 --dump-dom \
    "file://$1.checked.html" 2>/dev/null | grep -o 'plot-check [^<]*' | sed 's/^plot-check //'
}

# The δ error recorded on every 25th record only (the Monitor's default full_every): the bias-z and
# driver-D plots still draw a line through the records that hold it; a trace without any δ says
# "no data" in D instead of drawing a flat zero. --layer/--head pick the plotted head.
gen2=$(dirname "$0")/../analyzers/gen2
/usr/bin/python3 - "$gen2" "$work/sparse.h5" "$work/nodelta.h5" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import h5py
import numpy as np
import make_traces
make_traces.write_trace(sys.argv[2], 7, "chain", 25, False)
make_traces.write_trace(sys.argv[3], 7, "chain", 1, False)
with h5py.File(sys.argv[3], "r+") as f:
    for name, g in f["attention"].items():
        for k in ("delta_err_count", "delta_err_pos", "delta_err_neg"):
            g[k][...] = -1
        for k in ("delta_err_sum", "delta_err_sumsq"):
            g[k][...] = np.nan
PY
"$lpdiag" report "$work/sparse.h5" -o "$work/sparse.html" --layer 0 --head 1 >/dev/null 2>&1
plots=$(render "$work/sparse.html")
echo "$plots"
grep -q "^Error bias z per bin, layer 0 head 1|true|" <<<"$plots" || { echo "FAIL: sparse delta: the bias-z plot of layer 0 head 1 drew no line"; exit 1; }
grep -q "^Running driver D.*layer 0 head 1|true|" <<<"$plots" || { echo "FAIL: sparse delta: the D plot drew no line"; exit 1; }
grep -q "(log scale)" "$work/sparse.html" || { echo "FAIL: the log axis is not labelled"; exit 1; }
"$lpdiag" report "$work/nodelta.h5" -o "$work/nodelta.html" >/dev/null 2>&1
plots=$(render "$work/nodelta.html")
grep -q "^Running driver D.*|false|.*no data" <<<"$plots" || { echo "FAIL: no delta: D is not 'no data': $(grep driver <<<"$plots")"; exit 1; }
echo "ok   sparse delta drawn, absent delta said, --layer/--head, log axis labelled"

# An existing report is not overwritten without --overwrite; a head the trace lacks is refused.
set +e
"$lpdiag" report "$work/sparse.h5" -o "$work/sparse.html" >/dev/null 2>"$work/err"; rc=$?
set -e
[[ $rc == 2 ]] && grep -q "already exists" "$work/err" || { echo "FAIL: an existing report was replaced (exit $rc)"; exit 1; }
"$lpdiag" report "$work/sparse.h5" -o "$work/sparse.html" --overwrite >/dev/null 2>&1 || { echo "FAIL: --overwrite"; exit 1; }
set +e
"$lpdiag" report "$work/sparse.h5" -o "$work/x.html" --head 99 >/dev/null 2>"$work/err"; rc=$?
set -e
[[ $rc == 2 ]] && grep -q -- "--head 99" "$work/err" || { echo "FAIL: --head 99 accepted (exit $rc)"; exit 1; }
# A run without any link: the timeline says so instead of an empty box.
"$lpdiag" synth "$work/clean.h5" --kind clean --seed 12 >/dev/null
"$lpdiag" report "$work/clean.h5" -o "$work/clean.html" >/dev/null 2>&1
grep -q "No link of the chain was found" "$work/clean.html" || { echo "FAIL: empty timeline box"; exit 1; }
echo "ok   report: no overwrite, bad head refused, empty timeline said"
