#!/usr/bin/env python3
"""Statistics over the seed grid of docs/results/reproduction.md: is seed/none worse than the fix?

Each run is compared with the fp32 (SDPA) run of the same lr, seed and data order; its gap is
`final_loss(run) / final_loss(fp32) - 1`, as `lpdiag analyze RUN --reference FP32` computes the
final losses. Runs come from `analyze --json --reference` outputs (`*.reference.json`, as
scripts/lab/seed_experiment.sh writes them) and/or from a data file of earlier runs whose JSON was not
kept (docs/reproduction/seed-grid-6e-3.json). Standard library only (the GPU machine has no
scipy, the CPU machines need none).

    scripts/lab/seed_grid_stats.py [--data FILE] [--lr 6e-3] [--svg OUT.svg] [DIR ...]

Tests, all one-sided and exact (or a permutation test with a fixed seed):
- degraded (gap >= 5%) in seed/none more often than in seed/paper: Fisher's exact test;
- seed/none's gap above seed/paper's, paired by seed: Wilcoxon signed-rank, exact up to 20
  pairs, normal approximation beyond;
- seed/none runs without a biased delta error (C2 missing) degrade more than those with one:
  permutation test on the difference of mean gaps.
"""
import argparse, glob, itertools, json, math, os, random, re, sys

DEGRADED = 5.0  # percent over fp32: the threshold `--reference` calls a degradation


def runs_from_dirs(dirs, lr):
    out = []
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, '*.reference.json'))):
            m = re.match(r'seed-(\w+)-([0-9.e+-]+)-s(\d+)\.reference\.json$', os.path.basename(p))
            if not m or m.group(2) != lr:
                continue
            a = json.load(open(p))
            ref = a['reference']['run']
            if a['run'].get('final_loss') is None or ref.get('final_loss') is None:
                print(f'{p}: no final loss in RUN or REF, skipped', file=sys.stderr)
                continue
            out.append(dict(arm=m.group(1), seed=int(m.group(3)),
                            gap=100.0 * (a['run']['final_loss'] / ref['final_loss'] - 1.0),
                            c2=bool(a['chain']['links']['C2']['present']),
                            attributable=a['reference']['attributable_to_attention_numerics'],
                            source=p))
    return out


def fisher_greater(a, b, c, d):
    """P(X >= a) for the 2x2 table ((a, b), (c, d)) with fixed margins."""
    n1, n2, k = a + b, c + d, a + c
    tot = math.comb(n1 + n2, k)
    return sum(math.comb(n1, x) * math.comb(n2, k - x) for x in range(a, min(n1, k) + 1)) / tot


def wilcoxon_greater(x, y):
    """Exact one-sided signed-rank test of x > y (pairs with zero difference dropped)."""
    d = [u - v for u, v in zip(x, y) if u != v]
    order = sorted(range(len(d)), key=lambda i: abs(d[i]))
    ranks = [0.0] * len(d)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2.0 + 1.0
        i = j + 1
    w = sum(r for r, v in zip(ranks, d) if v > 0)
    n = len(d)
    if n > 20:  # enumeration is 2^n: normal approximation with continuity correction
        mu, sd = n * (n + 1) / 4.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
        return w, 0.5 * math.erfc((w - 0.5 - mu) / sd / math.sqrt(2.0))
    hits = sum(1 for signs in itertools.product((0, 1), repeat=len(d))
               if sum(r for r, s in zip(ranks, signs) if s) >= w - 1e-9)
    return w, hits / 2 ** len(d)


def permutation_greater(a, b, iters=100000, seed=16):
    """P(mean(A') - mean(B') >= observed) over random relabelings."""
    obs = sum(a) / len(a) - sum(b) / len(b)
    pool = list(a) + list(b)
    rng = random.Random(seed)
    hits = 0
    for _ in range(iters):
        rng.shuffle(pool)
        hits += sum(pool[:len(a)]) / len(a) - sum(pool[len(a):]) / len(b) >= obs - 1e-12
    return obs, hits / iters


