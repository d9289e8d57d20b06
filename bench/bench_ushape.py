"""Planted U's in synthetic noisy learning curves: recall per visible depth, false-positive rate,
per checkpoint schedule and number of seeds.

    python bench/bench_ushape.py [--curves 150] [--pairs 300] [--seeds 1,3] [--schedules dense,pythia,zhoblimp]

Schedules (tokens = step x 2,097,152, Pythia's batch):
    dense     10 checkpoints per decade of steps (1 ... 143,000) plus step 0
    pythia    0, 1, 2, 4 ... 512, then every 1000 steps to 143,000 (154; log then linear)
    zhoblimp  step 0 plus 46 log-spaced steps (train.schedule kind=log, n_log=47): 47 checkpoints
Each planted curve is a sigmoid on log10 tokens (0.5 -> 0.75..0.95) minus a Gaussian dip of depth
0.03..0.30 and width 0.03..0.40 decades, centred after the curve has risen (>= 90 % of its rise);
each clean curve is the sigmoid alone; each flat curve stays at chance (a paradigm never learned:
the hardest null, every checkpoint has the largest binomial noise). Per seed and checkpoint the
outcomes of `pairs` pairs are drawn with persistent per-pair difficulties
(tests/synthetic.py: sample_correct).
Truth is what a reader sees in the noise-free curve at the checkpoints: its deepest geometric U at
delta = 0.05 (probes.analysis.ushape.find_u_shapes); visible depth = min(drop, recovery); span = checkpoints
strictly between its peak and its first recovery point. A planted U is found when an accepted U
has its trough strictly between the true peak and the true recovery. Rows: depth band x span (1;
2-4 = the narrow dips smoothing flattens; >= 5 checkpoints). The target: recall >= 0.90 for depth
>= 0.10 spanning >= 2 checkpoints, FPR <= 0.05.
At 1 seed every U is also held to the one-seed minimum of pairs (probes.analysis.ushape.min_pairs).
The detector is probes.analysis.ushape.analyse_curve with UShapeConfig defaults (n_boot 400 for speed).

    python bench/bench_ushape.py --part null [--runs runs/zhoblimp_mini/mini-*] [--reports 20]

False U's per report under nulls that keep the same pairs at every checkpoint and in every seed
(tests/synthetic.py: sample_persistent: fixed pair difficulties, a shock to each paradigm at each
checkpoint shared in part by the seeds, the pair's own wobble; no independent binomial draw), beside the
report's bound (ReportConfig.false_u_budget, 0.5 expected false U's per report). Its three parameters are
fitted to the runs given (checkpoint dispersion over binomial, seeds' residual correlation, pairs flipping
between checkpoints; the defaults are those measured on runs/zhoblimp_mini/mini-0.41m-b500000-s{0,1}).
Two nulls, each a whole report's curves (the runs' phenomena, paradigms, pairs, seeds, checkpoints):
planted (every paradigm flat at its step-0 accuracy or a sigmoid rise) and the runs' own curves with their
dips removed (each paradigm's seed-mean curve replaced by its isotonic fit, rising or falling, whichever
is closer). Each report's curves are tested at level false_u_budget / curves, as `probes report` does, by
the detector with its paired noise and the checkpoints' own noise fixed at 1 binomial variance, and with that
measured (ushape.group_shock, the rule now). A third null, "shared shocks", is the stress case the fitted
ones are not: the dips-removed curves with every paradigm shocked at every checkpoint alike in both seeds
(STRESS), checkpoint noise well above binomial, as if seeds shared their data order and paradigms flipped whole.

    python bench/bench_ushape.py --part laptop [--reports 40] [--depths 0.10,0.05]

Recall of planted U's (depth exactly 0.10 / 0.05 on the phenomenon's seed-mean truth, over 1 or 2 checkpoints)
and false U's per report at the laptop grid's shape (15 phenomena x 8 paradigms x 30 pairs, 2 seeds, the 2M
budget's 9 checkpoints, the persistent null fitted to it, each curve at 0.5 / 90 as `probes report` tests the
grid's 90), and the recall at the pairs ushape.pairs_needed quotes for that depth (its promise: 80 %).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from probes.analysis.evalset import log_tokens
from probes.analysis.unoise import dispersion
from probes.analysis.ushape import UShapeConfig, analyse_curve, find_u_shapes, group_shock, onset_index

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from synthetic import planted_dip, sample_correct, sample_persistent, sigmoid_curve  # noqa: E402 (a test helper)
from train.schedule import ScheduleConfig, checkpoint_steps

TOKENS_PER_STEP = 2048 * 1024
LAST_STEP = 143_000
BANDS = [(0.05, 0.10), (0.10, 0.20), (0.20, 1.0)]


def schedule(name: str) -> np.ndarray:
    if name == "dense":
        n = int(round(10 * np.log10(LAST_STEP))) + 1
        return np.unique(np.r_[0, np.round(np.logspace(0, np.log10(LAST_STEP), n))]).astype(np.int64)
    if name == "pythia":
        return np.array(checkpoint_steps(ScheduleConfig(kind="pythia"), LAST_STEP, TOKENS_PER_STEP))
    if name == "zhoblimp":
        return np.array(checkpoint_steps(ScheduleConfig(kind="log", n_log=47), LAST_STEP, TOKENS_PER_STEP))
    raise SystemExit(f"unknown schedule {name!r}")


def truth_u(truth: np.ndarray, x: np.ndarray, delta: float = 0.05):
    """(visible depth, span, x of peak, x of recovery) of the deepest U in the noise-free curve."""
    us = find_u_shapes(truth, delta)
    if not us:
        return None
    u = max(us, key=lambda u: min(u.depth, u.recovered_to - u.trough_y))
    r_max = u.trough + int(np.argmax(truth[u.trough:] >= u.recovered_to - 1e-12))
    return min(u.depth, u.recovered_to - u.trough_y), u.recovery - u.peak - 1, x[u.peak], x[r_max]


STRESS = (0.35, 1.0, 0.0, 0.3)  # (shock, shared, common, jitter) of the "shared shocks" null
# measured on runs/zhoblimp_mini/mini-0.41m-b500000-s{0,1} (calibrate() prints them for the runs given)
DEFAULT_TARGET = (0.38, 1.01, 0.21, 0.11)  # paradigm and phenomenon dispersion, seed correlation, flips


def group_outcomes(ev, bench: str = "zhoblimp"):
    """Per model x budget group of the runs: x (log10 tokens), per-seed outcomes (S, T, pairs) of one pair
    order, the paradigm of each pair column, and paradigm -> phenomenon."""
    from probes.analysis.evalfile import MISSING, MLP
    from probes.analysis.ushape import _paradigm_columns

    info = {r.name: r for r in ev.runs}
    groups: dict[tuple, list[str]] = {}
    for (run, b) in ev.outcomes:
        if b == bench:
            groups.setdefault((info[run].model, info[run].budget), []).append(run)
    phen = dict(ev.table.loc[ev.table.benchmark == bench, ["paradigm", "phenomenon"]].drop_duplicates().values)
    for key, runs in sorted(groups.items(), key=str):
        outs = [ev.outcomes[(r, bench)] for r in sorted(runs)]
        steps = outs[0].steps
        for o in outs[1:]:
            steps = np.intersect1d(steps, o.steps)
        x = log_tokens(np.mean([o.tokens[np.searchsorted(o.steps, steps)] for o in outs], axis=0))
        cols = [_paradigm_columns(o) for o in outs]
        names = sorted(set.intersection(*(set(c) for c in cols)))
        n = min(len(c[p]) for c in cols for p in names)
        par = np.repeat(names, n)
        Y = []
        for o, c in zip(outs, cols):
            hit = o.correct[np.searchsorted(o.steps, steps)]
            hit = ((hit & MLP) > 0) & ((hit & MISSING) == 0)
            Y.append(np.concatenate([hit[:, c[p][:n]] for p in names], axis=1))
        yield key, x, np.stack(Y), par, phen


def moments(x, Y, par, units):
    """(dispersion of the paradigm curves, of the phenomenon curves (units: paradigm indices), seeds'
    residual correlation, share of pairs flipping between checkpoints) of outcomes Y (S, T, pairs)."""
    names = list(dict.fromkeys(par))
    idx = [np.flatnonzero(par == p) for p in names]
    means = np.stack([Y[:, :, i].mean(axis=2) for i in idx], axis=2)
    counts = np.full(means.shape, float(len(idx[0])))
    d_par = dispersion(x, means, counts, [[k] for k in range(len(names))])
    d_ph = dispersion(x, means, counts, units)
    w = ((x[2:] - x[1:-1]) / (x[2:] - x[:-2]))[None, :, None]
    r = means[:, 1:-1] - (w * means[:, :-2] + (1 - w) * means[:, 2:])
    corr = float(np.corrcoef(r[0].ravel(), r[1].ravel())[0, 1]) if len(Y) > 1 else 0.0
    return d_par, d_ph, corr, float(np.mean(Y[:, 1:] != Y[:, :-1]))


def simulate(mu, par, S, rng, units, shock, shared, common, jitter):
    """(S, T, pairs) outcomes of the persistent null with true paradigm curves mu (T, paradigms); a share
    `common` of each checkpoint's shock variance is common to the paradigms of a phenomenon (units)."""
    names = list(dict.fromkeys(par))
    n, T = int(np.sum(par == names[0])), len(mu)
    out = [None] * len(names)

    def shocks():  # (S, T), variance 1, correlation `shared` across seeds
        return np.sqrt(shared) * rng.standard_normal(T) + np.sqrt(1 - shared) * rng.standard_normal((S, T))
    for u in units:
        ph = shocks()
        for k in u:
            c = shock * (np.sqrt(common) * ph + np.sqrt(1 - common) * shocks())
            out[k] = sample_persistent(mu[:, k], n, S, rng, shock, shared, jitter, c=c)
    return np.concatenate(out, axis=2)


