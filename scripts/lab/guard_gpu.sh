#!/usr/bin/env bash
# One device call: GPT-2 small, seed-mma/none at lr 1e-3 (the reproduction's failing arm, same
# config, seed and data order as its unguarded runs) with the Monitor's guard, 5,000 steps.
#   scripts/lab/guard_gpu.sh        SEED (1), GUARD (fp32), RUN_LIMIT (430 s); needs corpus/kjv.txt (carry it)
# ARM=unguarded: the same run without --guard (the live alarm still reports); ARM=fp32: its fp32
# arm, PyTorch's SDPA in fp32 (the reproduction's counterfactual, ~400 s on an H200). A guarded run
# that raises no alarm is its own unguarded arm: run it first, and the unguarded arm of a seed
# only where the guard switched. STEPS=N runs on past step 5,000 at the schedule's final lr (the
# first 5,000 steps keep the 5,000-step schedule); DET=1 adds --deterministic. GUARD_AT=STEP:LAYER
# (guarded arm) also switches LAYER at STEP whatever the alarm says: with DET=1, how late a switch
# still saves a run whose unguarded arm failed; add NO_ALARM_SWITCH=1 so that the alarm's own switches
# (earlier than STEP) stay off and GUARD_AT alone switches. THRESHOLDS=slow-trigger: the alarm's
# named thresholds (--alarm-thresholds; the run's name gets -slow-trigger).
# MODE=repro: whether the same seed gives the same run twice in one build on one card.
# MODE=cost instead: what a switched layer costs per step, interleaved A/B, two repetitions, 160
# steps timed from step 60, lr 1e-3 on the corpus (at gpt2_train's default 3e-3 every layer's
# logits collapse within 50 steps and the alarm switches them all): the same config with --guard
# fp32 and no switch, and with layer 1 switched at step 50 (--guard-at 50:1); for lpdiag's
# seed-mma kernels and for PyTorch's SDPA.
# Logs, the alarms, analyze's verdict and the trace (split in 15 MB parts: cat guard-*.h5.part-* > trace) under $OUT.
# SKIP_BUILD=1: the build is there already (guard_gpu_many.sh, which runs several of these at once);
# PACK=1: the trace packed losslessly by scripts/pack-trace to NAME.h5.xz (about 5.5 MB for 6,000
# steps, some 40 s of one core; `xz -d` gives a trace whose values, alarms and analysis are the
# full trace's) instead of split.
set -u
OUT=${OUT:-out/guard}
mkdir -p "$OUT"
B=build-gpu
if [ ! -f $B/build.ninja ]; then source "$(dirname "$0")/gpu_configure.sh"; fi
if [ -z "${SKIP_BUILD:-}" ]; then
  echo "== build $(date +%T)"
  ninja -C $B lpdiag_torch lpdiag_cli gpt2_train >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
fi
G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --autocast"
if [ "${MODE:-run}" = cost ]; then
  echo "== guard cost A/B $(date +%T)"
  for rep in 1 2; do
    for cfg in "mma-none --policy seed-mma:tile=512 --guard fp32" "mma-sw50 --policy seed-mma:tile=512 --guard fp32 --guard-at 50:1" \
               "sdpa-none --attention sdpa --guard fp32" "sdpa-sw50 --attention sdpa --guard fp32 --guard-at 50:1"; do
      set -- $cfg; n=$1; shift
      timeout 120 $G --steps 160 --timed-from 60 --log-every 1000 --weights-every 10 --no-activations --lr 1e-3 --warmup 200 \
        --text corpus/kjv.txt "$@" --out "$OUT/cost-$n-$rep.h5" \
        --overwrite >"$OUT/cost-$n-$rep.log" 2>&1
      echo "$n rep $rep rc=$? $(grep -E "^steady" "$OUT/cost-$n-$rep.log" | cut -c1-60)"
      { echo "=== $n rep $rep"; cat "$OUT/cost-$n-$rep.log"; } >>"$OUT/guard-cost.log"; rm -f "$OUT/cost-$n-$rep."*
    done
  done
  exit 0
