"""Coverage of the report's intervals on synthetic grids of known truth, through the report's own functions.

    python bench/bench_coverage.py [--reps 100] [--seeds 1,2,3,5,10] [--sds 0,0.03,0.05,0.1] [--pairs sampled,full]

The estimand. A cell (model x budget) is a recipe; its seeds are draws from the recipe's population of seeds,
and a benchmark paradigm is a population of N pairs (N = 1000 when 30 are sampled, as the curve benchmark
`zhoblimp`; N = 300 and all scored for the full set, as `zhoblimp_all`). The true value of a unit (a
phenomenon, or "overall" = the mean of all paradigms) is E_seed[mean over its paradigms of the accuracy on the
paradigm's whole population], computed exactly; every seed scores the same sampled pairs.

The truth (tests/synthetic.py's persistent model, per pair): pair i of paradigm k is right for seed s iff
z_i < g_k + c_{s,ph} + e_{s,i}: z_i ~ N(0, 1) the pair's own difficulty, fixed across seeds and checkpoints;
c_{s,ph} ~ N(0, tau^2) the seed's effect on the phenomenon (tau set so the phenomenon's accuracy moves with sd
`--sds` near 0.75); e ~ N(0, 0.3^2) the pair's wobble (pairs that are right stay right, as measured: paradigm
dispersion 0.4-0.6). Six phenomena of 1, 2, 3, 4, 6 and 8 paradigms; paradigm accuracy 0.55-0.92 at the last
checkpoint, two phenomena exactly at chance (symmetric populations, the above-chance null), step 0 at chance
with its own pair preferences. A grid is 2 models x 2 budgets, each its own truth.

Printed per seed sd x seeds x pair set: the coverage of the 95 % claim of every interval (curve point at the last
checkpoint, per phenomenon and overall; Table-4 cell, phenomenon and overall; scaling cell; change from step 0),
the band kinds drawn, and the rate of p_above < 0.05 on the null phenomena. MC s.e. = sqrt(c(1-c)/n) over the
n intervals (units within a replicate are correlated through pooling: the replicate count is what matters).
Last line: cells that claim 95 % and lie outside 0.93-0.97, tests above 0.05 + 2 s.e.
"""
from __future__ import annotations

import argparse
import resource
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
from scipy.special import ndtr, ndtri
from scipy.stats import norm

from probes.analysis import bands
from probes.analysis.evalfile import MLP
from probes.analysis.evalset import RunInfo
from probes.analysis.scaling import final_accuracy, grid_tables
from probes.analysis.table4 import table4

PARADIGMS = [1, 2, 3, 4, 6, 8]  # per phenomenon
NULL_PHEN = {1, 4}  # exactly at chance at the last checkpoint
JITTER = 0.3
CELLS = [("mA", 1_000_000), ("mA", 4_000_000), ("mB", 1_000_000), ("mB", 4_000_000)]
STEPS = (0, 1000)
TAU_PER_SD = np.sqrt(1 + JITTER ** 2) / norm.pdf(norm.ppf(0.75))  # latent sd per accuracy sd near 0.75


def populations(rng, K: int, n_pop: int, null: np.ndarray) -> np.ndarray:
    """(K, n_pop) pair difficulties; a null paradigm's are symmetric, so its accuracy at g = 0 is exactly 0.5
    whatever the sd of the seed's shift."""
    z = rng.standard_normal((K, n_pop))
    h = n_pop // 2
    z[null, h:2 * h] = -z[null, :h]
    z[null, 2 * h:] = 0.0
    return z


