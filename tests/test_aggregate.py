"""Seed intervals and pair bootstrap against hand computation and explicit resampling."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from probes.aggregate import (bootstrap_paradigm_intervals, bootstrap_phenomenon_intervals,
                              resample_accuracy, seed_summary, t975)


def test_seed_summary_t_interval_by_hand():
    t = pd.DataFrame({"run": ["a", "b", "c"], "model": "m", "step": 10, "tokens": 100,
                      "acc_mlp": [0.6, 0.7, 0.8], "acc_sum": [0.5, 0.5, 0.5]})
    s = seed_summary(t, ["model", "step"]).iloc[0]
    # mean 0.7, sd 0.1, t(2) = 4.303 -> half width 4.303 * 0.1 / sqrt(3) = 0.24843
    assert s.n_seeds == 3 and s.acc_mlp_mean == pytest.approx(0.7)
    assert s.acc_mlp_lo == pytest.approx(0.7 - 0.248434, abs=1e-5)
    assert s.acc_mlp_hi == pytest.approx(0.7 + 0.248434, abs=1e-5)
    assert s.acc_sum_lo == pytest.approx(0.5)
    one = seed_summary(t.iloc[:1], ["model", "step"]).iloc[0]
    assert np.isnan(one.acc_mlp_lo)  # a single seed has no seed interval


def test_t_quantiles():
    assert t975(1) == pytest.approx(12.706)
    assert t975(22) == pytest.approx(2.086)  # between table rows: the smaller df (conservative)
    assert t975(10_000) == pytest.approx(1.96, abs=1e-3)


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
    t = pd.DataFrame({"run": "r", "step": 1, "phenomenon": "p", "paradigm": ["a", "b"],
                      "n_pairs": [100, 400], "acc_mlp": [0.8, 0.5], "acc_sum": [0.8, 0.5]})
    row = bootstrap_phenomenon_intervals(t, ["run", "step", "phenomenon"]).iloc[0]
    se = np.sqrt(0.8 * 0.2 / 100 + 0.25 / 400) / 2
    assert row.acc_mlp == pytest.approx(0.65)
    assert row.acc_mlp_boot_hi - row.acc_mlp == pytest.approx(1.959964 * se)
    assert row.n_pairs == 500 and row.n_paradigms == 2
