#!/usr/bin/env bash
# SIGTERM and SIGINT lose no record: with a flush interval longer than the
# run, a graceful termination still leaves every step recorded before it, in a cleanly closed
# trace. C++: the Monitor flushes at the next record() and re-raises the signal. Python: SIGTERM
# the same way; SIGINT is Python's KeyboardInterrupt, and the example closes in `finally`.
#   termination.sh GPT2_TRAIN PYTHON LIBLPDIAG_TORCH LPDIAG
set -u
cpp=$1 py=$2 lib=$3 lpdiag=$4
work=$(mktemp -d /tmp/termination-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
# Background jobs of a script start with SIGINT ignored; give the child the default back.
with_default_sigint() { exec "$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }
for loop in cpp py; do
  for sig in TERM INT; do
    t=$work/$loop.$sig.h5
    if [[ $loop == cpp ]]; then
      with_default_sigint "$cpp" --steps 1000000 --n-layer 2 --n-head 2 --n-embd 32 --block 32 --batch 4 --flush-every 100000 --log-every 1 \
        --overwrite --out "$t" >"$work/log" 2>&1 &
    else
      with_default_sigint "$py" "$(dirname "$0")/../../examples/python/train_gpt2.py" --lib "$lib" --steps 1000000 --n-embd 32 --block 32 \
        --batch 4 --overwrite --out "$t" >"$work/log" 2>&1 &
    fi
    pid=$!
    sleep 4
    kill -$sig $pid
    wait $pid
    rc=$?
    info=$("$lpdiag" info "$t" 2>&1) || { echo "FAIL $loop SIG$sig: no readable trace: $info"; fail=1; continue; }
    records=$(awk '/records/ {print $2; exit}' <<<"$info")
    if (( records == 0 )); then echo "FAIL $loop SIG$sig: no record survived (exit $rc)"; fail=1
    elif grep -q "died without closing" <<<"$info"; then echo "FAIL $loop SIG$sig: the trace was not closed"; fail=1
    else echo "ok   $loop SIG$sig: exit $rc, $records records, closed cleanly (no flush was due)"; fi
  done
done
exit $fail
