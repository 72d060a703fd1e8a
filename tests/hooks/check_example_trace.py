"""An example's trace (Python or C++) holds every signal its Monitor was given, read with h5py
(an independent reader): per record the loss, the attention counters, the weight norms and, from the
forward hooks, each block's output statistics (finite, rms <= max |x|)."""
import math
import sys

try:
    import h5py
except ImportError:
    print("SKIP: h5py is not installed")
    sys.exit(77)

path, layers = sys.argv[1], int(sys.argv[2])
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
        sn = f[f"weights/{wq[0]}/spectral_norm"][:n]
        assert all(math.isfinite(x) and x > 0 for x in sn), f"layer {l}: W_Q spectral norm missing"
print(f"{path}: {n} records, activations, counters and weight norms of {layers} layers present")
