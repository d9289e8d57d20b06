"""Planted U's in synthetic noisy learning curves: recall, false-positive rate, position error.

    python bench/bench_ushape.py [--curves 200] [--seeds 3] [--pairs 300] [--delta 0.1]

Each planted curve is a sigmoid on log10 tokens minus a Gaussian dip of known depth, centre and
width; each null curve is the sigmoid alone. Per seed and checkpoint, the outcomes of `pairs` pairs
are drawn with per-pair difficulties that persist across checkpoints (probes.synthetic). The
detector is probes.ushape.analyse_curve with UShapeConfig defaults (plus --delta).
Recall counts planted curves with an accepted U whose trough lies within 0.5 decade of the planted
one, among the planted curves whose noiseless curve itself has a U of at least delta (a shallow dip
on a steep rise is no U at all); the FPR counts null curves with any accepted U.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from probes.synthetic import log_spaced_steps, planted_dip, sample_correct, sigmoid_curve
from probes.ushape import UShapeConfig, analyse_curve, find_u_shapes
from probes.evalset import log_tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--curves", type=int, default=200, help="curves per depth and null curves")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--delta", type=float, default=UShapeConfig.delta)
    ap.add_argument("--depths", default="0.1,0.15,0.2,0.3")
    ap.add_argument("--rng", type=int, default=0)
    a = ap.parse_args()
    cfg = UShapeConfig(delta=a.delta, n_boot=500)
    rng = np.random.default_rng(a.rng)
    steps = log_spaced_steps(47, 143000)
    x = log_tokens(steps * 2048 * 1024)
    t0 = time.perf_counter()

    def draw(curve):
        mats = [[sample_correct(curve, a.pairs, rng).astype(float)] for _ in range(a.seeds)]
        return analyse_curve(x, mats, cfg, onset_index=1, rng=rng)

    def base():
        return sigmoid_curve(x, 0.5, rng.uniform(0.7, 0.95), rng.uniform(7.5, 10.5), rng.uniform(1.0, 3.0))

    print(f"{len(steps)} checkpoints, {a.seeds} seeds, {a.pairs} pairs, delta={a.delta}, "
          f"bandwidth={cfg.bandwidth}, alpha={cfg.alpha}, min agreement={cfg.min_seed_agreement}")
    print(f"{'depth':>6} {'planted':>8} {'U in truth':>10} {'recall':>7} {'found any':>9} "
          f"{'trough err (dec)':>16} {'peak err (dec)':>14}")
    for depth in [float(d) for d in a.depths.split(",")]:
        n_true = hits = any_found = 0
        t_err, p_err = [], []
        for _ in range(a.curves):
            center, width = rng.uniform(7.5, 10.5), rng.uniform(0.2, 0.4)
            truth = np.clip(base() - planted_dip(x, depth, center, width), 0, 1)
            true_us = find_u_shapes(truth, a.delta)
            found = [u for u in draw(truth) if u["accepted"]]
            any_found += bool(found)
            if not true_us:
                continue
            n_true += 1
            tu = max(true_us, key=lambda u: u.depth)
            near = [u for u in found if abs(x[u["trough"]] - x[tu.trough]) <= 0.5]
            if near:
                hits += 1
                best = min(near, key=lambda u: abs(x[u["trough"]] - x[tu.trough]))
                t_err.append(abs(x[best["trough"]] - x[tu.trough]))
                p_err.append(abs(x[best["peak"]] - x[tu.peak]))
        rec = hits / n_true if n_true else float("nan")
        print(f"{depth:6.2f} {a.curves:8d} {n_true:10d} {rec:7.2f} {any_found / a.curves:9.2f} "
              f"{np.mean(t_err) if t_err else float('nan'):16.3f} {np.mean(p_err) if p_err else float('nan'):14.3f}")
    fp = sum(any(u["accepted"] for u in draw(np.clip(base(), 0, 1))) for _ in range(a.curves))
    fp_single = 0
    cfg1 = cfg
    for _ in range(a.curves):
        mats = [[sample_correct(np.clip(base(), 0, 1), a.pairs, rng).astype(float)]]
        fp_single += any(u["accepted"] for u in analyse_curve(x, mats, cfg1, 1, rng))
    print(f"null (monotone sigmoid + noise): FPR {fp / a.curves:.3f} with {a.seeds} seeds, "
          f"{fp_single / a.curves:.3f} with 1 seed ({a.curves} curves each)")
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
