#!/usr/bin/python3
"""The seed-numerics runs of docs/results/reproduction.md (tests/fixtures/seed: a small GPT-2 trained on
the H200 with lpdiag's seed CUDA kernels, bf16 autocast, and its fp32-attention counterfactual)
through `lpdiag analyze` and `lpdiag check`, with the verdicts the runs showed:
 - seed/none at lr 4e-3: healthy (its max logit rose to 216 by step ~600 and settled near 60
   while the loss tracked the fp32 run's; the verdict formerly called this an
   attention-logit failure), biased delta error and the repeated-maxima trigger present, no
   chain (no W_Q growth singled out), an early warning; nothing to attribute against fp32;
 - GPT-2 small (12 layers, width 768, block 1024, batch 16) at lr 1e-3 on the seed-mma kernels,
   the paper's recipe and 512-key tile, 5,000 steps (each arm alone on the H200):
   seed-mma/none learned faster than fp32 until step ~4,800 and then its loss exploded (0.15 ->
   0.8, gradient norm to 40) while fp32 attention (SDPA, same seed and data order) and the
   paper's fix (not a fixture: 7.3 MB) stayed healthy: the paper's Figure 7 in miniature. Every
   link in layer 2 head 7: the trigger present (2-4% of rows) before the biased delta error
   (from step 2,891) and stepping up at 3,741, sigma_1 of that head's W_Q growing from 4,239
   beyond all others, the layer's W_Q updates aligning from 4,766, the loss explosion at 4,834.
   By its own trace a candidate, undecided (the delta error every 50th step is too sparse to test
   that the bias drives the growth); against fp32 a causal chain decided by the reference. This
   pair replaced the (2,800 and 2,400 steps of a 3,000-step schedule, no failure).
 - fp32 at lr 4e-3: healthy, no attention counters (PyTorch's attention), check clean.
 - lr 6e-3 (2,500 steps, seed 1): seed/none and seed/paper healthy by their own
   traces with an attention-logit warning (logits to 1,184 and 1,968 while the loss kept
   falling 14% over the second half); against fp32 (SDPA, same seed and data order) seed/none's
   loss ended 12% higher, a degradation attributable to the numerics (true), seed/paper's 2%
   (nothing to attribute, null). formerly the verdict called all three lpdiag arms
   failed (attention_logit_growth from step 15).
 - GPT-2 small at lr 2e-3 (warmup 200, 2,000-step cosine, same seed and data order):
   seed-mma/none (four arms sharing the GPU, cut at 1,349 steps) failed
   (attention_logit_growth from step 106, max logit 4,900, its loss rising 2.33 -> 2.49 on the
   character-frequency plateau), no chain (no biased delta error, no W_Q head singled out).
   seed-mma/paper (all 2,000 steps) failed the same way (logits to 11,072, the loss
   at 2.33 on the plateau to the end, a loss_plateau warning) and, since the long C2
   windows, shows the fix's own biased delta error (z +11.9 in layer 11 head 11 from step 700,
   after the failure began: said so, no chain), and fp32 (SDPA, all
   2,000 steps) left the plateau at step ~1,400 and ended at 1.91: healthy, no warning. So
   against fp32 both bf16 failures are attributable to the attention numerics (true: fp32's loss
   12% lower over the steps both reached, 22% at the end), and seed/none against its paper-fix
   twin is not (false: the fix fails alike). formerly the fp32 and paper arms were cut
   at ~1,150-1,300 steps, both on the plateau, and every attribution was null.
 - PyTorch's own bf16 attention (cuDNN) at lr 2e-3 seed 1: on the plateau to the end
   (2.355) where fp32 learned (1.911): healthy with a plateau warning by its own trace (no logits
   recorded), a degradation attributable to the numerics against fp32.
 - The same at seed 2: seed-mma/none failed (logits to 12,000, the loss on the plateau
   at 2.43) and so did seed-mma/paper (logits to 5,920), but the fix's loss left the plateau and
   ended at 1.96, 24% lower: against its paper-fix twin seed/none is undecided (null: the fix
   lessened the failure without preventing it), no longer "fails alike".
   seed_runs.py LPDIAG_BINARY FIXTURE_DIR"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_runs import analyze  # noqa: E402


def check_gpt2_failure_at_1e_3(lpdiag, d, check):
    """The paper's failure at GPT-2 small: seed-mma/none against fp32, 5,000 steps."""
    name = "gpt2-seedmma-none-1e-3-5k"
    j = analyze(lpdiag, f"{d}/{name}.h5")
    run, chain, links = j["run"], j["chain"], j["chain"]["links"]
    onset = (run["failure"] or {}).get("onset_step")
    check(f"{name}: failed, loss_explosion from step {onset} (the loss left 0.15 at ~4,830)",
          not run["healthy"] and run["failure"]["kind"] == "loss_explosion" and 4700 <= onset <= 4900)
    check(f"{name}: every link present ({j['missing_links']})", j["missing_links"] == [])
    where = {k: (v.get("layer_index"), v.get("head")) for k, v in links.items()}
    check(f"{name}: C1, C2 and C4 at layer 2 head 7, C3 in layer 2 ({where})",
          all(where[k] == (2, 7) for k in ("C1", "C2", "C4")) and where["C3"][0] == 2)
    on = {k: v["onset_step"] for k, v in links.items()}
    check(f"{name}: onsets bias < growth < failure, aligned updates before the failure ({on})",
          on["C2"] < on["C4"] < on["C5"] and on["C3"] <= on["C5"] and on["C2"] < on["C1"])
    check(f"{name}: the trigger said present before the bias", any("trigger was present before the bias" in f for f in j["findings"]))
    check(f"{name}: by its own trace an undecided candidate at layer 2 head 7, for the sparse delta records",
          not chain["found"] and chain["undecided"] and (chain["layer_index"], chain["head"]) == (2, 7)
          and any("recorded in only" in f for f in j["findings"]))
    rc = subprocess.run([lpdiag, "check", f"{d}/{name}.h5"], capture_output=True, text=True)
    check(f"{name}: check exits 1 and names the failure and the candidate (got {rc.returncode})",
          rc.returncode == 1 and "loss_explosion" in rc.stdout and "candidate causal chain at layer 2 head 7" in rc.stdout)
    j = analyze(lpdiag, f"{d}/{name}.h5", "--reference", f"{d}/gpt2-fp32-1e-3-5k.h5")
    ref, chain = j["reference"], j["chain"]
    check(f"{name} against gpt2-fp32-1e-3-5k: attributable, the reference healthy ({ref['evidence'][-120:]})",
          ref["attributable_to_attention_numerics"] is True and ref["failed"] is False)
    check(f"{name} against gpt2-fp32-1e-3-5k: a causal chain at layer 2 head 7, decided by the reference",
          chain["found"] and not chain["undecided"] and (chain["layer_index"], chain["head"]) == (2, 7)
          and j["driving_evidence"] == "reference" and any("decided by the reference run" in f for f in j["findings"]))
    g = ref["head_growth"] or {}
    # The head C4 singled out, measured in both runs over C4's onset..the failure: it grew ~3x in
    # RUN and stayed flat (within 1.3x, C4's own margin) in REF, as REF's median head did.
    check(f"{name} against gpt2-fp32-1e-3-5k: layer 2 head 7's W_Q growth is the numerics' doing ({g})",
          (g.get("layer_index"), g.get("head")) == (2, 7) and g.get("by_numerics") is True and g["run_growth"] >= 2
          and g["ref_growth"] < 1.3 and g["from_step"] == on["C4"] and g["to_step"] == onset
          and any("that head's growth is the attention numerics' doing" in f for f in j["findings"]))
    text = subprocess.run([lpdiag, "analyze", f"{d}/{name}.h5", "--reference", f"{d}/gpt2-fp32-1e-3-5k.h5"], capture_output=True,
                          text=True).stdout
    check(f"{name} against gpt2-fp32-1e-3-5k: the headline names the chain and what decided it",
          text.splitlines()[2].startswith("causal chain at layer 2 head 7 (confidence") and "decided by the reference run)" in text
          and "attributable to the attention numerics (against" in text.splitlines()[3] and text.splitlines()[3].endswith("YES"))