def fit_null(x, mu, par, S, units, target, rng):
    """The persistent null's (shock, shared, common, jitter) whose moments come closest to target's."""
    best = None
    for shock in (0.0, 0.1, 0.2, 0.3, 0.45, 0.6):
        for shared in (0.0, 0.5, 1.0) if shock else (0.0,):
            for common in (0.0, 0.5, 0.9) if shock else (0.0,):
                for jitter in (0.1, 0.2, 0.3, 0.5):
                    p = (shock, shared, common, jitter)
                    got = moments(x, simulate(mu, par, S, rng, units, *p), par, units)
                    err = sum(np.log(max(g, .05) / max(t, .05)) ** 2 for g, t in zip(got[:2], target[:2])) \
                        + (got[2] - target[2]) ** 2 + np.log(got[3] / target[3]) ** 2
                    if best is None or err < best[0]:
                        best = (err, p, got)
    return best[1], best[2]


def null_section(a) -> None:
    from scipy.optimize import isotonic_regression

    from probes.analysis.evalset import load_runs
    from probes.analysis.report import ReportConfig

    budget = ReportConfig().false_u_budget
    rng = np.random.default_rng(a.rng)
    if a.runs:
        grid = list(group_outcomes(load_runs(a.runs)))
    else:  # the laptop grid's shape: 15 phenomena of 8 paradigms, 30 pairs, 2 seeds, 8 checkpoints, at chance
        x = log_tokens(np.r_[0, 1e4, 2.2e4, 4.6e4, 1e5, 2.2e5, 4.6e5, 5e5])
        par = np.repeat([f"p{k}" for k in range(120)], 30)
        grid = [(("laptop-shape", None), x, np.zeros((2, 8, len(par)), bool), par,
                 {f"p{k}": f"ph{k // 8}" for k in range(120)})]
    print(f"\nfalse U's per report under item-persistent nulls; bound {budget} (ReportConfig.false_u_budget)")
    print(f"{'group':<24} {'disp: paradigm':>14} {'phenomenon':>10} {'seed corr':>9} {'flips':>6}   "
          "null fitted (shock, shared, common, jitter) -> its moments")
    plans = []
    for key, x, Y, par, phen in grid:
        names = list(dict.fromkeys(par))
        units = {}
        for k, p in enumerate(names):
            units.setdefault(phen.get(p, "?"), []).append(k)
        units = list(units.values())
        means = np.stack([Y[:, :, par == p].mean(axis=2) for p in names], axis=2)  # (S, T, K)
        target = moments(x, Y, par, units) if a.runs else DEFAULT_TARGET
        y = means.mean(axis=0) if a.runs else np.full((len(x), len(names)), 0.5)
        # dips removed: each paradigm's isotonic fit, rising or falling, whichever is closer
        fits = [min((isotonic_regression(y[:, k], increasing=up).x for up in (True, False)),
                    key=lambda f: np.sum((f - y[:, k]) ** 2)) for k in range(len(names))]
        removed = np.clip(np.stack(fits, axis=1), 0.02, 0.98)
        params, got = fit_null(x, removed, par, len(Y), units, target, rng)
        print(f"{str(key):<24} {target[0]:14.2f} {target[1]:10.2f} {target[2]:9.2f} {target[3]:6.3f}   "
              f"{params} -> {got[0]:.2f}, {got[1]:.2f}, {got[2]:.2f}, {got[3]:.3f}")
        planted = np.stack([np.full(len(x), y[0, k]) if k % 2 else
                            np.clip(sigmoid_curve(x, y[0, k], y[0, k] + 0.15, np.median(x), 3.0), .02, .98)
                            for k in range(len(names))], axis=1)
        plans += [(x, par, len(Y), params, units, {"planted": planted, "dips removed": removed,
                                                   "shared shocks": removed})] * a.copies
    n_curves = sum(len(p[4]) for p in plans)
    alpha = min(0.05, budget / n_curves)
    cfg = UShapeConfig(alpha=alpha, n_boot=max(400, int(np.ceil(10 / alpha))), n_null=max(4000, int(np.ceil(40 / alpha))))
    print(f"{n_curves} phenomenon curves per report, each tested at {alpha:.4f}; {a.reports} null reports per row")
    print(f"{'null':<14} {'detector':<28} {'shock':>10} {'false U/report':>14} {'(se)':>6} {'bound':>6} "
          f"{'per curve':>9} {'alpha':>7}")
    for null in ("planted", "dips removed", "shared shocks"):
        for rule, use in (("paired, shock 1 (fixed)", False), ("paired, measured shock (now)", True)):
            det = np.random.default_rng(a.rng + 1)
            sim = np.random.default_rng(a.rng + 2)  # the same null data for both rules
            per_report, measured = [], []
            for _ in range(a.reports):
                n_false = 0
                for x, par, S, fitted, units, mus in plans:
                    # the stress row: each paradigm shocked at every checkpoint, both seeds alike (one data order)
                    Y = simulate(mus[null], par, S, sim, units, *(STRESS if null == "shared shocks" else fitted))
                    Y = Y.astype(float)
                    names = list(dict.fromkeys(par))
                    idx = [np.flatnonzero(par == p) for p in names]
                    unit_mats = [[[Y[s][:, idx[k]] for k in u] for s in range(S)] for u in units]
                    measured.append(group_shock(x, unit_mats))
                    shock = measured[-1] if use else 1.0
                    onset = onset_index(Y.mean(axis=(0, 2)), cfg.onset_gain)
                    for mats in unit_mats:
                        n_false += sum(v["accepted"] for v in analyse_curve(x, mats, cfg, onset, det, shock))
                per_report.append(n_false)
            m, se = np.mean(per_report), np.std(per_report, ddof=1) / np.sqrt(len(per_report))
            print(f"{null:<14} {rule:<28} {np.nanmedian(measured):10.2f} {m:14.2f} {se:6.2f} {budget:6.1f} "
                  f"{m / n_curves:9.4f} {alpha:7.4f}"
                  + ("  HOLDS" if m <= budget else "  FAILS"))


