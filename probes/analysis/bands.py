"""Curves with the interval the data can support: seeds and pairs resampled together, or over seeds.

A learning curve of a model x budget is the mean over its seeds (runs). Its 95 % band (column `band`) is
* `t` with >= MIN_SEEDS_T seeds: the Student-t interval over seeds (seed variation is measured);
* `seed-pair-bootstrap` with 2 seeds: the hierarchical bootstrap of the seed mean, seeds resampled with
  replacement, then pairs within each paradigm of each drawn seed. A t-interval from 2 seeds has t = 12.7
  at df = 1 and spans most of [0, 1]; the bootstrap's seed part rests on the same two draws (say so);
* `pair-bootstrap` with one seed: pairs only; seed variation is not measured at all.

Both bootstraps are computed exactly, without draws. A unit (a phenomenon, or the whole benchmark) is the
mean of its K paradigms, so seed j's pair-bootstrap variance is v_j = sum_k p_k (1 - p_k) / n_k / K^2.
Drawing S seeds J_1..J_S uniformly and then pairs, the mean M* = (1/S) sum_i X*_{J_i} has
Var M* = (mean_j v_j + Var_j acc_j) / S = sum_j v_j / S^2 + (S - 1) sd^2 / S^2 (sd over seeds, ddof 1):
the pair-only variance plus the seeds' own spread. The band is the normal interval with that variance.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from probes.analysis.aggregate import Z975, t975

MIN_SEEDS_T = 3
RUN_KEYS = ["run", "model", "budget", "seed"]


def band_kind(n_seeds, min_seeds_t: int = MIN_SEEDS_T):
    """`t`, `seed-pair-bootstrap` or `pair-bootstrap` per number of seeds (scalar or array)."""
    s = np.asarray(n_seeds)
    k = np.where(s >= min_seeds_t, "t", np.where(s >= 2, "seed-pair-bootstrap", "pair-bootstrap"))
    return str(k) if k.ndim == 0 else k


def seed_pair_half(var_sum, sd, n_seeds):
    """Half-width of the 95 % seed-and-pair bootstrap interval of a seed mean (module docstring): var_sum
    is the sum over seeds of their pair-bootstrap variances, sd the standard deviation over seeds."""
    s = np.asarray(n_seeds, dtype=float)
    seed_var = np.where(s > 1, (s - 1) * np.nan_to_num(np.asarray(sd, dtype=float)) ** 2, 0.0)
    return Z975 * np.sqrt(np.asarray(var_sum, dtype=float) + seed_var) / s


def unit_curves(table: pd.DataFrame, metric: str, by: Sequence[str] = ("phenomenon",)) -> pd.DataFrame:
    """Per run x step x benchmark (x `by`; () for "overall"): acc = mean of the paradigms' accuracies (as
    ZhoBLiMP's overall score), var = its stratified pair-bootstrap variance, n_pairs, n_paradigms."""
    keys = [*RUN_KEYS, "step", "benchmark", *by]
    t = table[list(dict.fromkeys([*keys, "tokens", "paradigm", "n_pairs", metric]))].copy()
    t = t[t[metric].notna() & (t["n_pairs"] > 0)]
    t["_var"] = t[metric] * (1 - t[metric]) / t["n_pairs"]
    g = t.groupby(keys, dropna=False, sort=True)
    out = g.agg(tokens=("tokens", "mean"), acc=(metric, "mean"), n_pairs=("n_pairs", "sum"),
                n_paradigms=("n_pairs", "size"), _var=("_var", "sum")).reset_index()
    out["var"] = out.pop("_var") / out["n_paradigms"] ** 2
    return out


def seed_bands(units: pd.DataFrame, keys: Sequence[str], min_seeds_t: int = MIN_SEEDS_T,
               bounds: tuple[float, float] = (0, 1)) -> pd.DataFrame:
    """Seed mean per `keys` (not "run"; "step" for a curve) with its 95 % band: n_seeds, tokens, acc_mean,
    acc_sd, seed_spread (max - min), se (the drawn band's), boot_lo/boot_hi (pairs only with one seed), t_lo/t_hi,
    and the band drawn: lo, hi, `band` (band_kind); intervals clipped to `bounds` (a change: (-1, 1))."""
    g = units.groupby(list(keys), dropna=False, sort=True)
    out = g.agg(n_seeds=("run", "nunique"), tokens=("tokens", "mean"), acc_mean=("acc", "mean"),
                acc_sd=("acc", "std"), acc_max=("acc", "max"), acc_min=("acc", "min"), var_sum=("var", "sum"),
                n_pairs=("n_pairs", "mean")).reset_index()
    out.insert(out.columns.get_loc("acc_max"), "seed_spread", out.pop("acc_max") - out.pop("acc_min"))
    s = out["n_seeds"].to_numpy(dtype=float)
    boot = seed_pair_half(out.pop("var_sum"), out["acc_sd"], s)
    t_half = t975(s - 1) * out["acc_sd"].to_numpy(dtype=float) / np.sqrt(s)
    m = out["acc_mean"].to_numpy(dtype=float)
    out["se"] = np.where(s >= min_seeds_t, out["acc_sd"].to_numpy(dtype=float) / np.sqrt(s), boot / Z975)
    out["boot_lo"], out["boot_hi"] = np.clip(m - boot, *bounds), np.clip(m + boot, *bounds)
    out["t_lo"], out["t_hi"] = np.clip(m - t_half, *bounds), np.clip(m + t_half, *bounds)
    use_t = s >= min_seeds_t
    out["band"] = band_kind(s, min_seeds_t)
    out["lo"] = np.where(use_t, out["t_lo"], out["boot_lo"])
    out["hi"] = np.where(use_t, out["t_hi"], out["boot_hi"])
    return out


