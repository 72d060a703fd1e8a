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
