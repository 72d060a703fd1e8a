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
# The Python package as cmake --install placed it, with its op library (when built with LibTorch):
# imported from the prefix alone, it finds and loads lpdiag/lib/liblpdiag_torch.so.
py=$work/prefix/lib/python3/dist-packages
[[ -f "$py/lpdiag/__init__.py" ]] || { echo "python package not installed under $py"; exit 1; }
if [[ -f "$py/lpdiag/lib/liblpdiag_torch.so" ]] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
  (cd "$work" && env -u LPDIAG_TORCH_LIBRARY PYTHONPATH="$py" /usr/bin/python3 -c "
import lpdiag, torch
path = lpdiag.load_library()
assert path.startswith('$py'), path
x = torch.zeros(1, 2, 8, 16, dtype=torch.bfloat16)
assert lpdiag.attention(x, x, x, causal=True, level='off').shape == x.shape
print('installed package: loads', path)")
else
  echo "SKIP installed package's op: built without LibTorch or no torch for /usr/bin/python3"
fi
# pip install ./python (offline, no dependencies fetched), where pip and setuptools are present.
if /usr/bin/python3 -m pip --version >/dev/null 2>&1 && /usr/bin/python3 -c "import setuptools" 2>/dev/null; then
  # From a copy: a build leaves build/ and *.egg-info beside pyproject.toml, not in the source tree.
  cp -r "$src/../../../python" "$work/python-src"
  /usr/bin/python3 -m pip install --quiet --no-build-isolation --no-deps --no-index --target "$work/pip" "$work/python-src" \
    > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
  (cd "$work" && PYTHONPATH="$work/pip" /usr/bin/python3 -c "import lpdiag, os; assert lpdiag.__file__.startswith('$work/pip'), lpdiag.__file__; print('pip install ./python:', os.path.dirname(lpdiag.__file__))")
elif [[ -n "${CI:-}" ]]; then
  echo "FAIL pip install ./python: no pip or setuptools for /usr/bin/python3 (scripts/lib/setup.sh installs python3-pip and python3-setuptools)"
  exit 1
else
  echo "SKIP pip install ./python: no pip or setuptools for /usr/bin/python3"
fi
