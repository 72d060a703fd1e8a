"""Reads lpdiag's fixture trace and capture with h5py alone (not lpdiag) and checks paths,
shapes, attributes and values against docs/reference/trace-format.md and the fixture's formulas."""
import json
import math
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # scripts/run-tests installs python3-h5py; a bare machine may lack it
    print(f"SKIP: {e}")
    sys.exit(77)

d = sys.argv[1]


def fx(step, a, b=0):
    return step * 0.5 + a * 0.125 + b * 0.0078125


with h5py.File(f"{d}/good.h5", "r") as f:
    a = f.attrs
    assert a["lpdiag_format"] == "lpdiag-trace", a["lpdiag_format"]
    assert int(a["lpdiag_version"]) == 1
    assert a["producer"] == "lpdiag fixtures"
    assert json.loads(a["run_config"])["n_head"] == 3
    assert int(a["rank"]) == 0 and int(a["world_size"]) == 1
    assert a["created_utc"].endswith("Z")
    step = f["/step"][...]
    assert step.dtype == np.int64 and step.shape == (50,)
    assert (step == np.arange(10, 60)).all()
    assert f["/step"].maxshape == (None,) and f["/step"].chunks is not None
    for s in ["loss", "lr", "grad_norm", "tokens_per_s"]:
        assert f[f"/scalars/{s}"].dtype == np.float64 and f[f"/scalars/{s}"].shape == (50,)
    assert f["/scalars/loss"][7] == fx(17, 0)
    g = f["/attention/h.1.attn"]
    assert int(g.attrs["layer_index"]) == 1 and int(g.attrs["n_heads"]) == 3 and int(g.attrs["head_dim"]) == 64
    assert g.attrs["policy"] == "fa2" and json.loads(g.attrs["fix"]) == {"kind": "none"}
    for name in ["rows", "repeated_max_rows", "tile_repeated_max_rows", "zero_max_repeated_rows", "pbar_one_entries",
                 "fix_engaged_rows", "o_err_count", "o_err_pos", "o_err_neg", "delta_err_count", "delta_err_pos",
                 "delta_err_neg"]:
        assert g[name].dtype == np.int64 and g[name].shape == (50, 3), name
    for name in ["o_err_sum", "o_err_sumsq", "delta_err_sum", "delta_err_sumsq"]:
        assert g[name].dtype == np.float64 and g[name].shape == (50, 3), name
    assert g["logit_max"].dtype == np.float32
    assert g["rows"][4, 2] == 14 * 1000 + 12
    assert g["o_err_sum"][4, 2] == -fx(14, 1, 2)
    w = f["/weights/h.0.attn.q"]
    assert w.attrs["role"] == "attn_q" and int(w.attrs["n_heads"]) == 3 and int(w.attrs["rows"]) == 192
    assert w["head_spectral_norm"].shape == (50, 3)
    assert w["spectral_norm"][0] == fx(10, 0, 1)
    assert math.isnan(w["frobenius_norm"][0])  # not measured
    u = f["/updates/h.0.attn.q"]
    assert u.attrs["role"] == "attn_q"
    assert u["sigma1"][0] == fx(10, 0, 3) and math.isnan(u["sigma1"][1])
    assert f["/activations/h.1"]["max_abs"].dtype == np.float32
    ev = f["/events"][...]
    assert ev.shape == (1,) and ev["step"][0] == 12 and ev["kind"][0] == b"nan_inf" and ev["head"][0] == 0
    assert set(ev.dtype.names) == {"step", "kind", "layer_index", "head", "value", "message"}

with h5py.File(f"{d}/run.capture.700.2.h5", "r") as f:
    assert f.attrs["lpdiag_format"] == "lpdiag-capture" and int(f.attrs["step"]) == 700
    assert int(f.attrs["causal"]) == 1 and abs(float(f.attrs["scale"]) - 0.25) < 1e-15
    assert f.attrs["source_dtype"] == "bfloat16"
    for t in ["q", "k", "v", "do"]:
        x = f[t][...]
        assert x.shape == (1, 2, 48, 16) and x.dtype == np.float32
        # every value exact in bf16: the low 16 bits of the fp32 pattern are zero
        assert (x.view(np.uint32) & 0xFFFF == 0).all()
print("h5py read the trace and the capture: paths, shapes, attributes and values as specified")
