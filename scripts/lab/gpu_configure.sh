# Sourced by the device-call scripts: configures build directory $B for the H200 against the
# machine's LibTorch, logging to $OUT/configure.log (exits with its tail on failure).
# EXTRA_CUDA_FLAGS, when set, is added to every nvcc command (A/B builds of a kernel knob). The image's
# CC/CXX/CUDAHOSTCXX point at /opt/gcc, which has only a static libstdc++: shared libraries linked
# through it crash inside Python's PyTorch (docs/guides/cpp.md), so the system g++ is named.
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
echo "== configure $(date +%T)"
CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ cmake -S . -B "$B" -G Ninja -DCMAKE_PREFIX_PATH="$TP" \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ \
  -DCMAKE_CUDA_FLAGS="${EXTRA_CUDA_FLAGS:-}" >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
