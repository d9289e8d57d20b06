"""The report's bands against hand computations (issue 42): seeds and pairs as two random levels, a seed
variance pooled over the phenomena of a cell with 2 seeds, its df, and labels that never claim 95 % where the
bench measured less (bench/bench_coverage.py)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from probes.analysis.bands import band_caption, change_units, seed_bands
from probes.analysis.evalfile import MLP
from probes.analysis.evalset import RunInfo


def units(accs: dict, pair_var: dict | None = None) -> pd.DataFrame:
    """Unit rows of one cell at one step: phenomenon -> the seeds' accuracies (var 1e-4 each)."""
    rows = [{"run": f"s{j}", "model": "m", "budget": 1, "seed": j, "benchmark": "b", "step": 5, "tokens": 50,
             "phenomenon": ph, "acc": a, "var": 1e-4, "n_pairs": 30, "n_paradigms": 1,
             **({"pair_var": pair_var[ph]} if pair_var else {})}
            for ph, seeds in accs.items() for j, a in enumerate(seeds)]
    return pd.DataFrame(rows)


KEYS = ["model", "budget", "benchmark", "phenomenon", "step"]


def test_two_seeds_pool_the_seed_variance_over_the_phenomena_of_a_cell():
    # sd^2 over 2 seeds: A (0.70, 0.80) 0.005, B (0.60, 0.60) 0, C (0.50, 0.70) 0.02: pooled 0.025 / 3 on df 3,
    # / S = 2: 1/240. A's half-width: sqrt(t975(3)^2 / 240 + 1.96^2 * 0.001), its shared pairs' variance 0.001
    b = seed_bands(units({"A": (0.7, 0.8), "B": (0.6, 0.6), "C": (0.5, 0.7)},
                         {"A": 0.001, "B": 0.002, "C": 0.0}), KEYS).set_index("phenomenon")
    assert list(b.band) == ["pooled-t"] * 3 and list(b.band_df) == [3, 3, 3]
    t3, z = 3.182446305284263, 1.959963984540054
    half = math.sqrt(t3 ** 2 / 240 + z ** 2 * 0.001)
    assert (b.loc["A"].lo, b.loc["A"].hi) == pytest.approx((0.75 - half, 0.75 + half), abs=1e-12)
    assert b.loc["A"].se == pytest.approx(half / t3)
    # B's seeds agree, yet it borrows the pooled seed variance
    assert b.loc["B"].hi - 0.6 == pytest.approx(math.sqrt(t3 ** 2 / 240 + z ** 2 * 0.002), abs=1e-12)
    # the seed x pair wobble in the seeds' spread (held by pair_var already) comes off before pooling:
    # A 0.005 - 0.004, B 0 - 0.001, C 0.02 - 0: pooled 0.02 / 3, / 2 = 1/300
    w = seed_bands(units({"A": (0.7, 0.8), "B": (0.6, 0.6), "C": (0.5, 0.7)}, {"A": 0.001, "B": 0.002, "C": 0.0})
                   .assign(wobble=lambda u: u.phenomenon.map({"A": 0.004, "B": 0.001, "C": 0.0})), KEYS)
    assert w.hi.iloc[0] - 0.75 == pytest.approx(math.sqrt(t3 ** 2 / 300 + z ** 2 * 0.001), abs=1e-12)


def test_three_seeds_add_the_shared_pairs_variance_to_the_t_band():
    # seeds 0.6, 0.7, 0.8: sd^2 0.01, / 3, on df 2; the pairs every seed scored: 0.002, with z
    b = seed_bands(units({"A": (0.6, 0.7, 0.8)}, {"A": 0.002}), KEYS).iloc[0]
    assert b.band == "t" and b.band_df == 2
    assert b.hi - 0.7 == pytest.approx(math.sqrt(4.302652729911275 ** 2 * 0.01 / 3 + 1.959963984540054 ** 2 * 0.002))


def test_a_band_that_cannot_reach_95_percent_says_its_measured_coverage():
    one = seed_bands(units({"A": (0.7, 0.8)}), KEYS)  # 2 seeds, nothing to pool with
    single = seed_bands(units({"A": (0.7,), "B": (0.6,)}), KEYS)  # one seed
    for b, kind in ((one, "seed-and-pair bootstrap"), (single, "pair bootstrap")):
        cap = band_caption(b)
        assert kind in cap and "coverage≈" in cap and "95 %" not in cap
    assert list(one.band) == ["seed-pair-bootstrap"] and one.band_df.isna().all()


def test_the_change_from_step_0_carries_the_shared_pairs_variance():
    """Two seeds on the same 4 pairs of one paradigm: d = last - first per pair, seed 1 [1, 1, 0, 0], seed 2
    [1, 0, 0, -1]; seed means [1, 0.5, 0, -0.5], var (ddof 1) 0.41667 / 4 pairs = 0.10417."""
    first = [np.array([0, 0, 1, 0]), np.array([0, 0, 0, 1])]
    last = [np.array([1, 1, 1, 0]), np.array([1, 0, 0, 0])]
    outcomes = {(f"s{j}", "b"): SimpleNamespace(steps=np.array([0, 9]), tokens=np.array([0, 90]),
                                                 correct=np.stack([first[j], last[j]]).astype(np.uint8) * MLP,
                                                 row_paradigm=np.zeros(4, np.int32), paradigms=["p"],
                                                 pair_ids=np.arange(4)) for j in (0, 1)}
    runs = [RunInfo(name=f"s{j}", path="", model="m", budget=1, seed=j) for j in (0, 1)]
    ch = change_units(outcomes, runs, MLP, ["b"])
    assert ch.pair_var.to_numpy() == pytest.approx([0.41666667 / 4] * 2)
    # the seed x pair wobble: residuals d - seed mean - pair mean + 0.25 are -0.25, 0.25, -0.25, 0.25 (seed 1)
    # and their negatives: 0.5 / ((2 - 1)(4 - 1)) / 4 pairs = 1/24
    assert ch.wobble.to_numpy() == pytest.approx([1 / 24] * 2)
