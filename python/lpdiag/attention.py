"""`lpdiag.attention`: the op with keyword arguments and errors that say what is wrong.

    y = lpdiag.attention(q, k, v, causal=True)                   # fa2 numerics, counters
    y = lpdiag.attention(q, k, v, causal=True, policy="seed:tile=512", fix="paper", level="full")

q, k, v: (B, H, N, d) tensors of one dtype and device. CUDA: bfloat16, d 64 or 128, policies
fa2, seed, seed-mma and fp32 (lpdiag's kernels). CPU: bfloat16 or float32, any d, every policy (the emulation).
`level`: off, counters or full; None (the default) takes the running Monitor's level for the
step (counters, or full every `full_every` steps), else counters.
`layer`: the attention layer the counters belong to; None takes the layer the active
lpdiag.Monitor is running (it numbers the attention modules it found), and without one the
call's counters go nowhere (said once)."""
import contextvars
import math
import warnings

import torch

from ._library import load

# The layer whose forward is running, set by lpdiag.Monitor's module hooks.
current_layer = contextvars.ContextVar("lpdiag_current_layer", default=None)
# The level the running Monitor wants for this step (its full_every cadence), set by its hooks.
current_level = contextvars.ContextVar("lpdiag_current_level", default=None)
# On a step the running Monitor observes: (layer id, rows per head, head bitmask) for the module
# whose forward is running; None otherwise (lpdiag.observe reads it).
current_observe = contextvars.ContextVar("lpdiag_current_observe", default=None)
_warned_no_layer = False
_warned_fp32 = False


class _TracedState:
    """The same two values while torch.compile traces the model: TorchDynamo cannot trace
    ContextVar.set (a graph break, so fullgraph=True fails), but it traces attribute stores on a
    plain object, and the op call then bakes the layer id into the graph."""
    layer = None
    level = None


traced = _TracedState()


def is_compiling():
    """True while TorchDynamo traces (torch >= 2.0); False on torch 1.13, which has no compiler."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    dynamo = getattr(torch, "_dynamo", None)
    return bool(dynamo is not None and hasattr(dynamo, "is_compiling") and dynamo.is_compiling())


def _quoted(x):
    return '"' + str(x).replace("\\", "\\\\").replace('"', '\\"') + '"'


def spec_json(policy="fa2", fix="none", level="counters", causal=False):
    """The op's spec in its one serialized form, {"policy", "fix", "level", "causal"} as JSON (the
    op parses and checks it; torch.ops.lpdiag.attention_spec gives the canonical form, fix with
    its parameters). Plain string building, so torch.compile folds it into a constant."""
    return ('{"policy":' + _quoted(policy) + ',"fix":' + _quoted(fix) + ',"level":' + _quoted(level) + ',"causal":' +
            ("true" if causal else "false") + "}")


def check_arguments(q, k, v, scale):
    """What the op cannot see: the arguments' Python types and an explicit scale. Shapes, dtypes,
    devices, the policy, the fix and the level are the op's to check (one place: hooks/src/attention_op.cpp)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"lpdiag.attention: {name} must be a torch.Tensor, got {type(t).__name__}")
    if scale is not None and q.dim() == 4 and not math.isclose(float(scale), 1.0 / math.sqrt(q.shape[-1]), rel_tol=1e-6):
        raise ValueError(f"lpdiag.attention: the op uses scale 1/sqrt(d) = {1.0 / math.sqrt(q.shape[-1]):.6g}; got scale={scale}")


def check_sdpa_keywords(q, k, attn_mask, dropout_p, enable_gqa):
    """The keywords of F.scaled_dot_product_attention the op does not take, refused with what to
    do instead; GQA shapes (fewer k/v heads than q heads) likewise."""
    if attn_mask is not None:
        raise ValueError("lpdiag.attention: attn_mask is not supported (the op computes causal or full attention); pass "
                         "causal=True for a causal mask, or leave calls with a mask to PyTorch (lpdiag.patch_sdpa does so and "
                         "reports them)")
    if dropout_p:
        raise ValueError(f"lpdiag.attention: dropout_p={dropout_p} is not supported (attention dropout changes what the kernel "
                         "rounds); train with dropout_p=0 in the attention, or leave these calls to PyTorch")
    if q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1]:
        raise ValueError(f"lpdiag.attention: q has {q.shape[1]} heads, k and v {k.shape[1]} (grouped-query attention"
                         f"{'' if enable_gqa else ', or a (B, N, H, d) tensor where (B, H, N, d) is expected'}); the op takes "
                         "(B, H, N, d) with one k/v head per q head: repeat them first, k.repeat_interleave("
                         f"{q.shape[1]} // {k.shape[1]}, dim=1)")


def attention(q, k, v, *, causal=False, scale=None, policy="fa2", fix="none", level=None, layer=None, is_causal=None,
              attn_mask=None, dropout_p=0.0, enable_gqa=False):
    """Attention through lpdiag's op (see the module's doc). Returns O in q's dtype. level None:
    the running Monitor's choice for this step (its level, "full" every full_every steps), else
    "counters". q, k, v: (B, H, N, d), bf16 as the kernel of a bf16 run sees them (fp32 inputs
    are rounded by no one: the op warns once). is_causal is accepted as SDPA spells causal;
    attn_mask, dropout_p and GQA shapes are refused with what to do instead."""
    global _warned_no_layer, _warned_fp32
    check_arguments(q, k, v, scale)
    if is_causal is not None:
        causal = bool(is_causal)
    check_sdpa_keywords(q, k, attn_mask, dropout_p, enable_gqa)
    if q.dtype == torch.float32 and str(policy).split(":")[0] in ("fa2", "fa2-seq", "seed", "seed-mma") and not _warned_fp32:
        warnings.warn(f"lpdiag.attention: q, k, v are float32 under policy {policy!r}, a bf16 kernel: its counters and errors then "
                      "describe float32 inputs that no bf16 kernel sees; cast them to torch.bfloat16 (as autocast does) to "
                      "observe what a bf16 run rounds")
        _warned_fp32 = True
    load()
    compiling = is_compiling()
    if level is None:
        level = (traced.level if compiling else current_level.get()) or "counters"
    if layer is None:
        layer = traced.layer if compiling else current_layer.get()
    if layer is None:
        if level != "off" and not _warned_no_layer and not compiling:
            warnings.warn("lpdiag.attention: no layer given and no lpdiag.Monitor running this module; the counters of such "
                          "calls are not recorded (pass layer=, or run the model inside `with lpdiag.Monitor(...)`)")
            _warned_no_layer = True
        layer = -1
    try:
        return torch.ops.lpdiag.attention(q, k, v, spec_json(policy, fix, level, bool(causal)), int(layer))
    except RuntimeError as e:  # the op's argument checks: one line, as a ValueError
        msg = str(e).strip().splitlines()[0] if str(e).strip() else "lpdiag.attention failed"
        if "lpdiag::attention" in msg:
            raise ValueError(msg.replace("lpdiag::attention", "lpdiag.attention")) from None
        raise