def svg(none, paper, path):
    seeds = sorted(set(none) | set(paper))
    w, h, left, top, bottom = 720, 300, 60, 20, 40
    lo = min(-5.0, min(list(none.values()) + list(paper.values())) - 1)
    hi = max(15.0, max(list(none.values()) + list(paper.values())) + 1)
    X = lambda i: left + (i + 0.5) * (w - left - 20) / len(seeds)
    Y = lambda g: top + (hi - g) / (hi - lo) * (h - top - bottom)
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
          f'<rect width="{w}" height="{h}" fill="white"/>']
    for g in range(int(math.ceil(lo / 5) * 5), int(hi) + 1, 5):
        el.append(f'<line x1="{left}" x2="{w - 20}" y1="{Y(g):.1f}" y2="{Y(g):.1f}" stroke="#ddd"/>'
                  f'<text x="{left - 6}" y="{Y(g) + 4:.1f}" text-anchor="end">{g:+d}%</text>')
    el.append(f'<line x1="{left}" x2="{w - 20}" y1="{Y(DEGRADED):.1f}" y2="{Y(DEGRADED):.1f}" stroke="#c00" stroke-dasharray="4 3"/>'
              f'<text x="{w - 22}" y="{Y(DEGRADED) - 4:.1f}" text-anchor="end" fill="#c00">degraded (5%)</text>')
    for i, s in enumerate(seeds):
        el.append(f'<text x="{X(i):.1f}" y="{h - bottom + 16}" text-anchor="middle">{s}</text>')
        if s in none:
            el.append(f'<circle cx="{X(i) - 4:.1f}" cy="{Y(none[s]):.1f}" r="4" fill="#d62728"/>')
        if s in paper:
            el.append(f'<rect x="{X(i) + 0.5:.1f}" y="{Y(paper[s]) - 3.5:.1f}" width="7" height="7" fill="#1f77b4"/>')
    el.append(f'<text x="{(w + left) / 2}" y="{h - 6}" text-anchor="middle">seed (same seed and data order in every arm)</text>')
    el.append(f'<circle cx="{left + 10}" cy="{top + 6}" r="4" fill="#d62728"/><text x="{left + 18}" y="{top + 10}">seed/none: loss over fp32 SDPA</text>'
              f'<rect x="{left + 206}" y="{top + 2.5}" width="7" height="7" fill="#1f77b4"/><text x="{left + 218}" y="{top + 10}">seed/paper (the fix)</text>')
    el.append('</svg>')
    with open(path, 'w') as f:
        f.write('\n'.join(el) + '\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('dirs', nargs='*', help='directories with seed-ARM-LR-sSEED.reference.json')
    ap.add_argument('--data', help='JSON list of earlier runs: {arm, seed, gap, c2, source}')
    ap.add_argument('--lr', default='6e-3')
    ap.add_argument('--svg', help='write the gap per seed as an SVG dot plot')
    a = ap.parse_args()
    runs = json.load(open(a.data))['runs'] if a.data else []
    runs += runs_from_dirs(a.dirs, a.lr)
    if not runs:
        raise SystemExit('no runs: give --data or directories holding *.reference.json')
    by = {}
    for r in runs:
        key = (r['arm'], r['seed'])
        if key in by:
            raise SystemExit(f'run {key} given twice ({by[key]["source"]}, {r["source"]})')
        by[key] = r
    none = {s: r['gap'] for (arm, s), r in by.items() if arm == 'none'}
    paper = {s: r['gap'] for (arm, s), r in by.items() if arm == 'paper'}
    print(f'lr {a.lr}: {len(none)} seed/none and {len(paper)} seed/paper runs')
    print('seed  none gap  C2    paper gap  C2')
    for s in sorted(set(none) | set(paper)):
        n, p = by.get(('none', s)), by.get(('paper', s))
        fmt = lambda r: f'{r["gap"]:+7.1f}%  {"yes" if r["c2"] else "no ":3s}' if r else '      —      '
        print(f'{s:4d}  {fmt(n)}   {fmt(p)}')
    mean = lambda v: sum(v) / len(v)
    for name, g in (('seed/none', none), ('seed/paper', paper)):
        v = sorted(g.values())
        if v:
            print(f'{name}: mean {mean(v):+.2f}%, median {v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2:+.2f}%, '
                  f'degraded (>= {DEGRADED:g}%) {sum(x >= DEGRADED for x in v)} of {len(v)}')
    if none and paper:
        dn, dp = sum(x >= DEGRADED for x in none.values()), sum(x >= DEGRADED for x in paper.values())
        print(f'degraded more often without the fix: Fisher exact one-sided p = '
              f'{fisher_greater(dn, len(none) - dn, dp, len(paper) - dp):.3f}')
        both = sorted(set(none) & set(paper))
        w, p = wilcoxon_greater([none[s] for s in both], [paper[s] for s in both])
        print(f'seed/none gap above seed/paper, paired over {len(both)} seeds: Wilcoxon W = {w:g}, one-sided p = {p:.3f}')
    miss = [by[('none', s)]['gap'] for s in none if not by[('none', s)]['c2']]
    pres = [by[('none', s)]['gap'] for s in none if by[('none', s)]['c2']]
    if miss and pres:
        d, p = permutation_greater(miss, pres)
        print(f'seed/none without C2 ({len(miss)} runs, mean {mean(miss):+.1f}%) against with C2 ({len(pres)}, '
              f'mean {mean(pres):+.1f}%): difference {d:+.1f} points, permutation one-sided p = {p:.4f}')
    if a.svg:
        svg(none, paper, a.svg)
        print(f'wrote {a.svg}')


if __name__ == '__main__':
    main()
