"""The fp32 guard on the GPU. A layer the guard switched to fp32 runs PyTorch's own fp32 attention
(lpdiag's fp32 CUDA kernels are a reference, far too slow for training):
 - its output equals F.scaled_dot_product_attention of the same q, k, v in fp32, rounded to bf16,
   bit for bit (same kernel, same inputs);
 - the other layer still runs lpdiag's bf16 kernel (its output differs from the fp32 one);
 - training goes on: finite losses and gradients after the switch; a guard_switch event.
Seed: fixed (printed). Exits 77 without a CUDA device.
    guard_cuda.py"""
import os
import sys
import tempfile

import h5py
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    print("guard_cuda.py: no CUDA device; skipped")
    sys.exit(77)

import lpdiag
import toy_gpt
from check_helpers import check, finish
from test_seed import seed as test_seed

C, H, T, V, STEPS, SWITCH = 256, 4, 128, 11, 6, 3  # head dim 64: the CUDA kernels' size
SEED = test_seed("guard_cuda.py", 20261206)
calls = []


def fn(q, k, v, is_causal=False):
    o = lpdiag.attention(q, k, v, causal=is_causal)
    calls.append((q.detach(), k.detach(), v.detach(), o.detach()))
    return o


def fp32_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).to(q.dtype)


model = toy_gpt.Model(fn, SEED, C, H, T, V).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(SEED)
data = torch.randint(0, V, (STEPS, 4, T + 1), generator=g).cuda()
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "guard.h5")
    with lpdiag.Monitor(path, model, guard="fp32") as mon:
        for step in range(STEPS):
            if step == SWITCH:
                mon.guard_layer(1)
            calls.clear()
            x, y = data[step, :, :-1], data[step, :, 1:]
            loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            check(f"step {step}: loss finite ({loss.item():.4f})", torch.isfinite(loss).item())
            q0, k0, v0, o0 = calls[0]
            q1, k1, v1, o1 = calls[1]
            if step >= SWITCH:
                check(f"step {step}: the guarded layer's output is fp32 SDPA's, bit for bit", torch.equal(o1, fp32_sdpa(q1, k1, v1)))
                check(f"step {step}: the unguarded layer still runs the bf16 kernel", not torch.equal(o0, fp32_sdpa(q0, k0, v0)))
                grads = [p.grad for p in model.layers[1].parameters()]
                check(f"step {step}: the guarded layer's gradients are finite",
                      all(gr is not None and torch.isfinite(gr).all().item() for gr in grads))
            else:
                check(f"step {step}: before the switch, layer 1 runs the bf16 kernel", not torch.equal(o1, fp32_sdpa(q1, k1, v1)))
            mon.record(step, loss, lr=1e-3)
    with h5py.File(path, "r") as f:
        kinds = [e["kind"].decode() for e in f["events"][:]]
    check("the trace holds a guard_switch event", "guard_switch" in kinds, f"events: {sorted(set(kinds))}")
finish()
