"""Finds the `lpdiag` command-line program (the C++ CLI: analyze, check, report, watch, ...).

Looked for, in order: $LPDIAG_CLI; next to this package (an installed copy in lpdiag/bin); the
build tree this package sits in (build*/tools/lpdiag); `lpdiag` on PATH."""
import os
import shutil

from ._library import search_path


def candidates():
    yield from search_path("LPDIAG_CLI", os.path.join("bin", "lpdiag"), os.path.join("tools", "lpdiag"))
    on_path = shutil.which("lpdiag")
    if on_path:
        yield on_path


def find():
    """The CLI's path; raises RuntimeError saying where it looked."""
    tried = []
    for path in candidates():
        tried.append(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise RuntimeError("lpdiag: cannot find the lpdiag program (build it with scripts/run-tests, or set LPDIAG_CLI); "
                       "looked at: " + ", ".join(tried))
