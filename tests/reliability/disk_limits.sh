#!/usr/bin/env bash
# A file-size limit (ulimit -f) or a full disk must never end a training run:
# for every limit from "fails at creation" to "fails late", the C++ and the Python loop exit
# normally, report the writer's error on one line at most, and leave either no file (creation
# failed) or a trace that `lpdiag info` reads, up to its last flushed record.
#   disk_limits.sh GPT2_TRAIN PYTHON LIBLPDIAG_TORCH LPDIAG
set -u
cpp=$1 py=$2 lib=$3 lpdiag=$4
work=$(mktemp -d /tmp/disk-limits-XXXXXX)
trap 'umount "$work/tmpfs" 2>/dev/null; rm -rf "$work"' EXIT
fail=0 trials=0
check() {  # LABEL RC LOG TRACE STEPS
  local label=$1 rc=$2 log=$3 trace=$4 steps=$5
  trials=$((trials + 1))
  local lines
  lines=$(grep -cE "^lpdiag[.:a-zA-Z ]*:" "$log")
  if (( rc >= 128 || rc == 2 )); then echo "FAIL $label: exit $rc"; tail -3 "$log"; fail=$((fail + 1)); return; fi
  if (( lines > 1 )); then echo "FAIL $label: the writer's error was reported $lines times"; fail=$((fail + 1)); return; fi
  if [[ ! -e $trace ]]; then
    grep -q "cannot create the trace" "$log" || { echo "FAIL $label: no trace and no message"; fail=$((fail + 1)); return; }
    echo "ok   $label: exit $rc, no trace (creation failed, said once)"
    return
  fi
  local info records
  info=$("$lpdiag" info "$trace" 2>&1) || { echo "FAIL $label: the trace is unreadable: $info"; fail=$((fail + 1)); return; }
  records=$(awk '/records/ {print $2; exit}' <<<"$info")
  (( records <= steps )) || { echo "FAIL $label: $records records of $steps steps"; fail=$((fail + 1)); return; }
  echo "ok   $label: exit $rc, trace readable with $records of $steps records$( ((lines)) && echo ', error said once')"
}
for kb in 1 40 64 100 160 256 2048; do
  rm -f "$work/c.h5" "$work/p.h5"
  (ulimit -f "$kb"; "$cpp" --steps 40 --n-layer 2 --n-head 2 --n-embd 32 --block 32 --batch 4 --flush-every 5 --overwrite --out "$work/c.h5" >"$work/c.log" 2>&1)
  check "C++ ulimit -f ${kb}k" $? "$work/c.log" "$work/c.h5" 40
  (ulimit -f "$kb"; "$py" "$(dirname "$0")/../../examples/python/train_gpt2.py" --lib "$lib" --steps 30 --n-embd 32 --block 32 --batch 4 \
     --overwrite --out "$work/p.h5" >"$work/p.log" 2>&1)
  check "Python ulimit -f ${kb}k" $? "$work/p.log" "$work/p.h5" 30
done
# A full disk: tmpfs of growing sizes, where mounting is allowed (root, not in every container).
mkdir -p "$work/tmpfs"
if mount -t tmpfs -o size=64k tmpfs "$work/tmpfs" 2>/dev/null; then
  umount "$work/tmpfs"
  for kb in 16 64 100 160 256 2048; do
    mount -t tmpfs -o size=${kb}k tmpfs "$work/tmpfs"
    "$cpp" --steps 40 --n-layer 2 --n-head 2 --n-embd 32 --block 32 --batch 4 --flush-every 5 --overwrite --out "$work/tmpfs/c.h5" >"$work/c.log" 2>&1
    check "C++ disk of ${kb}k" $? "$work/c.log" "$work/tmpfs/c.h5" 40
    rm -f "$work/tmpfs/c.h5"
    "$py" "$(dirname "$0")/../../examples/python/train_gpt2.py" --lib "$lib" --steps 30 --n-embd 32 --block 32 --batch 4 \
      --overwrite --out "$work/tmpfs/p.h5" >"$work/p.log" 2>&1
    check "Python disk of ${kb}k" $? "$work/p.log" "$work/tmpfs/p.h5" 30
    umount "$work/tmpfs"
  done
else
  echo "full-disk sweep skipped: cannot mount a tmpfs here (needs root outside a restricted container)"
fi
echo "$trials trials, $fail failure(s)"
exit $(( fail > 0 ))