LAPTOP_TOKENS = np.r_[0, 1e4, 21544, 46416, 1e5, 215443, 464159, 1e6, 2e6]  # the 2M budget's 9 checkpoints
LAPTOP_NULL = (0.1, 0.5, 0.0, 0.2)  # the persistent null fitted to the laptop grid (null_section prints it)


def laptop_group(rng, x, n_pairs, depth, K=8, S=2, PH=15):
    """One model x budget group of the laptop grid's shape: PH phenomena of K paradigms x n_pairs pairs, S seeds,
    outcomes from the fitted persistent null (LAPTOP_NULL). Phenomenon 0 rises (the recall part's curves) and
    dips over 1 or 2 checkpoints, its seed-mean truth a U of depth exactly `depth`; the others are flat or
    rise by 0.15 (the planted null's curves). Returns (unit mats, truth of phenomenon 0's U, table rows)."""
    import pandas as pd

    y0 = rng.uniform(0.45, 0.6, K * PH)
    mu = np.stack([np.full(len(x), y0[k]) if k % 2 else sigmoid_curve(x, y0[k], y0[k] + 0.15, np.median(x), 3.0)
                   for k in range(K * PH)], axis=1)
    mu[:, :K] = np.stack([sigmoid_curve(x, 0.5, rng.uniform(0.75, 0.95), rng.uniform(x[1] + 0.5, x[1] + 0.55 * (
        x[-1] - x[1])), rng.uniform(1.5, 4)) for _ in range(K)], axis=1)
    j, span = rng.integers(4, 7), rng.integers(1, 3)  # a dip over 1 or 2 checkpoints from x[j] on
    target = mu[j - 1, :K].mean() - depth * np.r_[1.0, 0.5][:span]  # the trough exactly `depth` down
    mu[j:j + span, :K] += (target - mu[j:j + span, :K].mean(axis=1))[:, None]
    par = np.repeat([f"p{k}" for k in range(K * PH)], n_pairs)
    units = [list(range(j * K, (j + 1) * K)) for j in range(PH)]
    Y = simulate(mu, par, S, rng, units, *LAPTOP_NULL)
    mats = [[[Y[s][:, k * n_pairs:(k + 1) * n_pairs].astype(float) for k in u] for s in range(S)] for u in units]
    acc = Y.reshape(S, len(x), K * PH, n_pairs).mean(axis=3)
    rows = pd.DataFrame({"run": np.repeat([f"s{s}" for s in range(S)], len(x) * K * PH),
                         "step": np.tile(np.repeat(np.arange(len(x)), K * PH), S),
                         "tokens": np.tile(np.repeat(LAPTOP_TOKENS[:len(x)], K * PH), S),
                         "paradigm": np.tile([f"p{k}" for k in range(K * PH)], S * len(x)),
                         "phenomenon": np.tile([f"ph{k // K}" for k in range(K * PH)], S * len(x)),
                         "acc_mlp": acc.ravel(), "n_pairs": n_pairs})
    return mats, truth_u(mu[:, :K].mean(axis=1), x, depth / 2), rows


