"""Helpers for kernel authors' own test suites."""
from . import probe as _probe


def assert_unbiased(fn, families=None, z=4.0, causal="both", seeds=1, device=None, name=None):
    """Raises AssertionError, with the probe table, when fn(q, k, v, causal) -> O rounds with a
    bias on any of the families (default all): its O or delta error more biased than the
    correctly rounded output's by more than `z` (or 10%), or non-finite outputs. A case fn
    cannot run is a failure here too (a test must not pass on what it did not check)."""
    label = name or getattr(fn, "__name__", "kernel")
    rows = _probe.probe([(label, fn, None)], families, causal, seeds, device, z)
    bad = [r for r in rows if r.kernel != "exact-rounding" and (r.failed or r.skipped)]
    if bad:
        table = "\n".join([_probe.HEADER] + [_probe.format_row(r) for r in rows])
        raise AssertionError(f"{label} rounds with a bias or could not run on {len(bad)} case(s):\n{table}")
    return rows
