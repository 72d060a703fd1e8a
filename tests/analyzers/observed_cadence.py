#!/usr/bin/python3
"""An observed kernel's trace through `lpdiag analyze`: the GPT-2-small seed-mma/none run at seed
3 (tests/fixtures/seed, the repeated-maxima counters every 10 steps, delta errors every 50) made
into the trace an observer at observe_every=50 writes: attention counters only every 50th step,
the counters only a kernel's insides show (tile ties, P-bar == 1 entries, fix engagement)
unmeasured, and each layer recorded as external:cudnn with `observed` and the cadence. The
verdict must stay what the dense trace gives (a candidate chain at layer 1 head 0, every link
there), and analyze must name the observed kernel, in text and in --json.
    observed_cadence.py LPDIAG_CLI FIXTURES_SEED"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

cli, fixtures = sys.argv[1], sys.argv[2]
EVERY = 50
failures = 0


def check(what, ok, detail=""):
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""))
    failures += not ok


def observed_copy(src, dst, every):
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        keep = (f["step"][:] % every) == 0
        for g in f["attention"].values():
            for name in g:
                a = g[name][:]
                a[~keep] = np.nan if a.dtype.kind == "f" else -1
                if name in ("tile_repeated_max_rows", "pbar_one_entries", "fix_engaged_rows"):
                    a[:] = -1
                g[name][...] = a
            g.attrs["policy"] = "external:cudnn"
            g.attrs["fix"] = '{"kind":"none"}'
            g.attrs["spec"] = json.dumps({"policy": "external:cudnn", "observed": True, "observe_every": every})


def analyze(path):
    out = subprocess.run([cli, "analyze", path, "--json"], capture_output=True, text=True)
    return json.loads(out.stdout)


tmp = tempfile.mkdtemp()
dense = os.path.join(fixtures, "gpt2-seedmma-none-1e-3-5k-s3-every10.h5")
thin = os.path.join(tmp, "observed.h5")
observed_copy(dense, thin, EVERY)
d, o = analyze(dense), analyze(thin)
check("the dense trace: a candidate chain at layer 1 head 0", d["chain"]["undecided"] and (d["chain"]["layer_index"], d["chain"]["head"]) == (1, 0),
      str(d["chain"].get("layer_index")))
check("observed every 50 steps: the same candidate at the same head", o["chain"]["undecided"] and
      (o["chain"]["layer_index"], o["chain"]["head"]) == (1, 0), str(o["summary"]))
check("and the same failure", o["run"]["healthy"] is False and o["run"]["failure"]["kind"] == d["run"]["failure"]["kind"], str(o["run"]))
num = o["attention_numerics"]
check("--json names the observed kernel and its cadence", num["observed"] and num["observe_every"] == EVERY and
      num["observed_kernels"] == "external:cudnn", str(num))
text = subprocess.run([cli, "analyze", thin], capture_output=True, text=True).stdout
check("the text names it under the verdict", "observed kernel: external:cudnn" in text.splitlines()[2], text[:400])
check("C1 and C2 are not called unrecorded", "not recorded" not in subprocess.run([cli, "analyze", thin, "--verbose"], capture_output=True,
                                                                                   text=True).stdout)
# watch ends with the verdict analyze gives (the same analysis: the recorded numerics read, the
# observed kernel named), line for line.
w = subprocess.run([cli, "watch", thin, "--interval", "0.1"], capture_output=True, text=True, timeout=120).stdout.splitlines()
tail = [x.strip() for x in w[w.index("verdict:") + 1:]] if "verdict:" in w else []
check("watch's closing verdict is analyze's, line for line", tail == text.splitlines()[1:1 + len(tail)] and len(tail) >= 3,
      "\n".join(w[-8:]))
print("FAIL" if failures else "ok")
sys.exit(1 if failures else 0)