fi
if [ "${MODE:-run}" = repro ]; then
  # Whether one build on one card gives the same run twice: two 300-step runs of the failing config,
  # same seed, their losses compared bit for bit (a guarded arm and its unguarded arm can then be
  # paired exactly up to the switch, across calls on the same kind of card). DET=1: with
  # --deterministic, and a third run without it, interleaved, for what determinism costs per step.
  det=(); [ -n "${DET:-}" ] && det=(--deterministic)
  for rep in 1 2 3; do
    flags=("${det[@]}"); [ $rep = 3 ] && { [ -n "${DET:-}" ] || break; flags=(); }
    timeout 120 $G --steps 300 --log-every 1 --weights-every 10 --no-activations --lr 1e-3 --warmup 200 --text corpus/kjv.txt \
      --seed "${SEED:-3}" --policy seed-mma:tile=512 --no-monitor "${flags[@]}" >"$OUT/repro-$rep.log" 2>&1
    echo "run $rep ${flags[*]:-(not deterministic)}: $(grep -E '^steady' "$OUT/repro-$rep.log" | cut -c1-70)"
  done
  grep -ih "determinis" "$OUT"/repro-*.log | sort | uniq -c | head -20
  for rep in 1 2; do awk '/^step/ {print $2, $4, $8}' "$OUT/repro-$rep.log" >"$OUT/repro-$rep.steps"; done
  if cmp -s "$OUT/repro-1.steps" "$OUT/repro-2.steps"; then echo "repro: losses and grad norms identical as printed over 300 steps"; else
    echo "repro: differ, first at: $(diff "$OUT/repro-1.steps" "$OUT/repro-2.steps" | head -3 | tr '\n' ' ')"; fi
  rm -f "$OUT"/repro-*.steps; exit 0
fi
seed=${SEED:-1}; guard=${GUARD:-fp32}
case "${ARM:-guarded}" in
  guarded) name=guard-$guard-s$seed; arm=(--policy seed-mma:tile=512 --guard "$guard")
           if [ -n "${GUARD_AT:-}" ]; then name=$name-at${GUARD_AT/:/-}; arm+=(--guard-at "$GUARD_AT"); fi
           if [ -n "${NO_ALARM_SWITCH:-}" ]; then name=$name-only; arm+=(--no-alarm-switch); fi
           if [ -n "${THRESHOLDS:-}" ]; then name=$name-$THRESHOLDS; arm+=(--alarm-thresholds "$THRESHOLDS"); fi ;;
  unguarded) name=unguarded-s$seed; arm=(--policy seed-mma:tile=512)
             if [ -n "${THRESHOLDS:-}" ]; then name=$name-$THRESHOLDS; arm+=(--alarm-thresholds "$THRESHOLDS"); fi ;;
  fp32) name=fp32-s$seed; arm=(--attention sdpa-fp32) ;;
  *) echo "ARM must be guarded, unguarded or fp32"; exit 2 ;;
esac
echo "== run $name $(date +%T)"
timeout -s TERM "${RUN_LIMIT:-430}" $G --weight-decay 0 --text corpus/kjv.txt --level full --full-every 50 --compression 6 --flush-every 50 \
  --log-every 250 --weights-every 10 --no-activations --warmup 200 --steps "${STEPS:-5000}" --decay-steps 5000 --seed "$seed" --lr 1e-3 \
  ${DET:+--deterministic} "${arm[@]}" --out "$OUT/$name.h5" >"$OUT/$name.log" 2>&1
echo "rc=$? $(date +%T)"
grep -E "ALARM|^step +[0-9]*[05]00 |^steady|^trained|^alarms" "$OUT/$name.log" | cut -c1-400
$B/tools/lpdiag analyze "$OUT/$name.h5" >"$OUT/$name.analyze.txt" 2>&1; head -12 "$OUT/$name.analyze.txt"
$B/tools/lpdiag alarm "$OUT/$name.h5" --json >"$OUT/$name.alarm.json" 2>&1
$B/tools/lpdiag alarm "$OUT/$name.h5" --json --thresholds slow-trigger >"$OUT/$name.alarm-slow-trigger.json" 2>&1
$B/tools/lpdiag alarm "$OUT/$name.h5" --json --thresholds odds-trigger >"$OUT/$name.alarm-odds-trigger.json" 2>&1
ls -la "$OUT/$name.h5"
if [ -n "${PACK:-}" ]; then
  python3 scripts/pack-trace "$OUT/$name.h5" "$OUT/$name.h5.xz" && rm "$OUT/$name.h5"
else
  split -b 15000000 -d "$OUT/$name.h5" "$OUT/$name.h5.part-" && rm "$OUT/$name.h5"
fi
[ -n "${SKIP_BUILD:-}" ] || rm -f "$OUT/build.log" "$OUT/configure.log"  # at most 8 files come back
echo "== done $(date +%T)"
