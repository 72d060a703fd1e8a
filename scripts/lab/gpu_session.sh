#!/usr/bin/env bash
# One call on the GPU machine: configure and build for sm_90 against the machine's LibTorch, then
# run the requested stages, each logged under $OUT (the device tool brings $OUT back).
#   scripts/lab/gpu_session.sh [mmaprobe] [emulation] [survey] [srcost] [tests] [check128] [sanitize] [bench] [bench128] [gpt2] [gpt2ab] [gpt2parts] [gpt2cad] [monitorcost] [ncu] [ncusrc] [mmabench] [python] [pybt] [pyerr] [seed] [seedmma] [seedmmaquick] [simt] [python2] [ctest] [seedmmancu]
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
B=build-gpu4
stage() { echo "== $1 ($(date +%T))"; }
source "$(dirname "$0")/gpu_configure.sh"
grep -E "CUDA kernels|LibTorch|libstdc" "$OUT/configure.log"
stage build
# TARGETS (space-separated) limits the build to what the stages need.
ninja -C $B -k 0 ${TARGETS:-} >"$OUT/build.log" 2>&1
echo "build rc=$?"
grep -E "error|FAILED" "$OUT/build.log" | head -20
grep -B1 -E "spill|Used [0-9]+ registers" "$OUT/build.log" | grep -A1 "sm_90" | grep -E "Used|spill" | sort | uniq -c | head -40 >"$OUT/registers.txt"
for s in "$@"; do
  case $s in
    mmaprobe)
      # The tensor cores' accumulation recorded (two fixed seeds), the MMA model checked on a
      # fresh one, the MUFU's ex2 surveyed, and the CPU fa2 policy against both forward kernels.
      stage "mma_probe"
      for seed in 1 2; do $B/tests/mma_probe "$OUT/mma-$seed.bin" $seed; done
      $B/tests/mma_probe --check | tee "$OUT/mma-check.log" | tail -20
      $B/tests/mma_probe --ex2 "$OUT/ex2-delta.bin" >"$OUT/ex2.log" 2>&1; echo "ex2 rc=$?"; cat "$OUT/ex2.log"
      for eng in wgmma mma; do
        stage "test_fa2_emulation ($eng)"
        LPDIAG_FLASH_FORWARD=$eng timeout 300 $B/tests/test_fa2_emulation --dump "$OUT/kernel-$eng.bin" >"$OUT/fa2-emulation-$eng.log" 2>&1; echo "rc=$?"
        tail -3 "$OUT/fa2-emulation-$eng.log"
      done
      (cd "$OUT" && gzip -9 kernel-*.bin ex2-delta.bin) ;;
    emulation)
      # The MMA model on fresh vectors, the fa2 policy (and the sr fix) against both forward
      # kernels, the MUFU's ex2 recorded for an exact model, and the sr fix's cost.
      stage "mma_probe --check"
      $B/tests/mma_probe --check | tail -18
      $B/tests/mma_probe --ex2-table "$OUT/ex2-table.bin" "$OUT/ex2-samples.bin" 12345
      gzip -9 "$OUT/ex2-table.bin" "$OUT/ex2-samples.bin"
      for eng in wgmma mma; do
        stage "test_fa2_emulation ($eng)"
        LPDIAG_FLASH_FORWARD=$eng timeout 300 $B/tests/test_fa2_emulation >"$OUT/fa2-emulation-$eng.log" 2>&1; echo "rc=$?"
        grep -E "FAIL|identical \(" "$OUT/fa2-emulation-$eng.log" | tail -12
      done ;;
    survey)
      stage "kernel survey"
      bash scripts/lab/kernel_survey.sh $B ;;
    srcost)
      stage "bench_attention --ours-only --fixes none,sr"
      timeout 300 $B/bench/bench_attention --reps 20 --ours-only --fixes none,sr >"$OUT/bench-sr.log" 2>&1; echo "rc=$?"
      grep -vE "^target|^ *(ok|MISS)" "$OUT/bench-sr.log" | tail -32 ;;
    tests)
      # Every gpu-labelled test: the default kernels (wgmma on a 9.0 device), the mma.sync ones,
      # the wgmma forward at both block heights, the operand layouts; then the gradient check
      # against SDPA flash with the default kernels and with the mma.sync ones.
      stage "ctest -L gpu"
      (cd $B && timeout 400 ctest -L gpu --output-on-failure >"$OUT/ctest-gpu.log" 2>&1); echo "rc=$?"
      grep -E "Test +#|tests passed|FAIL" "$OUT/ctest-gpu.log" | head -20
      grep -hE "^gaussian" "$OUT/ctest-gpu.log" | head -4
      for eng in auto mma; do
        stage "bench_attention --check ($eng)"
        LPDIAG_FLASH_FORWARD=$eng LPDIAG_FLASH_BACKWARD=$eng timeout 300 $B/bench/bench_attention --check --json "$OUT/check-$eng.json" >"$OUT/check-$eng.log" 2>&1; echo "rc=$?"
        grep -E "FAIL|PASSED|FAILED|error" "$OUT/check-$eng.log" | head -20
      done ;;
    check128)
      stage "bench_attention --check --bwd-keys 128"
      timeout 300 $B/bench/bench_attention --check --bwd-keys 128 >"$OUT/check128.log" 2>&1; echo "rc=$?"
      grep -E "FAIL|PASSED|FAILED|error" "$OUT/check128.log" | head -20 ;;
    bench128)
      stage "bench_attention --ours-only --bwd-keys 128"
      timeout 400 $B/bench/bench_attention --reps 20 --ours-only --bwd-keys 128 >"$OUT/bench128.log" 2>&1; echo "rc=$?"
      tail -12 "$OUT/bench128.log" ;;
    mmabench)
      # The mma.sync kernels' timings, for comparison with the default ones.
      stage "bench_attention --ours-only, mma.sync kernels"
      LPDIAG_FLASH_FORWARD=mma LPDIAG_FLASH_BACKWARD=mma timeout 400 $B/bench/bench_attention --reps 20 --ours-only --json "$OUT/mma-bench.json" >"$OUT/mma-bench.log" 2>&1; echo "rc=$?"
      tail -20 "$OUT/mma-bench.log" ;;
    sanitize)
      for tool in memcheck racecheck; do
        stage "compute-sanitizer $tool"
        for eng in ${SAN_ENGINES:-auto mma}; do
          LPDIAG_FLASH_FORWARD=$eng LPDIAG_FLASH_BACKWARD=$eng timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/test_flash_attention --small >"$OUT/sanitizer-$tool-$eng.log" 2>&1
          echo "$eng rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer-$tool-$eng.log" | tail -3
        done
      done ;;
    bench)
      stage "bench_attention"
      timeout 400 $B/bench/bench_attention --reps 20 --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1; echo "rc=$?"
      tail -32 "$OUT/bench.log" ;;
    ncu)
      stage "ncu"
      # GPT-2 small (shape 0) and d128 non-causal (shape 2): our off-level forward and backward kernels.
      for shp in 0 2; do
        timeout 250 ncu --clock-control none --set full -k regex:"flash_(fwd|bwd)_kernel" -c 5 -o "$OUT/flash-$shp" \
          $B/bench/bench_attention --only $shp --ours-only --reps 1 >"$OUT/ncu-$shp.log" 2>&1; echo "rc=$?"
        ncu --import "$OUT/flash-$shp.ncu-rep" --page details >"$OUT/ncu-details-$shp.txt" 2>&1
      done
      grep -hE "flash_|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible" "$OUT"/ncu-details-*.txt | head -60
      ncu --import "$OUT/flash.ncu-rep" --page details >"$OUT/ncu-details.txt" 2>&1
      grep -E "flash_|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Stall" "$OUT/ncu-details.txt" | head -60 ;;
    seedmmancu)
      # Where the seed-mma kernels spend their time (4x fa2 against 1.3x): ncu's full set
      # on the forward, dK/dV and dQ kernels at the GPT-2 shape (bench_seed_kernels' first shape,
      # tile 64, the first launch of each), with the per-instruction stall summary.
      for k in fwd dkdv dq; do
        stage "ncu seed_mma_${k}_kernel"
        timeout 200 ncu --clock-control none --set full -k regex:"seed_mma_${k}_kernel" -c 1 -o "$OUT/seedmma-$k" \
          $B/bench/bench_seed_kernels --mma-only --reps 1 >"$OUT/seedmma-ncu-$k.log" 2>&1; echo "rc=$?"
        ncu --import "$OUT/seedmma-$k.ncu-rep" --page details >"$OUT/seedmma-details-$k.txt" 2>&1
        ncu --import "$OUT/seedmma-$k.ncu-rep" --page source --csv --print-source sass >"$OUT/seedmma-sass-$k.csv" 2>/dev/null
        python3 scripts/lab/ncu_summary.py "$OUT/seedmma-sass-$k.csv" --top 12 >"$OUT/seedmma-summary-$k.txt" 2>&1; cat "$OUT/seedmma-summary-$k.txt"
        gzip -f "$OUT/seedmma-sass-$k.csv"; rm -f "$OUT/seedmma-$k.ncu-rep" "$OUT/seedmma-ncu-$k.log"
        grep -E "seed_mma|Duration|Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Stall" "$OUT/seedmma-details-$k.txt" | head -30
      done ;;
    ncusrc)
      # Where the kernels stall, per SASS instruction (warp-state sampling): shape NCU_SHAPE
      # (bench_attention --only; default 2, d = 128 non-causal) at level NCU_LEVEL (default off;
      # e.g. NCU_SHAPE=0 NCU_LEVEL=counters for what the counters cost at d = 64).
      for k in fwd bwd; do
        stage "ncu source $k (shape ${NCU_SHAPE:-2}, ${NCU_LEVEL:-off})"
        timeout 200 ncu --clock-control none --set full -k regex:"flash_${k}(_wgmma)?_kernel" -c 1 -o "$OUT/src-$k" \
          $B/bench/bench_attention --only "${NCU_SHAPE:-2}" --level "${NCU_LEVEL:-off}" --ours-only --reps 1 >"$OUT/ncusrc-$k.log" 2>&1; echo "rc=$?"
        ncu --import "$OUT/src-$k.ncu-rep" --page details >"$OUT/src-details-$k.txt" 2>&1
        ncu --import "$OUT/src-$k.ncu-rep" --page source --csv --print-source sass >"$OUT/src-sass-$k.csv" 2>"$OUT/src-sass-$k.err"
        python3 scripts/lab/ncu_summary.py "$OUT/src-sass-$k.csv" --top 10 >"$OUT/src-summary-$k.txt" 2>&1; cat "$OUT/src-summary-$k.txt"
        gzip -f "$OUT/src-sass-$k.csv"; rm -f "$OUT/src-$k.ncu-rep" "$OUT/src-sass-$k.err" "$OUT/ncusrc-$k.log"
        grep -E "flash_|Duration|Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Stall" "$OUT/src-details-$k.txt" | head -40
      done ;;
    gpt2)
      G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --steps 50 --timed-from 10"
      for cfg in "sdpa:--attention sdpa --no-monitor" "off:--level off --no-monitor" \
                 "ctr:--level counters --no-monitor" "hooks:--level counters" "offmon:--level off"; do
        name=${cfg%%:*}; args=${cfg#*:}
        stage "gpt2 $name"
        timeout 300 $G $args --out "$OUT/gpt2-$name.h5" >"$OUT/gpt2-$name.log" 2>&1; echo "rc=$?"
        grep -E "steady|trained|error|what" "$OUT/gpt2-$name.log" | tail -3
      done
      ls -l "$OUT"/gpt2-hooks.h5 2>/dev/null
      $B/tools/lpdiag info "$OUT/gpt2-hooks.h5" 2>&1 | head -20 ;;
    gpt2cad)
      # Where the Monitor's cost goes: the same run with the weight and update statistics at
      # cadences 1, 10 and 1000, against no Monitor.
      G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --steps 40 --timed-from 10"
      for cfg in "off:--level off --no-monitor" "w1:--level counters --weights-every 1" "w10:--level counters --weights-every 10" \
                 "w1000:--level counters --weights-every 1000" "off1000:--level off --weights-every 1000"; do
        name=${cfg%%:*}; args=${cfg#*:}
        stage "gpt2 cadence $name"
        timeout 200 $G $args --out "$OUT/cad-$name.h5" 2>&1 | grep steady
      done
      rm -f "$OUT"/cad-*.h5 ;;
    gpt2ab)
      # The overhead benchmark interleaved: (SDPA, lpdiag off, Monitor with nothing due after
      # step 0, hooks at the default cadence) three times over, so drift shows as spread.
      G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --steps 40 --timed-from 10"
      for rep in $(seq 1 "${AB_REPS:-3}"); do
        for cfg in "sdpa:--attention sdpa --no-monitor" "off:--level off --no-monitor" \
                   "mon1000:--level off --weights-every 1000" "hooks:--level counters"; do
          name=${cfg%%:*}; args=${cfg#*:}
          echo "$rep $name $(timeout 200 $G $args --out "$OUT/ab.h5" 2>&1 | grep steady)"
          [ "$name" = hooks ] && [ "$rep" = 1 ] && echo "hooks trace: $(stat -c %s "$OUT/ab.h5") bytes, 40 records"
        done
      done | tee "$OUT/gpt2ab.log"
      rm -f "$OUT"/ab.h5 ;;
    monitorcost)
      stage "bench_monitor_costs"
      timeout 200 $B/bench/bench_monitor_costs --json "$OUT/monitor_costs.json" 2>&1 | tee "$OUT/monitor_costs.log" ;;
    gpt2parts)
      # Where the overhead over lpdiag-off goes: counters alone, and the Monitor without
      # activations or without weight and update statistics, interleaved twice.
      G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --steps 40 --timed-from 10"
      for rep in 1 2; do
        for cfg in "off:--level off --no-monitor" "ctr:--level counters --no-monitor" "hooks:--level counters" \
                   "noact:--level counters --no-activations" "w1000:--level counters --weights-every 1000"; do
          name=${cfg%%:*}; args=${cfg#*:}
          echo "$rep $name $(timeout 200 $G $args --out "$OUT/parts.h5" 2>&1 | grep steady)"
        done
      done | tee "$OUT/gpt2parts.log"
      rm -f "$OUT"/parts.h5 ;;
    python)
      stage "python: load and one op call on cuda"
      ldd $B/hooks/liblpdiag_torch.so | grep -E "cudart|c10|torch_cuda" | tee "$OUT/ldd.txt"
      timeout 100 python3 -X faulthandler -c "
