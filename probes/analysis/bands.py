"""Curves with the interval the data can support: seeds and pairs as two random levels.

The estimand of a seed mean (a learning-curve point, a Table-4 or scaling cell, a change from step 0) is the
recipe's: E over the recipe's population of seeds of the accuracy on the benchmark's population of pairs (a
`<name>_all` benchmark is scored on all its pairs: no pair term). Every seed scores the same pairs, so the
seed mean's variance is seed-between variance / S (the seeds' sd over S: it holds their seed x pair wobble)
plus the pairs' shared variance: pair_var = sum_k var_i(mean over seeds of pair i's score) / n_k / K^2 over
the K paradigms of the unit (shared_pair_var, from the per-pair outcomes; its wobble part, /S, is counted
twice: a little safe), or without per-pair data its bound P = mean_j v_j, v_j = sum_k p_k (1 - p_k) / n_k / K^2
(seed j's pair-bootstrap variance). The band (column `band`, bench/bench_coverage.py measures each) is
* `t` with >= MIN_SEEDS_T seeds: Student-t on the Welch-Satterthwaite df of sd^2 / S + pair_var (the pair
  term taken as known: its df is in the hundreds);
* `pooled-t` with 2 seeds: the same, its seed variance pooled over the units of a pool group (`pool_keys`:
  the phenomena or paradigms of one model x budget x checkpoint step; for "overall", the model x budget cells
  of the benchmark at that step), df = sum (S_i - 1); assumes they share one seed variance (band_caption);
* `seed-pair-bootstrap` with 2 seeds and nothing to pool (pooled df < 2): the hierarchical bootstrap of the seed
  mean, computed exactly: Var M* = sum_j v_j / S^2 + (S - 1) sd^2 / S^2, normal interval. It cannot reach 95 %;
* `pair-bootstrap` with one seed: pairs only; seed variation is not measured at all.
The last two carry the coverage the bench measured in every label (COVERAGE), never "95 %". Columns `band_df`:
the t quantile's df (NaN for the bootstraps); `seed_df`: the seed variance's (pooled: sum (S_i - 1)).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from probes.analysis.aggregate import Z975, t975
from probes.evals.files import ALL_SUFFIX

MIN_SEEDS_T = 3
MIN_POOLED_DF = 2  # a pooled seed variance on 1 df is the unit's own: t = 12.7
RUN_KEYS = ["run", "model", "budget", "seed"]
CLAIMS_95 = {"t", "pooled-t"}
# bench/bench_coverage.py (200 replicates, seed sd 0-0.10 per phenomenon, sampled and full pair sets)
COVERAGE = {"seed-pair-bootstrap": "coverage≈0.70–0.97", "pair-bootstrap": "coverage≈0.25–0.95"}
UNIT_KEYS = ("phenomenon", "paradigm")


def band_kind(n_seeds, min_seeds_t: int = MIN_SEEDS_T, pooled_df=None):
    """`t`, `pooled-t`, `seed-pair-bootstrap` or `pair-bootstrap` per number of seeds (scalar or array) and the
    seed df pooled over its group (None: nothing pooled)."""
    s = np.asarray(n_seeds)
    pooled = np.zeros(s.shape, bool) if pooled_df is None else np.asarray(pooled_df) >= MIN_POOLED_DF
    k = np.where(s >= min_seeds_t, "t", np.where(s < 2, "pair-bootstrap",
                                                 np.where(pooled, "pooled-t", "seed-pair-bootstrap")))
    return str(k) if k.ndim == 0 else k


def band_label(kind: str) -> str:
    """What a band may be called in a sentence: "95 % t" where it reaches 95 %, else its measured coverage."""
    return f"95 % {kind}" if kind in CLAIMS_95 else f"{kind} ({COVERAGE.get(kind, 'coverage not measured')})"


def seed_pair_half(var_sum, sd, n_seeds):
    """Half-width of the seed-and-pair bootstrap interval of a seed mean (module docstring; Z975): var_sum is
    the sum over seeds of their pair-bootstrap variances, sd the standard deviation over seeds."""
    s = np.asarray(n_seeds, dtype=float)
    seed_var = np.where(s > 1, (s - 1) * np.nan_to_num(np.asarray(sd, dtype=float)) ** 2, 0.0)
    return Z975 * np.sqrt(np.asarray(var_sum, dtype=float) + seed_var) / s


def pool_keys(keys: Sequence[str]) -> list[str]:
    """The group a unit's seed variance is pooled over: its cell (model x budget x benchmark x step) where the
    units are phenomena or paradigms, else the benchmark (x step): the grid's cells."""
    keys = list(keys)
    if any(k in keys for k in UNIT_KEYS):
        return [k for k in keys if k not in UNIT_KEYS]
    return [k for k in keys if k not in ("model", "budget")]


