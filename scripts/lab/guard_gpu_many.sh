#!/usr/bin/env bash
# Several runs of the alarm corpus (docs/results/alarm.md) in one device call, as many at once as
# the machine has GPUs, each by guard_gpu.sh on one GPU: on a machine of eight, eight 6,000-step
# runs in the time of one. On one GPU the jobs run one after another, as far as the time allows.
#   JOBS="unguarded:37 unguarded:38 guarded:34 fp32:36:5000" scripts/lab/guard_gpu_many.sh
# A job is ARM:SEED[:STEPS]: ARM as guard_gpu.sh takes it (unguarded, guarded, fp32), STEPS 6,000
# unless given; every run --deterministic, as the corpus's runs from seed 21 on. GUARD and
# THRESHOLDS apply to every job. LIMIT (default 585 s) is the call's time: the build, then waves
# of as many jobs as there are GPUs (CUDA_VISIBLE_DEVICES one each), each run cut at what is left
# less the time for its analysis (and packing); a wave starts only with MIN_RUN (default 300) s
# left, and the jobs not started are named. At most 8 files come back from a call, 64 MiB in all:
# logs.tar (each job's log, analyze verdict, alarm JSONs and console output) and one trace per
# job, split as guard_gpu.sh splits it for up to 4 jobs, packed losslessly (PACK=1, about 5.5 MB
# each) for 5 to 7; `xz -d` restores a packed one, and its alarm corpus entry records the SHA-256 of
# that restored file. Not yet run on a machine of several GPUs (none was lent when it was written).
# DRY=1 prints the plan and runs nothing (GPUS=N stands in for nvidia-smi).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/guard}
LIMIT=${LIMIT:-585}
MIN_RUN=${MIN_RUN:-300}
read -r -a jobs <<<"${JOBS:-}"
if [ ${#jobs[@]} -eq 0 ]; then echo "set JOBS, e.g. JOBS=\"unguarded:37 unguarded:38\""; exit 2; fi
if [ ${#jobs[@]} -gt 7 ]; then echo "at most 7 jobs a call: 8 files come back, logs.tar and one trace a job"; exit 2; fi
for j in "${jobs[@]}"; do
  [[ $j =~ ^(unguarded|guarded|fp32):[0-9]+(:[0-9]+)?$ ]] || { echo "job '$j' is not ARM:SEED[:STEPS] (ARM unguarded, guarded or fp32)"; exit 2; }
done
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ "$gpus" -lt 1 ]; then echo "no GPU (nvidia-smi -L lists none)"; exit 1; fi
pack=; post=10; traces=split
if [ ${#jobs[@]} -gt 4 ]; then pack=1; post=60; traces=packed; fi  # 40 s of packing, one core per trace; the analysis and alarms take 5 s
mkdir -p "$OUT/runs"
if [ -z "${DRY:-}" ]; then
  B=build-gpu
  if [ ! -f $B/build.ninja ]; then source scripts/lab/gpu_configure.sh; fi
  ninja -C $B lpdiag_torch lpdiag_cli gpt2_train >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
  rm -f "$OUT/build.log" "$OUT/configure.log"
fi
echo "== built at $SECONDS s: $gpus GPU(s), ${#jobs[@]} job(s), traces $traces"
i=0
while [ $i -lt ${#jobs[@]} ]; do
  left=$((LIMIT - SECONDS))
  if [ $left -lt "$MIN_RUN" ]; then echo "not run, $left s left: ${jobs[*]:$i}"; break; fi
  pids=()
  for ((g = 0; g < gpus && i < ${#jobs[@]}; g++, i++)); do
    IFS=: read -r arm seed steps <<<"${jobs[$i]}"
    echo "== GPU $g: $arm seed $seed, ${steps:-6000} steps, run limit $((left - post)) s ($(date +%T))"
    [ -n "${DRY:-}" ] && continue
    (CUDA_VISIBLE_DEVICES=$g OUT="$OUT/runs" SKIP_BUILD=1 PACK=$pack ARM=$arm SEED=$seed STEPS=${steps:-6000} DET=1 \
       RUN_LIMIT=$((left - post)) scripts/lab/guard_gpu.sh >"$OUT/runs/$arm-s$seed.console.txt" 2>&1) &
    pids+=($!)
  done
  [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
  [ -n "${DRY:-}" ] && SECONDS=$((SECONDS + 480))  # the plan's next wave, as a 6,000-step run would leave it
done
[ -n "${DRY:-}" ] && exit 0
grep -h -E "^rc=|ALARM|^steady|^trained|HEALTHY|FAILED" "$OUT"/runs/*.console.txt | cut -c1-300
mv "$OUT"/runs/*.h5.xz "$OUT"/runs/*.h5.part-* "$OUT"/ 2>/dev/null
tar -cf "$OUT/logs.tar" -C "$OUT/runs" . && rm -rf "$OUT/runs"
ls -la "$OUT"
echo "== done at $SECONDS s"
