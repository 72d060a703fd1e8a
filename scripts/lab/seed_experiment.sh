#!/usr/bin/env bash
# One device call: the reproduction experiment of docs/results/reproduction.md. A small GPT-2
# (4 layers, 4 heads of 64, width 256, block 256, batch 16) on the KJV text under bf16 autocast,
# the paper's recipe (AdamW 0.9/0.95, weight decay 0, clip 1, warmup then cosine), same seed and
# data order in every arm, hooks on at `full`:
#   seed/none, seed/paper, seed/safe (the seed CUDA kernels, key tile 128: two tiles per row, as
#   the paper's 512-key tiles at block 1024), fa2/none, fp32 (PyTorch SDPA in fp32),
# at lr 1e-3, and seed/none, seed/paper and fp32 at lr 4e-3 (the learning-rate search).
# Then `lpdiag analyze` of every arm and `--reference` of each bf16 arm against its fp32 arm.
#   scripts/lab/seed_experiment.sh [STEPS] [all|seed-1e-3|search]     needs corpus/kjv.txt (scripts/lab/make-corpus; carry it)
# search runs seed/none, seed/paper and fp32 at each learning rate of LRS (default "6e-3 1e-2").
# confirm runs every arm at LR (default 6e-3), seed 1: seed/none, seed/paper, seed/safe, fa2/none,
# fp32 (SDPA) and fp32lp (lpdiag's fp32 kernels, which record logits and the trigger); and seed 2
# (names ending -s2): seed/none, seed/paper, fp32.
# seeds runs seed/none, seed/paper, seed/safe and fp32 at LR for each seed of SEEDS (default 3),
# and seed/safe alone for each of SAFE_SEEDS (default 2).
# grid runs the arms of GRID_ARMS (default "none paper fp32"; also safe) for each LR:SEED pair of
# GRID (default "8e-3:1 8e-3:2 6e-3:4"); names end -sSEED.
# gpt2 runs GPT-2 small (12 layers, 12 heads of 64, width 768, block 1024, batch 16), the paper's
# recipe at lr LR (default 1e-3), warmup 200, full every 50 steps, for each arm of GPT2_ARMS
# (default "seedmma-none fp32"; also seedmma-paper, seedmma-safe, fa2-none, and sdpa-bf16: PyTorch's
# own attention in bf16, no lpdiag counters; ARM@SEED runs another seed, its name ending -sSEED):
# the seed arms on the
# seed-mma kernels (tensor cores) with the paper's 512-key tile, two tiles per row at block 1024.
# seed-1e-3 runs the three seed arms at lr 1e-3 alone (they are the slow ones: the seed kernels
# run on the CUDA cores).
set -u
OUT=${OUT:-out/seed}
STEPS=${1:-5000}
ARMS=${2:-all}
mkdir -p "$OUT"
B=build-seed
source "$(dirname "$0")/gpu_configure.sh"
echo "== build $(date +%T)"
ninja -C $B gpt2_train lpdiag_cli ${EXTRA_TARGETS:-} >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
[ -n "${PRE:-}" ] && eval "$PRE"
G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 4 --n-head 4 --n-embd 256 --block 256 --batch 16 --autocast
   --weight-decay 0 --text corpus/kjv.txt --level full --compression 6 --flush-every 50 --log-every 250
   --weights-every 5 --no-activations --warmup 200 --steps $STEPS"
run() {  # name, args...
  local name=$1; shift
  timeout -s TERM "${RUN_LIMIT:-420}" $G --seed "${RSEED:-1}" "$@" --out "$OUT/$name.h5" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(grep -E "^trained|error|steady" "$OUT/$name.log" | tail -2 | tr '\n' ' ')"
}
echo "== runs $(date +%T)"
S="--policy seed:tile=128"
if [ "$ARMS" = gpt2 ]; then
G="$B/examples/gpt2/gpt2_train --device cuda --n-layer 12 --n-head 12 --n-embd 768 --block 1024 --batch 16 --autocast
   --weight-decay 0 --text corpus/kjv.txt --level full --full-every 50 --compression 6 --flush-every 50 --log-every 100
   --weights-every 10 --no-activations --warmup 200 --steps $STEPS"
lr=${LR:-1e-3}
M="--policy seed-mma:tile=512"
for spec in ${GPT2_ARMS:-seedmma-none fp32}; do
  arm=${spec%@*}; sd=1; [ "$arm" != "$spec" ] && sd=${spec#*@}
  name=$arm-$lr; [ "$sd" != 1 ] && name=$name-s$sd
  case $arm in
    seedmma-none) RSEED=$sd run $name --lr $lr $M & ;;
    seedmma-paper) RSEED=$sd run $name --lr $lr $M --fix paper & ;;
    seedmma-safe) RSEED=$sd run $name --lr $lr $M --fix safe & ;;
    fa2-none) RSEED=$sd run $name --lr $lr --policy fa2 & ;;
    fp32) RSEED=$sd run $name --lr $lr --attention sdpa-fp32 & ;;
    sdpa-bf16) RSEED=$sd run $name --lr $lr --attention sdpa & ;;
    *) echo "unknown arm $arm"; exit 2 ;;
  esac