def shared_pair_var(outcomes: dict, runs: list, bit: int, change: bool = False) -> pd.DataFrame:
    """Per model x budget x benchmark x step x paradigm, `pair_var`: the pair-sampling variance of the seed mean
    on pairs every seed scored, var_i(mean over seeds of pair i's score) / n (ddof 1); the score is right (1) or
    wrong, or with `change` last minus first checkpoint (at the last step). A cell whose seeds scored other
    pairs or checkpoints has no rows: seed_bands then takes P (module docstring)."""
    from probes.analysis.evalfile import MISSING

    info, cells, rows = {r.name: r for r in runs}, {}, []
    for (run, bench), o in sorted(outcomes.items()):
        cells.setdefault((info[run].model, info[run].budget, bench), []).append(o)
    for (model, budget, bench), os_ in cells.items():
        o = os_[0]
        if len(o.steps) < 1 + change or any(not np.array_equal(x.steps, o.steps) or x.paradigms != o.paradigms
                                            or not np.array_equal(x.pair_ids, o.pair_ids) for x in os_):
            continue
        c = np.stack([x.correct[[0, -1]] if change else x.correct for x in os_])  # seeds x steps x pairs
        y, ok = ((c & bit) > 0).astype(float), ~((c & MISSING) > 0).any(axis=0)
        steps = o.steps[-1:] if change else o.steps
        if change:
            y, ok = y[:, 1:] - y[:, :1], ok[1:] & ok[:1]
        K, T = len(o.paradigms), len(steps)
        at = (np.arange(T)[:, None] * K + o.row_paradigm[None, :])[ok]
        yb = y.mean(axis=0)[ok]
        n, s1, s2 = (np.bincount(at, w, T * K) for w in (None, yb, yb ** 2))
        with np.errstate(divide="ignore", invalid="ignore"):
            pv = (s2 - s1 ** 2 / n) / (n - 1) / n
        rows.append(pd.DataFrame({"model": model, "budget": budget, "benchmark": bench, "step": np.repeat(steps, K),
                                  "paradigm": np.tile(np.asarray(o.paradigms, dtype=object), T), "pair_var": pv}))
    cols = ["model", "budget", "benchmark", "step", "paradigm", "pair_var"]
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)
    return out.astype({"budget": "Int64"})


