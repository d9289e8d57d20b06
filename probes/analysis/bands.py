"""Curves with the interval the data can support: seeds and pairs as two random levels (docs/report.md, "Bands
and intervals": the estimand, the variance of a seed mean, the four band kinds; bench/bench_coverage.py measures
each). Why the `t` band is sqrt(t975(S - 1)^2 sd^2 / S + Z975^2 pair_var), each part with its own quantile and
the pair term taken as known (its df is in the hundreds): Welch-Satterthwaite's df, tried first, covered 0.92 at
3 seeds where the seeds dominate; this is exact at either end, safe between. shared_pair_var's wobble part (/S)
is counted twice: a little safe. The bootstraps cannot reach 95 %: their labels carry the coverage the bench
measured (COVERAGE), never "95 %". Column `band_df`: the seed variance's df, S - 1 or pooled sum (S_i - 1) (NaN
for the bootstraps); `se`: half-width / t975(band_df)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from probes.analysis.aggregate import Z975, seed_summary, t975
from probes.analysis.evalfile import MISSING
from probes.evals.files import ALL_SUFFIX

MIN_SEEDS_T = 3
MIN_POOLED_DF = 2  # a pooled seed variance on 1 df is the unit's own: t = 12.7
RUN_KEYS = ["run", "model", "budget", "seed"]
CLAIMS_95 = {"t", "pooled-t"}
# measured by bench/bench_coverage.py at seed sd 0-0.10 per phenomenon, sampled and full pair sets (docs/report.md)
COVERAGE = {"seed-pair-bootstrap": "coverage≈0.70–0.90", "pair-bootstrap": "coverage≈0.16–1.00"}
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
    on pairs every seed scored, var_i(mean over seeds of pair i's score) / n (ddof 1), and `wobble`: the seed x
    pair interaction's mean square (seeds x pairs crossed, df (S - 1)(n - 1)) / n, its share of one seed's
    paradigm mean. The score is right (1) or wrong, or with `change` last minus first checkpoint (at the last
    step). A cell whose seeds scored other pairs or checkpoints has no rows: seed_bands then takes P."""
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
        S, yb = len(y), y.mean(axis=0)[ok]
        n, s1, s2, sy = (np.bincount(at, w, T * K) for w in (None, yb, yb ** 2, (y ** 2).mean(axis=0)[ok]))
        seeds = sum(np.bincount(at, yj[ok], T * K) ** 2 for yj in y)  # sum over seeds of (their sum)^2
        with np.errstate(divide="ignore", invalid="ignore"):
            pv = (s2 - s1 ** 2 / n) / (n - 1) / n
            wob = (S * sy - seeds / n - S * s2 + S * s1 ** 2 / n) / ((S - 1) * (n - 1)) / n if S > 1 else np.nan
        rows.append(pd.DataFrame({"model": model, "budget": budget, "benchmark": bench, "step": np.repeat(steps, K),
                                  "paradigm": np.tile(np.asarray(o.paradigms, dtype=object), T), "pair_var": pv,
                                  "wobble": wob}))
    cols = ["model", "budget", "benchmark", "step", "paradigm", "pair_var", "wobble"]
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)
    return out.astype({"budget": "Int64"})


