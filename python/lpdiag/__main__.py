"""python3 -m lpdiag probe --kernel K[,K...]: the probe bench for anything torch can call.
Exit codes: 0 every probe passed, 1 a kernel rounds with a bias (or NaN), 2 bad usage or nothing ran.

Every other command (analyze, check, report, watch, info, replay, repair, synth, round) is the
`lpdiag` program's: `python3 -m lpdiag analyze run.h5` runs it (found as lpdiag._cli says)."""
import argparse
import os
import sys

from . import probe

CLI_COMMANDS = ("analyze", "check", "report", "watch", "info", "replay", "repair", "synth", "round")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in CLI_COMMANDS:
        from . import _cli
        try:
            path = _cli.find()
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
        os.execv(path, [path] + list(argv))
    p = argparse.ArgumentParser(prog="python3 -m lpdiag", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.epilog = "also: " + ", ".join(CLI_COMMANDS) + " (the lpdiag program's commands; see python3 -m lpdiag analyze --help)"
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("probe", help="judge attention kernels on adversarial families against exact rounding",
                        description=probe.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("--kernel", "-k", required=True,
                    help="comma-separated: lpdiag, sdpa-flash, sdpa-cudnn, sdpa-efficient, sdpa-math, flex, or "
                         "pkg.module:function (fn(q, k, v, causal) -> O on bf16 (B, H, N, d) tensors)")
    pr.add_argument("--fix", default="none", help="fixes for the lpdiag kernel, comma-separated (none, paper, safe, sr)")
    pr.add_argument("--family", default="", help="comma-separated families (default all)")
    pr.add_argument("--causal", default="both", choices=["yes", "no", "both"])
    pr.add_argument("--seeds", type=int, default=1, help="seeds per family and causal mode")
    pr.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    pr.add_argument("--fail-z", type=float, default=4.0, help="allowed |z| beyond exact rounding's")
    pr.add_argument("--json", action="store_true", help="one JSON object on stdout")
    pr.add_argument("--junit", default=None, help="also write JUnit XML to this file")
    args = p.parse_args(argv)
    return probe.main(args)


if __name__ == "__main__":
    sys.exit(main())
