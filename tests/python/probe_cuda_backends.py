"""gpu: python3 -m lpdiag probe on the CUDA backends torch has here (lpdiag's op with and without
the sr fix, SDPA flash/cuDNN/efficient/math, FlexAttention): every backend either runs or is
skipped with a reason; the exact-rounding callable on CUDA passes and the deliberately biased one
fails; lpdiag's op without a fix fails strong sinks and with `sr` passes. Exits 77 without CUDA."""
import json
import sys

import torch

from check_helpers import check, finish, probe

if not torch.cuda.is_available():
    print("SKIP: no CUDA device visible to torch")
    sys.exit(77)

rc, out, err = probe("--json", "--kernel", "lpdiag,sdpa-flash,sdpa-cudnn,sdpa-efficient,sdpa-math,flex,kernels_for_tests:exact,"
                   "kernels_for_tests:biased", "--fix", "none,sr", "--family", "strong-sinks,iid", "--causal", "no")
j = json.loads(out) if out.strip() else {"results": []}
res = {(r["family"], r["kernel"]): r for r in j["results"]}
check("the run finished with a verdict (exit 1: some backend is biased)", rc == 1, err)
for name in ["lpdiag", "lpdiag/sr", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "flex"]:
    r = res.get(("iid", name), {})
    check(f"{name} ran or was skipped with a reason", bool(r) and (r.get("skipped") or "o_err_z" in r), json.dumps(r))
check("exact rounding (CUDA tensors) passes", res[("strong-sinks", "kernels_for_tests:exact")]["failed"] is False)
check("the biased callable fails", res[("iid", "kernels_for_tests:biased")]["failed"] is True)
check("lpdiag without a fix fails strong sinks", res[("strong-sinks", "lpdiag")]["failed"] is True)
check("lpdiag with sr passes strong sinks", res[("strong-sinks", "lpdiag/sr")]["failed"] is False)
finish()
