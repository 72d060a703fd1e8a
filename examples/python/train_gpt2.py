"""nanoGPT-style character-level GPT-2 training in plain PyTorch, with lpdiag's hooks.

The lines marked `# lpdiag` are all it takes (load the library, route attention through the
op, create the Monitor with its role map and the activations to watch, record each step, close).

    python3 examples/python/train_gpt2.py --lib build/hooks/liblpdiag_torch.so --out out/py.h5
"""
import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--lib", default="build/hooks/liblpdiag_torch.so")
p.add_argument("--out", default="out/py.h5")
p.add_argument("--steps", type=int, default=100)
p.add_argument("--n-layer", type=int, default=2)
p.add_argument("--n-head", type=int, default=2)
p.add_argument("--n-embd", type=int, default=64)
p.add_argument("--block", type=int, default=64)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
p.add_argument("--device", default="cpu")
p.add_argument("--policy", default="fa2", help="attention numerics: fa2, seed, seed:tile=N (CUDA: fa2 and seed kernels; CPU: every policy)")
p.add_argument("--fix", default="none", help="none, paper, safe, sr")
args = p.parse_args()
torch.manual_seed(1337)
torch.ops.load_library(args.lib)  # lpdiag

text = open(args.text).read() if os.path.exists(args.text) else "the kernel rounds the scores. " * 2000
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)


class Block(nn.Module):
    def __init__(self, layer):
        super().__init__()
        C = args.n_embd
        self.layer, self.ln1, self.ln2 = layer, nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, args.n_head, C // args.n_head).transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))
        y = torch.ops.lpdiag.attention(q, k, v, True, args.policy, args.fix, "counters", self.layer)  # lpdiag
        y = y.to(x.dtype).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(len(chars), args.n_embd), nn.Embedding(args.block, args.n_embd)
        self.blocks = nn.ModuleList(Block(l) for l in range(args.n_layer))
        self.ln_f, self.lm_head = nn.LayerNorm(args.n_embd), nn.Linear(args.n_embd, len(chars), bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


model = GPT().to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
rank, world = (torch.distributed.get_rank(), torch.distributed.get_world_size()) if torch.distributed.is_initialized() else (0, 1)
mon = torch.classes.lpdiag.Monitor(args.out, args.n_layer, args.n_head, args.n_embd // args.n_head, '{"model":"nanogpt"}', rank, world)  # lpdiag
for l, b in enumerate(model.blocks):  # lpdiag: role map, GPT-2's fused c_attn
    mon.add_fused_qkv(f"h.{l}.attn", l, b.c_attn.weight)  # lpdiag
    mon.set_attention_numerics(l, args.policy, args.fix)  # lpdiag: what the op runs in this layer
    mon.add_activation(f"h.{l}.out", l)  # lpdiag: each block's output (max |x|, rms)
    b.register_forward_hook(lambda m, i, o, name=f"h.{l}.out": mon.observe_activation(name, o))  # lpdiag
first = None
try:  # lpdiag: close the trace on KeyboardInterrupt or any exit from the loop
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 20) * (0.55 + 0.45 * math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(len(data) - args.block - 1, (args.batch,))
        x = torch.stack([data[i:i + args.block] for i in ix]).to(args.device)
        y = torch.stack([data[i + 1:i + args.block + 1] for i in ix]).to(args.device)
        loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        first = first if first is not None else loss.item()
        if not mon.record(step, loss.detach(), lr, gn):  # lpdiag: tensors may stay on the device
            break
        if step % 25 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
finally:
    mon.close()  # lpdiag
print(f"loss {first:.4f} -> {loss.item():.4f}; trace {mon.trace_path()}")
assert loss.item() < first, "loss did not fall"
