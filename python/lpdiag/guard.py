"""The guard on attention lpdiag did not write. When the online alarm names a layer and the
Monitor was given `guard=`, that layer's later attention calls run under safe numerics:

- calls of lpdiag's op switch in the op itself (the guard's policy or fix; nothing to do here);
- a kernel wrapped with lpdiag.observed, and PyTorch's scaled_dot_product_attention called inside
  the layer's module, run on fp32 copies of q, k, v, the output cast back to the input's dtype. An
  external kernel has no fix to switch, so every guard is fp32 attention there.

The module hooks of the Monitor set `current_guard` for a guarded layer's forward; nothing else
is touched, and other layers run as they did."""
import contextvars

import torch
import torch.nn.functional as F

# "fp32" while a guarded layer's forward runs; None otherwise.
current_guard = contextvars.ContextVar("lpdiag_current_guard", default=None)

GUARDS = ("fp32", "sr", "paper")


def check_guard(guard):
    if guard is not None and guard not in GUARDS:
        raise ValueError(f"lpdiag.Monitor: guard must be one of {', '.join(GUARDS)} or None, got {guard!r}")
    return guard


def _to_fp32(t):
    return t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def run_guarded(fn, q, k, v, *args, **kw):
    """fn on fp32 copies of q, k, v (and of a float attn_mask); its output (or first output) cast
    back to q's dtype."""
    if "attn_mask" in kw:
        kw = dict(kw, attn_mask=_to_fp32(kw["attn_mask"]))
    out = fn(_to_fp32(q), _to_fp32(k), _to_fp32(v), *args, **kw)
    if isinstance(out, tuple):
        return (out[0].to(q.dtype),) + out[1:]
    return out.to(q.dtype)


if hasattr(torch.overrides, "TorchFunctionMode"):
    class GuardSdpaMode(torch.overrides.TorchFunctionMode):
        """Runs the scaled_dot_product_attention calls made inside a guarded layer in fp32."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is getattr(F, "scaled_dot_product_attention", None):
                q, k, v, *rest = args
                return run_guarded(func, q, k, v, *rest, **kwargs)
            return func(*args, **kwargs)
else:  # torch < 1.13: no SDPA to guard
    GuardSdpaMode = None
