#!/usr/bin/env bash
# One device call: build gpt2_train for the H200 and record a group of real GPT-2-small runs
# (docs/results/validation.md), four at a time on the one GPU. Each trace comes
# back deflated under $OUT with its log.
#   scripts/lab/real_runs.sh all|safe
# Needs corpus/kjv.txt (scripts/lab/make-corpus; carry it).
set -u
OUT=${OUT:-out/real}
mkdir -p "$OUT"
B=build-real
source "$(dirname "$0")/gpu_configure.sh"
echo "== build $(date +%T)"
ninja -C $B gpt2_train >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16
   --text corpus/kjv.txt --level full --compression 6 --flush-every 25 --seed 1 --log-every 50 --weights-every 2"
run() {  # name, steps, timeout, args...
  local name=$1 steps=$2 limit=$3; shift 3
  nvidia-smi --query-gpu=memory.used --format=csv,noheader >/dev/null 2>&1
  timeout -s TERM "$limit" $G --steps "$steps" "$@" --out "$OUT/$name.h5" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(grep -E "^trained|error" "$OUT/$name.log" | tail -1)"
}
echo "== runs $(date +%T)"
# Four runs at a time (~20 GB of GPU memory each).
case ${1:-} in
  all)
    run healthy 700 300 --lr 6e-4 --warmup 100 &
    run stall 300 300 --lr 6e-3 --warmup 20 &
    run stall-fp32 300 300 --lr 6e-3 --warmup 20 --attention sdpa-fp32 &
    run stall-fix 300 300 --lr 6e-3 --warmup 20 --fix paper &
    wait
    run spike 600 300 --lr 1e-3 --warmup 100 --lr-spike 300:40:8 &
    run spike-fp32 600 300 --lr 1e-3 --warmup 100 --lr-spike 300:40:8 --attention sdpa-fp32 &
    run spike-fix 600 300 --lr 1e-3 --warmup 100 --lr-spike 300:40:8 --fix paper &
    run nan 200 300 --lr 5e-2 --warmup 10 &
    wait
    run nan-fp32 200 200 --lr 5e-2 --warmup 10 --attention sdpa-fp32 &
    run nan-fix 200 200 --lr 5e-2 --warmup 10 --fix paper &
    wait ;;
  safe)
    # lpdiag's own fix (the safe shift) on the same three failures and the healthy run.
    run stall-safe 300 300 --lr 6e-3 --warmup 20 --fix safe &
    run spike-safe 600 300 --lr 1e-3 --warmup 100 --lr-spike 300:40:8 --fix safe &
    run explode-safe 200 300 --lr 5e-2 --warmup 10 --fix safe &
    run healthy-safe 700 300 --lr 6e-4 --warmup 100 --fix safe &
    wait ;;
  *) echo "usage: scripts/lab/real_runs.sh all|safe"; exit 2 ;;
esac
echo "== done $(date +%T)"
ls -l "$OUT"
for f in "$OUT"/*.log; do echo "--- $f"; grep -E "^step +(0|[0-9]*00) |^trained|steady|error|what|not finite" "$f" | tail -14; done
nvidia-smi --query-gpu=name,memory.used --format=csv >"$OUT/gpu.log" 2>&1
# At most 8 files of 16 MiB come back: the traces as 15 MB pieces of one tar (cat traces.tar.* | tar x).
(cd "$OUT" && tar czf logs.tar.gz *.log && rm -f *.log && tar cf - *.h5 | split -b 15M - traces.tar. && rm -f *.h5)
ls -l "$OUT"