def unit_curves(table: pd.DataFrame, metric: str, by: Sequence[str] = ("phenomenon",),
                shared: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run x step x benchmark (x `by`; () for "overall"): acc = mean of the paradigms' accuracies (as
    ZhoBLiMP's overall score), var = its stratified pair-bootstrap variance, n_pairs, n_paradigms; with
    `shared` (shared_pair_var) pair_var and wobble = sum_k x_k / K^2, NaN unless every paradigm has one."""
    keys = [*RUN_KEYS, "step", "benchmark", *by]
    t = table[list(dict.fromkeys([*keys, "tokens", "paradigm", "n_pairs", metric]))].copy()
    t = t[t[metric].notna() & (t["n_pairs"] > 0)]
    t["_var"] = t[metric] * (1 - t[metric]) / t["n_pairs"]
    on = ["model", "budget", "benchmark", "step", "paradigm"]
    sh = t[on].merge(shared, on=on, how="left") if shared is not None else pd.DataFrame(index=range(len(t)))
    for c in ("pair_var", "wobble"):
        t[c] = sh[c].to_numpy() if c in sh else np.nan
    g = t.groupby(keys, dropna=False, sort=True)
    out = g.agg(tokens=("tokens", "mean"), acc=(metric, "mean"), n_pairs=("n_pairs", "sum"),
                n_paradigms=("n_pairs", "size"), _var=("_var", "sum")).reset_index()
    out["var"] = out.pop("_var") / out["n_paradigms"] ** 2
    for c in ("pair_var", "wobble"):
        out[c] = (g[c].sum().to_numpy() / out["n_paradigms"] ** 2).where(g[c].count().to_numpy() == out["n_paradigms"])
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
    pv, wob = (g[c].mean().to_numpy(dtype=float) if c in units else np.full(len(out), np.nan)
               for c in ("pair_var", "wobble"))
    pair = np.where(full, 0.0, np.where(np.isfinite(pv), pv, var_sum / s))
    # the seeds' own variance: their spread less the seed x pair wobble in it, which pair_var holds already
    tau2 = sd2 - np.where(np.isfinite(pv) & np.isfinite(wob) & ~full, wob, 0.0)
    pk = pool_keys(keys)
    grp = [out[k] for k in pk] if pk else np.zeros(len(out))
    pooled = pd.DataFrame({"ss": (s - 1) * tau2, "df": s - 1}).groupby(grp, dropna=False).transform("sum")
    pooled_df = pooled["df"].to_numpy()
    few = s < min_seeds_t
    seed_var = np.maximum(np.where(few, pooled["ss"].to_numpy() / np.maximum(pooled_df, 1), tau2), 0) / s
    seed_df = np.where(few, pooled_df, s - 1)
    kind = band_kind(s, min_seeds_t, np.where(few, pooled_df, 0))
    use_t = np.isin(kind, list(CLAIMS_95))
    tq = t975(np.where(use_t, seed_df, np.nan))
    t_half = np.sqrt(tq ** 2 * seed_var + Z975 ** 2 * pair)
    m = out["acc_mean"].to_numpy(dtype=float)
    out["se"] = np.where(use_t, t_half / tq, boot / Z975)  # the drawn band is acc_mean +- t975(band_df) se
    out["band_df"] = np.where(use_t, seed_df, np.nan)
    out["var_seeds"], out["var_pairs"] = seed_var, pair  # the two parts of a t band (above_chance's p)
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
    df = bands.loc[bands.band == "pooled-t", "band_df"] if "band_df" in bands else pd.Series(dtype=float)
    words = {"t": f"95 % t over seeds and pairs ({MIN_SEEDS_T}+ seeds)",
             "pooled-t": f"95 % t, 2 seeds, seed variance pooled over the phenomena of a cell (overall: over the "
                         f"grid's cells), assumed equal (df {df.min():.0f}–{df.max():.0f})",
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
        r = info[run]
        rows.append({"run": run, "model": r.model, "budget": r.budget, "seed": r.seed, "benchmark": bench,
                     "acc": d.mean(), "var": ((d2 - d ** 2) / n[n > 0]).sum() / len(d) ** 2, "n_pairs": int(n.sum()),
                     "first_acc": m0.mean(), "last_acc": m1.mean(), "first_step": int(o.steps[0]),
                     "tokens": int(o.tokens[-1])})
    out = pd.DataFrame(rows)
    if len(out):
        out["budget"] = out["budget"].astype("Int64")
        pv = shared_pair_var({k: v for k, v in outcomes.items() if k[1] in benchmarks}, runs, bit, change=True)
        g = pv.groupby(["model", "budget", "benchmark"], dropna=False)
        out = out.merge(g[["pair_var", "wobble"]].sum().div(g["pair_var"].count() ** 2, axis=0).reset_index(),
                        how="left", on=["model", "budget", "benchmark"])
    return out


def above_chance(cells: pd.DataFrame, chance: float = 0.5) -> pd.DataFrame:
    """cells (seed_bands rows) with p_above (one-sided, by the cell's own band, t or normal) and
    q_above (Benjamini-Hochberg over the phenomena of one model x budget x benchmark)."""
    out = cells.copy()
    d = (out.acc_mean - chance).to_numpy(dtype=float)
    p = np.asarray(stats.norm.sf(d / out.se.where(out.se > 0).to_numpy(dtype=float)))
    t = out.band.isin(CLAIMS_95).to_numpy() & (d > 0)
    # a t band's own one-sided p: the level at which its lower bound sqrt(t_a^2 seeds + z_a^2 pairs) reaches
    # chance (60 bisections in log alpha)
    lo, hi = np.full(t.sum(), 1e-15), np.full(t.sum(), 0.5)
    df, vs, vp = (out.loc[t, c].to_numpy(dtype=float) for c in ("band_df", "var_seeds", "var_pairs"))
    for _ in range(60):
        a = np.sqrt(lo * hi)
        above = stats.t.isf(a, df) ** 2 * vs + stats.norm.isf(a) ** 2 * vp < d[t] ** 2
        lo, hi = np.where(above, lo, a), np.where(above, a, hi)
    p[t] = hi
    # no spread at all (every pair right in every seed): above chance iff the mean is
    out["p_above"] = np.where(out.se > 0, p, (out.acc_mean <= chance).astype(float))
    out["q_above"] = out.groupby(["model", "budget", "benchmark"], dropna=False)["p_above"].transform(
        lambda s: stats.false_discovery_control(s.to_numpy(), method="bh"))
    return out


def paradigm_bands(table: pd.DataFrame, keys: Sequence[str], values: Sequence[str] = ("acc_mlp", "acc_sum")
                   ) -> pd.DataFrame:
    """seed_summary of per-paradigm rows with each value's <v>_lo/<v>_hi the band of this module."""
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
