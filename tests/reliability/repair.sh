#!/usr/bin/env bash
# A trace whose writer was SIGKILLed: lpdiag reads it, `info` says how to make other readers
# open it, `lpdiag repair` clears the flags without losing a record, and h5py opens it after.
#   repair.sh LPDIAG PYTHON_WITH_H5PY
set -u
lpdiag=$1 py=$2
work=$(mktemp -d /tmp/repair-XXXXXX)
trap 'rm -rf "$work"' EXIT
t=$work/killed.h5
"$lpdiag" synth "$t" --records 5000 --delay-us 400 --flush-every 50 >/dev/null 2>&1 &
pid=$!
sleep 1
kill -9 $pid
wait $pid 2>/dev/null
fail=0
before=$("$lpdiag" info "$t" | awk '/records/ {print $2; exit}')
"$lpdiag" info "$t" | grep -q "lpdiag repair" || { echo "FAIL info gives no repair hint"; fail=1; }
if ! "$py" -c "import h5py" 2>/dev/null; then echo "h5py missing: the h5py checks are skipped"; h5=0; else h5=1; fi
if ((h5)) && "$py" -c "import h5py,sys; h5py.File(sys.argv[1],'r')" "$t" 2>/dev/null; then echo "note: h5py opened the killed trace before the repair"; fi
"$lpdiag" repair "$t" || { echo "FAIL repair exited $?"; fail=1; }
after=$("$lpdiag" info "$t" | awk '/records/ {print $2; exit}')
[[ $before == "$after" && $before -gt 0 ]] || { echo "FAIL records $before before, $after after"; fail=1; }
if ((h5)); then
  n=$("$py" -c "import h5py,sys; print(h5py.File(sys.argv[1],'r')['step'].shape[0])" "$t") || { echo "FAIL h5py cannot open the repaired trace"; fail=1; }
  [[ ${n:-0} == "$after" ]] || { echo "FAIL h5py sees ${n:-?} rows, lpdiag $after"; fail=1; }
fi
"$lpdiag" repair "$t" | grep -q "nothing to repair" || { echo "FAIL a second repair did something"; fail=1; }
((fail)) || echo "ok   killed at $before records; repaired; h5py and lpdiag agree"
exit $fail
