"""The toy model the Python observer and guard tests train: embedding, two attention blocks whose
attention is a callable fn(q, k, v, is_causal=True) on (B, H, T, C/H) bf16 tensors, a head.
Sizes: width C, H heads, T tokens, vocabulary V. Seeded at construction (the caller's seed)."""
import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, fn, C, H, T):
        super().__init__()
        self.fn, self.n_head, self.C, self.T = fn, H, C, T
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B, C, H, T = x.shape[0], self.C, self.n_head, self.T
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2).to(torch.bfloat16) for t in self.c_attn(x).split(C, 2))
        y = self.fn(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).float().reshape(B, T, C))


class Model(nn.Module):
    def __init__(self, fn, seed, C, H, T, V, attn=Attn):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(V, C)
        self.layers = nn.ModuleList(attn(fn, C, H, T) for _ in range(2))
        self.head = nn.Linear(C, V)

    def forward(self, idx):
        x = self.emb(idx)
        for a in self.layers:
            x = x + a(x)
        return self.head(x)
