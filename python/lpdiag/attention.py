"""`lpdiag.attention`: the op with keyword arguments and errors that say what is wrong.

    y = lpdiag.attention(q, k, v, causal=True)                   # fa2 numerics, counters
    y = lpdiag.attention(q, k, v, causal=True, policy="seed:tile=512", fix="paper", level="full")

q, k, v: (B, H, N, d) tensors of one dtype and device. CUDA: bfloat16, d 64 or 128, policies
fa2 and seed (lpdiag's kernels). CPU: bfloat16 or float32, any d, every policy (the emulation).
`layer`: the attention layer the counters belong to; None takes the layer the active
lpdiag.Monitor is running (it numbers the attention modules it found), and without one the
call's counters go nowhere (said once)."""
import contextvars
import math
import warnings

import torch

from ._library import load

POLICIES = ("fa2", "fa2-seq", "seed", "fp32", "fp8-p", "fp8-p:e4m3", "fp8-p:e5m2")
CUDA_POLICIES = ("fa2", "seed")
LEVELS = ("off", "counters", "full")

# The layer whose forward is running, set by lpdiag.Monitor's module hooks.
current_layer = contextvars.ContextVar("lpdiag_current_layer", default=None)
_warned_no_layer = False


def _policy_name(policy):
    return policy.split(":tile=")[0]


def check_arguments(q, k, v, policy, fix, level, scale):
    """Raises ValueError / TypeError naming the first argument the op cannot take."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"lpdiag.attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"lpdiag.attention: {name} must be (B, H, N, d), got shape {tuple(t.shape)}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"lpdiag.attention: q, k, v must have one shape (self-attention, no GQA), got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"lpdiag.attention: q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"lpdiag.attention: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"lpdiag.attention: tensors on {q.device} are not supported (cpu or cuda)")
    if level not in LEVELS:
        raise ValueError(f"lpdiag.attention: level must be one of {', '.join(LEVELS)}, got {level!r}")
    if not isinstance(policy, str) or _policy_name(policy) not in POLICIES:
        raise ValueError(f"lpdiag.attention: policy must be one of {', '.join(POLICIES)} (seed also as 'seed:tile=N'), got {policy!r}")
    if not isinstance(fix, str):
        raise TypeError(f"lpdiag.attention: fix must be a string such as 'none', 'paper', 'safe', 'sr:seed=7', got {fix!r}")
    if q.device.type == "cuda":
        if q.dtype != torch.bfloat16:
            raise TypeError(f"lpdiag.attention: on CUDA q, k, v must be bfloat16, got {q.dtype} (float32 runs on the CPU only)")
        if q.shape[-1] not in (64, 128):
            raise ValueError(f"lpdiag.attention: the CUDA kernels take head dim 64 or 128, got {q.shape[-1]}")
        if _policy_name(policy) not in CUDA_POLICIES:
            raise ValueError(f"lpdiag.attention: policy {policy!r} runs on the CPU only; the CUDA kernels implement fa2 and seed")
    elif q.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"lpdiag.attention: q, k, v must be bfloat16 or float32 (values exact in bf16), got {q.dtype}")
    if scale is not None and not math.isclose(float(scale), 1.0 / math.sqrt(q.shape[-1]), rel_tol=1e-6):
        raise ValueError(f"lpdiag.attention: the op uses scale 1/sqrt(d) = {1.0 / math.sqrt(q.shape[-1]):.6g}; got scale={scale}")


def attention(q, k, v, *, causal=False, scale=None, policy="fa2", fix="none", level="counters", layer=None):
    """Attention through lpdiag's op (see the module's doc). Returns O in q's dtype."""
    global _warned_no_layer
    check_arguments(q, k, v, policy, fix, level, scale)
    load()
    if layer is None:
        layer = current_layer.get()
    if layer is None:
        if level != "off" and not _warned_no_layer:
            warnings.warn("lpdiag.attention: no layer given and no lpdiag.Monitor running this module; the counters of such "
                          "calls are not recorded (pass layer=, or run the model inside `with lpdiag.Monitor(...)`)")
            _warned_no_layer = True
        layer = -1
    return torch.ops.lpdiag.attention(q, k, v, bool(causal), policy, fix, level, int(layer))