def check_gpt2_failure_at_1e_3_seed_3(lpdiag, d, check):
    """Seed 3 of the same configuration, thinned to every 10th record (`scripts/pack-trace
    --every 10`: the loss every 10th step, weights whole, delta errors every 50th step whole).
    seed-mma/none's loss exploded (0.36 at step ~3,975 -> 2.76 at 5,000, no one-bin spike in the
    whole trace) after its logits had collapsed in the first 250 steps and the loss had learned
    through that; every link in layer 1 head 0. The rules this asserts (a rise the loss learned
    through is a warning; a divergence to twice the best is an explosion) were set on this run's
    whole trace; the thinned trace is a second reading of it."""
    name, fp32 = "gpt2-seedmma-none-1e-3-5k-s3-every10", "gpt2-fp32-1e-3-5k-s3-every10"
    j = analyze(lpdiag, f"{d}/{name}.h5")
    run, links = j["run"], j["chain"]["links"]
    onset = (run["failure"] or {}).get("onset_step")
    check(f"{name}: failed, loss_explosion from step {onset} (the loss left ~0.36 at ~4,000-4,700)",
          not run["healthy"] and run["failure"]["kind"] == "loss_explosion" and 4000 <= onset <= 4700)
    check(f"{name}: the early logit collapse is a warning the run learned through",
          any(w["kind"] == "attention_logit_growth" and "learned through it" in w["evidence"] for w in run["warnings"]))
    check(f"{name}: every link present ({j['missing_links']})", j["missing_links"] == [])
    where = {k: (v.get("layer_index"), v.get("head")) for k, v in links.items()}
    check(f"{name}: C1, C2 and C4 at layer 1 head 0, C3 in layer 1 ({where})",
          all(where[k] == (1, 0) for k in ("C1", "C2", "C4")) and where["C3"][0] == 1)
    on = {k: v["onset_step"] for k, v in links.items()}
    check(f"{name}: every link before the failure's C5 ({on})", max(on[k] for k in ("C1", "C2", "C3", "C4")) < on["C5"])
    rc = subprocess.run([lpdiag, "check", f"{d}/{name}.h5"], capture_output=True, text=True)
    check(f"{name}: check exits 1 naming loss_explosion (got {rc.returncode})", rc.returncode == 1 and "loss_explosion" in rc.stdout)
    j = analyze(lpdiag, f"{d}/{fp32}.h5")
    check(f"{fp32}: healthy, no chain", j["run"]["healthy"] and not j["chain"]["found"])
    j = analyze(lpdiag, f"{d}/{name}.h5", "--reference", f"{d}/{fp32}.h5")
    ref, chain, g = j["reference"], j["chain"], j["reference"]["head_growth"] or {}
    check(f"{name} against {fp32}: attributable, a causal chain at layer 1 head 0 decided by the reference",
          ref["attributable_to_attention_numerics"] is True and chain["found"] and not chain["undecided"]
          and (chain["layer_index"], chain["head"]) == (1, 0) and j["driving_evidence"] == "reference")
    check(f"{name} against {fp32}: layer 1 head 0 grew >= 3x in RUN, < 1.3x in fp32 ({g})",
          (g.get("layer_index"), g.get("head")) == (1, 0) and g.get("by_numerics") is True and g["run_growth"] >= 3
          and g["ref_growth"] < 1.3)


