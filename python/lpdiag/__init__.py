"""lpdiag from Python, over the same op library the C++ side builds:
 - `lpdiag.attention(q, k, v, causal=..., policy=..., fix=..., level=..., layer=None)`: the op
   with keyword arguments and clear errors;
 - `with lpdiag.Monitor("run.h5", model) as mon: ... mon.record(step, loss, lr=, grad_norm=)`:
   a trace of a training run, the attention modules and q/k/v weights found in the model;
 - the probe bench for attention kernels (`python3 -m lpdiag probe`, `lpdiag.testing.assert_unbiased`)."""
from ._library import load as load_library
from .attention import attention
from .monitor import Monitor

__version__ = "0.1.0"
__all__ = ["attention", "Monitor", "load_library", "__version__"]
