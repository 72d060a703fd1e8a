"""lpdiag from Python, over the same op library the C++ side builds:
 - `lpdiag.attention(q, k, v, causal=..., policy=..., fix=..., level=..., layer=None)`: the op
   with keyword arguments and clear errors;
 - `with lpdiag.Monitor("run.h5", model) as mon: ... mon.record(step, loss, lr=, grad_norm=)`:
   a trace of a training run, the attention modules and q/k/v weights found in the model;
 - `with lpdiag.patch_sdpa(policy=..., level=...):` routes torch's scaled_dot_product_attention
   through the op (torch >= 2.0), and `lpdiag.register_transformers()` offers
   attn_implementation="lpdiag" to Hugging Face models;
 - `lpdiag.observed(fn, name=...)` and `with lpdiag.observe_sdpa():` observe the attention kernel
   the model already runs (its own, FlexAttention, PyTorch's SDPA backends) at the Monitor's
   observe_every cadence, without changing it;
 - the probe bench for attention kernels (`python3 -m lpdiag probe`, `lpdiag.testing.assert_unbiased`)."""
from ._library import load as load_library
from .attention import attention
from .hf import register_transformers
from .monitor import Monitor
from .observe import observe_sdpa, observed
from .sdpa import patch_sdpa

__version__ = "0.1.0"
__all__ = ["attention", "Monitor", "observed", "observe_sdpa", "patch_sdpa", "register_transformers", "load_library", "__version__"]

import sys as _sys

if "transformers" in _sys.modules:  # already imported by the user: offer "lpdiag" as an attention implementation
    register_transformers()
