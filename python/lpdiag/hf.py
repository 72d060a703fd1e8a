"""lpdiag as Hugging Face attention implementations: "lpdiag" (lpdiag's kernels) and
"lpdiag-observe" (transformers' SDPA unchanged, observed on the Monitor's observed steps):

    lpdiag.register_transformers(policy="fa2", level="counters")
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="lpdiag")

transformers calls it as `(module, query, key, value, attention_mask, scaling=, dropout=, **kw)`
with (B, H, N, d) tensors and expects ((B, N, H, d) output, weights). Calls lpdiag can run
(see lpdiag.sdpa.unsupported_reason; no mask, or a mask that is only the causal one) go to
lpdiag.attention; others (a padding mask, dropout while training, fp16) run transformers' own
SDPA implementation, counted in `fell_through` and reported once per reason. Key/value heads
shared by several query heads (GQA) are repeated first, as transformers' SDPA path does."""
import collections
import warnings

import torch

from .attention import attention, current_observe
from .observe import ObserveSdpaMode
from .sdpa import unsupported_reason

fell_through = collections.Counter()
routed = 0
_spec = {}


def _repeat_kv(x, groups):
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _only_causal(mask, n):
    """Whether `mask` (boolean: True = attend; or additive: 0 = attend) masks exactly the keys after
    each query, which lpdiag's causal attention does itself."""
    if mask is None or mask.dim() < 2 or mask.shape[-1] != n or mask.shape[-2] != n:
        return False
    keep = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return bool((mask == keep).all())
    return bool(((mask == 0) == keep).all()) and bool((mask.masked_select(~keep.expand_as(mask)) <= -1e4).all())


def lpdiag_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' AttentionInterface signature; see the module's doc."""
    global routed
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    groups = query.shape[1] // key.shape[1] if key.shape[1] else 1
    k, v = _repeat_kv(key, groups), _repeat_kv(value, groups)
    causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", True))) and query.shape[2] > 1
    mask = attention_mask
    if mask is not None and causal and _only_causal(mask, query.shape[2]):
        mask = None  # the causal mask transformers built: lpdiag's causal attention is the same
    why = unsupported_reason(query, k, v, mask, dropout if module.training else 0.0, scaling)
    if why is None:
        routed += 1
        out = attention(query, k, v, causal=causal, scale=scaling, **_spec)
        return out.transpose(1, 2).contiguous(), None
    if why not in fell_through:
        warnings.warn(f"lpdiag (transformers attention): {why}: this call runs transformers' SDPA implementation")
    fell_through[why] += 1
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def lpdiag_observe_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """"lpdiag-observe": transformers' own SDPA implementation, unchanged; on the running Monitor's
    observed steps its scaled_dot_product_attention call is observed (lpdiag.observe_sdpa)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if current_observe.get() is None or ObserveSdpaMode is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    with ObserveSdpaMode():  # on an observed step only
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def register_transformers(**spec):
    """Registers "lpdiag" and "lpdiag-observe" with transformers' AttentionInterface (spec: policy, fix, level). Returns
    False when transformers (or its AttentionInterface, transformers >= 4.48) is not installed."""
    try:
        from transformers import AttentionInterface
    except ImportError:
        return False
    bad = sorted(set(spec) - {"policy", "fix", "level"})
    if bad:
        raise TypeError(f"lpdiag.register_transformers: unknown argument(s) {', '.join(bad)}; it takes policy, fix, level")
    _spec.clear()
    _spec.update(spec)
    AttentionInterface.register("lpdiag", lpdiag_attention_forward)
    AttentionInterface.register("lpdiag-observe", lpdiag_observe_forward)
    try:  # transformers >= 4.53 builds masks per implementation: SDPA's (none when only causal)
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
        for name in ("lpdiag", "lpdiag-observe"):
            if name not in ALL_MASK_ATTENTION_FUNCTIONS:
                AttentionMaskInterface.register(name, sdpa_mask)
    except ImportError:
        pass
    return True
