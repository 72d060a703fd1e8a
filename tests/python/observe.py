"""lpdiag.observed on the CPU: the user's attention runs unchanged and on observed steps lpdiag
measures what it did.
 - Training with and without observation gives identical losses and weights, bit for bit.
 - The trace records the layer as external:<name>, observed, with the cadence; counters land on
   the first step and every observe_every-th, and only there; tile ties and P-bar counts, which
   only a kernel's insides show, are unmeasured.
 - A kernel that rounds O upward (bf16 rounding toward +inf) shows a positive O and delta bias;
   the same kernel rounding to nearest does not.
 - Calls the observer cannot take (an attn_mask) run unchanged, are counted, and said once.
 - observe_layers / observe_heads restrict what is observed.
Seed: fixed (printed). Tolerances: none; everything asserted is exact or a sign.
    observe.py LPDIAG_CLI"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import h5py
import torch
import torch.nn as nn

import lpdiag
import toy_gpt
from check_helpers import check, finish
from test_seed import seed as test_seed

cli = os.path.abspath(sys.argv[1])
C, H, T, V = 32, 4, 16, 11
SEED = test_seed("observe.py", 20261205)



def math_attention(q, k, v, is_causal=False, scale=None, attn_mask=None, round_up=False):
    """Attention in fp32 from bf16 inputs, O rounded to bf16 (to nearest, or upward: a biased kernel)."""
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
    if attn_mask is not None:
        s = s + attn_mask
    if is_causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ v.float()
    if round_up:  # toward +inf: the next bf16 above whenever rounding to nearest went down
        r = o.to(torch.bfloat16)
        up = r.float() < o
        bits = r.view(torch.int16)
        step = torch.where(r.float() >= 0, torch.ones_like(bits), -torch.ones_like(bits))
        r = torch.where(up, (bits + step).view(torch.bfloat16), r)
        return r
    return o.to(torch.bfloat16)


def Model(fn):
    return toy_gpt.Model(fn, SEED, C, H, T, V)


def train(model, steps, mon=None):
    g = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, V, (4, T), generator=g)
        loss = nn.functional.cross_entropy(model(idx).reshape(-1, V), idx.roll(1, 1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if mon is not None:
            mon.record(step, loss.detach(), lr=3e-3)
    return losses


tmp = tempfile.mkdtemp()
plain = Model(math_attention)
base = train(plain, 12)
watched = Model(lpdiag.observed(math_attention, name="my-kernel"))
path = os.path.join(tmp, "obs.h5")
with lpdiag.Monitor(path, watched, observe_every=5, full_every=0) as mon:
    seen = train(watched, 12, mon)
check("observation changes no loss (12 steps, bit for bit)", seen == base, f"{seen[:3]} vs {base[:3]}")
same = all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), watched.state_dict().values()))
check("observation changes no weight (bit for bit)", same)

with h5py.File(path, "r") as f:
    layer = f["attention"][sorted(f["attention"])[0]]
    spec = json.loads(layer.attrs["spec"])
    check("the layer is recorded as external:<name>", layer.attrs["policy"] == "external:my-kernel", str(layer.attrs["policy"]))
    check("its spec says observed, at which cadence", spec.get("observed") is True and spec.get("observe_every") == 5, str(spec))
    steps = list(f["step"][:])
    rows = layer["rows"][:]
    measured = [int(s) for s, r in zip(steps, rows) if r[0] >= 0]
    check("counters on the first step and every 5th only", measured == [0, 5, 10], str(measured))
    check("each observed step counts every query row of every head", all(r == 4 * T for r in rows[0]), str(rows[0]))
    check("tile ties are unmeasured for an observed layer", int(layer["tile_repeated_max_rows"][0][0]) == -1)
    check("delta errors recorded from the backward", int(layer["delta_err_count"][0][0]) == 4 * T, str(layer["delta_err_count"][0]))

# A biased kernel: upward rounding of O gives positive O errors and, with dO, a delta bias.
def bias_of(fn):
    model = Model(fn)
    p = os.path.join(tmp, f"bias{id(fn)}.h5")
    with lpdiag.Monitor(p, model, observe_every=1, full_every=0) as mon:
        idx = torch.randint(0, V, (4, T), generator=torch.Generator().manual_seed(SEED))
        loss = model(idx).sum()
        loss.backward()
        mon.record(0, loss.detach())
    with h5py.File(p, "r") as f:
        layer = f["attention"][sorted(f["attention"])[0]]
        return float(layer["o_err_sum"][0].sum()), int(layer["o_err_pos"][0].sum()), int(layer["o_err_neg"][0].sum())


up = bias_of(lpdiag.observed(lambda q, k, v, **kw: math_attention(q, k, v, round_up=True, **kw), name="round-up"))
near = bias_of(lpdiag.observed(math_attention, name="nearest"))
check("a kernel rounding O upward: every error >= 0 and most > 0", up[0] > 0 and up[2] == 0 and up[1] > 0, str(up))
check("rounding to nearest: errors of both signs", near[1] > 0 and near[2] > 0, str(near))

# Calls the observer cannot take: counted and said once, and the call's output is the kernel's.
masked = lpdiag.observed(lambda q, k, v, **kw: math_attention(q, k, v, attn_mask=kw.pop("attn_mask"), **kw), name="masked")


class MaskedAttn(toy_gpt.Attn):
    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2).to(torch.bfloat16) for t in self.c_attn(x).split(C, 2))
        y = masked(q, k, v, attn_mask=torch.zeros(T, T))
        return self.c_proj(y.transpose(1, 2).float().reshape(B, T, C))


m = Model(math_attention)
m.layers = nn.ModuleList(MaskedAttn(math_attention, C, H, T) for _ in range(2))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with lpdiag.Monitor(os.path.join(tmp, "masked.h5"), m, observe_every=1) as mon:
        for step in range(2):
            mon.record(step, m(torch.zeros(2, T, dtype=torch.long)).sum().detach())
said = [str(x.message) for x in w if "not observed" in str(x.message)]
check("an attn_mask call is skipped and said once", len(said) == 1 and "attn_mask" in said[0], str(said))
check("and counted", lpdiag.observe.skipped.get("attn_mask given (the observer computes causal or full attention)") == 4,
      str(dict(lpdiag.observe.skipped)))

# A subset: layer 1 only, heads 0 and 2.
sub = Model(lpdiag.observed(math_attention, name="k"))
p = os.path.join(tmp, "sub.h5")
with lpdiag.Monitor(p, sub, observe_every=1, observe_layers=[1], observe_heads=[0, 2]) as mon:
    train(sub, 2, mon)
with h5py.File(p, "r") as f:
    names = sorted(f["attention"], key=lambda n: f["attention"][n].attrs["layer_index"])
    r0, r1 = f["attention"][names[0]]["rows"][0], f["attention"][names[1]]["rows"][0]
    check("observe_layers: layer 0 not observed", all(x == -1 for x in r0), str(r0))
    check("observe_heads: heads 0 and 2 of layer 1 only", list(r1) == [4 * T, 0, 4 * T, 0], str(r1))

out = subprocess.run([cli, "analyze", path], capture_output=True, text=True)
check("analyze names the observed kernel", "my-kernel" in out.stdout, out.stdout[-800:])
finish()
