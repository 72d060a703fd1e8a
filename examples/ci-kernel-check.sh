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
# family (docs/results/kernel-survey.md), which is the point: the gate catches a kernel that rounds with a
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
# The same gate for kernels torch can call (PyTorch's backends, FlexAttention, your own), on the
# same families from the same seeds, judged by the same rule; run it where the kernel runs:
#   PYTHONPATH=python LPDIAG_TORCH_LIBRARY=build/hooks/liblpdiag_torch.so \
#     python3 -m lpdiag probe --kernel sdpa-cudnn,flex,mypkg.attention:my_kernel --junit probe-results.xml
# and from a test suite (raises AssertionError with the table when my_kernel is biased):
#   import lpdiag.testing
#   lpdiag.testing.assert_unbiased(my_kernel, families=["strong-sinks", "dup-keys"], z=4)
# lpdiag's own CUDA kernels from the C++ CLI (built with CUDA, on a GPU):
#   "$lpdiag" probe --kernel lpdiag-cuda --fix none,sr
# Training runs that recorded a trace can be gated the same way:
#   lpdiag check run.h5 --max-bias-z 4 --junit check-results.xml
