"""gpt2_train --guard on the CPU: a learning-rate spike at step 30 (x100 for 5 steps) makes the
attention logits collapse; the Monitor's alarm names each layer as it happens and the guard
switches it to fp32 attention. Asserts the switch events, the layers' numerics recorded as fp32
afterwards, analyze's alarm and guard lines, and that the same run without --guard is identical
up to the first alarm's step (the guard changes nothing before it switches). With --guard-at 45:0
--no-alarm-switch the alarms are still raised but switch nothing: layer 0 alone switches, at step 45,
and the run is the unguarded one up to there.
  gpt2_guard.py GPT2_TRAIN LPDIAG OUT_DIR"""
import json
import os
import subprocess
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from check_list import CheckList  # noqa: E402

train, cli, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
check = CheckList()


def run(name, *extra):
    path = f"{out}/{name}.h5"
    p = subprocess.run([train, "--steps", "60", "--lr-spike", "30:100:5", "--out", path, "--overwrite", "--log-every", "10", *extra],
                       capture_output=True, text=True)
    # gpt2_train exits 1 when the loss ended above where it began, as it does after this spike.
    check(p.returncode in (0, 1) and "trained 60 steps" in p.stdout, f"{name}: gpt2_train trained ({p.returncode}: {p.stderr[-400:]})")
    return path, p


g, gp = run("guarded", "--guard", "fp32")
u, _ = run("unguarded")
alarms = json.loads(next(line for line in gp.stdout.splitlines() if line.startswith("alarms: "))[len("alarms: "):])
switched = sorted(a["layer_index"] for a in alarms if a["guarded"])
check(switched == [0, 1], f"both layers alarmed and switched: {alarms}")
first = min(a["step"] for a in alarms)
with h5py.File(g, "r") as f, h5py.File(u, "r") as h:
    ev = [(int(e["step"]), e["kind"].decode(), int(e["layer_index"]), e["message"].decode()) for e in f["events"][:]]
    check(sorted(layer for _, k, layer, _ in ev if k == "guard_switch") == [0, 1], f"guard_switch events: {ev}")
    check(all(any(k == "attention_spec" and layer == x and "fp32" in m for _, k, layer, m in ev) for x in (0, 1)),
          "each switched layer recorded as fp32 afterwards")
    lg, lu, st = f["scalars/loss"][:], h["scalars/loss"][:], f["step"][:]
    same = [i for i in range(len(st)) if st[i] <= first]
    check(all(lg[i] == lu[i] for i in same), f"identical to the unguarded run up to step {first}")
late, lp = run("late-only", "--guard", "fp32", "--guard-at", "45:0", "--no-alarm-switch")
late_alarms = json.loads(next(line for line in lp.stdout.splitlines() if line.startswith("alarms: "))[len("alarms: "):])
check(late_alarms and not any(a["guarded"] for a in late_alarms), f"alarms raised, none switched a layer: {late_alarms}")
with h5py.File(late, "r") as f, h5py.File(u, "r") as h:
    ev = [(int(e["step"]), e["kind"].decode(), int(e["layer_index"])) for e in f["events"][:]]
    check([(s, layer) for s, k, layer in ev if k == "guard_switch"] == [(45, 0)], f"one switch, layer 0 at step 45: {ev}")
    lg, lu, st = f["scalars/loss"][:], h["scalars/loss"][:], f["step"][:]
    check(all(lg[i] == lu[i] for i in range(len(st)) if st[i] <= 45), "identical to the unguarded run up to step 45")
    check(any(lg[i] != lu[i] for i in range(len(st)) if st[i] > 46), "and not after the switch")
# --alarm-thresholds slow-trigger: the growth rule's first-fit thresholds; these alarms are logit
# collapses, a rule both sets share, so the guarded run alarms and switches as with the default.
_, sp = run("slow-trigger", "--guard", "fp32", "--alarm-thresholds", "slow-trigger")
slow_alarms = json.loads(next(line for line in sp.stdout.splitlines() if line.startswith("alarms: "))[len("alarms: "):])
check([(a["step"], a["layer_index"], a["guarded"]) for a in slow_alarms] == [(a["step"], a["layer_index"], a["guarded"]) for a in alarms],
      f"--alarm-thresholds slow-trigger: the same collapse alarms and switches: {slow_alarms}")
p = subprocess.run([train, "--steps", "5", "--out", f"{out}/bad.h5", "--alarm-thresholds", "early"], capture_output=True, text=True)
check(p.returncode != 0 and "slow-trigger" in p.stderr + p.stdout and not os.path.exists(f"{out}/bad.h5"),
      f"--alarm-thresholds with an unknown name is refused, the names listed ({p.returncode}: {(p.stderr + p.stdout)[-200:]})")
p = subprocess.run([cli, "analyze", g], capture_output=True, text=True)
check("guard at step" in p.stdout and "alarm at step" in p.stdout, "analyze shows the alarms and the switches:\n" + p.stdout)
check.finish()
