"""Reference callables for the probe entry's tests: fn(q, k, v, causal) -> O (bf16)."""
import torch


def _fp64(q, k, v, causal):
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def exact(q, k, v, causal):
    """fp64 attention rounded once to bf16: the best a bf16 output can do (must pass)."""
    o = _fp64(q, k, v, causal)
    # torch converts fp64 -> fp32 -> bf16: a double rounding, off from one rounding only where the
    # value lies within 2^-24 of a bf16 midpoint (rare, and not one-signed).
    return o.to(torch.bfloat16)


def biased(q, k, v, causal):
    """exact, then every element moved up by one bf16 place (must fail)."""
    o = exact(q, k, v, causal)
    bits = o.view(torch.int16)
    up = torch.where(o >= 0, bits + 1, bits - 1).view(torch.bfloat16)
    return torch.where(o == 0, o, up)


def no_grad(q, k, v, causal):
    """exact without autograd (gradients must be reported as missing, not as passed)."""
    with torch.no_grad():
        return exact(q, k, v, causal).detach()
