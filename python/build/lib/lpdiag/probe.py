"""The probe bench: every kernel on every family, judged against the exact-rounding row.

The families and the judgement come from libdiag through the op library (torch.ops.lpdiag.
probe_case / judge_outputs), so this entry and `lpdiag probe` in C++ test identical inputs from
the same seeds and apply one rule: a row fails when its O or delta error is more biased than the
correctly rounded output's, |z| > max(|z_exact| + fail_z, 1.1 |z_exact|), or it has non-finite
outputs. delta is formed from the kernel's own O the way a backward forms it (fp32, column order).
dQ/dK/dV errors come through autograd where the kernel supports it."""
import json
import sys
import time
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

import torch

from . import kernels as K
from ._library import load


@dataclass
class Row:
    family: str
    causal: bool
    seed: int
    kernel: str
    description: str = ""
    result: dict = field(default_factory=dict)  # judge_outputs' entry (o_err_z, delta_err_z, ...)
    exact: dict = field(default_factory=dict)
    skipped: str = ""  # why it could not run
    grads: str = ""    # why there are no gradients, if so
    failed: bool = False
    why: str = ""


def _worse(z, z_exact, fail_z):
    if z is None:
        return True
    z_exact = abs(z_exact or 0.0)
    return not abs(z) <= max(z_exact + fail_z, 1.1 * z_exact)


def run_case(family, causal, seed, kernel_specs, device, fail_z):
    """kernel_specs: [(name, fn, why_not)]. Returns the rows of this case (exact-rounding first)."""
    q, k, v, g, desc = torch.ops.lpdiag.probe_case(family, causal, seed)
    rows, outs, names, grads = [], [], [], []
    for name, fn, why_not in kernel_specs:
        row = Row(family, causal, seed, name, desc)
        rows.append(row)
        if why_not:
            row.skipped = why_not
            continue
        qd, kd, vd = (t.to(device=device, dtype=torch.bfloat16).requires_grad_(True) for t in (q, k, v))
        try:
            o = fn(qd, kd, vd, causal)
            if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(q.shape):
                raise RuntimeError(f"returned {type(o).__name__} {getattr(o, 'shape', '')}, expected a tensor of shape {tuple(q.shape)}")
        except Exception as e:  # a backend that cannot run this case (shape, dtype, device)
            row.skipped = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            continue
        gr = [torch.empty(0)] * 3
        try:
            o.backward(g.to(device=device, dtype=o.dtype))
            if all(t.grad is not None for t in (qd, kd, vd)):
                gr = [t.grad.detach().float().cpu() for t in (qd, kd, vd)]
            else:
                row.grads = "no gradients reached q, k, v"
        except Exception as e:
            row.grads = f"no gradients: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        outs.append(o.detach().float().cpu())
        names.append(name)
        grads.extend(gr)
    judged = json.loads(torch.ops.lpdiag.judge_outputs(q, k, v, g, causal, outs, names, grads))
    exact = judged["exact_rounding"]
    by_name = {r["name"]: r for r in judged["outputs"]}
    head = Row(family, causal, seed, "exact-rounding", desc, exact, exact)
    for row in rows:
        row.exact = exact
        if row.skipped:
            continue
        row.result = by_name[row.kernel]
        r = row.result
        biased = _worse(r["o_err_z"], exact["o_err_z"], fail_z) or _worse(r["delta_err_z"], exact["delta_err_z"], fail_z)
        nan = r["nan_count"] > 0
        row.failed = biased or nan
        if biased:
            row.why = (f"biased rounding: O error z {r['o_err_z']:+.2f}, delta error z {r['delta_err_z']:+.2f}; exact rounding "
                       f"{exact['o_err_z']:+.2f}, {exact['delta_err_z']:+.2f} (more biased by > {fail_z} z or 10%)")
        if nan:
            row.why += ("; " if row.why else "") + f"{r['nan_count']} non-finite outputs"
    return [head] + rows


def _fmt(x, spec="+8.2f"):
    if isinstance(x, (int, float)):
        return f"{x:{spec}}"
    width = int("".join(c for c in spec.split(".")[0] if c.isdigit()) or 8)
    return f"{'-':>{width}}"


# The columns of `lpdiag probe`'s table (tools/lpdiag/attention_report.cpp and cmd_probe.cpp), in
# its order, for the measures both entries have; then the gradients, which only this one has.
HEADER = (f"{'family':<13} {'causal':<6} {'seed':<4} {'kernel':<24} {'O err mean':>11} {'O z':>8} {'worst z':>8} "
          f"{'δ err mean':>11} {'δ z':>8} {'NaN':>6} {'O |z|-ex':>9} {'δ |z|-ex':>9} {'O rms':>9} {'dQ z':>8} {'dK z':>8} "
          f"{'dV z':>8}")


