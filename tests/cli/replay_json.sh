#!/usr/bin/env bash
# replay --json: results in the order given (policy-major), with every documented key.
set -euo pipefail
out=$("$1" replay "$2" --policy fa2,seed,fp32 --fix none,paper:beta=7,tol=1e-3,safe --json)
python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
assert "o_err_z" in j["exact_rounding"] and j["exact_rounding"]["policy"] == "exact-rounding", j
assert "recorded" not in j  # this capture holds no o
r = j["results"]
assert [(x["policy"], x["fix"]) for x in r] == [(p, f) for p in ["fa2", "seed", "fp32"] for f in ["none", "paper", "safe"]], r
assert r[1]["fix_params"] == {"kind": "paper", "beta": 7.0, "tol": 0.001}
for x in r:
    for k in ["policy", "fix", "o_err_mean", "o_err_z", "delta_err_mean", "delta_err_z", "repeated_max_rows",
              "pbar_one_entries", "fix_engaged_rows", "nan_count"]:
        assert k in x, k
print("ok")
PY
# `recorded`: the capture's own spec (this one: fa2, fix "{}" = none), first in the list.
out=$("$1" replay "$2" --policy recorded,seed --fix recorded --json)
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])["results"]
assert [(x["policy"], x["fix"]) for x in r] == [("fa2", "none"), ("seed", "none")], r
print("ok: recorded")
PY
