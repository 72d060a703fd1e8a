#!/usr/bin/env bash
# One device call for the observer: build, its GPU tests, the observed kernel survey, and the
# GPT-2-small step A/B; or (stage gpt2run) a GPT-2-small run with PyTorch's default attention
# observed. Logs under $OUT.
#   scripts/lab/observer_gpu.sh [tests] [ab] [gpt2run] [guardtest]
#   gpt2run needs corpus/kjv.txt (scripts/lab/make-corpus; carry it). STEPS (5000), SEED (1), LR (1e-3).
set -u
OUT=${OUT:-out/observer}
mkdir -p "$OUT"
B=build-gpu
stage() { echo "== $1 ($(date +%T))"; }
if [ ! -f $B/build.ninja ]; then source "$(dirname "$0")/gpu_configure.sh"; fi
stage build
ninja -C $B lpdiag_torch lpdiag_cli gpt2_train test_observer test_observer_cuda >"$OUT/build.log" 2>&1
echo "build rc=$?"; grep -E "error|FAILED" "$OUT/build.log" | head -20
G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16"
for s in "$@"; do
  case $s in
    tests)
      stage "test_observer_cuda"
      timeout 300 $B/tests/test_observer_cuda >"$OUT/test_observer_cuda.log" 2>&1; echo "rc=$?"; tail -40 "$OUT/test_observer_cuda.log"
      stage "test_observer (CPU)"
      $B/tests/test_observer | tail -2
      if [ -n "${OBSERVE_SURVEY:-}" ]; then  # the probe families through lpdiag.observed, every backend (minutes)
        stage "observe_cuda.py"
        OUT=$OUT PYTHONPATH=python:tests/python LPDIAG_TORCH_LIBRARY=$B/hooks/liblpdiag_torch.so timeout 400 \
          python3 tests/python/observe_cuda.py $B/tools/lpdiag docs/results/data/kernel_survey_h200.json >"$OUT/observe_cuda.log" 2>&1
        echo "rc=$?"; grep -vE "^ok" "$OUT/observe_cuda.log" | tail -30
      fi
      stage "the op under torch.compile and opcheck; op errors"
      for t in "tests/python/guard_cuda.py" "tests/python/compile_op.py" "tests/python/compile_monitor.py $B/tools/lpdiag" \
               "tests/hooks/op_errors.py $B/hooks/liblpdiag_torch.so"; do
        PYTHONPATH=python:tests/python:tests LPDIAG_TORCH_LIBRARY=$B/hooks/liblpdiag_torch.so timeout 300 python3 $t >"$OUT/$(basename ${t%% *} .py).log" 2>&1
        echo "$t rc=$?"; grep -E "FAIL" "$OUT/$(basename ${t%% *} .py).log" | head -5
      done ;;
    ab)
      # Interleaved, two repetitions, 150 steps timed from step 10: PyTorch's SDPA without lpdiag;
      # with the Monitor and the observer every 50 steps (steps 50, 100, 150 observed) at
      # gpt2_train's defaults (weights and updates every 10 steps, block outputs every step); with
      # weights every step and no block outputs; with weights every 10 and no block outputs (the
      # Python Monitor's defaults); the same naming 1,024 query rows per head (the default); the
      # Monitor alone; every step observed (an observed step's own cost).
      stage "gpt2 step A/B"
      for rep in 1 2; do
        for cfg in "plain --attention sdpa --no-monitor" "obs50 --attention sdpa --observe-every 50" \
                   "obs50na --attention sdpa --observe-every 50 --weights-every 1 --no-activations" \
                   "obs50w10na --attention sdpa --observe-every 50 --weights-every 10 --no-activations" \
                   "obs50w10nar1k --attention sdpa --observe-every 50 --weights-every 10 --no-activations --observe-rows 1024" \
                   "obs0w10na --attention sdpa --observe-every 0 --weights-every 10 --no-activations" \
                   "obs1w10na --attention sdpa --observe-every 1 --weights-every 10 --no-activations"; do
          set -- $cfg; n=$1; shift
          case " ${AB_ONLY:-$n} " in *" $n "*) ;; *) continue ;; esac  # AB_ONLY: a subset of the configs, by name
          timeout 120 $G --steps 160 --timed-from 10 --log-every 1000 "$@" --out "$OUT/ab-$n-$rep.h5" --overwrite >"$OUT/ab-$n-$rep.log" 2>&1
          echo "$n rep $rep rc=$? $(grep -E "^steady" "$OUT/ab-$n-$rep.log") $(grep -E "host time" "$OUT/ab-$n-$rep.log")"
          { echo "=== $n rep $rep"; cat "$OUT/ab-$n-$rep.log"; } >>"$OUT/ab.log"; rm -f "$OUT/ab-$n-$rep".*
        done
      done ;;
    guardtest)
      PYTHONPATH=python:tests/python:tests LPDIAG_TORCH_LIBRARY=$B/hooks/liblpdiag_torch.so timeout 120 python3 tests/python/guard_cuda.py \
        >"$OUT/guard_cuda.log" 2>&1; echo "guard_cuda.py rc=$?"; grep -E "FAIL" "$OUT/guard_cuda.log" | head ;;
    gpt2run)
      stage "GPT-2 small, PyTorch's default attention (bf16), observed every 50 steps"
      steps=${STEPS:-5000}; seed=${SEED:-1}; lr=${LR:-1e-3}
      timeout -s TERM 540 $G --autocast --weight-decay 0 --text corpus/kjv.txt --compression 6 --flush-every 50 --log-every 250 \
        --weights-every 10 --no-activations --warmup 200 --steps $steps --seed $seed --lr $lr --attention sdpa --observe-every 50 \
        --out "$OUT/gpt2-sdpa-observed-$lr-s$seed.h5" >"$OUT/gpt2run.log" 2>&1
      echo "rc=$?"; grep -E "^step +(0|[0-9]*000) |^trained|steady|error" "$OUT/gpt2run.log" | tail -12
      $B/tools/lpdiag analyze "$OUT/gpt2-sdpa-observed-$lr-s$seed.h5" --verbose >"$OUT/gpt2run.analyze.txt" 2>&1
      $B/tools/lpdiag analyze "$OUT/gpt2-sdpa-observed-$lr-s$seed.h5" --json >"$OUT/gpt2run.analyze.json" 2>&1
      $B/tools/lpdiag alarm "$OUT/gpt2-sdpa-observed-$lr-s$seed.h5" --json >"$OUT/gpt2run.alarm.json" 2>&1
      head -40 "$OUT/gpt2run.analyze.txt"
      t="$OUT/gpt2-sdpa-observed-$lr-s$seed.h5"; ls -la "$t"
      split -b 15000000 -d "$t" "$t.part-" && rm "$t" ;;
  esac
done
stage done
