"""Observe the attention kernel a model already runs, without changing it.

    attn = lpdiag.observed(my_attention, name="my-kernel")    # any fn(q, k, v, **kw) -> o
    with lpdiag.Monitor("run.h5", model, observe_every=50) as mon, lpdiag.observe_sdpa():
        ...                                                     # PyTorch's SDPA, whatever backend it picks

On an observed step (every `observe_every` steps of the running Monitor, and its first), each call
is measured from outside: lpdiag computes S in fp32 and exact attention in fp64 from the call's
own q, k, v, and compares the kernel's O (and, in the backward, rowsum(dO * O)) with it. The
counts and error sums land in the trace as the layer's attention signals, the layer's numerics
recorded as "external:<name>" with `observed` and the cadence. The kernel's output is returned
as it is (the same tensor) and dO reaches the kernel untouched: a hook reads it and returns
nothing. On other steps the cost is one branch.

What the observer cannot take (an attn_mask, dropout, a device or dtype it does not handle,
shapes that do not match) is skipped, counted and reported once; the call runs unchanged."""
import collections
import contextlib
import functools
import math
import warnings

import torch
import torch.nn.functional as F

from ._library import load
from .attention import current_observe, is_compiling
from .guard import current_guard, run_guarded

# Why calls were not observed (reason -> count), in this process.
skipped = collections.Counter()
_warned_no_monitor = False


def _skip(name, why):
    if why not in skipped:
        warnings.warn(f"lpdiag observer: a call of {name} was not observed: {why}; such calls run unchanged and are counted "
                      "in lpdiag.observe.skipped")
    skipped[why] += 1


def _bhnd(t, layout):
    return t.transpose(1, 2) if layout == "bnhd" else t


def observe_call(name, q, k, v, o, *, causal=False, scale=None, attn_mask=None, dropout_p=0.0, layout="bhnd"):
    """Observes one call whose output `o` the kernel computed (see the module's doc). Returns
    nothing and changes nothing; does nothing unless the running Monitor observes this step."""
    global _warned_no_monitor
    due = current_observe.get()
    if due is None:
        return
    if is_compiling():
        _skip(name, "the call is being compiled by torch.compile (observe the eager model, or leave observe_every=0)")
        return
    if isinstance(o, (tuple, list)):  # kernels that return (O, lse, ...)
        o = o[0]
    if attn_mask is not None:
        return _skip(name, "attn_mask given (the observer computes causal or full attention)")
    if dropout_p:
        return _skip(name, "dropout_p > 0 (the kernel's output is random; there is no exact output to compare)")
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v, o)):
        return _skip(name, "q, k, v or O is not a tensor")
    layer, max_rows, head_mask = due
    q4, k4, v4, o4 = (_bhnd(t.detach(), layout) for t in (q, k, v, o))
    load()
    err = torch.ops.lpdiag.observe_forward(q4, k4, v4, o4, bool(causal), float(scale or 0.0), int(layer), str(name),
                                           int(max_rows), int(head_mask))
    if err.numel() == 0 or not o.requires_grad:
        return

    def read_grad(g):
        torch.ops.lpdiag.observe_backward(_bhnd(g.detach(), layout), err, int(layer), int(head_mask))
        # returns None: the gradient goes on as it came
    o.register_hook(read_grad)


def observed(fn, name=None, *, layout="bhnd"):
    """Wraps an attention callable fn(q, k, v, **kw) -> o (or (o, ...)) so the running Monitor
    observes it. q, k, v, o: (B, H, N, d) (layout="bnhd": (B, N, H, d), as flash-attn takes
    them); k and v may have fewer heads (grouped-query attention). Causal from `is_causal=` or
    `causal=`, scale from `scale=` or `softmax_scale=` (default 1/sqrt(d)); a call with
    `attn_mask` or `dropout_p > 0` is not observed. Works on torch 1.13 too."""
    if not callable(fn):
        raise TypeError(f"lpdiag.observed: fn must be callable, got {type(fn).__name__}")
    if layout not in ("bhnd", "bnhd"):
        raise ValueError(f"lpdiag.observed: layout must be 'bhnd' or 'bnhd', got {layout!r}")
    label = str(name or getattr(fn, "__name__", "kernel"))

    @functools.wraps(fn)
    def wrapper(q, k, v, *args, **kw):
        # A layer the Monitor's guard switched runs the kernel in fp32 (lpdiag.guard).
        o = run_guarded(fn, q, k, v, *args, **kw) if current_guard.get() else fn(q, k, v, *args, **kw)
        if current_observe.get() is not None:
            causal = bool(kw.get("is_causal", kw.get("causal", False)))
            scale = kw.get("scale", kw.get("softmax_scale"))
            observe_call(label, q, k, v, o, causal=causal, scale=scale, attn_mask=kw.get("attn_mask"),
                         dropout_p=kw.get("dropout_p", 0.0), layout=layout)
        return o
    return wrapper