def laptop_section(a) -> None:
    """Recall of planted U's and false U's per report at the laptop grid's shape, tested as `probes report`
    tests its 90 phenomenon curves (6 groups x 15), and the recall at the pairs pairs_needed quotes."""
    from probes.analysis.ushape import pairs_needed

    x = log_tokens(LAPTOP_TOKENS)
    alpha = 0.5 / 90
    cfg = UShapeConfig(alpha=alpha, n_boot=max(400, int(np.ceil(10 / alpha))), n_null=max(4000, int(np.ceil(40 / alpha))))
    print(f"\nlaptop grid's shape: 15 phenomena x 8 paradigms, 2 seeds, {len(x)} checkpoints, persistent null "
          f"{LAPTOP_NULL}; each curve at alpha {alpha:.4f}; {a.reports} groups per row")
    print(f"{'depth':>6} {'pairs':>6} {'recall':>7} {'(se)':>6} {'false U/report':>15}   pairs_needed at this depth "
          f"(80 % recall), recall there")
    for depth in map(float, a.depths.split(",")):
        rng, det = np.random.default_rng(a.rng), np.random.default_rng(a.rng + 1)
        need = None
        for n_pairs in (30, "needed"):
            if n_pairs == "needed":
                n_pairs = need
            hits, false = [], 0
            for _ in range(a.reports):
                mats, t, rows = laptop_group(rng, x, n_pairs, depth)
                if need is None:
                    need = pairs_needed(rows, UShapeConfig(delta=depth, alpha=alpha, n_null=cfg.n_null))[
                        "pairs_needed_per_seed"]
                shock = group_shock(x, mats)
                onset = onset_index(np.mean([[m.mean(axis=1) for m in seed] for u in mats for seed in u], axis=(0, 1)),
                                    cfg.onset_gain)
                for j, m in enumerate(mats):
                    found = [r for r in analyse_curve(x, m, cfg, onset, det, shock) if r["accepted"]]
                    if j == 0:
                        hits.append(any(t[2] < x[r["trough"]] < t[3] for r in found))
                    else:
                        false += len(found)
            r = float(np.mean(hits))
            target = 0.9 if (depth == 0.10 and n_pairs == 30) else 0.8 if n_pairs == need else None
            mark = "" if target is None else ("  meets" if r >= target else "  MISSES") + f" (target {target})"
            print(f"{depth:6.2f} {n_pairs:6d} {r:7.2f} {np.sqrt(r * (1 - r) / len(hits)):6.2f} "
                  f"{false / a.reports / 14 * 90:15.2f}   {need}{mark}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--curves", type=int, default=150, help="planted and clean curves per schedule x seeds")
    ap.add_argument("--seeds", default="1,3")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--schedules", default="dense,pythia,zhoblimp")
    ap.add_argument("--rng", type=int, default=0)
    ap.add_argument("--part", default="recall,null,laptop", help="recall (planted U's), null (false U's per report), "
                    "laptop (recall and false U's at the laptop grid's shape, and at pairs_needed's figure)")
    ap.add_argument("--runs", nargs="*", default=[], help="run directories the null is fitted to and built from")
    ap.add_argument("--reports", type=int, default=20, help="null reports per row of the null part")
    ap.add_argument("--depths", default="0.10,0.05", help="planted depths of the laptop part")
    ap.add_argument("--copies", type=int, default=1, help="each group's curves this many times per null report "
                    "(6 with one group of runs: a report of the laptop grid's 6 groups)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    if "null" in a.part:
        null_section(a)
    if "laptop" in a.part:
        laptop_section(a)
    if "recall" not in a.part:
        print(f"wall {time.perf_counter() - t0:.1f} s")
        return
    cfg = UShapeConfig(n_boot=400)
    print(f"{a.pairs} pairs per paradigm, {a.curves} planted + {a.curves} clean curves per row; delta={cfg.delta}, "
          f"bandwidth={cfg.bandwidth} (+ raw), alpha={cfg.alpha}, min seed agreement={cfg.min_seed_agreement}")
    print(f"{'schedule':<9} {'ckpts':>5} {'seeds':>5} {'depth':>10} {'span':>5} {'U in truth':>10} "
          f"{'found':>5} {'recall':>6}   {'FPR clean':>9} {'FPR flat':>8}")
    for sched in a.schedules.split(","):
        steps = schedule(sched)
        x = log_tokens(steps * TOKENS_PER_STEP)
        lo, hi = x[1], x[-1]
        for n_seeds in [int(s) for s in a.seeds.split(",")]:
            # curves and their noise from one generator, the detector's bootstrap from another: the
            # planted set is the same whatever the detector draws (and for every detector compared)
            rng, det = np.random.default_rng(a.rng), np.random.default_rng(a.rng + 1)

            def accepted(curve):
                mats = [[sample_correct(curve, a.pairs, rng).astype(float)] for _ in range(n_seeds)]
                return [u for u in analyse_curve(x, mats, cfg, onset_index=1, rng=det) if u["accepted"]]

            def base():
                mid, slope = rng.uniform(lo + 0.5, lo + 0.55 * (hi - lo)), rng.uniform(1.5, 4.0)
                return mid, slope, sigmoid_curve(x, 0.5, rng.uniform(0.75, 0.95), mid, slope)

            tally: dict[tuple, list[int]] = {}
            for _ in range(a.curves):
                mid, slope, b = base()
                risen = mid + np.log(9) / slope  # 90 % of the rise
                center = rng.uniform(risen, hi - 0.2)
                truth = np.clip(b - planted_dip(x, rng.uniform(0.03, 0.3), center, rng.uniform(0.03, 0.4)), 0, 1)
                t = truth_u(truth, x)
                if t is None:
                    continue
                depth, span, x_peak, x_rec = t
                band = next((bd for bd in BANDS if bd[0] <= depth < bd[1]), None)
                if band is None:
                    continue
                hit = any(x_peak < x[u["trough"]] < x_rec for u in accepted(truth))
                key = (band, 0 if span < 2 else 1 if span <= 4 else 2)  # 1 | 2-4 (narrow) | >= 5 checkpoints
                tally.setdefault(key, [0, 0])
                tally[key][0] += 1
                tally[key][1] += hit
            fp = sum(bool(accepted(np.clip(base()[2], 0, 1))) for _ in range(a.curves))
            fp_flat = sum(bool(accepted(np.full(len(x), 0.5))) for _ in range(a.curves))
            first = True
            for (band, span), (n, hits) in sorted(tally.items()):
                fpr = f"{fp / a.curves:9.3f} {fp_flat / a.curves:8.3f}" if first else ""
                print(f"{sched:<9} {len(steps):5d} {n_seeds:5d} {f'{band[0]:.2f}-{band[1]:.2f}':>10} "
                      f"{('1', '2-4', '>=5')[span]:>5} {n:10d} {hits:5d} {hits / n:6.2f}   {fpr}")
                first = False
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