def grid(rng, reps: int, S: int, sd: float, full: bool):
    """(table, outcomes, runs, truth): `reps` replicates as benchmarks r<i> (or r<i>_all with the full set)."""
    n_pop, n = (300, 300) if full else (1000, 30)
    tau = sd * TAU_PER_SD
    rows, outcomes, runs, truth = [], {}, [], []
    phen_of = np.array([p for p, K in enumerate(PARADIGMS) for _ in range(K)])
    K, P = len(phen_of), len(PARADIGMS)
    null = np.isin(phen_of, list(NULL_PHEN))
    names = [f"p{k}" for k in range(K)]
    for r in range(reps):
        bench = f"r{r}" + ("_all" if full else "")
        for model, budget in CELLS:
            c = tau * rng.standard_normal((len(STEPS), S, P))  # seed x phenomenon, per step
            corr = np.zeros((S, len(STEPS), K, n), dtype=np.uint8)
            th = np.zeros((len(STEPS), K))
            for t in range(len(STEPS)):
                a = np.where(null | (t == 0), 0.5, rng.uniform(0.55, 0.92, K))
                g = ndtri(a) * np.sqrt(1 + JITTER ** 2)
                z = populations(rng, K, n_pop, null | (t == 0))
                th[t] = ndtr((g[:, None] - z) / np.sqrt(JITTER ** 2 + tau ** 2)).mean(axis=1)
                zs = np.take_along_axis(z, np.argsort(rng.random((K, n_pop)), axis=1)[:, :n], axis=1)
                e = JITTER * rng.standard_normal((S, K, n))
                corr[:, t] = (zs[None] < g[None, :, None] + c[t][:, phen_of, None] + e) * MLP
            for t, step in enumerate(STEPS):
                for ph in range(P):
                    truth.append((bench, model, budget, step, f"ph{ph}", th[t, phen_of == ph].mean(), ph in NULL_PHEN))
                truth.append((bench, model, budget, step, "overall", th[t].mean(), False))
            truth.append((bench, model, budget, -1, "change", th[1].mean() - th[0].mean(), False))
            acc = corr.mean(axis=3) / MLP  # seeds x steps x paradigms
            for s in range(S):
                name = f"{bench}/{model}-{budget}/s{s}"
                runs.append(RunInfo(name=name, path="", model=model, budget=budget, seed=s,
                                    model_params=1e6 if model == "mA" else 4e6))
                outcomes[(name, bench)] = SimpleNamespace(
                    steps=np.array(STEPS), tokens=np.array(STEPS) * 1000, correct=corr[s].reshape(len(STEPS), K * n),
                    row_paradigm=np.repeat(np.arange(K, dtype=np.int32), n), paradigms=names, pair_ids=np.arange(K * n))
                for t, step in enumerate(STEPS):
                    rows.append(((name, model, budget, s, step, step * 1000, bench), acc[s, t]))
    cols = ["run", "model", "budget", "seed", "step", "tokens", "benchmark"]
    table = pd.DataFrame([key for key, _ in rows for _ in range(K)], columns=cols)
    table["phenomenon"] = np.tile([f"ph{p}" for p in phen_of], len(rows))
    table["paradigm"] = np.tile(names, len(rows))
    table["n_pairs"] = n
    table["acc_mlp"] = table["acc_sum"] = np.concatenate([a for _, a in rows])
    table["budget"] = table["budget"].astype("Int64")
    truth = pd.DataFrame(truth, columns=["benchmark", "model", "budget", "step", "unit", "truth", "null"])
    truth["budget"] = truth["budget"].astype("Int64")
    return table, outcomes, runs, truth


def hits(b: pd.DataFrame, truth: pd.DataFrame, on: list[str]) -> pd.DataFrame:
    m = b.merge(truth, on=on, validate="one_to_one")
    return m.assign(hit=(m.lo <= m.truth) & (m.truth <= m.hi))