import torch; torch.ops.load_library('$B/hooks/liblpdiag_torch.so'); print('loaded', flush=True)
q = torch.randn(1, 2, 128, 64, device='cuda', dtype=torch.bfloat16, requires_grad=True)
o = torch.ops.lpdiag.attention(q, q, q, True, 'fa2', 'none', 'counters', 0); print('fwd', flush=True)
o.float().sum().backward(); print('bwd', q.grad.float().abs().sum().item(), flush=True)" 2>&1 | tail -25
      stage "python: errors from the op"
      timeout 100 python3 -c "
import torch; torch.ops.load_library('$B/hooks/liblpdiag_torch.so')
for dev, d, dt in (('cpu', 32, torch.float64), ('cuda', 32, torch.bfloat16)):
    q = torch.randn(1, 2, 16, d, device=dev, dtype=dt)
    try:
        torch.ops.lpdiag.attention(q, q, q, True, 'fa2', 'none', 'counters', 0)
        print(dev, 'no error')
    except RuntimeError as e: print(dev, 'caught:', str(e)[:150], flush=True)" 2>&1 | tail -6
      stage "python example on cuda"
      timeout 200 python3 -X faulthandler examples/python/train_gpt2.py --lib $B/hooks/liblpdiag_torch.so --device cuda --n-embd 128 --n-head 2 --out "$OUT/py.h5" >"$OUT/python.log" 2>&1; echo "rc=$?"
      tail -30 "$OUT/python.log" ;;
    pybt)
      stage "python: backtrace of the error-path abort"
      cat >/tmp/err.py <<PY
