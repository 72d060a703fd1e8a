#!/usr/bin/python3
"""A second synthetic trace generator, written from docs/reference/trace-format.md alone (numpy + h5py),
independently of `lpdiag synth` (analyzers/src/synth.cpp), to validate the analyzers on data
their authors did not shape. What differs from `lpdiag synth`, on purpose:

- background drift in every run: every W_Q head's sigma_1 grows 1.2-2x over the run at its own
  rate, attention logits grow, the repeated-max rate and the loss wander;
- heavy-tailed noise (Student t, 3 degrees of freedom) on every signal;
- irregular strides (1-5 steps, with bursts of 10-40), NaN / -1 gap records (3%);
- ramps of several shapes (step, logistic, exponential, linear) and widths (0-15% of the run);
- onsets anywhere from the first 5% of the run, with gaps that may be zero (overlapping onsets);
- growth driven by a bias whose size wanders (an AR(1) process), so bias and growth rate
  co-vary as the mechanism says (chains); growth that ramps and levels off (nulls); and
  "undriven" nulls with every link in place, ordered and in one head, whose growth follows an
  AR(1) process independent of the bias (timing alone must not make a chain);
- "late-bias" nulls: every link in one head, the growth undriven, but the bias beginning 10-25% of
  the run after the growth became visible (and the failure after it): an effect before its cause,
  which must not make a chain or a candidate. validate.py makes a few of them beside the KINDS
  cycle;
- failures that end non-finite as NaN with a nan_inf event, or as a sustained explosion;
- "collapse-divergence" traces, the shape of GPT-2 seed-mma/none at seed 3
  (docs/results/reproduction.md): every head's max logit collapses (x60-400) within the first 1-7% of
  the run, the loss learns through it for most of the run, then diverges smoothly to 2.5-5x its best
  over 5-10% of the run, from 70-80% of it, with no one-record spike; no link planted. validate.py
  makes a few of them beside the KINDS cycle;
- optionally (delta_every > 1, validate.py's LPDIAG_GEN2_DELTA_EVERY) O and delta errors on every
  delta_every-th record only, unmeasured (-1 / NaN) between, as a run at `--full-every` records
  them; the rest of the trace and the random draws are the same as with delta_every = 1;
- optionally (weights_every > 1, validate.py's LPDIAG_GEN2_WEIGHTS_EVERY) the weight and update
  statistics on every weights_every-th record only, as the examples record them (--weights-every);
  the random draws are the same;
- optionally (real_like, validate.py's LPDIAG_GEN2_REAL_LIKE=1) two features of the H200 GPT-2
  runs (docs/results/reproduction.md): the heads part early (each head's sigma_1 rises by its
  own factor, up to 4.5x, over the first 3-15% of the run, then levels off) and repeated maxima
  occur at a baseline of 0.5-6% of every head's rows; drawn from a second random stream (the
  draws after the repeated-max counts still differ: a binomial draw's use of the stream depends on
  its rate).

   make_traces.py OUT_DIR SEED COUNT   writes COUNT traces gen2_<seed>_<i>.h5 plus truth.json
"""
import json
import math
import sys

import h5py
import numpy as np

KINDS = ["chain"] * 6 + ["clean", "loss-spike", "growth-no-trigger", "bias-no-growth", "undriven"]


def t_noise(rng, size, scale):
    return scale * rng.standard_t(3, size=size)


def ramp(rng, n, start, width, shape):
    """0 before `start`, rising to 1 over `width` records in the given shape (arrays of length n)."""
    x = np.arange(n, dtype=float)
    if width < 1 or shape == "step":
        return (x >= start).astype(float)
    u = np.clip((x - start) / width, 0.0, 1.0)
    if shape == "logistic":
        v = 1.0 / (1.0 + np.exp(-10.0 * (u - 0.5)))
        v = (v - v[0] if start <= 0 else v) * (x >= start)
        return np.clip(v / max(v.max(), 1e-12), 0, 1)
    if shape == "exponential":
        return np.where(x >= start, (np.exp(3.0 * u) - 1.0) / (math.e ** 3 - 1.0), 0.0)
    return u  # linear


