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
(probes.analysis.synthetic.sample_correct).
Truth is what a reader sees in the noise-free curve at the checkpoints: its deepest geometric U at
delta = 0.05 (probes.analysis.ushape.find_u_shapes); visible depth = min(drop, recovery); span = checkpoints
strictly between its peak and its first recovery point. A planted U is found when an accepted U
has its trough strictly between the true peak and the true recovery. Rows: depth band x span (1;
2-4 = the narrow dips smoothing flattens; >= 5 checkpoints). The target: recall >= 0.90 for depth
>= 0.10 spanning >= 2 checkpoints, FPR <= 0.05.
At 1 seed every U is also held to the one-seed minimum of pairs (probes.analysis.ushape.min_pairs).
The detector is probes.analysis.ushape.analyse_curve with UShapeConfig defaults (n_boot 400 for speed).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from probes.analysis.evalset import log_tokens
from probes.analysis.synthetic import planted_dip, sample_correct, sigmoid_curve
from probes.analysis.ushape import UShapeConfig, analyse_curve, find_u_shapes
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


def truth_u(truth: np.ndarray, x: np.ndarray):
    """(visible depth, span, x of peak, x of recovery) of the deepest U in the noise-free curve."""
    us = find_u_shapes(truth, 0.05)
    if not us:
        return None
    u = max(us, key=lambda u: min(u.depth, u.recovered_to - u.trough_y))
    r_max = u.trough + int(np.argmax(truth[u.trough:] >= u.recovered_to - 1e-12))
    return min(u.depth, u.recovered_to - u.trough_y), u.recovery - u.peak - 1, x[u.peak], x[r_max]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--curves", type=int, default=150, help="planted and clean curves per schedule x seeds")
    ap.add_argument("--seeds", default="1,3")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--schedules", default="dense,pythia,zhoblimp")
    ap.add_argument("--rng", type=int, default=0)
    a = ap.parse_args()
    cfg = UShapeConfig(n_boot=400)
    t0 = time.perf_counter()
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
