#!/usr/bin/env python3
"""Summarises an `ncu --page source --csv --print-source sass` export of one kernel: the warp
stall reasons over all samples and the instruction mix (share of executed instructions and of
stall samples per opcode). Used by scripts/lab/gpu_session.sh (stage ncusrc).
    ncu_summary.py FILE.csv [--top N]"""
import csv
import sys
from collections import Counter


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 12
    rows = list(csv.reader(open(sys.argv[1])))
    if len(rows) < 3:
        sys.exit(f"{sys.argv[1]}: no instruction rows (was it exported with --page source --csv?)")
    print(" ".join(rows[0])[:160])
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    data = [r for r in rows[2:] if len(r) >= len(hdr)]
    samples_col = ix["Warp Stall Sampling (All Samples)"]
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[samples_col]) for r in data) or 1.0
    by_reason = {s: sum(num(r[ix[s]]) for r in data) for s in stalls}
    print(f"stall samples {total:.0f}")
    for s, v in sorted(by_reason.items(), key=lambda x: -x[1])[:top]:
        print(f"  {s:26s} {100 * v / total:5.1f}%")
    executed, sampled = Counter(), Counter()
    for r in data:
        words = r[ix["Source"]].split()
        if not words:
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        op = op.split(".")[0]
        executed[op] += num(r[ix["Instructions Executed"]])
        sampled[op] += num(r[samples_col])
    n = sum(executed.values()) or 1.0
    print(f"instructions executed {n:.4g}")
    for op, v in executed.most_common(top * 2):
        print(f"  {op:10s} {100 * v / n:5.1f}% of instructions {100 * sampled[op] / total:5.1f}% of samples")


if __name__ == "__main__":
    main()