_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def sdpa_backend(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The backend PyTorch picks for this scaled_dot_product_attention call: "cudnn", "flash",
    "efficient", "math" (or "sdpa" where this torch does not say)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    backends = getattr(getattr(torch.nn, "attention", None), "SDPBackend", None)
    if choose is None or backends is None:
        return "sdpa"
    try:
        try:
            c = int(choose(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa))
        except TypeError:
            c = int(choose(q, k, v, attn_mask, dropout_p, is_causal, scale=scale))
    except Exception:  # a call PyTorch itself will refuse: it says why when it runs
        return "sdpa"
    for n, member in getattr(backends, "__members__", {}).items():
        value = getattr(member, "value", member)
        if int(value) == c:
            n = n.lower()
            return {"flash_attention": "flash", "efficient_attention": "efficient", "cudnn_attention": "cudnn"}.get(n, n)
    return "sdpa"


class SdpaObservation:
    """What observe_sdpa yields: calls observed, and the backends they ran on (name -> count)."""

    def __init__(self):
        self.calls = 0
        self.backends = collections.Counter()


_open_blocks = []  # the observe_sdpa blocks open now (innermost last)


if hasattr(torch.overrides, "TorchFunctionMode"):
    class ObserveSdpaMode(torch.overrides.TorchFunctionMode):
        """Observes the scaled_dot_product_attention calls made while it is entered. The Monitor
        enters it around an attention module's forward on observed steps only: on other steps
        no mode is active and PyTorch's dispatch is untouched."""

        def __init__(self, seen=None):
            super().__init__()
            self.seen = seen if seen is not None else SdpaObservation()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func is getattr(F, "scaled_dot_product_attention", None) and current_observe.get() is not None:
                b = dict(zip(_PARAMS, args))
                b.update(kwargs)
                q, k, v = b.get("query"), b.get("key"), b.get("value")
                backend = sdpa_backend(q, k, v, b.get("attn_mask"), b.get("dropout_p", 0.0), bool(b.get("is_causal", False)),
                                       b.get("scale"), bool(b.get("enable_gqa", False)))
                self.seen.calls += 1
                self.seen.backends[backend] += 1
                observe_call(backend, q, k, v, out, causal=bool(b.get("is_causal", False)), scale=b.get("scale"),
                             attn_mask=b.get("attn_mask"), dropout_p=b.get("dropout_p", 0.0))
            return out
else:  # torch < 1.13
    ObserveSdpaMode = None


def sdpa_mode_for_step():
    """The mode the Monitor enters around an attention module on an observed step, when an
    observe_sdpa block is open; else None."""
    return ObserveSdpaMode(_open_blocks[-1]) if _open_blocks and ObserveSdpaMode is not None else None


@contextlib.contextmanager
def observe_sdpa():
    """Observes every torch.nn.functional.scaled_dot_product_attention call that the running
    Monitor's attention modules make on its observed steps, with whatever backend PyTorch picks;
    the layer's numerics are recorded as "external:<backend>". Nothing is rerouted, and on steps
    that are not observed nothing intercepts PyTorch at all. Needs torch >= 2.0. Yields the
    calls seen and their backends (SdpaObservation)."""
    if not hasattr(F, "scaled_dot_product_attention") or ObserveSdpaMode is None:
        raise RuntimeError(f"lpdiag.observe_sdpa needs torch >= 2.0 (this is torch {torch.__version__}, which has no "
                           "scaled_dot_product_attention); wrap the model's attention function with lpdiag.observed instead")
    seen = SdpaObservation()
    _open_blocks.append(seen)
    try:
        yield seen
    finally:
        _open_blocks.remove(seen)


def head_mask(heads, n_head):
    """The op's head bitmask for a list of heads (None: all)."""
    if heads is None:
        return 0
    mask = 0
    for h in heads:
        h = int(h)
        if not 0 <= h < n_head:
            raise ValueError(f"lpdiag.Monitor: observe_heads must be in [0, {n_head}), got {h}")
        if h >= 63:
            raise ValueError("lpdiag.Monitor: observe_heads can name heads 0 to 62 (a bitmask); leave it None to observe all")
        mask |= 1 << h
    return mask


def _mean_z(n, s, ss):
    """z of a mean error from its count, sum and sum of squares (as lpdiag's analyzers compute it)."""
    if n < 2 or not math.isfinite(s) or not math.isfinite(ss):
        return float("nan")
    mean = s / n
    var = max(0.0, ss - s * mean) / (n - 1)
    if var == 0:
        return 0.0 if mean == 0 else math.copysign(float("inf"), mean)
    return mean / math.sqrt(var / n)


def measure(q, k, v, o, dout=None, *, causal=False, scale=None):
    """What the observer sees in one call, every row observed: q, k, v the kernel's inputs and o
    its output ((B, H, N, d); k, v may have fewer heads), dout the gradient at o (optional).
    Returns {"heads": {field: [per head]}, "o_z": z of the mean O error, "delta_z": z of the mean
    delta error (None without dout), "repeated_max_rows", "rows"} over all heads. For a kernel
    author's own tests; a training run uses lpdiag.observed under a Monitor instead."""
    load()
    none = torch.empty(0)
    t = torch.ops.lpdiag.observe_stats(q.detach(), k.detach(), v.detach(), o.detach(),
                                       none if dout is None else dout.detach(), bool(causal), float(scale or 0.0))
    cols = torch.ops.lpdiag.observe_stat_columns().split()
    heads = {c: t[:, i].tolist() for i, c in enumerate(cols)}

    def total(c):
        return float(sum(heads[c]))
    out = {"heads": heads, "rows": int(total("rows")), "repeated_max_rows": int(total("repeated_max_rows")),
           "o_z": _mean_z(total("o_err_count"), total("o_err_sum"), total("o_err_sumsq")), "delta_z": None}
    if dout is not None:
        out["delta_z"] = _mean_z(total("delta_err_count"), total("delta_err_sum"), total("delta_err_sumsq"))
    return out
