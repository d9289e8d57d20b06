"""Mean and 95 % interval over seeds; bootstrap intervals over pairs: resampling a paradigm's n pairs gives a count
of correct pairs distributed exactly Binomial(n, k/n), so its percentile bootstrap is two binomial quantiles."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

Z975 = float(stats.norm.ppf(0.975))


def t975(df):
    """Two-sided 95 % Student-t quantile for `df` degrees of freedom (scalar or array); NaN below 1."""
    df = np.asarray(df, dtype=float)
    q = stats.t.ppf(0.975, np.where(df >= 1, df, np.nan))
    return float(q) if q.ndim == 0 else q


def seed_summary(table: pd.DataFrame, keys: Sequence[str], values: Sequence[str] = ("acc_mlp", "acc_sum"),
                 ) -> pd.DataFrame:
    """Per `keys` (with "step"): n_seeds, tokens (runs of one model x budget share the schedule) and per value
    <v>_mean, <v>_sd and the 95 % t-interval <v>_lo, <v>_hi (NaN with a single seed)."""
    g = table.groupby(list(keys), dropna=False, sort=True)
    out = g.agg(n_seeds=("run", "nunique"), tokens=("tokens", "mean"))
    t = t975(out["n_seeds"].to_numpy() - 1)
    for v in values:
        m, sd = g[v].mean(), g[v].std(ddof=1)
        half = sd / np.sqrt(out["n_seeds"]) * t
        out[f"{v}_mean"], out[f"{v}_sd"] = m, sd
        out[f"{v}_lo"], out[f"{v}_hi"] = m - half, m + half
    return out.reset_index()


def bootstrap_paradigm_intervals(table: pd.DataFrame, values: Sequence[str] = ("acc_mlp", "acc_sum"),
                                 level: float = 0.95) -> pd.DataFrame:
    """Adds <v>_boot_lo / <v>_boot_hi: exact percentile bootstrap over pairs for each paradigm row."""
    out = table.copy()
    a = (1 - level) / 2
    for v in values:
        lo = np.full(len(out), np.nan)
        hi = np.full(len(out), np.nan)
        n_all = out["n_pairs"].to_numpy()
        for n in np.unique(n_all[n_all > 0]):
            rows = np.flatnonzero(n_all == n)
            k = np.rint(out[v].to_numpy()[rows] * n).astype(int)
            qlo, qhi = (stats.binom.ppf(q, n, np.arange(n + 1) / n) / n for q in (a, 1 - a))  # for k = 0..n
            lo[rows], hi[rows] = qlo[k], qhi[k]
        out[f"{v}_boot_lo"], out[f"{v}_boot_hi"] = lo, hi
    return out

