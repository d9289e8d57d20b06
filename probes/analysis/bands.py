"""Curves with the interval the data can support: over seeds where there are enough, over pairs where not.

A learning curve of a model x budget is the mean over its seeds (runs). Its 95 % band is
* with >= MIN_SEEDS_T seeds: the Student-t interval over seeds (seed variation is measured);
* with fewer: the pair-bootstrap interval of the seed mean (only the sampling of pairs is measured).
  A t-interval from 2 seeds has t = 12.7 at df = 1 and spans most of [0, 1]: not a band a reader can use.

The pair bootstrap is the stratified one of probes.analysis.aggregate (pairs resampled within each
paradigm and seed): a unit (a phenomenon, or the whole benchmark) is the mean of its K paradigms, so
one seed's bootstrap variance is sum_j p_j (1 - p_j) / n_j / K^2 exactly, and the seed mean's is the
sum over the S seeds divided by S^2; the band is the normal interval with that variance. Each seed's
own curve is drawn beside the band, so seed variation stays visible even where it is not a band.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from probes.analysis.aggregate import Z975, t975

MIN_SEEDS_T = 3
BAND_T = "95 % t-interval over seeds"
BAND_BOOT = "95 % pair-bootstrap interval of the seed mean"
RUN_KEYS = ["run", "model", "budget", "seed"]


def unit_curves(table: pd.DataFrame, metric: str, by: Sequence[str] = ("phenomenon",)) -> pd.DataFrame:
    """Per run x step x benchmark (x `by`): acc = mean of the paradigms' accuracies (each paradigm weighs
    the same, as ZhoBLiMP's overall score), var = its stratified pair-bootstrap variance, n_pairs,
    n_paradigms. by=() gives the whole benchmark ("overall")."""
    keys = [*RUN_KEYS, "step", "benchmark", *by]
    t = table[list(dict.fromkeys([*keys, "tokens", "paradigm", "n_pairs", metric]))].copy()
    t = t[t[metric].notna() & (t["n_pairs"] > 0)]
    t["_var"] = t[metric] * (1 - t[metric]) / t["n_pairs"]
    g = t.groupby(keys, dropna=False, sort=True)
    out = g.agg(tokens=("tokens", "mean"), acc=(metric, "mean"), n_pairs=("n_pairs", "sum"),
                n_paradigms=("n_pairs", "size"), _var=("_var", "sum")).reset_index()
    out["var"] = out.pop("_var") / out["n_paradigms"] ** 2
    return out


def seed_bands(units: pd.DataFrame, keys: Sequence[str], min_seeds_t: int = MIN_SEEDS_T) -> pd.DataFrame:
    """Seed mean per `keys` (which include "step" and not "run") with its 95 % band.

    Columns: n_seeds, tokens, acc_mean, acc_sd (over seeds), boot_lo/boot_hi (pair bootstrap, always),
    t_lo/t_hi (Student-t over seeds, NaN below 2 seeds), and the band drawn: lo, hi and `band`
    ("t" with >= min_seeds_t seeds, else "pair-bootstrap")."""
    g = units.groupby(list(keys), dropna=False, sort=True)
    out = g.agg(n_seeds=("run", "nunique"), tokens=("tokens", "mean"), acc_mean=("acc", "mean"),
                acc_sd=("acc", "std"), var_sum=("var", "sum"), n_pairs=("n_pairs", "mean")).reset_index()
    s = out["n_seeds"].to_numpy(dtype=float)
    boot = Z975 * np.sqrt(out.pop("var_sum").to_numpy(dtype=float)) / s
    t_half = t975(s - 1) * out["acc_sd"].to_numpy(dtype=float) / np.sqrt(s)
    m = out["acc_mean"].to_numpy(dtype=float)
    out["boot_lo"], out["boot_hi"] = np.clip(m - boot, 0, 1), np.clip(m + boot, 0, 1)
    out["t_lo"], out["t_hi"] = np.clip(m - t_half, 0, 1), np.clip(m + t_half, 0, 1)
    use_t = s >= min_seeds_t
    out["band"] = np.where(use_t, "t", "pair-bootstrap")
    out["lo"] = np.where(use_t, out["t_lo"], out["boot_lo"])
    out["hi"] = np.where(use_t, out["t_hi"], out["boot_hi"])
    return out


def band_caption(bands: pd.DataFrame) -> str:
    """What the drawn bands are, short enough for a figure title: one kind, or both."""
    kinds = set(bands["band"]) if len(bands) else set()
    if kinds == {"t"}:
        return f"bands: 95 % t-interval over seeds ({int(bands.n_seeds.min())}+ seeds)"
    boot = f"bands: 95 % pair bootstrap of the seed mean (< {MIN_SEEDS_T} seeds); thin lines: each seed"
    return boot if kinds == {"pair-bootstrap"} else f"{boot}; t over seeds where {MIN_SEEDS_T}+"