def check_gpt2_failure_at_1e_3_seed_10(lpdiag, d, check):
    """Seed 10 of the same configuration (made after the alarm's thresholds were frozen), packed
    to every 20th record: the delta error, recorded every 50th step, is left on every 100th. Its
    loss spiked at step ~4,100 and exploded from ~4,900; the W_Q of layer 2 head 5 grew from step
    ~2,460 and the bias in that head shows first on the record at step 2,800, the record before
    it at 2,700. Dated to the record that shows it, the bias would be 340 steps after the growth,
    beyond the ordering's slack (~245 steps), and the chain refused; it may have begun anywhere
    after 2,700, within the slack, so no order is read and the chain is named at that head, an
    undecided candidate (the full trace gives the same)."""
    name = "gpt2-seedmma-none-1e-3-5k-s10"
    j = analyze(lpdiag, f"{d}/{name}.h5")
    run, chain, links = j["run"], j["chain"], j["chain"]["links"]
    check(f"{name}: failed ({(run['failure'] or {}).get('kind')} from {(run['failure'] or {}).get('onset_step')})",
          not run["healthy"] and 4000 <= run["failure"]["onset_step"] <= 4400)
    on = {k: v["onset_step"] for k, v in links.items()}
    check(f"{name}: C4 at layer 2 head 5, the bias there first recorded more than the slack after it ({on})",
          (links["C4"]["layer_index"], links["C4"]["head"]) == (2, 5) and on["C2"] - on["C4"] > 250)
    check(f"{name}: the record spacing said, no order read between bias and growth",
          any(f.startswith("C2 is dated to step") and "no order between them is read" in f for f in j["findings"]))
    check(f"{name}: an undecided candidate chain at layer 2 head 5",
          not chain["found"] and chain["undecided"] and (chain["layer_index"], chain["head"]) == (2, 5))



def check_gpt2_stall_on_sparse_records(lpdiag, d, check):
    """Seed 18 of the same configuration, packed to every 20th record, keeps one step's loss in
    20. Its full trace left its trend at step 4,102 and ended at ~1.9x its best: FAILED,
    loss_stall, a candidate chain at layer 1 head 4. On the packed records the end is 5.3
    one-record noise s.d. above the best; the stall rule compares the two medians by their own
    standard error (12 of them here), so the verdict is the full trace's. The healthy seeds packed
    the same way, whose loss kept falling, stay healthy: the rule may not read their noise as a
    stall. The run's live loss alarm (step 4,151) dates the failure, the records' stall coming
    later (4,400) than the full trace's."""
    name = "gpt2-seedmma-none-1e-3-5k-s18"
    j = analyze(lpdiag, f"{d}/{name}.h5")
    run, chain = j["run"], j["chain"]
    stalls = [x["onset_step"] for x in run["signs"] if x["kind"] == "loss_stall"]
    check(f"{name}: failed, the records read as a loss_stall ({stalls})", not run["healthy"] and len(stalls) == 1 and 4000 <= stalls[0] <= 4500)
    check(f"{name}: dated by the live loss alarm ({(run['failure'] or {}).get('kind')} from {(run['failure'] or {}).get('onset_step')})",
          run["failure"]["onset_step"] == 4151 and "live alarm" in run["failure"]["evidence"])
    check(f"{name}: an undecided candidate chain at layer 1 head 4 ({chain.get('layer_index')}, {chain.get('head')})",
          not chain["found"] and chain["undecided"] and (chain["layer_index"], chain["head"]) == (1, 4))
    for seed in (11, 12, 13, 14, 15, 16, 17, 19, 20):
        name = f"gpt2-seedmma-none-1e-3-5k-s{seed}"
        run = analyze(lpdiag, f"{d}/{name}.h5")["run"]
        check(f"{name}: healthy ({(run['failure'] or {}).get('kind')})", run["healthy"] and run["failure"] is None)


