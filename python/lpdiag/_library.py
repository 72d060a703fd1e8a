"""Finds and loads lpdiag's op library (liblpdiag_torch.so), which registers torch.ops.lpdiag.*.

Looked for, in order: $LPDIAG_TORCH_LIBRARY; next to this package (an installed copy in
lpdiag/lib); the build tree this package sits in (build*/hooks)."""
import glob
import os

import torch

_loaded = None


def search_path(env_var, installed, in_build):
    """Where to look for one of lpdiag's built files, in order: $env_var; `installed` next to this
    package; `in_build` (a path under a build directory) in each build* directory of the source
    tree this package sits in."""
    env = os.environ.get(env_var)
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, installed)
    root = os.path.dirname(os.path.dirname(here))
    yield from sorted(glob.glob(os.path.join(root, "build*", in_build)))


def _candidates():
    return search_path("LPDIAG_TORCH_LIBRARY", os.path.join("lib", "liblpdiag_torch.so"), os.path.join("hooks", "liblpdiag_torch.so"))


def load(path=None):
    """Loads the op library once (from `path` when given); returns its path. Raises RuntimeError
    saying where it looked."""
    global _loaded
    if _loaded:
        return _loaded
    tried = []
    for path in [path] if path else _candidates():
        tried.append(path)
        if os.path.exists(path):
            torch.ops.load_library(path)
            _loaded = path
            from . import compile_support
            compile_support.register()  # torch.compile / opcheck support (torch >= 2.1)
            return path
    raise RuntimeError("lpdiag: cannot find liblpdiag_torch.so (build lpdiag with LibTorch, or set LPDIAG_TORCH_LIBRARY); "
                       "looked at: " + ", ".join(tried))
