"""lpdiag.patch_sdpa and the Hugging Face "lpdiag" attention implementation.

Everywhere: the fall-through rules (lpdiag.sdpa.unsupported_reason) on each kind of call lpdiag
cannot run, and unknown spec arguments refused. With torch >= 2.0 (the GPU machine's 2.11; on
torch 1.13 this part is skipped, visibly, and patch_sdpa must raise saying why): a nanoGPT-style
model that calls F.scaled_dot_product_attention, unchanged, trains 3 steps inside
`with lpdiag.Monitor(...)` and `lpdiag.patch_sdpa(...)`: every call routed (layers x steps), the
trace holds both layers' counters, O equal to PyTorch's SDPA within bf16 rounding (relative L2
<= 2e-2: bf16 inputs and outputs, a bf16 ulp is 2^-8 = 3.9e-3 relative per element), a call with
an attn_mask runs PyTorch's SDPA and is reported, and outside the block nothing is routed.
Where transformers is installed: a 2-layer GPT-2 with attn_implementation="lpdiag" runs forward
and backward through lpdiag (calls routed), its logits within 2e-2 relative L2 of the sdpa
implementation's. On CPU and, when present, CUDA (bf16). Seed printed."""
import copy
import os
import sys
import tempfile
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import lpdiag
from check_helpers import check, finish
from lpdiag.sdpa import unsupported_reason

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import test_seed  # noqa: E402
seed = test_seed.seed("sdpa_patch", 21104)
print(f"seed {seed}; torch {torch.__version__}")
torch.manual_seed(seed)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


q = torch.randn(1, 2, 8, 64)
for what, args, kw, want in (
        ("supported fp32 CPU call", (q, q, q), {}, None),
        ("attn_mask", (q, q, q), {"attn_mask": torch.ones(8, 8, dtype=torch.bool)}, "attn_mask given"),
        ("dropout", (q, q, q), {"dropout_p": 0.1}, "dropout_p > 0"),
        ("fp16", (q.half(), q.half(), q.half()), {}, "float16 on the CPU"),
        ("other scale", (q, q, q), {"scale": 0.5}, "a scale other than 1/sqrt(d)"),
        ("cross lengths", (q, q[:, :, :4], q[:, :, :4]), {}, "q, k, v not of one (B, H, N, d) shape"),
        ("gqa", (q, q, q), {"enable_gqa": True}, "enable_gqa")):
    got = unsupported_reason(*args, **kw)
    check(f"fall-through rule: {what} -> {want}", got == want, repr(got))
try:
    with lpdiag.patch_sdpa(levle="full"):
        pass
    check("unknown spec argument refused", False, "no error")
except TypeError as e:
    check("unknown spec argument refused, named", "levle" in str(e), str(e))

if not hasattr(F, "scaled_dot_product_attention"):
    try:
        with lpdiag.patch_sdpa():
            pass
        check("torch < 2.0: patch_sdpa raises", False, "no error")
    except RuntimeError as e:
        check("torch < 2.0: patch_sdpa raises saying why", "needs torch >= 2.0" in str(e), str(e))
    print("SKIP: routing SDPA calls and the transformers implementation need torch >= 2.0 (this is "
          f"{torch.__version__}); the GPU machine's torch 2.11 runs them")
    finish()

C, H, T = 128, 2, 32


class Block(nn.Module):  # nanoGPT's attention, unchanged: F.scaled_dot_product_attention
    def __init__(self):
        super().__init__()
        self.n_head = H
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B = x.shape[0]
        qq, kk, vv = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        y = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
        return x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.blocks, self.head = nn.Embedding(11, C), nn.ModuleList(Block() for _ in range(2)), nn.Linear(C, 11)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


devices = [("cpu", torch.float32)] + ([("cuda", torch.bfloat16)] if torch.cuda.is_available() else [])
with tempfile.TemporaryDirectory() as d:
    for dev, dtype in devices:
        model = Model().to(dev, dtype)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        path = os.path.join(d, f"sdpa-{dev}.h5")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with lpdiag.Monitor(path, model, flush_every=1) as mon, lpdiag.patch_sdpa(level="counters") as mode:
                for step in range(3):
                    idx = torch.randint(0, 11, (2, T), device=dev)
                    loss = F.cross_entropy(model(idx).float().view(-1, 11), idx.view(-1))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    mon.record(step, loss, lr=1e-3, grad_norm=1.0)
                x = torch.randn(2, H, T, 64, device=dev, dtype=dtype)
                mine = F.scaled_dot_product_attention(x, x * 0.5, x.flip(2), is_causal=True)
                masked = F.scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(T, T, dtype=torch.bool, device=dev))
            theirs = F.scaled_dot_product_attention(x, x * 0.5, x.flip(2), is_causal=True)
        check(f"{dev}: every model call routed (2 layers x 3 steps + 1)", mode.routed == 7, f"routed {mode.routed}")
        check(f"{dev}: O within 2e-2 of PyTorch's SDPA", rel(mine, theirs) <= 2e-2, f"{rel(mine, theirs):.3g}")
        check(f"{dev}: a masked call ran PyTorch's SDPA and was counted", mode.fell_through == {"attn_mask given": 1}
              and torch.isfinite(masked).all().item(), str(dict(mode.fell_through)))
        msgs = [str(w.message) for w in caught if "patch_sdpa" in str(w.message)]
        check(f"{dev}: the fall-through reported once, with its reason",
              len(msgs) == 1 and "attn_mask given (1)" in msgs[0], str(msgs))
        check(f"{dev}: trace written", os.path.getsize(path) > 0)
        try:
            import h5py
            with h5py.File(path, "r") as h:
                rows = [int(g["rows"][:].sum()) for g in h["attention"].values()]
            check(f"{dev}: both layers' counters in the trace (rows {rows})", len(rows) == 2 and all(r > 0 for r in rows))
        except ImportError:
            print(f"skip {dev}: counters per layer (no h5py here)")

try:
    import transformers
except ImportError:
    transformers = None
if transformers is None:
    print("SKIP: transformers is not installed: the Hugging Face attention implementation is not tested here")
else:
    check("transformers: 'lpdiag' registered", lpdiag.register_transformers(level="counters"))
    from lpdiag import hf
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=128, n_positions=64, vocab_size=50, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    for dev, dtype in devices:
        torch.manual_seed(seed)
        # Each model its own config: the implementation is read from the config at every call.
        ours = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(cfg), attn_implementation="lpdiag").to(dev, dtype)
        ref = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(cfg), attn_implementation="sdpa").to(dev, dtype)
        ref.load_state_dict(ours.state_dict())
        idx = torch.randint(0, 50, (2, 32), device=dev)
        before = hf.routed
        out = ours(idx, labels=idx)
        out.loss.backward()
        with torch.no_grad():
            r = ref(idx).logits
        check(f"transformers {dev}: attention calls routed to lpdiag", hf.routed - before == 2,
              f"routed {hf.routed - before}, fell through {dict(hf.fell_through)}")
        check(f"transformers {dev}: logits within 2e-2 of the sdpa implementation's", rel(out.logits, r) <= 2e-2,
              f"{rel(out.logits, r):.3g}")
        check(f"transformers {dev}: gradients finite", all(torch.isfinite(p.grad).all().item() for p in ours.parameters()
                                                            if p.grad is not None))
finish()
