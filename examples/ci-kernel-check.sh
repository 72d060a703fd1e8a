#!/usr/bin/env bash
# A CI step for attention-kernel authors. `lpdiag probe` runs the numerics under test on
# adversarial input families (repeated maxima, sinks, strong sinks, sign-skewed V, large logits,
# long rows, max == 0) with fixed seeds and fails the job (exit 1) when the O or delta error is
# more biased than the correctly rounded output (the `exact-rounding` row of every case).
#
#   POLICY=fa2 FIX=none examples/ci-kernel-check.sh [path/to/lpdiag]
#
# Set POLICY/FIX to the numerics you ship. JUnit goes to probe-results.xml for the CI UI.
# FlashAttention-2 numerics (lpdiag's CUDA kernels, bit for bit) fail this check on the strong-sinks
# family (docs/PROBE_RESULTS.md), which is the point: the gate catches a kernel that rounds with a
# bias. FIX=sr (stochastic rounding of O) passes it.
set -uo pipefail
lpdiag=${1:-build/tools/lpdiag}
"$lpdiag" probe --policy "${POLICY:-fa2}" --fix "${FIX:-none}" --fail-z 4 --junit probe-results.xml
rc=$?
case $rc in
  0) echo "kernel check passed" ;;
  1) echo "kernel check FAILED: biased rounding (details above and in probe-results.xml)" ;;
  *) echo "kernel check could not run (exit $rc)" ;;
esac
exit $rc
# Training runs that recorded a trace can be gated the same way:
#   lpdiag check run.h5 --max-bias-z 4 --junit check-results.xml
