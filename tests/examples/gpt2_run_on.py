"""gpt2_train --decay-steps: running on past a run's end keeps its schedule. A 60-step run with
--decay-steps 40 must print, for steps 0..39, the same loss, lr and gradient norm as the 40-step run
(on the CPU training is bit-reproducible, so exact equality is the right tolerance), and the lr
from step 40 on must be --min-lr. Also: the run_config attribute of its trace records decay_steps.
  gpt2_run_on.py GPT2_TRAIN OUT_DIR"""
import json
import os
import subprocess
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from check_list import CheckList  # noqa: E402

train, out = sys.argv[1:3]
os.makedirs(out, exist_ok=True)
check = CheckList()


def run(name, *extra):
    path = f"{out}/{name}.h5"
    p = subprocess.run([train, "--log-every", "1", "--warmup", "10", "--lr", "1e-3", "--min-lr", "2e-4", "--out", path, "--overwrite",
                        *extra], capture_output=True, text=True)
    check(p.returncode in (0, 1) and "trained" in p.stdout, f"{name}: gpt2_train ran ({p.returncode}: {p.stderr[-400:]})")
    rows = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "step":  # step N  loss X  lr Y  grad_norm Z  [ms/step]
            rows[int(f[1])] = (f[3], f[5], f[7])
    return path, rows


_, first = run("first", "--steps", "40")
path, longer = run("longer", "--steps", "60", "--decay-steps", "40")
check(len(first) == 40 and all(s in longer for s in range(60)), f"both runs printed every step ({len(first)}, {len(longer)})")
same = [s for s in range(40) if first.get(s) == longer.get(s)]
check(len(same) == 40, f"steps 0..39 identical in loss, lr and gradient norm ({len(same)} of 40)")
tail_lr = {longer[s][1] for s in range(40, 60) if s in longer}
check(tail_lr == {"2.00e-04"}, f"lr after the decay end is --min-lr: {sorted(tail_lr)}")
check(first.get(39, ("", ""))[1] != "2.00e-04" and float(first[39][1]) < 2.1e-4, f"the first run's last lr is near --min-lr: {first.get(39)}")
with h5py.File(path, "r") as h:
    cfg = json.loads(h.attrs["run_config"])
check(cfg.get("decay_steps") == 40 and cfg.get("steps") == 60, f"run_config records decay_steps 40 of 60 steps: {cfg.get('decay_steps')}")
check.finish()
