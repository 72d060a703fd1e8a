#!/usr/bin/env bash
# Random SIGKILL and SIGTERM of both example training loops: every trace left behind is readable
# by lpdiag, holds whole records only, and `lpdiag repair` makes it readable for any HDF5 reader.
#   kill_loops.sh GPT2_TRAIN PYTHON LIBLPDIAG_TORCH LPDIAG     trials: $LPDIAG_KILL_TRIALS (default 6 per loop and signal)
set -u
cpp=$1 py=$2 lib=$3 lpdiag=$4
trials=${LPDIAG_KILL_TRIALS:-6}
seed=${LPDIAG_KILL_SEED:-$RANDOM}
RANDOM=$seed
echo "kill trials: seed $seed (LPDIAG_KILL_SEED repeats it), $trials per loop and signal"
work=$(mktemp -d /tmp/kill-loops-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0 n=0 nonempty=0
for loop in cpp py; do
  for sig in KILL TERM; do
    for t in $(seq "$trials"); do
      trace=$work/$loop.$sig.$t.h5
      if [[ $loop == cpp ]]; then
        "$cpp" --steps 400 --n-layer 2 --n-head 2 --n-embd 32 --block 32 --batch 4 --flush-every 10 --overwrite --out "$trace" >/dev/null 2>&1 &
      else
        "$py" "$(dirname "$0")/../../examples/python/train_gpt2.py" --lib "$lib" --steps 400 --n-embd 32 --block 32 --batch 4 \
          --overwrite --out "$trace" >/dev/null 2>&1 &
      fi
      pid=$!
      sleep "$(( RANDOM % 30 + 5 ))e-1"
      kill -$sig $pid 2>/dev/null
      wait $pid 2>/dev/null
      n=$((n + 1))
      [[ -e $trace ]] || continue  # killed before the first record
      if ! out=$("$lpdiag" info "$trace" 2>&1); then echo "FAIL $loop SIG$sig trial $t: unreadable: $out"; fail=$((fail + 1)); continue; fi
      records=$(awk '/records/ {print $2; exit}' <<<"$out")
      (( records > 0 )) && nonempty=$((nonempty + 1))
      "$lpdiag" repair "$trace" >/dev/null 2>&1 || { echo "FAIL $loop SIG$sig trial $t: repair failed"; fail=$((fail + 1)); continue; }
      "$lpdiag" check "$trace" >/dev/null 2>&1; rc=$?
      (( rc <= 1 )) || { echo "FAIL $loop SIG$sig trial $t: check exit $rc"; fail=$((fail + 1)); }
      echo "ok   $loop SIG$sig trial $t: $records records readable"
    done
  done
done
echo "$n kills, $nonempty left records, $fail failure(s)"
exit $(( fail > 0 ))
