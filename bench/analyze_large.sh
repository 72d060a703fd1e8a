#!/usr/bin/env bash
# Time and peak memory of `lpdiag analyze` on a large synthetic trace (12 layers x 12 heads).
#   bench/analyze_large.sh RECORDS [DIR] [COLD_RUNS]     e.g. bench/analyze_large.sh 1000000 /tmp 3
# Baselines in the same run: `lpdiag info` (open + validate, no rows read) and analyze with one
# worker (the reader in-process). "Cold" drops the page cache first, which needs root; without
# it the cold rows are skipped. Memory is measured in separate runs (sampling costs CPU): the
# sum over the analyzer and its worker processes (RSS counts shared pages once per process; PSS
# splits them).
set -euo pipefail
records=${1:?records} dir=${2:-/tmp} cold_runs=${3:-3}
lpdiag=${LPDIAG:-build/tools/lpdiag}
trace=$dir/analyze-bench-$records.h5
[[ -f $trace ]] || /usr/bin/time -f "synth: %e s" "$lpdiag" synth "$trace" --kind chain --seed 1 --records "$records" --layers 12 --heads 12 --gaps 0 >/dev/null
ls -l "$trace" | awk '{printf "trace: %.2f GB\n", $5/1e9}'
/usr/bin/time -f "info:                 %e s wall" "$lpdiag" info "$trace" >/dev/null

drop() { sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
timed() {  # LABEL ARGS...: wall, user and system seconds (nothing else runs beside it)
  local label=$1; shift
  /usr/bin/time -f "%e %U %S" -o /tmp/analyze-large.time "$lpdiag" analyze "$trace" --json "$@" >/tmp/analyze-large.json
  read -r wall user sys </tmp/analyze-large.time
  printf "%-24s %6.2f s wall (%5.2f s user, %5.2f s sys)\n" "$label:" "$wall" "$user" "$sys"
}
memory() {  # LABEL ARGS...: summed RSS and PSS of lpdiag and its workers, sampled every 0.25 s
  local label=$1; shift
  local rss=0 pss=0 r p
  "$lpdiag" analyze "$trace" --json "$@" >/dev/null &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    r=0 p=0
    for q in $pid $(pgrep -P $pid 2>/dev/null); do
      r=$((r + $(awk '/^Rss:/{print $2}' /proc/$q/smaps_rollup 2>/dev/null || echo 0)))
      p=$((p + $(awk '/^Pss:/{print $2}' /proc/$q/smaps_rollup 2>/dev/null || echo 0)))
    done
    ((r > rss)) && rss=$r; ((p > pss)) && pss=$p
    sleep 0.25
  done
  wait $pid
  printf "%-24s summed RSS %4d MB, PSS %4d MB\n" "$label:" $((rss / 1024)) $((pss / 1024))
}
if drop; then
  for i in $(seq 1 "$cold_runs"); do drop; timed "analyze cold #$i"; done
  drop; timed "analyze cold, 1 worker" --workers 1
else
  echo "(not root: cold runs skipped)"
fi
timed "analyze warm"
timed "analyze warm, 1 worker" --workers 1
memory "analyze memory"
memory "analyze memory, 1 worker" --workers 1
python3 -c "import json; c = json.load(open('/tmp/analyze-large.json'))['chain']; print('chain found:', c['found'], 'layer', c['layer_index'], 'head', c['head'])"
