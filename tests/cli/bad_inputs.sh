#!/usr/bin/env bash
# Every unusable input gives exit code 2 and exactly one line on stderr that names the file and
# the problem, with no HDF5 diagnostics: bad_inputs.sh LPDIAG FIXTURE_MAKER WORKDIR
set -u
lpdiag=$1 maker=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
"$maker" "$dir" >/dev/null || { echo "FAIL: fixture maker"; exit 1; }
fails=0
expect_bad() {  # FILE REGEX [COMMAND]
  local file=$1 regex=$2 cmd=${3:-info}
  local err
  err=$("$lpdiag" "$cmd" "$file" 2>&1 >/dev/null)
  local rc=$?
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne 2 || $lines -ne 1 || "$err" != *"$file"* ]] || ! grep -Eq -- "$regex" <<<"$err" || grep -q "HDF5-DIAG" <<<"$err"; then
    echo "FAIL: $cmd $file: rc=$rc lines=$lines: $err"
    fails=$((fails + 1))
  else
    echo "ok: $err"
  fi
}
expect_bad "$dir/missing.h5" "no such file"
expect_bad "$dir/not_hdf5.h5" "not an HDF5 file"
expect_bad "$dir/foreign.h5" "not an lpdiag trace"
expect_bad "$dir/version99.h5" "version 99 is not supported"
expect_bad "$dir/lengths.h5" "different lengths: /scalars/loss has 12 rows, /step has 30"
expect_bad "$dir/dtype.h5" "/step has type float64, expected int64"
expect_bad "$dir/attn_dtype.h5" "repeated_max_rows has type int32, expected int64"
expect_bad "$dir/run.capture.700.2.h5" "attention capture, not a trace"
# watch runs the same preflight (it retries for a few seconds, a trace may be mid-creation).
expect_bad "$dir/not_hdf5.h5" "not an HDF5 file" watch
expect_bad "$dir/foreign.h5" "not an lpdiag trace" watch
expect_bad "$dir/version99.h5" "version 99 is not supported" watch
expect_bad "$dir/lengths.h5" "different lengths" watch
mkdir -p "$dir/a_directory.h5"
expect_bad "$dir/a_directory.h5" "is a directory" watch
# Truncated at random byte offsets: each must be a clean error (or, if HDF5 still finds every
# object, a successful read); never a crash.
size=$(stat -c %s "$dir/good.h5")
for i in $(seq 1 40); do
  off=$(( (RANDOM * 32768 + RANDOM) % size ))
  head -c "$off" "$dir/good.h5" > "$dir/trunc.$off.h5"
  err=$("$lpdiag" info --json "$dir/trunc.$off.h5" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ge 128 ]] || grep -q "HDF5-DIAG" <<<"$err"; then
    echo "FAIL: truncated at $off: rc=$rc: $err"; fails=$((fails + 1))
  elif [[ $rc -eq 2 ]]; then
    [[ $(printf '%s\n' "$err" | grep -c .) -eq 1 && "$err" == *"trunc.$off.h5"* ]] || { echo "FAIL: truncated at $off: $err"; fails=$((fails + 1)); }
  elif [[ $rc -ne 0 ]]; then
    echo "FAIL: truncated at $off: rc=$rc"; fails=$((fails + 1))
  fi
done
echo "truncation: 40 offsets checked"
# The good file works, as text and as JSON.
"$lpdiag" info "$dir/good.h5" >/dev/null || { echo "FAIL: info on good.h5"; fails=$((fails + 1)); }
json=$("$lpdiag" info --json "$dir/good.h5")
python3 - "$json" <<'PY' || fails=$((fails + 1))
import json, sys
j = json.loads(sys.argv[1])
for k in ["format", "version", "records", "first_step", "last_step", "events", "attention_layers", "matrices"]:
    assert k in j, k
assert j["format"] == "lpdiag-trace" and j["version"] == 1
assert j["records"] == 50 and j["first_step"] == 10 and j["last_step"] == 59 and j["events"] == 1
assert [a["layer_index"] for a in j["attention_layers"]] == [0, 1] and j["attention_layers"][0]["n_heads"] == 3
assert {m["role"] for m in j["matrices"]} == {"attn_q", "mlp_in"}
assert all({"name", "role", "layer_index"} <= set(m) for m in j["matrices"])
print("ok: info --json keys and values")
PY
exit $(( fails > 0 ))
