#!/usr/bin/env bash
# A second writer on the path of a live trace fails with one clear line and the first trace
# stays whole: `lpdiag synth` and `gpt2_train` against a live `lpdiag synth`.
#   second_writer.sh LPDIAG GPT2_TRAIN
set -u
lpdiag=$1 cpp=$2
work=$(mktemp -d /tmp/second-writer-XXXXXX)
trap 'kill $first 2>/dev/null; rm -rf "$work"' EXIT
trace=$work/live.h5
"$lpdiag" synth "$trace" --records 600 --seed 3 --delay-us 4000 --flush-every 20 >"$work/first.log" 2>&1 &
first=$!
for _ in $(seq 100); do [[ -s $trace ]] && break; sleep 0.05; done
sleep 0.3
fail=0
"$lpdiag" synth "$trace" --records 10 >"$work/second.log" 2>&1
rc=$?
if [[ $rc == 2 && $(wc -l <"$work/second.log") == 1 ]] && grep -q "another writer" "$work/second.log"; then echo "ok   lpdiag synth refused: $(cat "$work/second.log")"
else echo "FAIL lpdiag synth: exit $rc: $(cat "$work/second.log")"; fail=1; fi
if [[ -x $cpp ]]; then
  "$cpp" --steps 5 --n-layer 1 --n-head 1 --n-embd 16 --block 16 --batch 2 --overwrite --out "$trace" >"$work/cpp.log" 2>&1
  rc=$?
  if [[ $rc == 2 ]] && grep -q "another writer" "$work/cpp.log" && [[ $(grep -c . "$work/cpp.log") -le 2 ]]; then echo "ok   gpt2_train refused: $(grep another "$work/cpp.log")"
  else echo "FAIL gpt2_train: exit $rc: $(cat "$work/cpp.log")"; fail=1; fi
fi
wait $first || { echo "FAIL the first writer exited $?"; fail=1; }
records=$("$lpdiag" info "$trace" | awk '/records/ {print $2; exit}')
if [[ $records == 600 ]]; then echo "ok   the first trace is whole: 600 records"; else echo "FAIL the first trace has '$records' records, 600 written"; fail=1; fi
exit $fail