def check_gpt2_failure_after_the_schedule(lpdiag, d, check):
    """Seeds 21 and 22 ran the same configuration on past its 5,000-step schedule to step 6,000 at
    the schedule's final lr. Seed 22 was healthy at step 5,000 and failed from step 5,672 (full
    trace: loss_explosion, a chain at layer 2 head 9); packed to every 10th record its verdict is
    still a loss explosion after step 5,000 with its candidate at that head. Seed 21 stays healthy."""
    name = "gpt2-seedmma-none-1e-3-6k-s22"
    j = analyze(lpdiag, f"{d}/{name}.h5")
    run, chain = j["run"], j["chain"]
    failure = run["failure"] or {}
    check(f"{name}: failed, loss_explosion after step 5000 ({failure.get('kind')} from {failure.get('onset_step')})",
          not run["healthy"] and failure.get("kind") == "loss_explosion" and 5000 < failure.get("onset_step", 0) <= 5800)
    check(f"{name}: its chain or candidate at layer 2 head 9 ({chain.get('layer_index')}, {chain.get('head')})",
          (chain["found"] or chain["undecided"]) and (chain["layer_index"], chain["head"]) == (2, 9))
    name = "gpt2-seedmma-none-1e-3-6k-s21"
    run = analyze(lpdiag, f"{d}/{name}.h5")["run"]
    check(f"{name}: healthy ({(run['failure'] or {}).get('kind')})", run["healthy"] and run["failure"] is None)


def check_gpt2_guard_after_the_onset(lpdiag, d, check):
    """Seed 22 again, with --guard fp32 and --deterministic, the same build and kind of card as its
    unguarded run: one trajectory up to the switch (the recorded losses and gradient norms equal
    bit for bit at every step both packed traces keep up to 5,740; the loss is stored exactly by the
    packing). The live alarms came after the onset (5,672): growth in layer 2 at 5,740 and in
    layer 1 at 5,780, each switching its layer to fp32. Unguarded, the loss over steps 5,800-5,990
    stayed 2x its best before the onset (0.0905); guarded it came back to within 1.3x of it
    (measured 1.17x and 2.20x, the means of the records every 20th step; both traces are fixed
    data, so the margins only say which side of the claim each is on)."""
    import h5py
    import numpy as np

    base = "gpt2-seedmma-none-1e-3-6k-s22"
    j = analyze(lpdiag, f"{d}/{base}-guarded.h5")
    switches = [(g["step"], g["layer_index"], g["switched"]) for g in j["guard_switches"]]
    check(f"{base}-guarded: layer 2 switched at 5740, layer 1 at 5780 ({switches})", switches == [(5740, 2, True), (5780, 1, True)])
    # Its records (every 20th step) hold too few of the spike's ~70 steps for the spike and stall
    # rules; the live loss alarm it recorded, which read every step, makes the verdict.
    failure = j["run"]["failure"] or {}
    check(f"{base}-guarded: FAILED by its live loss alarm at 5730 ({failure.get('kind')} from {failure.get('onset_step')})",
          not j["run"]["healthy"] and failure.get("kind") == "loss_explosion" and failure.get("onset_step") == 5730
          and "live alarm" in failure.get("evidence", ""))

    def losses(name):
        with h5py.File(f"{d}/{name}.h5", "r") as f:
            return dict(zip(f["step"][:].tolist(), zip(f["scalars/loss"][:].tolist(), f["scalars/grad_norm"][:].tolist())))

    g, u = losses(f"{base}-guarded"), losses(base)
    common = sorted(set(g) & set(u))
    before = [s for s in common if s <= 5740]
    check(f"{base}-guarded: the same trajectory as unguarded up to the switch ({len(before)} common records)",
          len(before) >= 280 and all(g[s] == u[s] for s in before))
    late = [s for s in common if 5800 <= s <= 5990]
    best = 0.09045
    ratio_g = np.mean([g[s][0] for s in late]) / best
    ratio_u = np.mean([u[s][0] for s in late]) / best
    check(f"{base}-guarded: the loss came back after the switch ({ratio_g:.2f}x its best before the onset; unguarded {ratio_u:.2f}x)",
          ratio_g <= 1.3 and ratio_u >= 2.0)

    # analyze on a failed run the guard switched after the onset names the switch and gives the loss
    # after it against the loss before the onset. The packed guarded trace's onset is its live
    # alarm's step (its records miss the spike), so the unguarded one (every 10th: FAILED from
    # 5,750 by its records) is given the guarded run's switch event at 5,760 in a copy. The means are checked against the records
    # to 2% (analyze reads 512 bins; a bin at a span's edge can take or leave one record).
    import shutil
    with tempfile.TemporaryDirectory() as tmp:
        doctored = f"{tmp}/switched.h5"
        shutil.copy(f"{d}/{base}.h5", doctored)
        with h5py.File(doctored, "r+") as f:
            ev = f["events"]
            ev.resize((ev.shape[0] + 1,))
            ev[-1] = (5760, b"guard_switch", 2, 10, float("nan"), b"fp32: growth; layer 2 switched to fp32 attention from the next step")
        j = analyze(lpdiag, doctored)
        go = j.get("guard_outcome") or {}
        onset = j["run"]["failure"]["onset_step"]
        span = (5999 - 0) // 10
        after = np.mean([u[s][0] for s in u if s >= 5860])
        before_ = np.mean([u[s][0] for s in u if onset - span <= s < onset])
        check(f"analyze --json: the guard's switch after the onset, the loss after it and before the onset ({go})",
              go.get("after_onset") is True and go.get("switch_step") == 5760 and go.get("layer_index") == 2
              and abs(go["loss_after"] - after) <= 0.02 * after and abs(go["loss_before"] - before_) <= 0.02 * before_)
        out = subprocess.run([lpdiag, "analyze", doctored], capture_output=True, text=True).stdout
        check(f"analyze: the guard line ({[x for x in out.splitlines() if x.startswith('guard:')]})",
              any(x.startswith(f"guard: layer 2 switched at step 5760, {5760 - onset} steps after the failure's onset; the loss from step 5860")
                  for x in out.splitlines()))
        nxt = [x for x in out.splitlines() if x.startswith("next:")]
        check(f"analyze: next says the switch came too late and to switch before the onset ({nxt})",
              nxt == [f"next: the guard switched layer 2 at step 5760, {5760 - onset} steps after the failure began, too late to "
                      f"prevent it: restart from a checkpoint taken well before step {onset} with that layer switched from there "
                      "(mon.guard_layer(2); gpt2_train --guard-at STEP:2; the earlier the switch, the more it saves); "
                      "`lpdiag alarm RUN.h5` shows when the warning came"])
        subprocess.run([lpdiag, "report", doctored, "-o", f"{tmp}/r.html"], capture_output=True, text=True)
        html = open(f"{tmp}/r.html").read() if os.path.exists(f"{tmp}/r.html") else ""
        check("report: the guard line", "<b>guard</b>: layer 2 switched at step 5760" in html)
        # A switch before the onset that did not prevent the failure: in another layer than the
        # chain's, next names the chain's layer; in the chain's own layer, the reference run.
        for layer, want in ((1, f"next: the run failed {onset - 5500} steps after the guard switched layer 1, and the chain is at "
                                "layer 2: guard that layer too (mon.guard_layer(2); gpt2_train --guard-at STEP:2)"),
                            (2, f"next: the run failed {onset - 5500} steps after the guard switched layer 2: rerun the same config, "
                                "seed and data with fp32 attention in every layer and pass it as --reference, which says whether attention "
                                "rounding is the cause")):
            early = f"{tmp}/early-{layer}.h5"
            shutil.copy(f"{d}/{base}.h5", early)
            with h5py.File(early, "r+") as f:
                ev = f["events"]
                ev.resize((ev.shape[0] + 1,))
                ev[-1] = (5500, b"guard_switch", layer, 10, float("nan"), b"fp32: by guard_layer(); switched from the next step")
            out = subprocess.run([lpdiag, "analyze", early], capture_output=True, text=True).stdout
            nxt = [x for x in out.splitlines() if x.startswith("next:")]
            check(f"analyze: a switch of layer {layer} before the onset that did not prevent the failure ({nxt})", nxt == [want])
    check(f"{base}: no guard, no guard outcome", analyze(lpdiag, f"{d}/{base}.h5").get("guard_outcome", 0) is None)


