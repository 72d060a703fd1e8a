"""lpdiag.attention and lpdiag.Monitor from Python (torch 1.13 on the CPU machines, 2.11 on the GPU
machine): a nanoGPT-style model (fused c_attn) and a Hugging Face-style one (q_proj/k_proj/v_proj)
whose attention calls lpdiag.attention without a layer index train 4 steps inside
`with lpdiag.Monitor(path, model)`; the trace must hold every layer's counters (rows > 0 in each,
so no layer's calls were dropped), the q/k/v weights the Monitor found, and the policy the model
ran. Bad arguments must raise with a message naming them. Seed printed."""
import json
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
seed = test_seed.seed("api", 21101)
print(f"seed {seed}")
torch.manual_seed(seed)


C, H, T = 32, 2, 16


class NanoAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_head = H
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2).to(torch.bfloat16) for t in self.c_attn(x).split(C, 2))
        y = lpdiag.attention(q, k, v, causal=True, policy="seed")
        return self.c_proj(y.float().transpose(1, 2).reshape(B, T, C))


class HFConfig:
    num_attention_heads = H


class HFAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(C, C) for _ in range(4))

    def forward(self, x):
        B = x.shape[0]
        q, k, v = (p(x).view(B, T, H, C // H).transpose(1, 2).to(torch.bfloat16) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = lpdiag.attention(q, k, v, causal=True, policy="seed")
        return self.o_proj(y.float().transpose(1, 2).reshape(B, T, C))


class Model(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.config = HFConfig()
        self.emb = nn.Embedding(11, C)
        self.layers = nn.ModuleList(attn() for _ in range(2))
        self.head = nn.Linear(C, 11)

    def forward(self, idx):
        x = self.emb(idx)
        for a in self.layers:
            x = x + a(x)
        return self.head(x)


with tempfile.TemporaryDirectory() as d:
    for kind, attn in (("nanogpt", NanoAttn), ("hf", HFAttn)):
        model = Model(attn)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        path = os.path.join(d, f"{kind}.h5")
        # nanogpt declares the policy, hf does not: both traces must say what the op ran (seed).
        with lpdiag.Monitor(path, model, **({"policy": "seed"} if kind == "nanogpt" else {}), flush_every=2) as mon:
            check(f"{kind}: two attention layers found", mon.layers == ["layers.0", "layers.1"], str(mon.layers))
            for step in range(4):
                idx = torch.randint(0, 11, (2, T))
                loss = nn.functional.cross_entropy(model(idx).view(-1, 11), idx.view(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                mon.record(step, loss, lr=1e-2, grad_norm=1.0)
        info = subprocess.run([LPDIAG, "info", path], capture_output=True, text=True).stdout
        check(f"{kind}: 4 records", "records     4" in info, info)
        check(f"{kind}: W_Q of both layers registered", info.count("attn_q") == 2, info)
        check(f"{kind}: the policy that ran recorded", info.count("policy seed") == 2, info)
        try:
            import h5py
            with h5py.File(path, "r") as h:
                rows = [int(g["rows"][:].sum()) for g in h["attention"].values()]
            check(f"{kind}: every layer's counters recorded (rows {rows})", len(rows) == 2 and all(r > 0 for r in rows))
        except ImportError:
            print(f"skip {kind}: counters per layer (no h5py here)")

# Two Monitors at once (two models in one process), their steps interleaved: each trace holds
# only its own model's counters (rows = batch x heads x T per layer and step: 2 x 2 x 16 = 64
# for A, 3 x 2 x 16 = 96 for B), and a call with a layer no Monitor holds is reported.
with tempfile.TemporaryDirectory() as d:
    ma, mb = Model(NanoAttn), Model(HFAttn)
    pa, pb = os.path.join(d, "a.h5"), os.path.join(d, "b.h5")
    with lpdiag.Monitor(pa, ma, policy="seed") as mon_a, lpdiag.Monitor(pb, mb, policy="seed") as mon_b:
        check("two Monitors: distinct sessions", mon_a.layer_id(0) != mon_b.layer_id(0), f"{mon_a.layer_id(0)} {mon_b.layer_id(0)}")
        for step in range(3):
            for model, mon, batch in ((ma, mon_a, 2), (mb, mon_b, 3)):
                idx = torch.randint(0, 11, (batch, T))
                nn.functional.cross_entropy(model(idx).view(-1, 11), idx.view(-1)).backward()
            if step == 1:  # a layer id no Monitor holds
                q1 = torch.zeros(1, 2, 8, 16, dtype=torch.bfloat16)
                lpdiag.attention(q1, q1, q1, layer=(1 << 40))
            mon_a.record(step, 1.0)
            mon_b.record(step, 1.0)
    try:
        import h5py
        for path, want, name in ((pa, 64, "A"), (pb, 96, "B")):
            with h5py.File(path, "r") as h:
                rows = sorted({int(x) for g in h["attention"].values() for x in g["rows"][:].sum(axis=-1)})
                events = [bytes(e["kind"]).rstrip(b"\0").decode() for e in h["events"][:]]
            check(f"two Monitors: {name}'s trace holds only its own counters (rows per layer and record {rows})", rows == [want])
            if name == "A":
                check("two Monitors: the call of a layer no Monitor holds is reported (unregistered_layer event)",
                      "unregistered_layer" in events, str(events))
    except ImportError:
        print("skip two Monitors: counters per trace (no h5py here)")

# A layer whose attention lpdiag did not run is recorded as such ("external"), the other as the
# op reported it, with nothing declared.
class PlainAttn(NanoAttn):
    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        p = torch.softmax((q @ k.transpose(-1, -2)) / (C // H) ** 0.5 + torch.full((T, T), -1e9).triu(1), -1)
        return self.c_proj((p @ v).transpose(1, 2).reshape(B, T, C))


with tempfile.TemporaryDirectory() as d:
    model = Model(NanoAttn)
    model.layers[1] = PlainAttn()
    path = os.path.join(d, "mixed.h5")
    with lpdiag.Monitor(path, model) as mon:
        idx = torch.randint(0, 11, (2, T))
        nn.functional.cross_entropy(model(idx).view(-1, 11), idx.view(-1)).backward()
        mon.record(0, 1.0)
    info = subprocess.run([LPDIAG, "info", path], capture_output=True, text=True).stdout
    check("mixed model: the op's layer recorded as it ran (seed)", info.count("policy seed") == 1, info)
    check("mixed model: the layer lpdiag did not run recorded as external", info.count("policy external") == 1, info)

# The level's cadence: counters every step, full every 2nd (steps 0 and 2): only those records
# carry the O error statistics (o_err_count > 0; -1 = not measured).
with tempfile.TemporaryDirectory() as d:
    model = Model(NanoAttn)
    path = os.path.join(d, "cadence.h5")
    with lpdiag.Monitor(path, model, policy="seed", full_every=2) as mon:
        for step in range(4):
            idx = torch.randint(0, 11, (2, T))
            nn.functional.cross_entropy(model(idx).view(-1, 11), idx.view(-1)).backward()
            mon.record(step, 1.0)
    try:
        import h5py
        with h5py.File(path, "r") as h:
            n = h["attention/layer.0.attn/o_err_count"][:].max(axis=-1).tolist()
        check(f"full_every=2: O errors measured at steps 0 and 2 only (o_err_count per record {n})",
              n[0] > 0 and n[2] > 0 and n[1] < 0 and n[3] < 0)
    except ImportError:
        print("skip full_every: per-record O errors (no h5py here)")
# A capture from Python, replayed offline: mon.request_capture(layer, step) writes layer 1's inputs
# and output at step 2 beside the trace; `lpdiag replay --policy recorded --fix recorded` re-runs
# what ran there (seed, no fix) and gets the recorded output back bit for bit, so its O error
# statistics equal the recorded row's exactly.
with tempfile.TemporaryDirectory() as d:
    model = Model(NanoAttn)
    path = os.path.join(d, "cap.h5")
    with lpdiag.Monitor(path, model) as mon:
        mon.request_capture(1, 2)
        for step in range(4):
            idx = torch.randint(0, 11, (2, T))
            nn.functional.cross_entropy(model(idx).view(-1, 11), idx.view(-1)).backward()
            mon.record(step, 1.0)
    cap = os.path.join(d, "cap.capture.2.1.h5")
    check("request_capture: the capture of layer 1 at step 2 written", os.path.exists(cap), str(os.listdir(d)))
    if os.path.exists(cap):
        out = subprocess.run([LPDIAG, "replay", cap, "--policy", "recorded", "--fix", "recorded", "--json"], capture_output=True, text=True)
        try:
            j = json.loads(out.stdout)
            r, rec = j["results"][0], j["recorded"]
            check(f"replay of the recorded spec: {r['policy']} / {r['fix']}", (r["policy"], r["fix"]) == ("seed", "none"))
            check(f"replay of the recorded spec gives the recorded O (o_err_z {r['o_err_z']} vs {rec['o_err_z']})",
                  all(r[k] == rec[k] for k in ("o_err_mean", "o_err_z", "o_err_rms")))
        except (ValueError, KeyError, IndexError) as e:
            check("replay --policy recorded --fix recorded --json", False, f"{e}: {out.stdout[:300]} {out.stderr[:300]}")
    try:
        mon.request_capture(2, 0)
        check("request_capture of a layer the Monitor does not have: raises", False, "no error")
    except ValueError as e:
        check("request_capture of a layer the Monitor does not have: raises naming it", "layer must be in [0, 2)" in str(e), str(e))

try:
    lpdiag.Monitor(os.path.join(tempfile.gettempdir(), f"bad-{seed}.h5"), Model(NanoAttn), full_every=-1)
    check("full_every=-1 refused", False, "no error")
except ValueError as e:
    check("full_every=-1 refused, named", "full_every" in str(e), str(e))

x = torch.zeros(1, 2, 8, 16, dtype=torch.bfloat16)
for what, call, needle in (
        ("3-D input", lambda: lpdiag.attention(x[0], x[0], x[0]), "(B, H, N, d)"),
        ("float64", lambda: lpdiag.attention(x.double(), x.double(), x.double()), "must be bfloat16 (or float32)"),
        ("unknown policy", lambda: lpdiag.attention(x, x, x, policy="fa9"), "unknown attention policy 'fa9'"),
        ("unknown level", lambda: lpdiag.attention(x, x, x, level="all"), "level must be off, counters or full"),
        ("other scale", lambda: lpdiag.attention(x, x, x, scale=0.5), "scale 1/sqrt(d)"),
        ("shapes differ", lambda: lpdiag.attention(x, x, x[:, :, :4]), "must have the shape of q"),
        ("not a tensor", lambda: lpdiag.attention([1.0], x, x), "must be a torch.Tensor"),
        ("no attention module", lambda: lpdiag.Monitor(os.path.join(tempfile.gettempdir(), f"none-{seed}.h5"), nn.Linear(2, 2)),
         "found no attention module")):
    try:
        call()
        check(f"{what}: raises", False, "no error")
    except (ValueError, TypeError) as e:
        check(f"{what}: raises naming it", needle in str(e), str(e))
finish()
