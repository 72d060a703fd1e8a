"""python3 -m lpdiag probe and lpdiag.testing.assert_unbiased on the CPU: the exact-rounding
callable passes, a deliberately biased one fails (exit 1, a JUnit failure), lpdiag's op fails on
strong sinks without a fix and passes with `sr`, a callable without autograd is reported as
having no gradients, and a backend this torch lacks is skipped (exit 2 when nothing ran).
    probe_entry.py   (PYTHONPATH holds python/ and tests/python/; LPDIAG_TORCH_LIBRARY the op library)"""
import json
import os
import tempfile

import torch

from check_helpers import check, finish, probe

import kernels_for_tests as kt
import lpdiag.testing

rc, out, err = probe("--kernel", "kernels_for_tests:exact", "--family", "strong-sinks,iid", "--causal", "no")
check("the exact-rounding callable passes (exit 0)", rc == 0 and "all 2 probes passed" in out, out + err)

with tempfile.TemporaryDirectory() as d:
    junit = os.path.join(d, "probe.xml")
    rc, out, err = probe("--kernel", "kernels_for_tests:biased", "--family", "iid", "--causal", "no", "--junit", junit)
    check("a biased callable fails (exit 1)", rc == 1 and "FAIL" in out, out + err)
    xml = open(junit).read()
    check("... and JUnit records the failure", 'failures="1"' in xml and "biased rounding" in xml, xml)

rc, out, err = probe("--kernel", "lpdiag,kernels_for_tests:no_grad", "--fix", "none,sr", "--family", "strong-sinks",
                     "--causal", "no", "--json")
j = json.loads(out) if out.strip() else {"results": []}
res = {r["kernel"]: r for r in j["results"]}
check("lpdiag fa2 without a fix is biased on strong sinks", res.get("lpdiag", {}).get("failed") is True, out + err)
check("lpdiag with the sr fix is not", res.get("lpdiag/sr", {}).get("failed") is False, out + err)
check("exit 1 on the biased row", rc == 1, err)
check("the op's gradients come through autograd", res.get("lpdiag", {}).get("dq_err_z") is not None, out)
check("a callable without autograd: gradients reported missing",
      "no gradients" in (res.get("kernels_for_tests:no_grad", {}).get("grads") or ""), out)
check("every row carries the exact-rounding reference", "exact-rounding" in res, out)

rc, out, err = probe("--kernel", "sdpa-math", "--family", "iid", "--causal", "no")
if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
    check("sdpa-math runs where torch has SDPA", rc in (0, 1) and "sdpa-math" in out, out + err)
else:
    check("sdpa-math on a torch without SDPA is skipped, and nothing ran is exit 2",
          rc == 2 and "skipped: torch" in out and "no probe ran" in err, out + err)

rc, out, err = probe("--kernel", "nope")
check("an unknown kernel is a usage error (exit 2, one line)", rc == 2 and err.count("\n") == 1, err)

lpdiag.testing.assert_unbiased(kt.exact, families=["iid"], causal="no")
check("assert_unbiased accepts the exact-rounding callable", True)
try:
    lpdiag.testing.assert_unbiased(kt.biased, families=["iid"], causal="no")
    check("assert_unbiased rejects the biased callable", False, "no AssertionError")
except AssertionError as e:
    check("assert_unbiased rejects the biased callable, with the table", "FAIL" in str(e) and "exact-rounding" in str(e), str(e))

finish()
