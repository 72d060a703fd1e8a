#!/usr/bin/env bash
# Time and peak memory of `lpdiag analyze` on a large synthetic trace (12 layers x 12 heads).
#   bench/analyze_large.sh RECORDS [DIR]     e.g. bench/analyze_large.sh 100000 /tmp
# Baseline in the same run: `lpdiag info` on the same file (open + validate, no data read).
set -euo pipefail
records=${1:?records} dir=${2:-/tmp}
lpdiag=${LPDIAG:-build/tools/lpdiag}
trace=$dir/analyze-bench-$records.h5
[[ -f $trace ]] || /usr/bin/time -f "synth: %e s" "$lpdiag" synth "$trace" --kind chain --seed 1 --records "$records" --layers 12 --heads 12 --gaps 0 >/dev/null
ls -l "$trace" | awk '{printf "trace: %.2f GB\n", $5/1e9}'
/usr/bin/time -f "info:    %e s wall, %M KB max RSS" "$lpdiag" info "$trace" >/dev/null
/usr/bin/time -f "analyze: %e s wall, %M KB max RSS" "$lpdiag" analyze "$trace" | head -2
