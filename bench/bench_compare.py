"""`probes compare` under a recipe-level null: which question each unit answers, measured.

    python bench/bench_compare.py [--reps 250] [--pairs 30] [--paradigms 12] [--phenomena 4] [--n-boot 1000]

Each replicate is two disjoint sets of seeds of ONE recipe (S seeds a side), scored on the same pairs, pushed
through compare's own statistics (probes.analysis.compare.stat_table: the rows, tests and Benjamini-Hochberg q that
`probes compare` writes), once with the default unit (recipe: Welch's t on the seeds) and once with `--unit item`
(the pair as the unit, seeds paired by position as compare pairs them by seed). Pairs persist: pair i of paradigm j
is right in seed s iff z_i < g_j + c_s,ph + e_si + delta, z_i ~ N(0, 1) its difficulty (the same in every seed),
c_s,ph ~ N(0, sd_c^2) the seed's effect on its phenomenon (shared by the phenomenon's paradigms), e_si ~ N(0,
JITTER^2) the pair's own wobble in that seed, g_j = probit(acc_j) sqrt(1 + JITTER^2) with acc_j ~ U(0.6, 0.85).
sd_c is set so that the seed effect has the stated sd on the accuracy scale at accuracy 0.72 (the paradigms'
middle); delta = 0 (null) or the shift that raises B's accuracy by 0.05 there (power).

Printed per seed sd x seeds a side: the share of replicates whose overall row has p < 0.05 (false-positive rate
under the null; power under the shift), and the share with at least one phenomenon at q < 0.05, each with its Monte
Carlo standard error sqrt(r (1 - r) / reps). A test is calibrated when its false-positive rate is <= 0.05 within
about two standard errors.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from scipy.stats import norm

from probes.analysis.compare import stat_table

JITTER = 0.5  # a pair's wobble between seeds, against its difficulty's sd of 1: pairs mostly keep their answer
MID = 0.72  # the accuracy at which the seed sd and the shift are set


def scale() -> float:
    """d accuracy / d latent shift at accuracy MID (pair right iff z < g + shift + e, z ~ N(0,1), e ~ N(0, J^2))."""
    s = np.sqrt(1 + JITTER ** 2)
    return float(norm.pdf(norm.ppf(MID)) / s)


def replicate(rng, seeds: int, seed_sd: float, shift: float, pairs: int, paradigms: int, phenomena: int):
    """Outcomes {benchmark: (A (seeds, items), B, paradigm, phenomenon)} of one null (shift 0) or shifted draw."""
    ph_of = np.arange(paradigms) % phenomena
    g = norm.ppf(rng.uniform(0.6, 0.85, paradigms)) * np.sqrt(1 + JITTER ** 2)
    z = rng.standard_normal((paradigms, pairs))
    c = rng.normal(0.0, seed_sd / scale(), (2 * seeds, phenomena))[:, ph_of]  # (seeds of both sides, paradigms)
    e = rng.normal(0.0, JITTER, (2 * seeds, paradigms, pairs))
    lift = np.repeat([0.0, shift / scale()], seeds)[:, None, None]
    ok = (z[None] < g[None, :, None] + c[:, :, None] + e + lift).reshape(2 * seeds, -1)
    par = np.repeat([f"p{j}" for j in range(paradigms)], pairs)
    phen = np.repeat([f"ph{k}" for k in ph_of], pairs)
    return {"synthetic": (ok[:seeds], ok[seeds:], par, phen)}


def rates(args, seeds: int, seed_sd: float, shift: float, unit: str, rng) -> tuple[float, float]:
    over = phen = 0
    for _ in range(args.reps):
        t, _ = stat_table(replicate(rng, seeds, seed_sd, shift, args.pairs, args.paradigms, args.phenomena), unit,
                          n_boot=args.n_boot, rng=rng)
        over += bool((t[t.level == "overall"].p < 0.05).any())
        phen += bool((t[t.level == "phenomenon"].q_bh < 0.05).any())
    return over / args.reps, phen / args.reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=250)
    ap.add_argument("--pairs", type=int, default=30, help="pairs a paradigm (the laptop grid's 30)")
    ap.add_argument("--paradigms", type=int, default=12)
    ap.add_argument("--phenomena", type=int, default=4)
    ap.add_argument("--n-boot", type=int, default=1000, help="the item unit's bootstrap draws")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)

    def cell(r: float) -> str:
        return f"{r:.3f} ± {np.sqrt(r * (1 - r) / args.reps):.3f}"

    print(f"{args.reps} replicates a row; {args.paradigms} paradigms in {args.phenomena} phenomena, {args.pairs} pairs "
          f"a paradigm; ± = Monte Carlo standard error\n")
    print("| seed sd | seeds a side | recipe: p < .05 (null) | item: p < .05 (null) | recipe: a phenomenon q < .05 "
          "(null) | item: a phenomenon q < .05 (null) | recipe: power at +0.05 | item: p < .05 at +0.05 |")
    print("|---|---|---|---|---|---|---|---|")
    for seed_sd in (0.0, 0.04, 0.085):
        for seeds in (2, 3, 5):
            (ro, rp), (io, ip) = (rates(args, seeds, seed_sd, 0.0, u, rng) for u in ("recipe", "item"))
            rpow, ipow = (rates(args, seeds, seed_sd, 0.05, u, rng)[0] for u in ("recipe", "item"))
            print(f"| {seed_sd} | {seeds} | {cell(ro)} | {cell(io)} | {cell(rp)} | {cell(ip)} | {cell(rpow)} | "
                  f"{cell(ipow)} |", flush=True)
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\n{c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime:.0f} CPU-s "
          f"({time.perf_counter() - t0:.0f} s wall)")


if __name__ == "__main__":
    main()
