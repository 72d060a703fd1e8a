"""Fake (meta) implementations of lpdiag's ops, so torch.compile and torch.library.opcheck can
trace them (torch >= 2.1; nothing is registered on older torch). They give each output's shape,
dtype, device and strides exactly as the real kernels do (hooks/src/attention_op.cpp):
 - attention / attention_fwd's O: on CUDA in q's layout ((B, N, H, d) storage when q is such a
   view), on the CPU contiguous; L: (B, H, N) float32 on CUDA, size 0 on the CPU (whose backward
   recomputes); the residual: q's shape in float32 at level "full" (the spec's) on CUDA, else size 0;
 - attention_bwd's dQ, dK, dV: as O, each in its input's layout."""
import json

import torch

_registered = False


def _like(t):
    if t.device.type == "cuda" and t.shape[1] > 1 and t.shape[2] > 1 and t.stride(1) < t.stride(2):
        b, h, n, d = t.shape
        return t.new_empty((b, n, h, d)).transpose(1, 2)
    return t.new_empty(t.shape)


def _fwd(q, k, v, spec, layer_index):
    f32 = torch.float32
    level = json.loads(spec).get("level", "counters")
    if q.device.type == "cuda":
        lse = q.new_empty(q.shape[:3], dtype=f32)
        residual = q.new_empty(q.shape, dtype=f32) if level == "full" else q.new_empty((0,), dtype=f32)
    else:  # two tensors, as the kernel returns (a fake must not alias what the real op does not)
        lse, residual = q.new_empty((0,), dtype=f32), q.new_empty((0,), dtype=f32)
    return _like(q), lse, residual


def _bwd(dout, q, k, v, o, lse, residual, spec, layer_index):
    return _like(q), _like(k), _like(v)


def _attention(q, k, v, spec, layer_index=-1):
    return _like(q)


def register():
    """Registers the fakes once (after the op library is loaded). Returns whether it could."""
    global _registered
    if _registered:
        return True
    reg = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
    if reg is None:
        return False
    reg("lpdiag::attention_fwd")(_fwd)
    reg("lpdiag::attention_bwd")(_bwd)
    reg("lpdiag::attention")(_attention)
    _registered = True
    return True
