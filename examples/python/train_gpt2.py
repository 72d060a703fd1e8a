"""nanoGPT-style character-level GPT-2 training in plain PyTorch, with lpdiag.

The lines marked `# lpdiag` are all it takes: attention through `lpdiag.attention`, the training
loop inside `with lpdiag.Monitor(...)`, one `mon.record` per step. The Monitor finds the blocks'
fused `c_attn` weights itself and numbers the layers; under torchrun it writes one trace per rank
(OUT.rank<k>.h5), which `lpdiag analyze OUT.rank*.h5` reads as one run.

    PYTHONPATH=python python3 examples/python/train_gpt2.py --out out/py.h5
    PYTHONPATH=python torchrun --nproc_per_node=2 examples/python/train_gpt2.py --out out/ddp.h5   # DDP, gloo on CPUs
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import lpdiag  # lpdiag
except ImportError:  # run from a source checkout without PYTHONPATH: the package beside the examples
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import lpdiag

p = argparse.ArgumentParser()
p.add_argument("--lib", default=None, help="liblpdiag_torch.so (default: $LPDIAG_TORCH_LIBRARY, the package's copy, the build tree)")
p.add_argument("--out", default="out/py.h5")
p.add_argument("--overwrite", action="store_true", help="replace an existing trace at --out")
p.add_argument("--steps", type=int, default=100)
p.add_argument("--n-layer", type=int, default=2)
p.add_argument("--n-head", type=int, default=2)
p.add_argument("--n-embd", type=int, default=64)
p.add_argument("--block", type=int, default=64)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
p.add_argument("--device", default="cpu")
p.add_argument("--policy", default="fa2", help="attention numerics: fa2, seed, seed-mma, NAME:tile=N, fp32 (CUDA: lpdiag's kernels; CPU: every policy)")
p.add_argument("--fix", default="none", help="none, paper, safe, sr")
args = p.parse_args()
lpdiag.load_library(args.lib)  # lpdiag (only to take --lib; lpdiag finds its library otherwise)

distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:  # torchrun: gloo on CPUs, nccl on GPUs
    torch.distributed.init_process_group("nccl" if args.device == "cuda" else "gloo")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
rank = torch.distributed.get_rank() if distributed else 0
torch.manual_seed(1337)  # the same initial weights on every rank

text = open(args.text).read() if os.path.exists(args.text) else "the kernel rounds the scores. " * 2000
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        C = args.n_embd
        self.n_head, self.ln1, self.ln2 = args.n_head, nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))
        y = lpdiag.attention(q, k, v, causal=True, policy=args.policy, fix=args.fix)  # lpdiag
        y = y.to(x.dtype).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(len(chars), args.n_embd), nn.Embedding(args.block, args.n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(args.n_layer))
        self.ln_f, self.lm_head = nn.LayerNorm(args.n_embd), nn.Linear(args.n_embd, len(chars), bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


model = GPT().to(args.device)
blocks = model.blocks
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
first = loss = None
with lpdiag.Monitor(args.out, model, overwrite=args.overwrite, policy=args.policy, fix=args.fix, run_config={"model": "nanogpt", "lr": args.lr},  # lpdiag
                    activations={f"h.{l}.out": b for l, b in enumerate(blocks)}) as mon:  # lpdiag: each block's max |x|, rms
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 20) * (0.55 + 0.45 * math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(len(data) - args.block - 1, (args.batch,), generator=gen)
        x = torch.stack([data[i:i + args.block] for i in ix]).to(args.device)
        y = torch.stack([data[i + 1:i + args.block + 1] for i in ix]).to(args.device)
        loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        first = first if first is not None else loss.item()
        if not mon.record(step, loss, lr=lr, grad_norm=gn):  # lpdiag: tensors may stay on the device
            break
        if step % 25 == 0 and rank == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
print(f"rank {rank}: loss {first:.4f} -> {loss.item():.4f}; trace {mon.trace_path}")
if distributed:
    torch.distributed.destroy_process_group()
assert loss.item() < first, "loss did not fall"