def one_cell(rng, reps: int, S: int, sd: float, full: bool) -> dict:
    table, outcomes, runs, truth = grid(rng, reps, S, sd, full)
    key = ["benchmark", "model", "budget"]
    last = truth[truth.step == STEPS[-1]]
    res, kinds = {}, set()
    # the shared pairs' variance, as report.py computes it (old code: none)
    pv = bands.shared_pair_var(outcomes, runs, MLP) if hasattr(bands, "shared_pair_var") else None
    sh = {} if pv is None else {"shared": pv}
    # curve points at the last checkpoint (seed_bands of unit_curves, as the report's figures)
    for by, unit in ((("phenomenon",), None), ((), "overall")):
        b = bands.seed_bands(bands.unit_curves(table, "acc_mlp", by, **sh), ["model", "budget", "benchmark", *by, "step"])
        b = b[b.step == STEPS[-1]]
        b = b.rename(columns={"phenomenon": "unit"}) if unit is None else b.assign(unit=unit)
        h = hits(b, last.drop(columns="step"), [*key, "unit"])
        res[f"curve {'phen' if unit is None else 'overall'}"] = h.hit.to_numpy()
        kinds |= set(b.band)
    # Table-4 cells and scaling cells: final_bands through table4() and grid_tables(), as report.py calls them
    cells = {by: bands.final_bands(table, "acc_mlp", by, **sh) for by in ((), ("phenomenon",))}
    t4_cells = pd.concat([cells[("phenomenon",)], cells[()].assign(phenomenon="overall")], ignore_index=True)
    final = final_accuracy(table, runs)
    t4 = []
    for bench in table.benchmark.unique():
        t = table4(final, bench, "acc_mlp", cells=t4_cells)
        for u in [*(f"ph{p}" for p in range(len(PARADIGMS))), "overall"]:
            t4.append(t[["model", "budget", f"{u}_lo", f"{u}_hi"]].set_axis(["model", "budget", "lo", "hi"], axis=1)
                      .assign(benchmark=bench, unit=u))
    t4 = hits(pd.concat(t4, ignore_index=True), last.drop(columns=["step"]), [*key, "unit"])
    res["table4 phen"], res["table4 overall"] = t4[t4.unit != "overall"].hit.to_numpy(), t4[t4.unit == "overall"].hit.to_numpy()
    overall, _ = grid_tables(final, "acc_mlp", (cells[()], cells[("phenomenon",)]))
    res["scaling overall"] = hits(overall.assign(unit="overall"), last.drop(columns="step"), [*key, "unit"]).hit.to_numpy()
    # change from step 0 (sampled curve benchmark only: the full set is scored at the last checkpoint alone)
    if not full:
        ch = bands.change_units(outcomes, runs, MLP, list(table.benchmark.unique()))
        cb = bands.seed_bands(ch, ["model", "budget", "benchmark"], bounds=(-1, 1)).assign(unit="change")
        res["change"] = hits(cb, truth[truth.step == -1].drop(columns="step"), [*key, "unit"]).hit.to_numpy()
        kinds |= set(cb.band)
    ac = bands.above_chance(cells[("phenomenon",)]).rename(columns={"phenomenon": "unit"})
    ac = ac.merge(last.drop(columns="step"), on=[*key, "unit"])
    res["FPR above chance"] = (ac[ac.null].p_above < 0.05).to_numpy()
    kinds |= set(cells[("phenomenon",)].band)
    df = cells[("phenomenon",)].get("band_df", pd.Series(dtype=float)).dropna()  # per phenomenon, median
    return {"res": res, "kinds": "/".join(sorted(kinds)), "df": f"{df.median():.0f}" if len(df) else ""}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seeds", default="1,2,3,5,10")
    ap.add_argument("--sds", default="0,0.03,0.05,0.1")
    ap.add_argument("--pairs", default="sampled,full")
    ap.add_argument("--rng", type=int, default=0)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.rng)
    claims = getattr(bands, "CLAIMS_95", {"t", "seed-pair-bootstrap", "pair-bootstrap"})
    cols = ["curve phen", "curve overall", "table4 phen", "table4 overall", "scaling overall", "change",
            "FPR above chance"]
    print(f"{a.reps} replicates a cell (a grid of 4 cells x 6 phenomena each); coverage of the 95 % claim "
          "(MC s.e. in brackets); FPR: p_above < 0.05 on null phenomena (alpha 0.05)\n")
    print("| pairs | seed sd | seeds | band | band_df | " + " | ".join(cols) + " |")
    print("|---|---:|---:|---|---:|" + "---:|" * len(cols))
    bad = []
    for pairs in a.pairs.split(","):
        for sd in map(float, a.sds.split(",")):
            for S in map(int, a.seeds.split(",")):
                out = one_cell(rng, a.reps, S, sd, pairs == "full")
                cells = []
                for col in cols:
                    h = out["res"].get(col)
                    if h is None or not len(h):
                        cells.append("–")
                        continue
                    c, se = h.mean(), np.sqrt(h.mean() * (1 - h.mean()) / len(h))
                    cells.append(f"{c:.3f} ({se:.3f})")
                    claimed = set(out["kinds"].split("/")) & claims
                    where = f"{pairs} sd={sd:g} S={S} {col}"
                    if col.startswith("FPR"):
                        bad += [f"{where}: {c:.3f}"] if claimed and c > 0.05 + 2 * max(se, 0.005) else []
                    elif claimed and not 0.93 <= c <= 0.97:
                        bad.append(f"{where}: {c:.3f}")
                print(f"| {pairs} | {sd:g} | {S} | {out['kinds']} | {out['df']} | " + " | ".join(cells) + " |",
                      flush=True)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\nCPU {ru.ru_utime + ru.ru_stime:.0f} s (user+sys)")
    print("outside 0.93-0.97 / above alpha + 2 s.e. (claiming 95 %): " + ("; ".join(bad) if bad else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
