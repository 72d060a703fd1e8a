"""`lpdiag.patch_sdpa(**spec)`: PyTorch's scaled_dot_product_attention through lpdiag, no model edit.

    with lpdiag.Monitor("run.h5", model) as mon, lpdiag.patch_sdpa(policy="fa2", level="counters"):
        loss = model(x) ...                     # nanoGPT / Hugging Face models call F.scaled_dot_product_attention

Inside the block, every call of torch.nn.functional.scaled_dot_product_attention that lpdiag can
run (q, k, v of one (B, H, N, d) shape, no attn_mask, no dropout, the default scale, bfloat16 on
CUDA with d 64 or 128, bfloat16 or float32 on the CPU) goes to `lpdiag.attention` with `spec`
(policy, fix, level; the layer comes from the running Monitor). Any other call falls through to
PyTorch unchanged; the reasons are counted (`mode.fell_through`) and reported once, when the
block ends. Opt-in: nothing is patched on import, and leaving the block restores PyTorch's
function (a TorchFunctionMode, not a monkey patch). Needs torch >= 2.0 (1.13 has no SDPA)."""
import collections
import contextlib
import math
import warnings

import torch
import torch.nn.functional as F

from .attention import attention

_SPEC_KEYS = ("policy", "fix", "level")


def unsupported_reason(q, k, v, attn_mask=None, dropout_p=0.0, scale=None, enable_gqa=False):
    """Why lpdiag cannot run this SDPA call (a short phrase), or None when it can."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return "non-tensor q, k or v"
    if attn_mask is not None:
        return "attn_mask given"
    if dropout_p:
        return "dropout_p > 0"
    if enable_gqa:
        return "enable_gqa"
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        return "q, k, v not of one (B, H, N, d) shape"
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        return "q, k, v of different dtypes or devices"
    d = q.shape[-1]
    if scale is not None and not math.isclose(float(scale), 1.0 / math.sqrt(d), rel_tol=1e-6):
        return "a scale other than 1/sqrt(d)"
    if q.device.type == "cuda":
        if q.dtype != torch.bfloat16:
            return f"{str(q.dtype).replace('torch.', '')} on CUDA"
        if d not in (64, 128):
            return f"head dim {d} on CUDA"
    elif q.device.type == "cpu":
        if q.dtype not in (torch.bfloat16, torch.float32):
            return f"{str(q.dtype).replace('torch.', '')} on the CPU"
    else:
        return f"device {q.device.type}"
    return None


_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _bind(args, kwargs):
    """The SDPA call's arguments by name (positional ones as PyTorch's signature orders them)."""
    b = dict(zip(_PARAMS, args))
    b.update(kwargs)
    return b


if hasattr(torch.overrides, "TorchFunctionMode"):
    class SdpaMode(torch.overrides.TorchFunctionMode):
        """The mode patch_sdpa enters: routed (calls lpdiag ran), fell_through (reason -> count)."""

        def __init__(self, spec):
            super().__init__()
            self.spec = spec
            self.routed = 0
            self.fell_through = collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is getattr(F, "scaled_dot_product_attention", None):
                b = _bind(args, kwargs)
                why = unsupported_reason(b.get("query"), b.get("key"), b.get("value"), b.get("attn_mask"), b.get("dropout_p", 0.0),
                                         b.get("scale"), b.get("enable_gqa", False))
                if why is None:
                    self.routed += 1
                    return attention(b["query"], b["key"], b["value"], causal=bool(b.get("is_causal", False)), **self.spec)
                self.fell_through[why] += 1
            return func(*args, **kwargs)
else:  # torch < 1.13
    SdpaMode = None


@contextlib.contextmanager
def patch_sdpa(**spec):
    """See the module's doc. spec: policy, fix, level (as lpdiag.attention takes them). Yields the mode."""
    bad = sorted(set(spec) - set(_SPEC_KEYS))
    if bad:
        raise TypeError(f"lpdiag.patch_sdpa: unknown argument(s) {', '.join(bad)}; it takes {', '.join(_SPEC_KEYS)}")
    if not hasattr(F, "scaled_dot_product_attention") or SdpaMode is None:
        raise RuntimeError(f"lpdiag.patch_sdpa needs torch >= 2.0 (this is torch {torch.__version__}, which has no "
                           "torch.nn.functional.scaled_dot_product_attention); call lpdiag.attention from the model instead")
    mode = SdpaMode(dict(spec))
    try:
        with mode:
            yield mode
    finally:
        if mode.fell_through:
            total = mode.routed + sum(mode.fell_through.values())
            reasons = ", ".join(f"{why} ({n})" for why, n in mode.fell_through.most_common())
            warnings.warn(f"lpdiag.patch_sdpa: {sum(mode.fell_through.values())} of {total} scaled_dot_product_attention calls "
                          f"ran in PyTorch, not lpdiag: {reasons}")