def check_c3_cut_off_by_the_trace_end(lpdiag, d, check):
    """A run that failed so close to its trace's end that a step up of the layer's W_Q updates at
    the failure could not have been read (the change-point test needs 4% of the trace after it) is
    not a run without C3: `analyze` names an undecided candidate and says C3 was untested. Seed
    22's trace (packed, every 10th record: FAILED from 5,750), cut at step 5,800 and with every
    W_Q update statistic held at its level before step 5,000 (C3 removed; nothing else changed):
    the candidate at layer 2 head 9, C3 untested. The control: a synthetic chain (`lpdiag synth
    --kind chain --seed 7 --records 2000`, its failure at step 2,149 of 4,130) with the same C3
    removal, where the trace runs on long after the failure: no causal chain, C3 missing."""
    import h5py
    import numpy as np

    def cut(src, dst, last):
        with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
            n, keep = len(f["step"]), int((f["step"][:] <= last).sum())
            for k, v in f.attrs.items():
                g.attrs[k] = v

            def copy(name, o):
                if isinstance(o, h5py.Group):
                    for k, v in o.attrs.items():
                        g.require_group(name).attrs[k] = v
                    return
                data = o[()]
                if name == "events":
                    data = data[data["step"] <= last]
                elif o.ndim >= 1 and o.shape[0] == n:
                    data = data[:keep]
                ds = g.create_dataset(name, data=data, maxshape=(None,) + o.shape[1:] if o.ndim else None, chunks=True if o.ndim else None)
                for k, v in o.attrs.items():
                    ds.attrs[k] = v
            f.visititems(copy)

    def remove_c3(path, before):
        with h5py.File(path, "r+") as f:
            steps = f["step"][:]
            for m in f["updates"]:
                for k in ("concentration", "similarity_prev"):
                    v = f["updates"][m][k][:]
                    early = v[(steps < before) & np.isfinite(v)]
                    if early.size:
                        v[np.isfinite(v)] = np.median(early)
                        f["updates"][m][k][:] = v

    with tempfile.TemporaryDirectory() as tmp:
        short = f"{tmp}/s22-to-5800.h5"
        cut(f"{d}/gpt2-seedmma-none-1e-3-6k-s22.h5", short, 5800)
        remove_c3(short, 5000)
        j = analyze(lpdiag, short)
        chain = j["chain"]
        check(f"seed 22 cut at 5800, C3 removed: failed ({(j['run']['failure'] or {}).get('onset_step')}), a candidate at layer 2 head 9 "
              f"with C3 untested (undecided {chain['undecided']}, {chain['layer_index']}, {chain['head']}, {j.get('untested_link')}, "
              f"missing {j['missing_links']})",
              not j["run"]["healthy"] and chain["undecided"] and not chain["found"] and (chain["layer_index"], chain["head"]) == (2, 9)
              and j.get("untested_link") == "C3" and j["missing_links"] == ["C3"]
              and any(x.startswith("C3 could not be tested") for x in j["findings"]))
        out = subprocess.run([lpdiag, "analyze", short], capture_output=True, text=True).stdout
        check("its headline names the candidate and the untested C3",
              "candidate chain at layer 2 head 9: every link present but C3, which the trace ends too soon after the failure to show" in out)
        check("its next step: train on past the failure, or a reference run",
              "next: the trace ends too soon after the failure to show C3: train on past the failure with the Monitor recording" in out)
        subprocess.run([lpdiag, "report", short, "-o", f"{tmp}/r.html"], capture_output=True, text=True)
        html = open(f"{tmp}/r.html").read() if os.path.exists(f"{tmp}/r.html") else ""
        check("the report says C3 was untested", "every link is present but C3, which the trace ends too soon after the failure to show" in html)
        # Rejected on another link, the headline gives that reason, not "missing C3": the same cut
        # trace with layer 2's W_Q head spectral norms of heads 3 and 9 swapped (the growth moved
        # to head 3, away from the trigger and the bias).
        with h5py.File(short, "r+") as f:
            hs = f["weights/h.2.attn.q/head_spectral_norm"]
            v = hs[:]
            v[:, [3, 9]] = v[:, [9, 3]]
            hs[:] = v
        out = subprocess.run([lpdiag, "analyze", short], capture_output=True, text=True).stdout
        check("with the growth moved to another head: no causal chain for that reason, C3 untested, not 'missing C3'",
              "no causal chain: the links are not localized together (C1 layer 2 head 9, C2 layer 2 head 9, C3 untested, C4 layer 2 head 3)"
              " (C3 untested: the trace ends too soon after the failure)" in out)
        syn = f"{tmp}/synth.h5"
        subprocess.run([lpdiag, "synth", syn, "--kind", "chain", "--seed", "7", "--records", "2000"], capture_output=True, check=True)
        remove_c3(syn, 1367)
        j = analyze(lpdiag, syn)
        check(f"synthetic chain (lpdiag synth --kind chain --seed 7 --records 2000), C3 removed, the trace long after the failure: no "
              f"causal chain, C3 missing, none untested "
              f"({j['missing_links']}, {j.get('untested_link')})",
              not j["run"]["healthy"] and not j["chain"]["found"] and not j["chain"]["undecided"] and j["missing_links"] == ["C3"]
              and j.get("untested_link") is None)