def unit_curves(table: pd.DataFrame, metric: str, by: Sequence[str] = ("phenomenon",),
                shared: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run x step x benchmark (x `by`; () for "overall"): acc = mean of the paradigms' accuracies (as
    ZhoBLiMP's overall score), var = its stratified pair-bootstrap variance, n_pairs, n_paradigms; with
    `shared` (shared_pair_var) pair_var = sum_k pair_var_k / K^2, NaN unless every paradigm has one."""
    keys = [*RUN_KEYS, "step", "benchmark", *by]
    t = table[list(dict.fromkeys([*keys, "tokens", "paradigm", "n_pairs", metric]))].copy()
    t = t[t[metric].notna() & (t["n_pairs"] > 0)]
    t["_var"] = t[metric] * (1 - t[metric]) / t["n_pairs"]
    on = ["model", "budget", "benchmark", "step", "paradigm"]
    t["_pv"] = t[on].merge(shared, on=on, how="left")["pair_var"].to_numpy() if shared is not None else np.nan
    g = t.groupby(keys, dropna=False, sort=True)
    out = g.agg(tokens=("tokens", "mean"), acc=(metric, "mean"), n_pairs=("n_pairs", "sum"),
                n_paradigms=("n_pairs", "size"), _var=("_var", "sum"), _pv=("_pv", "sum"), _npv=("_pv", "count")
                ).reset_index()
    out["var"] = out.pop("_var") / out["n_paradigms"] ** 2
    out["pair_var"] = (out.pop("_pv") / out["n_paradigms"] ** 2).where(out.pop("_npv") == out["n_paradigms"])
    return out


def seed_bands(units: pd.DataFrame, keys: Sequence[str], min_seeds_t: int = MIN_SEEDS_T,
               bounds: tuple[float, float] = (0, 1)) -> pd.DataFrame:
    """Seed mean per `keys` (not "run"; "step" for a curve) with its band: n_seeds, tokens, acc_mean, acc_sd,
    seed_spread (max - min), se (the drawn band's), boot_lo/boot_hi (the seed-pair bootstrap; pairs only with
    one seed), t_lo/t_hi, band_df, and the band drawn: lo, hi, `band` (band_kind); intervals clipped to
    `bounds` (a change: (-1, 1)). Seed variances are pooled over pool_keys(keys) below min_seeds_t seeds."""
    g = units.groupby(list(keys), dropna=False, sort=True)
    out = g.agg(n_seeds=("run", "nunique"), tokens=("tokens", "mean"), acc_mean=("acc", "mean"),
                acc_sd=("acc", "std"), acc_max=("acc", "max"), acc_min=("acc", "min"), var_sum=("var", "sum"),
                n_pairs=("n_pairs", "mean")).reset_index()
    out.insert(out.columns.get_loc("acc_max"), "seed_spread", out.pop("acc_max") - out.pop("acc_min"))
    s = out["n_seeds"].to_numpy(dtype=float)
    sd2 = np.nan_to_num(out["acc_sd"].to_numpy(dtype=float)) ** 2
    var_sum = out.pop("var_sum").to_numpy(dtype=float)
    boot = seed_pair_half(var_sum, out["acc_sd"], s)
    full = out["benchmark"].astype(str).str.endswith(ALL_SUFFIX).to_numpy() if "benchmark" in out else False
    # the shared pairs' variance where measured (shared_pair_var), else its bound P
    pv = g["pair_var"].mean().to_numpy(dtype=float) if "pair_var" in units else np.full(len(out), np.nan)
    pair = np.where(full, 0.0, np.where(np.isfinite(pv), pv, var_sum / s))
    pk = pool_keys(keys)
    grp = [out[k] for k in pk] if pk else np.zeros(len(out))
    pooled = pd.DataFrame({"ss": (s - 1) * sd2, "df": s - 1}).groupby(grp, dropna=False).transform("sum")
    pooled_df = pooled["df"].to_numpy()
    few = s < min_seeds_t
    seed_var = np.where(few, pooled["ss"].to_numpy() / np.maximum(pooled_df, 1), sd2) / s
    seed_df = np.where(few, pooled_df, s - 1)
    v = seed_var + pair
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(seed_var > 0, seed_df * (v / seed_var) ** 2, np.inf)
    kind = band_kind(s, min_seeds_t, np.where(few, pooled_df, 0))
    use_t = np.isin(kind, list(CLAIMS_95))
    t_half = t975(np.where(use_t, df, np.nan)) * np.sqrt(v)
    m = out["acc_mean"].to_numpy(dtype=float)
    out["se"] = np.where(use_t, np.sqrt(v), boot / Z975)
    out["band_df"], out["seed_df"] = np.where(use_t, df, np.nan), seed_df
    out["boot_lo"], out["boot_hi"] = np.clip(m - boot, *bounds), np.clip(m + boot, *bounds)
    out["t_lo"], out["t_hi"] = np.clip(m - t_half, *bounds), np.clip(m + t_half, *bounds)
    out["band"] = kind
    out["lo"] = np.where(use_t, out["t_lo"], out["boot_lo"])
    out["hi"] = np.where(use_t, out["t_hi"], out["boot_hi"])
    return out


def band_caption(bands: pd.DataFrame) -> str:
    """What the drawn bands are, short enough for a figure title: each kind drawn (the pooled one with its df
    and assumption; the bootstraps with their measured coverage, never "95 %") and the estimand."""
    kinds = set(bands["band"]) if len(bands) else set()
    if not kinds:
        return "no curves, no bands"
    df = bands.loc[bands.band == "pooled-t", "seed_df"] if "seed_df" in bands else pd.Series(dtype=float)
    words = {"t": f"95 % t over seeds and pairs ({MIN_SEEDS_T}+ seeds)",
             "pooled-t": f"95 % t, 2 seeds, seed variance pooled over the phenomena of a cell (overall: over the "
                         f"grid's cells), assumed equal (seed df {df.min():.0f}–{df.max():.0f})",
             "seed-pair-bootstrap": f"seed-and-pair bootstrap, 2 seeds ({COVERAGE['seed-pair-bootstrap']})",
             "pair-bootstrap": f"pair bootstrap, one seed: no seed variation ({COVERAGE['pair-bootstrap']})"}
    return "bands: " + "; ".join(words[k] for k in words if k in kinds) + \
        "; estimand: the recipe's seeds, the benchmark's pairs; thin lines: each seed"


def final_bands(table: pd.DataFrame, metric: str, by: Sequence[str] = (), shared: pd.DataFrame | None = None
                ) -> pd.DataFrame:
    """seed_bands of each run's last checkpoint per model x budget x benchmark (x `by`): the intervals of
    Table-4 cells, scaling cells and difficulty groups (by=("phenomenon", "paradigm") for a paradigm)."""
    last = table[table.step == table.groupby(["run", "benchmark"])["step"].transform("max")]
    return seed_bands(unit_curves(last, metric, by, shared), ["model", "budget", "benchmark", *by])


def change_units(outcomes: dict, runs: list, bit: int, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per run x benchmark, unit rows for seed_bands: acc = the overall accuracy's change from the first
    checkpoint to the last on the same pairs, var = its pair-bootstrap variance (sum_k var(d_k) / n_k / K^2,
    d = last - first per pair), first_acc, last_acc, first_step, tokens (of the last checkpoint), pair_var
    (shared_pair_var of the change)."""
    from probes.analysis.evalfile import MISSING

    info = {r.name: r for r in runs}
    rows = []
    for (run, bench), o in sorted(outcomes.items()):
        if bench not in benchmarks or len(o.steps) < 2:
            continue
        c0, c1 = o.correct[0], o.correct[-1]
        ok = ((c0 | c1) & MISSING) == 0
        k, a0, a1 = o.row_paradigm[ok], (c0[ok] & bit) > 0, (c1[ok] & bit) > 0
        n = np.bincount(k)
        m0, m1, d, d2 = (np.bincount(k, x)[n > 0] / n[n > 0] for x in (a0, a1, a1 * 1.0 - a0, a1 != a0))
        K = len(d)
        r = info[run]
        rows.append({"run": run, "model": r.model, "budget": r.budget, "seed": r.seed, "benchmark": bench,
                     "acc": d.mean(), "var": ((d2 - d ** 2) / n[n > 0]).sum() / K ** 2, "n_pairs": int(n.sum()),
                     "first_acc": m0.mean(), "last_acc": m1.mean(), "first_step": int(o.steps[0]),
                     "tokens": int(o.tokens[-1])})
    out = pd.DataFrame(rows)
    if len(out):
        out["budget"] = out["budget"].astype("Int64")
        pv = shared_pair_var({k: v for k, v in outcomes.items() if k[1] in benchmarks}, runs, bit, change=True)
        pv = pv.groupby(["model", "budget", "benchmark"], dropna=False)["pair_var"].agg(["sum", "count"])
        out = out.merge((pv["sum"] / pv["count"] ** 2).rename("pair_var").reset_index(), how="left",
                        on=["model", "budget", "benchmark"])
    return out


def above_chance(cells: pd.DataFrame, chance: float = 0.5) -> pd.DataFrame:
    """cells (seed_bands rows) with p_above (one-sided, by the cell's own band: Student-t on band_df, else normal) and
    q_above (Benjamini-Hochberg over the phenomena of one model x budget x benchmark)."""
    from scipy import stats

    out = cells.copy()
    z = (out.acc_mean - chance) / out.se.where(out.se > 0)
    t = out.band.isin(CLAIMS_95)
    p = np.where(t, stats.t.sf(z, out.band_df.where(t, 1)), stats.norm.sf(z))
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
