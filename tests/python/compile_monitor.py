"""torch.compile(fullgraph=True) of a model whose attention calls lpdiag.attention without a layer
index, inside `with lpdiag.Monitor(path, model)` (torch >= 2.4; exit 77, skipped visibly, on 1.13):
the layer ids come from the Monitor's module hooks, traced into the graph. Three steps train; the
trace must hold both layers' counters (rows > 0 in each: no call was dropped as layer -1) and the
loss must fall. CUDA (bf16, d 64) where present, else the CPU. Seed printed.
    compile_monitor.py LPDIAG_CLI"""
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn

import lpdiag
from check_helpers import check, finish

LPDIAG = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import test_seed  # noqa: E402
seed = test_seed.seed("compile_monitor", 21102)
print(f"seed {seed}; torch {torch.__version__}")
torch.manual_seed(seed)
lpdiag.load_library()
if not hasattr(torch, "compile") or not hasattr(torch.library, "opcheck"):
    print(f"SKIP: torch.compile needs torch >= 2.4 (this is {torch.__version__})")
    sys.exit(77)

dev = "cuda" if torch.cuda.is_available() else "cpu"
C, H, T, V = 128, 2, 64, 17


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_head = H
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        y = lpdiag.attention(q, k, v, causal=True)  # no layer: the Monitor's
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Attn() for _ in range(2))
        self.head = nn.Linear(C, V)

    def forward(self, idx):
        x = self.emb(idx)
        for a in self.layers:
            x = x + a(x)
        return self.head(x)


model = Model().to(dev, torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
idx = torch.randint(0, V, (4, T), device=dev)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "compiled.h5")
    losses = []
    try:
        with lpdiag.Monitor(path, model, flush_every=1) as mon:
            check("two attention layers found", mon.layers == ["layers.0", "layers.1"], str(mon.layers))
            compiled = torch.compile(model, fullgraph=True)
            for step in range(3):
                loss = nn.functional.cross_entropy(compiled(idx).float().view(-1, V), idx.view(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                mon.record(step, loss, lr=3e-3, grad_norm=1.0)
                losses.append(loss.item())
        check(f"compiled model ({dev}, fullgraph=True, layer=None) trains: loss {losses[0]:.4f} -> {losses[-1]:.4f}", losses[-1] < losses[0])
    except Exception as e:  # noqa: BLE001 (report any failure of the compile)
        check(f"compiled model ({dev}, fullgraph=True, layer=None)", False, f"{type(e).__name__}: {str(e)[:1500]}")
    if os.path.exists(path):
        info = subprocess.run([LPDIAG, "info", path], capture_output=True, text=True).stdout
        check("3 records", "records     3" in info, info)
        try:
            import h5py
        except ImportError:
            h5py = None
            print("skip: counters per layer (no h5py here)")
        if h5py:
            with h5py.File(path, "r") as h:
                rows = [int(g["rows"][:].sum()) for g in h["attention"].values()]
            check(f"both layers' counters recorded under compile (rows {rows})", len(rows) == 2 and all(r > 0 for r in rows))
finish()
