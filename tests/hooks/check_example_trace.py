"""An example's trace (Python or C++) holds every signal its Monitor was given, read with h5py
(an independent reader): per record the loss, the attention counters and, from the forward hooks,
each block's output statistics (finite, rms <= max |x|); the weight norms at the records of the
weights cadence (WEIGHTS_EVERY, default 10: the Monitor's default) and at no other.
  check_example_trace.py TRACE LAYERS [WEIGHTS_EVERY]"""
import math
import sys

try:
    import h5py
except ImportError:
    print("SKIP: h5py is not installed")
    sys.exit(77)

path, layers = sys.argv[1], int(sys.argv[2])
every = int(sys.argv[3]) if len(sys.argv) > 3 else 10
with h5py.File(path, "r") as f:
    n = f["step"].shape[0]
    assert n > 0, "no records"
    assert all(math.isfinite(x) for x in f["scalars/loss"][:n]), "loss not finite"
    for l in range(layers):
        g = f[f"activations/h.{l}.out"]
        mx, rms = g["max_abs"][:n], g["rms"][:n]
        for s in range(n):
            assert math.isfinite(mx[s]) and math.isfinite(rms[s]), f"h.{l}.out record {s}: {mx[s]} {rms[s]}"
            assert 0 < rms[s] <= mx[s] * (1 + 1e-6), f"h.{l}.out record {s}: rms {rms[s]} > max {mx[s]}"
        rows = f[f"attention/layer.{l}.attn/rows"][:n]
        assert (rows > 0).all(), f"layer {l}: attention rows missing"
        wq = [k for k, g in f["weights"].items() if g.attrs.get("role") == "attn_q" and g.attrs.get("layer_index") == l]
        assert len(wq) == 1, f"layer {l}: {len(wq)} W_Q matrices recorded"
        sn, steps = f[f"weights/{wq[0]}/spectral_norm"][:n], f["step"][:n]
        due = [s % every == 0 for s in steps]
        assert any(due), f"no record at a multiple of {every}"
        assert all(math.isfinite(x) and x > 0 for x, d in zip(sn, due) if d), f"layer {l}: W_Q spectral norm missing"
        assert all(not math.isfinite(x) for x, d in zip(sn, due) if not d), f"layer {l}: W_Q spectral norm off the cadence"
print(f"{path}: {n} records, activations, counters and weight norms of {layers} layers present")
