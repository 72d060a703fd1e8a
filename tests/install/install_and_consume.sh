#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs a downstream
# project that only knows find_package(lpdiag).
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$src" -B "$work/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
out=$("$work/build/downstream")
echo "$out"
[[ "$out" == "bf16(-4.703990459442139) = -4.71875" ]]
"$work/prefix/bin/lpdiag" --version
