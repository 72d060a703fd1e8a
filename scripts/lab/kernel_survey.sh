#!/usr/bin/env bash
# The kernel survey of docs/results/kernel-survey.md, on the GPU machine: every attention kernel torch
# can call there (and lpdiag's CUDA kernels through the C++ CLI) on every probe family, causal
# and not, judged against exact rounding. Writes logs and JSON under $OUT.
#   scripts/lab/kernel_survey.sh BUILD_DIR
set -u
B=${1:-build-gpu4}
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" LPDIAG_TORCH_LIBRARY="$B/hooks/liblpdiag_torch.so"
echo "== python3 -m lpdiag probe ($(date +%T))"
timeout 420 python3 -m lpdiag probe --kernel lpdiag,sdpa-flash,sdpa-cudnn,sdpa-efficient,sdpa-math,flex --fix none,sr \
  --json >"$OUT/survey-python.json" 2>"$OUT/survey-python.err"; echo "rc=$?"
tail -3 "$OUT/survey-python.err"
echo "== lpdiag probe --kernel lpdiag-cuda ($(date +%T))"
timeout 300 "$B/tools/lpdiag" probe --policy fa2 --kernel lpdiag-cuda --fix none,paper,safe,sr >"$OUT/survey-cli.txt" 2>&1; echo "rc=$?"
tail -3 "$OUT/survey-cli.txt"
