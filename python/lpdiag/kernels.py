"""The attention kernels `python3 -m lpdiag probe --kernel K` can put to the test.

A kernel is a callable fn(q, k, v, causal) -> O on bf16 tensors of shape (B, H, N, d) on one
device. `resolve(name)` gives (callable, why_not): why_not is None when it can run here, else the
reason it cannot (reported as skipped, never as passed)."""
import importlib

import torch
import torch.nn.functional as F

from ._library import load
from .attention import spec_json

SDPA_BACKENDS = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-efficient": "EFFICIENT_ATTENTION",
                 "sdpa-math": "MATH"}
NAMES = ["lpdiag", *SDPA_BACKENDS, "flex"]


def _sdpa(backend):
    if not hasattr(F, "scaled_dot_product_attention"):
        return None, f"torch {torch.__version__} has no scaled_dot_product_attention (needs torch >= 2.0)"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None, f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel to pick a backend (needs >= 2.3)"
    if not hasattr(SDPBackend, backend):
        return None, f"torch {torch.__version__} has no SDPA backend {backend}"
    chosen = getattr(SDPBackend, backend)

    def run(q, k, v, causal):
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run, None


def _flex():
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None, f"torch {torch.__version__} has no FlexAttention (needs >= 2.5)"
    compiled = torch.compile(flex_attention)

    def run(q, k, v, causal):
        if q.device.type != "cuda":
            raise RuntimeError("FlexAttention is probed on CUDA only")
        mask = None
        if causal:
            mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, q.shape[2], k.shape[2], device=q.device)
        return compiled(q, k, v, block_mask=mask)

    return run, None


def _lpdiag(fix):
    load()

    def run(q, k, v, causal):
        return torch.ops.lpdiag.attention(q, k, v, spec_json("fa2", fix, "counters", causal), -1)

    return run, None


def resolve(name, fix="none"):
    if name == "lpdiag":
        return _lpdiag(fix)
    if name in SDPA_BACKENDS:
        return _sdpa(SDPA_BACKENDS[name])
    if name == "flex":
        return _flex()
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"--kernel {name}: cannot import {attr} from {module}: {e}") from None
        return fn, None
    raise ValueError(f"unknown kernel '{name}'; expected one of {', '.join(NAMES)} or pkg.module:function")