def main():
    lpdiag, d = sys.argv[1], sys.argv[2]
    bad = 0

    def check(what, ok):
        nonlocal bad
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        bad += not ok

    for name, present in (("seed-none-4e-3", {"C1", "C2"}), ("fp32-4e-3", set()), ("gpt2-fp32-1e-3-5k", set())):
        j = analyze(lpdiag, f"{d}/{name}.h5")
        run, chain = j["run"], j["chain"]
        check(f"{name}: healthy", run["healthy"] and run["failure"] is None)
        check(f"{name}: no causal chain", not chain["found"])
        found = {k for k, v in chain["links"].items() if v["present"]}
        check(f"{name}: links present {sorted(found & {'C1', 'C2'})} (expected {sorted(present)})", found & {"C1", "C2"} == present)
        if "C2" in present:
            check(f"{name}: the early warning is said", any("early warning" in f for f in j["findings"]))
        if name == "gpt2-fp32-1e-3-5k":
            check(f"{name}: no warning, no growth singled out (C4 missing)", not run["warnings"] and not chain["links"]["C4"]["present"])
        rc = subprocess.run([lpdiag, "check", f"{d}/{name}.h5"], capture_output=True, text=True)
        want = 1 if "C2" in present else 0
        check(f"{name}: check exits {want} (got {rc.returncode})", rc.returncode == want and ("biased rounding" in rc.stdout) == bool(want))
    ref = analyze(lpdiag, f"{d}/seed-none-4e-3.h5", "--reference", f"{d}/fp32-4e-3.h5")["reference"]
    check("seed-none-4e-3 against fp32-4e-3: nothing to attribute (null), the reference healthy",
          ref["attributable_to_attention_numerics"] is None and ref["failed"] is False)
    check_gpt2_failure_at_1e_3(lpdiag, d, check)
    check_gpt2_failure_at_1e_3_seed_3(lpdiag, d, check)
    check_gpt2_failure_at_1e_3_seed_10(lpdiag, d, check)
    check_gpt2_stall_on_sparse_records(lpdiag, d, check)
    check_gpt2_failure_after_the_schedule(lpdiag, d, check)
    # Two checks read or rewrite the fixtures with h5py. The build picks a Python that has it
    # (LPDIAG_H5PY_PYTHON in tests/CMakeLists.txt); where none does, they are skipped, and said so.
    skipped = []
    for needs_h5py in (check_gpt2_guard_after_the_onset, check_c3_cut_off_by_the_trace_end):
        if importlib.util.find_spec("h5py") is None:
            skipped.append(needs_h5py.__name__)
            print(f"skip {needs_h5py.__name__}: h5py is not installed")
        else:
            needs_h5py(lpdiag, d, check)
    for name in ("seed-none-6e-3", "seed-paper-6e-3"):
        j = analyze(lpdiag, f"{d}/{name}.h5", "--reference", f"{d}/fp32-6e-3.h5")
        run, ref = j["run"], j["reference"]
        check(f"{name}: healthy, with an attention_logit_growth warning",
              run["healthy"] and [w["kind"] for w in run["warnings"]] == ["attention_logit_growth"])
        check(f"{name}: no causal chain", not j["chain"]["found"])
        want = True if name == "seed-none-6e-3" else None
        check(f"{name} against fp32-6e-3: attributable {want} ({ref['evidence'][-120:]})",
              ref["attributable_to_attention_numerics"] is want and ref["failed"] is False)
        # A degradation has no failure onset: no finding may place its bias "after the failure".
        check(f"{name}: no finding puts the delta-error bias after a failure the run did not have",
              not any("after the failure" in f for f in j["findings"]))
    j = analyze(lpdiag, f"{d}/fp32-6e-3.h5")
    check("fp32-6e-3: healthy, no warning (no logits recorded)", j["run"]["healthy"] and not j["run"]["warnings"])
    j = analyze(lpdiag, f"{d}/gpt2-seedmma-none-2e-3.h5", "--reference", f"{d}/gpt2-fp32-2e-3.h5")
    run, ref = j["run"], j["reference"]
    check(f"gpt2-seedmma-none-2e-3: failed, attention_logit_growth ({(run['failure'] or {}).get('onset_step')})",
          not run["healthy"] and run["failure"]["kind"] == "attention_logit_growth" and run["max_logit"] > 1000)
    check("gpt2-seedmma-none-2e-3: no causal chain, C2 missing", not j["chain"]["found"] and "C2" in j["missing_links"])
    check(f"gpt2-seedmma-none-2e-3 against gpt2-fp32-2e-3: attributable, fp32 learned ({ref['evidence'][-150:]})",
          ref["attributable_to_attention_numerics"] is True and ref["failed"] is False)
    rc = subprocess.run([lpdiag, "check", f"{d}/gpt2-seedmma-none-2e-3.h5"], capture_output=True, text=True)
    check(f"gpt2-seedmma-none-2e-3: check exits 1 and names the failure (got {rc.returncode})",
          rc.returncode == 1 and "attention_logit_growth" in rc.stdout + rc.stderr)
    j = analyze(lpdiag, f"{d}/gpt2-seedmma-paper-2e-3.h5", "--reference", f"{d}/gpt2-fp32-2e-3.h5")
    run, ref = j["run"], j["reference"]
    kinds = [w["kind"] for w in run["warnings"]]
    check(f"gpt2-seedmma-paper-2e-3: failed, attention_logit_growth (max logit {run['max_logit']}), a loss_plateau warning ({kinds})",
          not run["healthy"] and run["failure"]["kind"] == "attention_logit_growth" and run["max_logit"] > 5000
          and "loss_plateau" in kinds)
    c2 = j["chain"]["links"]["C2"]
    check(f"gpt2-seedmma-paper-2e-3: no causal chain; C2 present on a long window (the fix's own delta bias, z ~ +12), from step "
          f"{c2.get('onset_step')}, after the failure, and said so",
          not j["chain"]["found"] and c2["present"] and "long-window" in c2["evidence"] and c2["onset_step"] > 300
          and any("began at step" in f and "after the failure had begun" in f for f in j["findings"]))
    m = re.search(r"(\d+) of 144 heads reached 1,000", run["failure"]["evidence"])
    check(f"gpt2-seedmma-paper-2e-3: the collapse is located (layer {run['failure'].get('layer_index')} head "
          f"{run['failure'].get('head')} first) and is model-wide ({m and m.group(1)} of 144 heads reached 1,000)",
          0 <= run["failure"].get("layer_index", -1) < 12 and 0 <= run["failure"].get("head", -1) < 12 and m and int(m.group(1)) >= 100)
    check(f"gpt2-seedmma-paper-2e-3 against gpt2-fp32-2e-3: attributable ({ref['evidence'][-120:]})",
          ref["attributable_to_attention_numerics"] is True and ref["failed"] is False)
    check("gpt2-seedmma-paper-2e-3 with --reference: the findings give the answer, not the open question nor the run to make",
          any("decides: attributable" in f and "not through the chain's biased rounding" in f for f in j["findings"])
          and not any("is open" in f for f in j["findings"]) and j["decide_with"] is None)
    rc = subprocess.run([lpdiag, "check", f"{d}/gpt2-seedmma-paper-2e-3.h5"], capture_output=True, text=True)
    check(f"gpt2-seedmma-paper-2e-3: check exits 1 and names the failure (got {rc.returncode})",
          rc.returncode == 1 and "attention_logit_growth" in rc.stdout + rc.stderr)
    j = analyze(lpdiag, f"{d}/gpt2-fp32-2e-3.h5")
    check(f"gpt2-fp32-2e-3: healthy, no warning, no chain (final loss {j['run']['final_loss']:.3f})",
          j["run"]["healthy"] and not j["run"]["warnings"] and not j["chain"]["found"] and j["run"]["final_loss"] < 2.1)
    rc = subprocess.run([lpdiag, "check", f"{d}/gpt2-fp32-2e-3.h5"], capture_output=True, text=True)
    # PyTorch's fp32 attention records no counters: the trigger and bias tests are said not run.
    check(f"gpt2-fp32-2e-3: check passes (exit {rc.returncode}), no warning on stderr, the tests without data said not run",
          rc.returncode == 0 and "warning" not in rc.stderr and "not run: trigger" in rc.stderr and "not run: biased rounding" in rc.stderr)
    ref = analyze(lpdiag, f"{d}/gpt2-seedmma-none-2e-3.h5", "--reference", f"{d}/gpt2-seedmma-paper-2e-3.h5")["reference"]
    check(f"gpt2-seedmma-none-2e-3 against its paper-fix twin: not attributable, the fix fails alike ({ref['evidence'][-100:]})",
          ref["attributable_to_attention_numerics"] is False and ref["failed"] is True)
    # Seed 2: both collapse their logits, but the fix's loss leaves the plateau.
    for name, lo, hi in (("gpt2-seedmma-none-2e-3-s2", 2.3, 2.6), ("gpt2-seedmma-paper-2e-3-s2", 1.85, 2.05)):
        j = analyze(lpdiag, f"{d}/{name}.h5")
        run = j["run"]
        check(f"{name}: failed, attention_logit_growth (max logit {run['max_logit']}), final loss {run['final_loss']:.3f} in [{lo}, {hi}]",
              not run["healthy"] and run["failure"]["kind"] == "attention_logit_growth" and run["max_logit"] >= 1000 and
              lo <= run["final_loss"] <= hi)
        # Without the fix no delta bias at all (whole-run z within +-3 in all 144 heads); the fix's
        # leans + over the whole run (z +7.9 in one head), seen on the long windows only.
        want_c2 = "paper" in name
        check(f"{name}: no causal chain, C2 {'present (long window)' if want_c2 else 'missing'}",
              not j["chain"]["found"] and j["chain"]["links"]["C2"]["present"] == want_c2
              and (not want_c2 or "long-window" in j["chain"]["links"]["C2"]["evidence"]))
    ref = analyze(lpdiag, f"{d}/gpt2-seedmma-none-2e-3-s2.h5", "--reference", f"{d}/gpt2-seedmma-paper-2e-3-s2.h5")["reference"]
    check(f"gpt2-seedmma-none-2e-3-s2 against its paper-fix twin: undecided, the fix lessened the failure ({ref['evidence'][-140:]})",
          ref["attributable_to_attention_numerics"] is None and ref["failed"] is True and "lessened" in ref["evidence"])
    # PyTorch's own bf16 attention at lr 2e-3, seed 1: on the plateau for the whole run,
    # no lpdiag counters. Its own trace: healthy by the failure rules with a plateau warning, the
    # logits and the trigger/bias said to be unrecorded (not "no delta-error statistics"); against fp32,
    # a degradation attributable to the attention numerics.
    j = analyze(lpdiag, f"{d}/gpt2-sdpa-bf16-2e-3.h5", "--reference", f"{d}/gpt2-fp32-2e-3.h5")
    run, ref, links = j["run"], j["reference"], j["chain"]["links"]
    check(f"gpt2-sdpa-bf16-2e-3: healthy with a loss_plateau warning, final loss {run['final_loss']:.3f}",
          run["healthy"] and [w["kind"] for w in run["warnings"]] == ["loss_plateau"] and run["final_loss"] > 2.2)
    check("gpt2-sdpa-bf16-2e-3: the verdict says the logits were not recorded, C1 and C2 say lpdiag did not run the attention",
          any("attention logits not recorded" in f for f in j["findings"])
          and all(links[k]["evidence"].startswith("not recorded: attention ran in a kernel lpdiag did not run") for k in ("C1", "C2")))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([lpdiag, "report", f"{d}/gpt2-sdpa-bf16-2e-3.h5", "-o", f"{tmp}/r.html"], capture_output=True, check=True)
        html = open(f"{tmp}/r.html", encoding="utf-8").read()
    check("gpt2-sdpa-bf16-2e-3: the report's headline is not a green 'Run healthy' over the plateau, and names what ran",
          '<h2 class="open">Run healthy by the failure rules, with a warning</h2>' in html and '<h2 class="none">' not in html
          and "policy external:sdpa" in html)
    check(f"gpt2-sdpa-bf16-2e-3: the JSON says what ran ({j['attention_numerics']})",
          j["attention_numerics"] == {"policy": "external:sdpa", "fix": "none", "all_fp32": False, "all_external": True,
                                      "observed": False, "observe_every": 0, "observed_kernels": ""})
    check(f"gpt2-sdpa-bf16-2e-3 against gpt2-fp32-2e-3: a degradation, attributable ({ref['evidence'][:120]})",
          ref["attributable_to_attention_numerics"] is True and 20 <= int((re.search(r"(\d+)% above", ref["evidence"]) or [0, 0])[1]) <= 26)
    if bad:
        print("FAIL")
        return 1
    if skipped:  # ctest reports the test as skipped (SKIP_RETURN_CODE 77), not as passed
        print(f"SKIP: every other check passed; {', '.join(skipped)} need h5py (apt-get install python3-h5py)")
        return 77
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