done
elif [ "$ARMS" = grid ]; then
for pair in ${GRID:-8e-3:1 8e-3:2 6e-3:4}; do
  lr=${pair%%:*}; sd=${pair#*:}
  for arm in ${GRID_ARMS:-none paper fp32}; do
    case $arm in
      none) RSEED=$sd run seed-none-$lr-s$sd --lr $lr $S & ;;
      paper) RSEED=$sd run seed-paper-$lr-s$sd --lr $lr $S --fix paper & ;;
      safe) RSEED=$sd run seed-safe-$lr-s$sd --lr $lr $S --fix safe & ;;
      fp32) RSEED=$sd run fp32-$lr-s$sd --lr $lr --attention sdpa-fp32 & ;;
      *) echo "unknown arm $arm"; exit 2 ;;
    esac
  done
done
elif [ "$ARMS" = seeds ]; then
lr=${LR:-6e-3}
for sd in ${SEEDS:-3}; do
  for a in "seed-none $S" "seed-paper $S --fix paper" "seed-safe $S --fix safe" "fp32 --attention sdpa-fp32"; do
    set -- $a; n=$1; shift; RSEED=$sd run $n-$lr-s$sd --lr $lr "$@" &
  done
done
for sd in ${SAFE_SEEDS:-2}; do RSEED=$sd run seed-safe-$lr-s$sd --lr $lr $S --fix safe & done
elif [ "$ARMS" = confirm ]; then
lr=${LR:-6e-3}
for a in "seed-none $S" "seed-paper $S --fix paper" "seed-safe $S --fix safe" "fa2-none" "fp32lp-none --policy fp32" "fp32 --attention sdpa-fp32"; do
  set -- $a; n=$1; shift; run $n-$lr --lr $lr "$@" &
done
for a in "seed-none $S" "seed-paper $S --fix paper" "fp32 --attention sdpa-fp32"; do
  set -- $a; n=$1; shift; RSEED=2 run $n-$lr-s2 --lr $lr "$@" &
done
elif [ "$ARMS" = search ]; then
for lr in ${LRS:-6e-3 1e-2}; do
run seed-none-$lr --lr $lr $S &
run seed-paper-$lr --lr $lr $S --fix paper &
run fp32-$lr --lr $lr --attention sdpa-fp32 &
done
else
run seed-none-1e-3 --lr 1e-3 $S &
run seed-paper-1e-3 --lr 1e-3 $S --fix paper &
run seed-safe-1e-3 --lr 1e-3 $S --fix safe &
fi
if [ "$ARMS" = all ]; then
run fa2-none-1e-3 --lr 1e-3 &
run fp32-1e-3 --lr 1e-3 --attention sdpa-fp32 &
run seed-none-4e-3 --lr 4e-3 $S &
run seed-paper-4e-3 --lr 4e-3 $S --fix paper &
run fp32-4e-3 --lr 4e-3 --attention sdpa-fp32 &
fi
wait
echo "== analyze $(date +%T)"
L=$B/tools/lpdiag
for f in "$OUT"/*.h5; do
  n=$(basename "$f" .h5)
  lr=${n#*-*-}; [ "${n%%-*}" = fp32 ] && lr=${n#fp32-}  # seed-none-4e-3 -> 4e-3, fp32-4e-3 -> 4e-3
  $L analyze "$f" --json >"$OUT/$n.analyze.json" 2>"$OUT/$n.analyze.err"
  $L analyze "$f" >"$OUT/$n.analyze.txt" 2>&1
  [ "$n" != "fp32-$lr" ] && [ -f "$OUT/fp32-$lr.h5" ] && $L analyze "$f" --reference "$OUT/fp32-$lr.h5" --json >"$OUT/$n.reference.json" 2>&1
  python3 - "$OUT/$n.analyze.json" "$OUT/$n.reference.json" "$n" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[3], "analyze failed:", e); sys.exit(0)
c, r = j["chain"], j["run"]
ref = None
try:
    ref = json.load(open(sys.argv[2])).get("reference")
except Exception:
    pass
print(f"{sys.argv[3]:18s} healthy={r['healthy']} failure={(r['failure'] or {}).get('kind')}@{(r['failure'] or {}).get('onset_step')} "
      f"chain={c['found']} missing={j.get('missing_links')} ref={None if not ref else (ref.get('failed'), ref.get('attributable_to_attention_numerics'))}")
PY
done
for f in "$OUT"/*.log; do echo "--- $(basename $f)"; grep -E "^step +(0|[0-9]*000|4999) |^trained|steady|error|not finite" "$f" | tail -9; done
(cd "$OUT" && tar czf logs.tar.gz *.log *.json *.txt *.err configure.log build.log 2>/dev/null; rm -f *.log *.json *.txt *.err; tar cf - *.h5 | split -b 15M - traces.tar. && rm -f *.h5)
ls -l "$OUT"
