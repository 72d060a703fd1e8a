#!/usr/bin/env bash
# Builds the reader fuzzer with clang (when clang++-14 or clang++ exists) and runs it for a
# bounded time on a seed corpus of real traces and captures: run_fuzzer.sh FIXTURE_MAKER WORKDIR [SECONDS]
set -euo pipefail
maker=$1 work=$2 seconds=${3:-60}
here=$(cd "$(dirname "$0")" && pwd)
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
if [[ -z "$cxx" ]]; then echo "SKIP: no clang++ for libFuzzer"; exit 77; fi
mkdir -p "$work"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f "$work/build/CMakeCache.txt" ]]; then
  cmake -S "$here" -B "$work/build" "${gen[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >"$work/configure.log" 2>&1 \
    || { cat "$work/configure.log"; exit 1; }
fi
cmake --build "$work/build" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; exit 1; }
rm -rf "$work/corpus" "$work/fixtures" && mkdir -p "$work/corpus"
"$maker" "$work/fixtures" >/dev/null
cp "$work/fixtures"/*.h5 "$work/corpus/"
# The writer's traces are ~1.2 MB (one chunk per dataset per flush), beyond -max_len, so libFuzzer
# would only ever see them cut short. Repacked (one chunk per dataset, raw and deflated) they are
# whole seeds of a few tens of KB.
if python3 -c "import h5py" 2>/dev/null; then
  for f in "$work/fixtures"/*.h5; do
    b=$(basename "$f" .h5)
    "$here/../../scripts/pack-trace" --no-compress "$f" "$work/corpus/$b.raw.h5" 2>/dev/null || true
    "$here/../../scripts/pack-trace" "$f" "$work/corpus/$b.packed.h5" 2>/dev/null || true
  done
else
  echo "note: no python3-h5py, the corpus holds only the traces as written (cut at -max_len)"
fi
ls -l "$work/corpus" | awk 'NR > 1 { n++; if ($5 <= 200000) w++ } END { printf "seed corpus: %d files, %d within -max_len\n", n, w }'
export LPDIAG_FUZZ_DIR=$work
# HDF5 keeps library-wide state that LeakSanitizer reports at exit; leaks are not what this hunts.
# An absurd size read from a corrupt file makes HDF5 call malloc(huge); glibc returns NULL and HDF5
# reports an error, so let ASan do the same instead of aborting.
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:suppressions=$here/asan.supp
cd "$work"
"$work/build/fuzz_trace_reader" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -max_len=200000 \
  -print_final_stats=1 "$work/corpus" 2>&1 | tail -25