def write_trace(path, seed, kind, delta_every=1, real_like=False, weights_every=1):
    rng = np.random.default_rng(seed)
    rng_real = np.random.default_rng([seed, 22])  # real_like's draws, apart from the rest
    L = int(rng.integers(2, 7))
    H = int(rng.integers(2, 13))
    T = int(rng.integers(800, 4001))
    # Steps: mostly 1-5 apart, some bursts.
    gaps = rng.integers(1, 6, size=T)
    burst = rng.random(T) < 0.01
    gaps[burst] = rng.integers(10, 41, size=int(burst.sum()))
    steps = np.cumsum(gaps) + int(rng.integers(0, 500))
    gap_row = rng.random(T) < 0.03

    # Onsets (record indices), -1 where absent.
    on = [-1] * 5
    early = rng.random() < 0.25
    f1 = rng.uniform(0.0, 0.05) if early else rng.uniform(0.05, 0.6)
    fs = [f1]
    for _ in range(3):
        fs.append(fs[-1] + (0.0 if rng.random() < 0.3 else rng.uniform(0.01, 0.08)))
    fs.append(fs[-1] + rng.uniform(0.05, 0.15))
    fs = [min(f, 0.9) for f in fs]
    rec = [int(f * T) for f in fs]
    if kind in ("chain", "undriven", "late-bias"):
        on = rec
    elif kind == "loss-spike":
        on[4] = int(rng.uniform(0.1, 0.9) * T)
    elif kind == "growth-no-trigger":
        on[3] = int(rng.uniform(0.1, 0.6) * T)
        on[4] = min(T - 20, on[3] + int(rng.uniform(0.1, 0.3) * T))
    elif kind == "bias-no-growth":
        on[0], on[1], on[2] = rec[0], rec[1], rec[2]
    pl, ph = int(rng.integers(0, L)), int(rng.integers(0, H))
    rows = int(rng.choice([256, 512, 1024, 2048]))

    # Bias size: an AR(1) process around 1, so growth that it drives co-varies with it.
    ar = np.empty(T)
    ar[0] = 0.0
    for i in range(1, T):
        ar[i] = 0.9 * ar[i - 1] + 0.3 * rng.standard_normal()
    bias_level = np.clip(1.0 + 0.5 * ar, 0.2, None)
    bias_sign = 1.0 if rng.random() < 0.5 else -1.0
    bias_z_rec = rng.uniform(1.0, 3.0)  # z of one record's delta-error mean

    shape = lambda: str(rng.choice(["step", "logistic", "exponential", "linear"]))
    width = lambda: int(rng.uniform(0.0, 0.15) * T)

    def visible(r):
        """Where a ramp becomes observable: the first record at 20% of its full change."""
        idx = np.nonzero(r >= 0.2)[0]
        return int(idx[0]) if len(idx) else T - 1

    # Each link's ramp starts no earlier than the previous link became observable, so a planted
    # chain stays ordered in what the trace can show; the truth is each ramp's observable start.
    zeros = np.zeros(T)
    r_trig = r_bias = r_upd = r_grow = zeros
    if on[0] >= 0:
        r_trig = ramp(rng, T, on[0], width(), shape())
        on[0] = visible(r_trig)
    if on[1] >= 0:
        on[1] = max(on[1], on[0])
        r_bias = ramp(rng, T, on[1], 0, "step")
    if on[2] >= 0:
        start = max(on[2], on[1])
        r_upd = ramp(rng, T, start, width(), shape())
        on[2] = visible(r_upd)
    g_shape = shape()
    if on[3] >= 0:
        start = max(on[3], on[2])
        r_grow = ramp(rng, T, start, max(1, width()), g_shape if g_shape != "step" else "linear")
        on[3] = visible(r_grow)  # where the growth rate reaches a fifth of its full value
    if kind == "late-bias":  # the bias after the growth, drawn from its own stream
        rng_late = np.random.default_rng([seed, 33])
        on[1] = min(T - 60, on[3] + int(rng_late.uniform(0.10, 0.25) * T))
        r_bias = ramp(rng, T, on[1], 0, "step")
        on[4] = max(on[4], on[1] + int(0.05 * T))
    if on[4] >= 0 and kind in ("chain", "undriven", "late-bias"):
        on[4] = min(T - 20, max(on[4], on[3] + int(0.05 * T)))

    f = np.arange(T) / T
    # sigma_1 per head: background drift (each head its own rate) + planted excess growth.
    drift_total = rng.uniform(math.log(1.2), math.log(2.0))
    rates = drift_total * (1 + 0.1 * rng.standard_normal((L, H)))
    log_sig0 = np.log(rng.uniform(0.7, 2.5, size=(L, H)))
    log_sig = log_sig0[None, :, :] + f[:, None, None] * rates[None, :, :]
    growth = rng.uniform(math.log(2.5), math.log(6.0))
    if on[3] >= 0:
        # Increments proportional to the envelope's slope times the (wandering) bias when a bias
        # drives it (chain); the plain envelope otherwise.
        # chain: the rate turns on with the ramp and then follows the bias to the end (the error
        # keeps adding up while the bias lasts); otherwise growth that levels off.
        env = r_grow if kind in ("chain", "undriven", "late-bias") else np.diff(np.concatenate([[0.0], r_grow]))
        drive = bias_level if kind == "chain" else np.ones(T)
        if kind in ("undriven", "late-bias"):  # the same kind of wandering, independent of the bias
            other = np.empty(T)
            other[0] = 0.0
            for i in range(1, T):
                other[i] = 0.9 * other[i - 1] + 0.3 * rng.standard_normal()
            drive = np.clip(1.0 + 0.5 * other, 0.2, None)
        # Growth happens per training step, so a record grows by the steps since the previous one.
        inc = env * drive * gaps
        # The planted growth is reached by the failure it leads to (on[4]), and goes on after.
        upto = on[4] if on[4] > on[3] else T
        inc *= growth / max(inc[:upto].sum(), 1e-12)
        planted = np.cumsum(inc)
        log_sig[:, pl, ph] += planted
        # Where the planted excess reached 1%, 2% and 4% of its total: the level's view of the
        # onset (the truth above is the rate's). No draw, so the traces are unchanged.
        growth_level = {q: int(np.nonzero(planted >= q * growth)[0][0]) for q in (0.01, 0.02, 0.04)}
    if real_like:  # the heads part early, each by its own factor, and level off
        part = rng_real.uniform(0.0, math.log(4.5), size=(L, H))
        tau0 = rng_real.uniform(0.01, 0.05)
        log_sig += (1 - np.exp(-f / tau0))[:, None, None] * part[None, :, :]
    log_sig += t_noise(rng, log_sig.shape, 0.004)
    sig = np.exp(log_sig)

    p0 = rng.uniform(0.0005, 0.004, size=(L, H))
    if real_like:  # repeated maxima at a real run's baseline
        p0 = rng_real.uniform(0.005, 0.06, size=(L, H))
    p_drift = rng.uniform(0.0, 0.5)
    a1 = rng.uniform(0.03, 0.2)
    logit0 = rng.uniform(3, 8, size=(L, H))

    # Loss: decay + wander + t noise; a failure after on[4].
    loss = 2.0 + rng.uniform(2, 6) * np.exp(-rng.uniform(3, 8) * f) + 0.05 * np.cumsum(rng.standard_normal(T)) / math.sqrt(T)
    loss += t_noise(rng, T, 0.01)
    nan_from = -1
    if on[4] >= 0:
        k = on[4]
        jump = rng.uniform(0.6, 3.0) * loss[k]
        loss[k:] += jump * (1 + np.cumsum(rng.uniform(0, 0.02, T - k)))
        if rng.random() < 0.5:
            nan_from = min(T - 1, k + int(rng.integers(5, 50)))
            loss[nan_from:] = np.nan

    divergence = -1
    if kind == "collapse-divergence":
        # Learning that goes on through most of the run, as seed 3's (1.0 at step 1,000, 0.36 at
        # 4,000 of 5,000): a decay rate of 2.5-5 per run. Faster learning, flat by a fifth of the
        # run after the collapse (rate 5-9 was tried), is a case the verdict's rule misses
        # (docs/reference/analyzers.md).
        loss = rng.uniform(0.3, 0.6) + rng.uniform(2, 4) * np.exp(-rng.uniform(2.5, 5) * f) + t_noise(rng, T, 0.01)
        divergence = int(rng.uniform(0.7, 0.8) * T)  # over by 0.9: the last tenth has diverged
        dw = max(2, int(rng.uniform(0.05, 0.10) * T))
        loss *= 1 + rng.uniform(2.0, 4.0) * np.clip((np.arange(T) - divergence) / dw, 0, 1)
        c0, cw = int(rng.uniform(0.005, 0.04) * T), max(2, int(rng.uniform(0.005, 0.03) * T))
        collapse = 1 + (rng.uniform(60, 400) - 1) * np.clip((np.arange(T) - c0) / cw, 0, 1)
    else:
        collapse = np.ones(T)

    # Update statistics.
    sim0, conc0 = rng.uniform(0.05, 0.4, size=L), rng.uniform(0.05, 0.3, size=L)
    sim1, conc1 = rng.uniform(0.8, 0.97), rng.uniform(0.6, 0.9)

    with h5py.File(path, "w", libver="latest") as h:
        h.attrs["lpdiag_format"] = "lpdiag-trace"
        h.attrs["lpdiag_version"] = np.int64(1)
        h.attrs["producer"] = "gen2 (tests/analyzers/gen2/make_traces.py)"
        h.attrs["created_utc"] = "2026-12-01T00:00:00Z"
        h.attrs["run_config"] = json.dumps({"synthetic": "gen2", "kind": kind, "seed": seed, "n_layer": L, "n_head": H})
        h.attrs["rank"] = np.int64(0)
        h.attrs["world_size"] = np.int64(1)

        def ds(name, data, dtype):
            data = np.asarray(data, dtype=dtype)
            h.create_dataset(name, data=data, chunks=(min(T, 512),) + data.shape[1:], maxshape=(None,) + data.shape[1:])

        ds("step", steps, "i8")
        ds("scalars/loss", loss, "f8")
        ds("scalars/lr", 1e-3 * np.minimum(1.0, 20 * f), "f8")
        ds("scalars/grad_norm", np.abs(1 + t_noise(rng, T, 0.1)), "f8")
        for l in range(L):
            g = h.create_group(f"attention/blocks.{l}.self_attn")
            g.attrs["layer_index"] = np.int64(l)
            g.attrs["n_heads"] = np.int64(H)
            g.attrs["head_dim"] = np.int64(64)
            g.attrs["policy"] = "fa2"
            g.attrs["fix"] = '{"kind":"none"}'
            p = p0[l][None, :] * (1 + p_drift * f[:, None]) * np.ones((T, H))
            if l == pl:
                p[:, ph] += a1 * r_trig
            rep = rng.binomial(rows, np.clip(p, 0, 1))
            n_rows = np.full((T, H), rows, dtype=np.int64)
            sd = 1e-3
            mu = np.zeros((T, H))
            if l == pl:
                mu[:, ph] = bias_sign * bias_z_rec * bias_level * r_bias * sd / math.sqrt(rows)
            d_sum = rows * mu + math.sqrt(rows) * sd * rng.standard_t(5, size=(T, H)) * math.sqrt(3 / 5)
            d_sumsq = rows * (sd * sd + mu * mu)
            o_n = rows * 64
            o_sum = 0.3 * mu * o_n + math.sqrt(o_n) * sd * rng.standard_normal((T, H))
            logits = (logit0[l][None, :] * np.exp(0.8 * f)[:, None] * (sig[:, l, :] / sig[0, l, :]) ** 2 * collapse[:, None]
                      + t_noise(rng, (T, H), 0.2))
            cols = {
                "rows": n_rows, "repeated_max_rows": rep, "tile_repeated_max_rows": rep * 2, "zero_max_repeated_rows": np.zeros((T, H)),
                "pbar_one_entries": rep * 2, "fix_engaged_rows": np.zeros((T, H)),
                "o_err_count": np.full((T, H), o_n), "o_err_pos": np.full((T, H), o_n // 2), "o_err_neg": np.full((T, H), o_n // 2),
                "delta_err_count": n_rows, "delta_err_pos": n_rows // 2, "delta_err_neg": n_rows // 2,
            }
            not_full = np.arange(T) % delta_every != 0  # records without the `full` error statistics
            for name, v in cols.items():
                v = np.array(v, dtype=np.int64)
                v[gap_row] = -1
                if name.startswith(("o_err", "delta_err")):
                    v[not_full] = -1
                ds(f"{g.name}/{name}", v, "i8")
            for name, v in {"o_err_sum": o_sum, "o_err_sumsq": o_n * sd * sd * np.ones((T, H)), "delta_err_sum": d_sum,
                            "delta_err_sumsq": d_sumsq}.items():
                v = np.array(v, dtype=float)
                v[gap_row] = np.nan
                v[not_full] = np.nan
                ds(f"{g.name}/{name}", v, "f8")
            lg = np.minimum(np.abs(logits), 3e38).astype(np.float32)
            lg[gap_row] = np.nan
            ds(f"{g.name}/logit_max", lg, "f4")
            for role, mname in (("attn_q", "q_proj"), ("attn_k", "k_proj")):
                for top in ("weights", "updates"):
                    wg = h.create_group(f"{top}/blocks.{l}.self_attn.{mname}")
                    wg.attrs["role"] = role
                    wg.attrs["layer_index"] = np.int64(l)
                    wg.attrs["rows"] = np.int64(H * 64)
                    wg.attrs["cols"] = np.int64(H * 64)
                    wg.attrs["n_heads"] = np.int64(H)
                    wg.attrs["source"] = f"blocks.{l}.self_attn.{mname}.weight"
                    no_w = np.arange(T) % weights_every != 0  # records without weight statistics
                    if top == "weights":
                        hs = sig[:, l, :].copy() if role == "attn_q" else np.exp(log_sig0[l])[None, :] * np.ones((T, H))
                        hs[gap_row] = np.nan
                        hs[no_w] = np.nan
                        ds(f"{wg.name}/head_spectral_norm", hs, "f8")
                        ds(f"{wg.name}/spectral_norm", hs.max(axis=1) * 1.05, "f8")
                        ds(f"{wg.name}/frobenius_norm", np.sqrt((hs ** 2).sum(axis=1)), "f8")
                        ds(f"{wg.name}/stable_rank", (hs ** 2).sum(axis=1) / (hs.max(axis=1) * 1.05) ** 2, "f8")
                    else:
                        up = r_upd if (l == pl and role == "attn_q") else np.zeros(T)
                        sim = np.clip(sim0[l] + (sim1 - sim0[l]) * up + t_noise(rng, T, 0.03), 0, 1)
                        conc = np.clip(conc0[l] + (conc1 - conc0[l]) * up + t_noise(rng, T, 0.02), 0, 1)
                        sim[gap_row] = np.nan
                        conc[gap_row] = np.nan
                        sim[no_w] = np.nan
                        conc[no_w] = np.nan
                        s1 = np.abs(1e-3 * (1 + t_noise(rng, T, 0.1)))
                        s1[no_w] = np.nan
                        ds(f"{wg.name}/sigma1", s1, "f8")
                        ds(f"{wg.name}/concentration", conc, "f8")
                        ds(f"{wg.name}/similarity_prev", sim, "f8")
            ag = h.create_group(f"activations/blocks.{l}")
            ag.attrs["layer_index"] = np.int64(l)
            ds(f"{ag.name}/max_abs", 10 + t_noise(rng, T, 1.0), "f4")
            ds(f"{ag.name}/rms", 1 + t_noise(rng, T, 0.01), "f4")
        ev = np.dtype([("step", "<i8"), ("kind", "S32"), ("layer_index", "<i4"), ("head", "<i4"), ("value", "<f8"), ("message", "S128")])
        events = []
        if nan_from >= 0:
            events = [(int(steps[i]), b"nan_inf", -1, -1, np.nan, b"loss is not finite") for i in range(nan_from, T)]
        h.create_dataset("events", data=np.array(events, dtype=ev), chunks=(64,), maxshape=(None,))

    truth = {"path": path, "seed": seed, "kind": kind, "layers": L, "heads": H, "records": T,
             "first_step": int(steps[0]), "last_step": int(steps[-1]),
             "layer_index": pl if (on[0] >= 0 or on[1] >= 0 or on[3] >= 0) else None,
             "head": ph if (on[0] >= 0 or on[1] >= 0 or on[3] >= 0) else None,
             "onset_step": [int(steps[k]) if k >= 0 else None for k in on],
             "non_finite_step": int(steps[nan_from]) if nan_from >= 0 else None,
             "divergence_step": int(steps[divergence]) if divergence >= 0 else None,
             "growth_level_step": {q: int(steps[k]) for q, k in growth_level.items()} if on[3] >= 0 else None}
    return truth


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    out, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    truths = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        truths.append(write_trace(f"{out}/gen2_{seed}_{i}.h5", seed * 1000 + i, kind))
    with open(f"{out}/truth.json", "w") as f:
        json.dump(truths, f, indent=1)


if __name__ == "__main__":
    main()
