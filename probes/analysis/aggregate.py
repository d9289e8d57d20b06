"""Aggregation: mean and 95 % interval over seeds; bootstrap intervals over pairs.

Resampling a paradigm's n pairs gives a count of correct pairs distributed exactly Binomial(n, k/n), so its
percentile bootstrap is a pair of binomial quantiles computed once per distinct n, without resampling loops.
"""
from __future__ import annotations

import math
from functools import lru_cache
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
    """Mean over seeds (runs) per `keys` (which must include "step"), with a 95 % t-interval.

    One row per group; columns n_seeds, tokens (mean over seeds: runs of one model x budget share
    the schedule), and for each value: <v>_mean, <v>_sd, <v>_lo, <v>_hi (NaN with a single seed).
    """
    g = table.groupby(list(keys), dropna=False, sort=True)
    out = g.agg(n_seeds=("run", "nunique"), tokens=("tokens", "mean"))
    t = t975(out["n_seeds"].to_numpy() - 1)
    for v in values:
        m, sd = g[v].mean(), g[v].std(ddof=1)
        half = sd / np.sqrt(out["n_seeds"]) * t
        out[f"{v}_mean"], out[f"{v}_sd"] = m, sd
        out[f"{v}_lo"], out[f"{v}_hi"] = m - half, m + half
    return out.reset_index()


@lru_cache(maxsize=64)
def _binomial_quantile_table(n: int, lo_q: float, hi_q: float) -> tuple[np.ndarray, np.ndarray]:
    """For k = 0..n: the lo_q / hi_q quantiles of Binomial(n, k/n) / n (percentile bootstrap)."""
    j = np.arange(n + 1)
    log_choose = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in j])
    p = j / n
    with np.errstate(divide="ignore", invalid="ignore"):
        lp, lq = np.log(p)[:, None], np.log1p(-p)[:, None]
        # 0 * log(0) is 0 here (k = 0 or k = n rows are point masses)
        terms = np.where(j == 0, 0.0, j * lp) + np.where(j == n, 0.0, (n - j) * lq)
    pmf = np.exp(log_choose[None, :] + terms)  # row k: pmf of Binomial(n, k/n)
    cdf = np.cumsum(pmf, axis=1)
    lo = np.argmax(cdf >= lo_q - 1e-12, axis=1) / n
    hi = np.argmax(cdf >= hi_q - 1e-12, axis=1) / n
    return lo, hi


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
            qlo, qhi = _binomial_quantile_table(int(n), a, 1 - a)
            lo[rows], hi[rows] = qlo[k], qhi[k]
        out[f"{v}_boot_lo"], out[f"{v}_boot_hi"] = lo, hi
    return out

