"""Seed intervals and pair bootstrap against hand computation and explicit resampling."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from probes.analysis.aggregate import bootstrap_paradigm_intervals, seed_summary, t975
from probes.analysis.bands import seed_bands, unit_curves


def resample_accuracy(correct: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Plain resampling bootstrap of a 0/1 vector's mean: the reference for the exact shortcut."""
    idx = rng.integers(0, len(correct), size=(n_boot, len(correct)))
    return correct[idx].mean(axis=1)


def test_seed_summary_t_interval_by_hand():
    t = pd.DataFrame({"run": ["a", "b", "c"], "model": "m", "step": 10, "tokens": 100,
                      "acc_mlp": [0.6, 0.7, 0.8], "acc_sum": [0.5, 0.5, 0.5]})
    s = seed_summary(t, ["model", "step"]).iloc[0]
    # mean 0.7, sd 0.1, t(2) = 4.30265 -> half width 4.30265 * 0.1 / sqrt(3) = 0.248414
    # (a 3-decimal t table's 4.303 gives 0.248434: off by 2e-5)
    assert s.n_seeds == 3 and s.acc_mlp_mean == pytest.approx(0.7)
    assert s.acc_mlp_lo == pytest.approx(0.7 - 0.248414, abs=2e-6)
    assert s.acc_mlp_hi == pytest.approx(0.7 + 0.248414, abs=2e-6)
    assert s.acc_sum_lo == pytest.approx(0.5)
    one = seed_summary(t.iloc[:1], ["model", "step"]).iloc[0]
    assert np.isnan(one.acc_mlp_lo)  # a single seed has no seed interval


def test_t_quantiles():
    # published two-sided 95 % values (4-decimal t tables): 12.7062, 4.3027, 2.0739, 1.9600 at df = inf
    assert t975(1) == pytest.approx(12.7062, abs=1e-4)
    assert t975(22) == pytest.approx(2.0739, abs=1e-4)  # exact for every df, not the next table row
    assert t975(10_000) == pytest.approx(1.9602, abs=1e-4)
    assert np.isnan(t975(0))  # one seed: no interval
    assert t975(np.array([0, 2])) == pytest.approx([np.nan, 4.3027], abs=1e-4, nan_ok=True)


def test_exact_pair_bootstrap_matches_resampling():
    t = pd.DataFrame({"n_pairs": [300, 300, 40], "acc_mlp": [240 / 300, 1.0, 0.5], "acc_sum": 0.5})
    b = bootstrap_paradigm_intervals(t)
    correct = np.r_[np.ones(240), np.zeros(60)]
    r = resample_accuracy(correct, 40_000, np.random.default_rng(0))
    lo, hi = np.quantile(r, [0.025, 0.975])
    assert b.acc_mlp_boot_lo[0] == pytest.approx(lo, abs=1 / 300 + 1e-9)
    assert b.acc_mlp_boot_hi[0] == pytest.approx(hi, abs=1 / 300 + 1e-9)
    assert (b.acc_mlp_boot_lo[1], b.acc_mlp_boot_hi[1]) == (1.0, 1.0)  # all right: no spread
    assert b.acc_mlp_boot_lo[2] < 0.5 < b.acc_mlp_boot_hi[2]


def test_phenomenon_bootstrap_variance_by_hand():
    t = pd.DataFrame({"run": "r", "model": "m", "budget": 1, "seed": 0, "step": 1, "tokens": 10, "benchmark": "b",
                      "phenomenon": "p", "paradigm": ["a", "b"], "n_pairs": [100, 400], "acc_mlp": [0.8, 0.5]})
    u = unit_curves(t, "acc_mlp")
    se = np.sqrt(0.8 * 0.2 / 100 + 0.25 / 400) / 2
    assert u.acc[0] == pytest.approx(0.65) and u["var"][0] == pytest.approx(se ** 2)
    assert (u.n_pairs[0], u.n_paradigms[0]) == (500, 2)
    row = seed_bands(u, ["model", "phenomenon", "step"]).iloc[0]  # one seed: pairs only
    assert row.band == "pair-bootstrap" and row.hi - row.acc_mean == pytest.approx(1.959964 * se)