def band_caption(bands: pd.DataFrame) -> str:
    """What the drawn bands are, short enough for a figure title: each kind drawn, and the two-draw caveat."""
    kinds = set(bands["band"]) if len(bands) else set()
    if not kinds:
        return "no curves, no bands"
    words = {"t": f"95 % t over seeds ({MIN_SEEDS_T}+ seeds)",
             "seed-pair-bootstrap": "95 % seed-and-pair bootstrap (with 2 seeds the seed variance rests on two "
                                    "draws)",
             "pair-bootstrap": "95 % pair bootstrap (one seed: no seed variation)"}
    return "bands: " + "; ".join(words[k] for k in words if k in kinds) + "; thin lines: each seed"


def final_bands(table: pd.DataFrame, metric: str, by: Sequence[str] = ()) -> pd.DataFrame:
    """seed_bands of each run's last checkpoint per model x budget x benchmark (x `by`): the intervals of
    Table-4 cells, scaling cells and difficulty groups (by=("phenomenon", "paradigm") for a paradigm)."""
    last = table[table.step == table.groupby(["run", "benchmark"])["step"].transform("max")]
    return seed_bands(unit_curves(last, metric, by), ["model", "budget", "benchmark", *by])


def change_units(outcomes: dict, runs: list, bit: int, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per run x benchmark, unit rows for seed_bands: acc = the overall accuracy's change from the first
    checkpoint to the last on the same pairs, var = its pair-bootstrap variance (sum_k var(d_k) / n_k / K^2,
    d = last - first per pair), first_acc, last_acc, first_step, tokens (of the last checkpoint)."""
    from probes.analysis.evalfile import MISSING

    info = {r.name: r for r in runs}
    rows = []
    for (run, bench), o in sorted(outcomes.items()):
        if bench not in benchmarks or len(o.steps) < 2:
            continue
        c0, c1 = o.correct[0], o.correct[-1]
        ok = ((c0 | c1) & MISSING) == 0
        f = pd.DataFrame({"k": o.row_paradigm[ok], "a0": (c0[ok] & bit) > 0, "a1": (c1[ok] & bit) > 0})
        f["d"] = f.a1.astype(float) - f.a0
        g = f.groupby("k")
        per = pd.DataFrame({"a0": g.a0.mean(), "a1": g.a1.mean(), "d": g.d.mean(), "v": g.d.var(ddof=0) / g.size(),
                            "n": g.size()})
        K = len(per)
        r = info[run]
        rows.append({"run": run, "model": r.model, "budget": r.budget, "seed": r.seed, "benchmark": bench,
                     "acc": per.d.mean(), "var": per.v.sum() / K ** 2, "n_pairs": int(per.n.sum()),
                     "first_acc": per.a0.mean(), "last_acc": per.a1.mean(), "first_step": int(o.steps[0]),
                     "tokens": int(o.tokens[-1])})
    out = pd.DataFrame(rows)
    if len(out):
        out["budget"] = out["budget"].astype("Int64")
    return out


def above_chance(cells: pd.DataFrame, chance: float = 0.5) -> pd.DataFrame:
    """cells (seed_bands rows) with p_above (one-sided, by the cell's own band: Student-t, else normal) and
    q_above (Benjamini-Hochberg over the phenomena of one model x budget x benchmark)."""
    from scipy import stats

    out = cells.copy()
    z = (out.acc_mean - chance) / out.se.where(out.se > 0)
    t = out.band == "t"
    p = np.where(t, stats.t.sf(z, np.maximum(out.n_seeds - 1, 1)), stats.norm.sf(z))
    # no spread at all (every pair right in every seed): above chance iff the mean is
    out["p_above"] = np.where(out.se > 0, p, (out.acc_mean <= chance).astype(float))
    out["q_above"] = out.groupby(["model", "budget", "benchmark"], dropna=False)["p_above"].transform(
        lambda s: stats.false_discovery_control(s.to_numpy(), method="bh"))
    return out


def paradigm_bands(table: pd.DataFrame, keys: Sequence[str], values: Sequence[str] = ("acc_mlp", "acc_sum")
                   ) -> pd.DataFrame:
    """seed_summary of per-paradigm rows with each value's <v>_lo/<v>_hi the band of this module."""
    from probes.analysis.aggregate import seed_summary

    s = seed_summary(table, keys, values)
    g = table.assign(**{f"_{v}": table[v] * (1 - table[v]) / table["n_pairs"] for v in values}).groupby(
        list(keys), dropna=False, sort=True)
    few = s["n_seeds"].to_numpy() < MIN_SEEDS_T
    for v in values:
        half = seed_pair_half(g[f"_{v}"].sum().to_numpy(), s[f"{v}_sd"], s["n_seeds"])
        m = s[f"{v}_mean"].to_numpy(dtype=float)
        s[f"{v}_lo"] = np.where(few, np.clip(m - half, 0, 1), s[f"{v}_lo"])
        s[f"{v}_hi"] = np.where(few, np.clip(m + half, 0, 1), s[f"{v}_hi"])
    s["band"] = band_kind(s["n_seeds"].to_numpy())
    return s
