"""lpdiag from Python: the probe bench for attention kernels (`python3 -m lpdiag probe`,
`lpdiag.testing.assert_unbiased`) over the same op library the C++ side builds."""
from ._library import load as load_library

__version__ = "0.1.0"
__all__ = ["load_library", "__version__"]
