#!/usr/bin/env bash
# One GPU call: the seed-mma kernels built twice, once as they are and once with
# __launch_bounds__' minimum blocks per SM raised (LPDIAG_SEED_MMA_{FWD,BWD}_MIN_BLOCKS, which cap
# the registers and may spill), timed alternately (bench_seed_kernels --mma-only, fa2 the baseline
# in each process), then the variant named by KEEP checked bit for bit against the CPU emulation
# (test_seed_cuda seed-mma, and the CUDA-core seed kernels on small cases) with memcheck.
#   OCC="1,1 3,3" KEEP=3,3 bash scripts/lab/seed_mma_occupancy_ab.sh      logs under $OUT
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
OCC=${OCC:-"1,1 3,3"}
KEEP=${KEEP:-1,1}
stage() { echo "== $1 ($(date +%T))"; }
for v in $OCC; do
  f=${v%,*} b=${v#*,}
  B=build-occ-$f-$b
  EXTRA_CUDA_FLAGS="-DLPDIAG_SEED_MMA_FWD_MIN_BLOCKS=$f -DLPDIAG_SEED_MMA_BWD_MIN_BLOCKS=$b"
  stage "configure and build $B ($EXTRA_CUDA_FLAGS)"
  source "$(dirname "$0")/gpu_configure.sh"
  ninja -C $B bench_seed_kernels test_seed_cuda >"$OUT/build-$f-$b.log" 2>&1; echo "build rc=$?"
  grep -E "error|FAILED" "$OUT/build-$f-$b.log" | head -10
  grep -A3 "seed_mma_\(fwd\|dkdv\|dq\)_kernelILi64ELb1" "$OUT/build-$f-$b.log" | grep -E "Used|spill" | head -8
done
for rep in 1 2; do
  for v in $OCC; do
    f=${v%,*} b=${v#*,}
    stage "bench_seed_kernels --mma-only (min blocks fwd $f bwd $b, rep $rep)"
    timeout 60 build-occ-$f-$b/bench/bench_seed_kernels --reps 10 --mma-only 2>&1 | tee -a "$OUT/seed-mma-occ-$f-$b.log"
  done
done
B=build-occ-${KEEP%,*}-${KEEP#*,}
stage "compute-sanitizer memcheck ($B, test_seed_cuda seed-mma --small)"
timeout ${SAN_LIMIT:-60} compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_seed_cuda seed-mma --small >"$OUT/seed-mma-memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|FAILED" "$OUT/seed-mma-memcheck.log" | tail -3
stage "test_seed_cuda seed --small ($B: the CUDA-core seed kernels share the roundings)"
timeout 120 $B/tests/test_seed_cuda seed --small >"$OUT/seed-cuda-small.log" 2>&1; echo "rc=$?"
grep -cE "identical$" "$OUT/seed-cuda-small.log"; grep -E "FAIL|cases" "$OUT/seed-cuda-small.log" | head -10
stage "test_seed_cuda seed-mma ($B)"
timeout ${SEED_TEST_LIMIT:-200} stdbuf -oL $B/tests/test_seed_cuda seed-mma >"$OUT/seed-mma-cuda.log" 2>&1; echo "rc=$?"
grep -cE "identical$" "$OUT/seed-mma-cuda.log"; grep -E "FAIL|cases|^device" "$OUT/seed-mma-cuda.log" | head -20