import torch; torch.ops.load_library('$B/hooks/liblpdiag_torch.so')
q = torch.randn(1, 2, 16, 32, dtype=torch.float64)
try:
    torch.ops.lpdiag.attention(q, q, q, True, 'fa2', 'none', 'counters', 0)
except RuntimeError as e: print('caught:', str(e)[:150], flush=True)
PY
      TORCH_SHOW_CPP_STACKTRACES=0 timeout 60 python3 /tmp/err.py 2>&1 | tail -3
      timeout 200 cuda-gdb -batch -ex "set pagination off" -ex run -ex bt --args python3 /tmp/err.py >"$OUT/pybt.txt" 2>&1
      grep -E "^#" "$OUT/pybt.txt" | head -40 ;;
    pyerr)
      stage "python error test"
      readelf -d $B/hooks/liblpdiag_torch.so | grep -c "libstdc++"
      (cd $B && timeout 120 ctest -R "hooks_python_errors|test_hooks|example_python" --output-on-failure 2>&1 | tail -25) ;;
    seedmma)
      # The seed-mma kernels (tensor cores): bit for bit against the CPU emulation's MMA model,
      # their speed against fa2, and GPT-2 training on them.
      stage "test_seed_cuda seed-mma"
      timeout 500 $B/tests/test_seed_cuda seed-mma >"$OUT/seed-mma-cuda.log" 2>&1; echo "rc=$?"
      grep -E "FAIL|cases|^device" "$OUT/seed-mma-cuda.log" | head -30
      stage "bench_seed_kernels --mma-only"
      timeout 200 $B/bench/bench_seed_kernels --reps 10 --mma-only 2>&1 | tee "$OUT/seed-mma-bench.log"
      stage "gpt2_train --policy seed-mma:tile=512 (GPT-2 small, 40 steps)"
      timeout 200 $B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --steps 40 \
        --policy seed-mma:tile=512 --level counters --out "$OUT/seed-mma-smoke.h5" --log-every 10 2>&1 | tail -6 ;;
    seedmmaquick)
      # The seed-mma kernels after a change: speed first, memcheck on small cases, then the
      # bit-for-bit test (the longest part; its log keeps each case's line as it comes).
      # Speed A/B: the exp window in shared memory (default) against every exp read from global
      # memory (LPDIAG_SEED_EXP=global), alternated twice in one process each.
      for rep in 1 2; do
        for mode in global window; do
          stage "bench_seed_kernels --mma-only (exp: $mode, rep $rep)"
          LPDIAG_SEED_EXP=$mode timeout 60 $B/bench/bench_seed_kernels --reps 10 --mma-only 2>&1 | tee -a "$OUT/seed-mma-bench.log"
        done
      done
      for tool in memcheck racecheck; do
        stage "compute-sanitizer $tool (test_seed_cuda seed-mma --small)"
        timeout ${SAN_LIMIT:-60} compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/test_seed_cuda seed-mma --small >"$OUT/seed-mma-$tool.log" 2>&1
        echo "rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED|identical" "$OUT/seed-mma-$tool.log" | tail -3
      done
      stage "test_seed_cuda seed-mma"
      timeout ${SEED_TEST_LIMIT:-200} stdbuf -oL $B/tests/test_seed_cuda seed-mma >"$OUT/seed-mma-cuda.log" 2>&1; echo "rc=$?"
      grep -cE "identical$" "$OUT/seed-mma-cuda.log"; grep -E "FAIL|cases|^device" "$OUT/seed-mma-cuda.log" | head -20 ;;
    seed)
      # The seed CUDA kernels: bit for bit against the CPU emulation, their speed against fa2,
      # the op and the C++ example on them, and a stuck loop's CUDA record.
      stage "test_seed_cuda"
      timeout 400 $B/tests/test_seed_cuda >"$OUT/seed-cuda.log" 2>&1; echo "rc=$?"
      grep -E "FAIL|cases FAILED|^device" "$OUT/seed-cuda.log" | head -30
      stage "bench_seed_kernels"
      timeout 200 $B/bench/bench_seed_kernels --reps 10 2>&1 | tee "$OUT/seed-bench.log"
      stage "gpt2_train --policy seed:tile=512 (small, 30 steps)"
      timeout 200 $B/examples/gpt2/gpt2_train --device cuda --n-layer 2 --n-head 2 --n-embd 128 --block 256 --batch 8 --steps 30 \
        --policy seed:tile=512 --fix paper --level full --out "$OUT/seed-smoke.h5" --log-every 10 2>&1 | tail -5
      $B/tools/lpdiag info "$OUT/seed-smoke.h5" 2>&1 | grep -E "records|policy|attention" | head -6
      stage "reliability_stuck_loop (CUDA mode)"
      (cd $B && timeout 120 ctest -R reliability_stuck_loop --output-on-failure 2>&1 | grep -E "ok|FAIL|skip|Passed|Failed" | head -20) ;;
    simt)
      # The one-thread-per-row kernels (seed, fp32): bit for bit against the CPU engine, both
      # sanitizers on small cases, their speed against fa2.
      for pol in seed fp32; do
        stage "test_seed_cuda $pol"
        timeout 300 $B/tests/test_seed_cuda $pol >"$OUT/simt-$pol.log" 2>&1; echo "rc=$?"
        grep -E "FAIL|cases FAILED|^device" "$OUT/simt-$pol.log" | head -20
        for tool in memcheck racecheck; do
          timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/test_seed_cuda $pol --small >"$OUT/sanitizer-$tool-$pol.log" 2>&1
          echo "$tool $pol rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases FAILED" "$OUT/sanitizer-$tool-$pol.log" | tail -2
        done
      done
      stage "bench_seed_kernels"
      timeout 200 $B/bench/bench_seed_kernels --reps 10 2>&1 | tee "$OUT/simt-bench.log" ;;
    python2)
      # The Python tests that need torch >= 2 (skipped with 77 on the CPU machines' 1.13):
      # the compiled op and the compiled Monitor, the SDPA patch, the API and the README.
      stage "python tests on torch 2"
      (cd $B && timeout 400 ctest -L python --output-on-failure >"$OUT/ctest-python.log" 2>&1); echo "rc=$?"
      grep -E "Test +#|tests passed|FAIL|Skipped|Not Run" "$OUT/ctest-python.log" | head -30 ;;
    ctest)
      stage "ctest"
      (cd $B && timeout 300 ctest -j8 -E fuzz_trace_reader --output-on-failure >"$OUT/ctest.log" 2>&1); echo "rc=$?"
      tail -15 "$OUT/ctest.log" ;;
  esac
done
