"""The online alarm and the guard in the Python Monitor, on the CPU. A 2-layer model whose layer 1
query weights are scaled up 300x at step 12 (its logits jump: a collapse the alarm must raise):
 - on_alarm is called once with the alarm (kind logit_collapse, layer 1); the trace holds an
   "alarm" event; the alarm never changes training: losses with and without it are identical;
 - guard="fp32": a guard_switch event, guarded_layers == [1]; losses identical to the unguarded
   run's up to the alarm's step and not after; the trace records layer 1's numerics as fp32 from
   then on (attention_spec event), layer 0's unchanged; an alarm in a layer already switched
   writes no second switch;
 - an external kernel (lpdiag.observed) in a guarded layer receives fp32 q, k, v after the switch;
 - Monitor.readings() gives the alarm's quantities as flat floats, the same as `lpdiag alarm
   --readings` reads from the trace;
 - an on_alarm that raises does not stop training; bad guard arguments are refused.
Seed: fixed (printed). Tolerances: none; losses are compared bit for bit.
    guard.py LPDIAG_CLI"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import torch
import torch.nn as nn

import lpdiag
import toy_gpt
from check_helpers import check, finish
from test_seed import seed as test_seed

cli = os.path.abspath(sys.argv[1])
C, H, T, V, STEPS, JUMP = 32, 4, 16, 11, 24, 12
SEED = test_seed("guard.py", 20261206)


def op_attention(q, k, v, is_causal=False):
    return lpdiag.attention(q, k, v, causal=is_causal)


def Model(fn):
    return toy_gpt.Model(fn, SEED, C, H, T, V)


def train(path, fn=op_attention, guard_layer_at=None, **kw):
    model = Model(fn)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(SEED)
    data = torch.randint(0, V, (STEPS, 4, T + 1), generator=g)
    losses = []
    with lpdiag.Monitor(path, model, overwrite=True, **kw) as mon:
        for step in range(STEPS):
            if guard_layer_at and step == guard_layer_at[0]:
                mon.guard_layer(guard_layer_at[1])
            if step == JUMP:
                with torch.no_grad():
                    model.layers[1].c_attn.weight[:C] *= 300  # layer 1's queries: its logits jump
            x, y = data[step, :, :-1], data[step, :, 1:]
            loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            mon.record(step, loss, lr=1e-3)
    return losses, mon


def events(path):
    with h5py.File(path, "r") as f:
        return [(int(e["step"]), e["kind"].decode(), int(e["layer_index"]), e["message"].decode()) for e in f["events"][:]]


with tempfile.TemporaryDirectory() as d:
    seen = []
    base, _ = train(f"{d}/off.h5", alarm=False)
    plain, mon = train(f"{d}/plain.h5", on_alarm=seen.append)
    check("on_alarm called once, a logit collapse at layer 1", len(seen) == 1 and seen[0]["kind"] == "logit_collapse"
          and seen[0]["layer_index"] == 1 and seen[0]["step"] == JUMP and not seen[0]["guarded"], str(seen))
    check("Monitor.alarms holds it", mon.alarms == seen, str(mon.alarms))
    ev = events(f"{d}/plain.h5")
    check("the trace holds the alarm event", any(k == "alarm" and layer == 1 and s == JUMP for s, k, layer, _ in ev), str(ev))
    check("no guard, no switch", not any(k == "guard_switch" for _, k, _, _ in ev) and mon.guarded_layers == [])
    check("the alarm never changes training (losses bit for bit)", base == plain)
    out = subprocess.run([cli, "alarm", f"{d}/plain.h5", "--json"], capture_output=True, text=True)
    j = json.loads(out.stdout)
    check("lpdiag alarm on the trace raises what the Monitor raised", out.returncode == 1 and j["alarm"]["step"] == JUMP
          and j["alarm"]["layer_index"] == 1, out.stdout + out.stderr)

    # The readings, for a dashboard: flat floats, the collapse's logit in layer 1, the alarm counted;
    # the same as `lpdiag alarm --readings` reads from the trace at its last record (to 1e-6
    # relative: the trace keeps float32 values where the Monitor's detector saw doubles).
    r = mon.readings()
    check("readings: flat floats, layer 1's logit at collapse level, one alarm",
          all(isinstance(v, float) for v in r.values()) and r.get("lpdiag/layer1/logit_max", 0) >= 100
          and r.get("lpdiag/layer0/logit_max", 1e9) < 100 and r.get("lpdiag/alarms") == 1.0
          and "lpdiag/loss_over_best" in r, str(r))
    out = subprocess.run([cli, "alarm", f"{d}/plain.h5", "--readings", f"{d}/readings.csv"], capture_output=True, text=True)
    rows = [line.split(",") for line in open(f"{d}/readings.csv").read().splitlines()] if os.path.exists(f"{d}/readings.csv") else [[]]
    last = dict(zip(rows[0], rows[-1]))
    want = {"loss_over_best": r.get("lpdiag/loss_over_best"), "L0_logit_max": r.get("lpdiag/layer0/logit_max"),
            "L1_logit_max": r.get("lpdiag/layer1/logit_max")}
    check("lpdiag alarm --readings: one row per record, its last row the Monitor's readings",
          len(rows) == STEPS + 1 and last.get("step") == str(STEPS - 1)
          and all(k in last and v is not None and abs(float(last[k]) - v) <= 1e-6 * abs(v) for k, v in want.items()),
          f"{out.stderr} {last} {want}")
    check("readings: {} with the alarm off", lpdiag.Monitor(f"{d}/quiet.h5", Model(op_attention), alarm=False).readings() == {})

    guarded, gmon = train(f"{d}/guard.h5", guard="fp32")
    check("guard: layer 1 switched", gmon.guarded_layers == [1] and gmon.alarms[0]["guarded"], str(gmon.alarms))
    check("guard: losses identical up to the alarm's step", guarded[:JUMP + 1] == plain[:JUMP + 1])
    check("guard: losses differ after it (layer 1 runs fp32)", guarded[JUMP + 1:] != plain[JUMP + 1:])
    ev = events(f"{d}/guard.h5")
    check("guard: a guard_switch event for layer 1", any(k == "guard_switch" and layer == 1 for _, k, layer, _ in ev), str(ev))
    specs = [(s, layer, m) for s, k, layer, m in ev if k == "attention_spec"]
    check("guard: the trace records layer 1 as fp32 from then on, layer 0 unchanged",
          any(layer == 1 and "fp32" in m for _, layer, m in specs) and not any(layer == 0 for _, layer, _ in specs), str(specs))

    out = subprocess.run([cli, "analyze", f"{d}/guard.h5"], capture_output=True, text=True)
    check("analyze shows the alarm and the switch", "alarm at step 12 (layer 1)" in out.stdout and "guard at step 12 (layer 1)" in out.stdout,
          out.stdout)
    alarm_line = next((ln for ln in out.stdout.splitlines() if ln.startswith("alarm at step 12")), "")
    # This collapse alarm's evidence is longer than the event's 128 bytes: the trace keeps it cut at a
    # word, marked, and analyze says where the whole of it is.
    check("analyze shows a cut alarm marked, and points to its whole evidence",
          alarm_line.endswith("...") and not alarm_line[:-3].endswith(" ")
          and f"(an alarm's whole evidence: lpdiag alarm {d}/guard.h5)" in out.stdout, out.stdout)
    out = subprocess.run([cli, "analyze", f"{d}/guard.h5", "--json"], capture_output=True, text=True)
    j = json.loads(out.stdout)
    check("analyze --json lists them", [a["layer_index"] for a in j["alarms"]] == [1]
          and [g["layer_index"] for g in j["guard_switches"]] == [1] and j["guard_switches"][0]["switched"], out.stdout[-600:])
    subprocess.run([cli, "report", f"{d}/guard.h5", "-o", f"{d}/guard.html"], capture_output=True, text=True)
    html = open(f"{d}/guard.html").read() if os.path.exists(f"{d}/guard.html") else ""
    check("the report shows the switch", "<b>guard</b> at step 12 (layer 1)" in html, html[:300])
    check("the report points a cut alarm to its whole evidence, unbolded",
          f"<p class=\"open\">(an alarm's whole evidence: lpdiag alarm {d}/guard.h5)</p>" in html, html[-1500:])

    # A layer already switched (here by hand, at step 5) that alarms: it stays as it is, the alarm
    # counts as guarded, and no second switch is written.
    _, amon = train(f"{d}/already.h5", guard="fp32", guard_layer_at=(5, 1))
    ev = events(f"{d}/already.h5")
    check("an alarm in a layer already guarded: guarded, no second switch",
          amon.guarded_layers == [1] and len(amon.alarms) == 1 and amon.alarms[0]["guarded"]
          and [(s, layer) for s, k, layer, _ in ev if k == "guard_switch"] == [(4, 1)], f"{amon.alarms} {ev}")

    # An external kernel in a guarded layer runs on fp32 inputs after the switch.
    dtypes = []

    def kernel(q, k, v, is_causal=False):
        dtypes.append(q.dtype)
        s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)

    _, emon = train(f"{d}/external.h5", fn=lpdiag.observed(kernel, name="mine"), guard="fp32", observe_every=1)
    # Two layers per step: layer 1's calls are the odd ones.
    after = [dt for i, dt in enumerate(dtypes) if i % 2 == 1 and i // 2 > JUMP + 1]
    before = [dt for i, dt in enumerate(dtypes) if i // 2 <= JUMP]
    check("external kernel: switched, fp32 inputs in layer 1 after the alarm, bf16 before",
          emon.guarded_layers == [1] and after and all(dt == torch.float32 for dt in after)
          and all(dt == torch.bfloat16 for dt in before), f"{emon.alarms} {dtypes}")

    def bad(a):
        raise RuntimeError("the user's callback failed")

    # alarm="slow-trigger": the first fit's thresholds for the growth rule; the collapse rule is
    # the same in both, so this run alarms as the default one did, and training is unchanged.
    slow, smon = train(f"{d}/slow.h5", alarm="slow-trigger")
    check("alarm='slow-trigger': the same collapse alarm, training unchanged",
          [(a["step"], a["kind"], a["layer_index"]) for a in smon.alarms] == [(JUMP, "logit_collapse", 1)] and slow == plain,
          str(smon.alarms))

    def alarm_config(path):
        with h5py.File(path, "r") as f:
            return json.loads(f.attrs["run_config"]).get("alarm")

    check("run_config records the alarm's thresholds (off, default, slow-trigger)",
          [alarm_config(f"{d}/{n}.h5") for n in ("off", "plain", "slow")] == ["off", "default", "slow-trigger"],
          str([alarm_config(f"{d}/{n}.h5") for n in ("off", "plain", "slow")]))
    out = subprocess.run([cli, "analyze", f"{d}/slow.h5", "--json"], capture_output=True, text=True)
    text = subprocess.run([cli, "analyze", f"{d}/slow.h5"], capture_output=True, text=True).stdout
    check("analyze names the live alarm's thresholds",
          json.loads(out.stdout).get("alarm_thresholds") == "slow-trigger" and "live alarm thresholds: slow-trigger" in text
          and "live alarm thresholds" not in subprocess.run([cli, "analyze", f"{d}/plain.h5"], capture_output=True, text=True).stdout,
          text[:600])
    subprocess.run([cli, "report", f"{d}/slow.h5", "-o", f"{d}/slow.html"], capture_output=True, text=True)
    html = open(f"{d}/slow.html").read() if os.path.exists(f"{d}/slow.html") else ""
    check("the report names them too", "<b>live alarm thresholds</b>: slow-trigger" in html, html[:300])
    try:
        train(f"{d}/named.h5", alarm="early")
        check("an unknown alarm name is refused", False)
    except ValueError as e:
        check("an unknown alarm name is refused, the names listed, no file written",
              "slow-trigger" in str(e) and not os.path.exists(f"{d}/named.h5"), str(e))

    l2, _ = train(f"{d}/bad.h5", on_alarm=bad)
    check("an on_alarm that raises does not stop training", l2 == plain)
    for kw, what in (({"guard": "bf16"}, "an unknown guard"), ({"guard": "fp32", "alarm": False}, "a guard without the alarm")):
        try:
            train(f"{d}/x.h5", **kw)
            check(f"{what} is refused", False)
        except ValueError as e:
            check(f"{what} is refused", "guard" in str(e), str(e))
finish()