def format_row(r):
    lead = f"{r.family:<13} {'yes' if r.causal else 'no':<6} {r.seed:<4} {r.kernel:<24} "
    if r.skipped:
        return lead + f"skipped: {r.skipped}"
    x, ex = r.result, r.exact
    is_exact = r.kernel == "exact-rounding"

    def excess(key):
        if is_exact or x.get(key) is None or ex.get(key) is None:
            return f"{'':>9}"
        return f"{abs(x[key]) - abs(ex[key]):>+9.2f}"

    line = (lead + f"{_fmt(x.get('o_err_mean'), '+11.3e')} {_fmt(x.get('o_err_z'))} {_fmt(x.get('o_err_worst_column_z'))} "
            f"{_fmt(x.get('delta_err_mean'), '+11.3e')} {_fmt(x.get('delta_err_z'))} {x.get('nan_count', 0):>6} "
            f"{excess('o_err_z')} {excess('delta_err_z')} {_fmt(x.get('o_err_rms'), '9.3e')} "
            f"{_fmt(x.get('dq_err_z'))} {_fmt(x.get('dk_err_z'))} {_fmt(x.get('dv_err_z'))}")
    if r.grads:
        line += f"  ({r.grads})"
    return line + ("  FAIL" if r.failed else "")


def write_junit(path, rows):
    cases = [r for r in rows if r.kernel != "exact-rounding"]
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        f.write(f'<testsuite name="lpdiag probe (python)" tests="{len(cases)}" failures="{sum(r.failed for r in cases)}" '
                f'skipped="{sum(bool(r.skipped) for r in cases)}">\n')
        for r in cases:
            name = f"{r.family}/{'causal' if r.causal else 'noncausal'}/seed{r.seed}/{r.kernel}"
            f.write(f'  <testcase classname="lpdiag.probe" name={quoteattr(name)}>')
            if r.failed:
                f.write(f"<failure message={quoteattr(r.why)}/>")
            elif r.skipped:
                f.write(f"<skipped message={quoteattr('skipped: ' + r.skipped)}/>")
            f.write(f"<system-out>{quoteattr(r.description)[1:-1]}</system-out></testcase>\n")
        f.write("</testsuite>\n")


def probe(kernel_specs, families=None, causal="both", seeds=1, device=None, fail_z=4.0, progress=None):
    """Runs the bench; returns the rows (exact-rounding row first in each case)."""
    load()
    families = families or list(torch.ops.lpdiag.probe_families())
    modes = {"both": [False, True], "yes": [True], "no": [False]}[causal]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for fam in families:
        for c in modes:
            for s in range(seeds):
                t0 = time.time()
                case = run_case(fam, c, s, kernel_specs, device, fail_z)
                rows.extend(case)
                if progress:
                    progress(case, time.time() - t0)
    return rows


def main(args):
    try:
        load()
        specs = []
        for name in [k for k in args.kernel.split(",") if k]:
            for fix in args.fix.split(",") if name == "lpdiag" else ["none"]:
                fn, why_not = K.resolve(name, fix)
                specs.append((name if name != "lpdiag" or fix == "none" else f"lpdiag/{fix}", fn, why_not))
        families = [f for f in args.family.split(",") if f] if args.family else None
        known = list(torch.ops.lpdiag.probe_families())
        for f in families or []:
            if f not in known:
                raise ValueError(f"unknown probe family '{f}'; families are: {', '.join(known)}")
        if args.seeds < 1 or not args.fail_z > 0:
            raise ValueError("--seeds must be >= 1 and --fail-z > 0")
    except (ValueError, RuntimeError) as e:
        print(f"lpdiag probe: {e}", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if not args.json:
        print(f"device {device}, torch {torch.__version__}")
        print(HEADER)

    def progress(case, seconds):
        if not args.json:
            for r in case:
                print(format_row(r), flush=True)

    rows = probe(specs, families, args.causal, args.seeds, device, args.fail_z, progress)
    judged = [r for r in rows if r.kernel != "exact-rounding"]
    failures = sum(r.failed for r in judged)
    skipped = sum(bool(r.skipped) for r in judged)
    if args.junit:
        write_junit(args.junit, rows)
    if args.json:
        print(json.dumps({"fail_z": args.fail_z, "device": device, "torch": torch.__version__, "failures": failures,
                          "skipped": skipped,
                          "results": [{"family": r.family, "causal": r.causal, "seed": r.seed, "kernel": r.kernel,
                                       "failed": r.failed, "skipped": r.skipped or None, "grads": r.grads or None,
                                       "why": r.why or None, **r.result} for r in rows]}, indent=2))
    else:
        ran = len(judged) - skipped
        print(f"{failures} of {ran} probes FAILED (more biased than exact rounding, --fail-z {args.fail_z}, or NaN)" if failures
              else f"all {ran} probes passed (no more biased than exact rounding, --fail-z {args.fail_z})")
        if skipped:
            print(f"{skipped} probes SKIPPED (not run, not passed): see the rows above")
    if failures:
        return 1
    if skipped == len(judged):
        print("lpdiag probe: no probe ran: every requested row was skipped", file=sys.stderr)
        return 2
    return 0
