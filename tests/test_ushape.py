"""Statistical U-shapes: smoother, known planted U, monotone curves, kinds, run directories."""
from __future__ import annotations

import numpy as np
import pytest

from probes.evalset import load_runs, log_tokens
from probes.synthetic import RunSpec, log_spaced_steps, planted_dip, sample_correct, sigmoid_curve, write_run
from probes.ushape import (UShapeConfig, analyse_curve, find_u_shapes_in_runs, onset_index,
                           smoothing_matrix)

X = np.linspace(6.0, 11.0, 40)  # log10 tokens of 40 checkpoints


def outcomes(curve, n_pairs, seeds, rng):
    return [[sample_correct(curve, n_pairs, rng).astype(float)] for _ in range(seeds)]


def test_smoother_keeps_lines_and_rows_sum_to_one():
    x = np.r_[5.0, 6.0, 6.3, 6.6, 6.7, 6.8, 7.4]
    W = smoothing_matrix(x, 0.15, 2)
    assert W.sum(axis=1) == pytest.approx(np.ones(len(x)))
    line = 0.1 * x - 0.2
    assert W @ line == pytest.approx(line)  # local-linear: no bias at the ends of a trend
    assert smoothing_matrix(x, 0.0) == pytest.approx(np.eye(len(x)))


def test_noiseless_u_found_at_planted_positions():
    # 1000 pairs, accuracy exactly the planted curve up to binomial noise of one seed
    truth = 0.85 - planted_dip(X, 0.3, 8.5, 0.3)  # flat 0.85, dip to 0.55 at 10^8.5 tokens
    cfg = UShapeConfig(delta=0.1, n_boot=300)
    rng = np.random.default_rng(0)
    (u,) = [u for u in analyse_curve(X, outcomes(truth, 1000, 3, rng), cfg, onset_index=0, rng=rng)
            if u["accepted"]]
    assert abs(X[u["trough"]] - 8.5) <= 0.15
    assert u["depth"] == pytest.approx(0.3, abs=0.06)  # smoothing shaves a little off the depth
    assert X[u["peak"]] < 8.2 and X[u["recovery"]] > 8.5
    assert u["kind"] == "learned_then_lost" and u["peak_above_chance"]
    assert u["p_drop"] < 0.01 and u["drop_lo"] > 0.2
    assert u["seed_agreement"] == 1.0


def test_monotone_noisy_curves_give_no_accepted_u():
    rng = np.random.default_rng(1)
    cfg = UShapeConfig(delta=0.1, n_boot=200)
    for _ in range(10):
        curve = sigmoid_curve(X, 0.5, 0.9, rng.uniform(7, 10), rng.uniform(1, 4))
        assert not any(u["accepted"] for u in analyse_curve(X, outcomes(curve, 300, 3, rng), cfg, 0, rng))


def test_kinds_early_heuristic_and_chance_dip():
    rng = np.random.default_rng(2)
    cfg = UShapeConfig(delta=0.1, n_boot=300)
    heuristic = 0.8 - planted_dip(X, 0.35, 7.5, 0.35) + 0.1 * (X > 9)  # high from the start
    us = [u for u in analyse_curve(X, outcomes(heuristic, 1000, 2, rng), cfg, onset_index=20, rng=rng)
          if u["accepted"]]
    assert us and us[0]["kind"] == "early_heuristic"
    chance_dip = 0.5 - planted_dip(X, 0.3, 8.0, 0.3) + 0.4 / (1 + np.exp(-3 * (X - 9.5)))
    us = [u for u in analyse_curve(X, outcomes(chance_dip, 1000, 2, rng), cfg, 0, rng) if u["accepted"]]
    assert us and us[0]["kind"] == "chance_dip" and not us[0]["peak_above_chance"]


def test_seed_disagreement_rejects_u():
    rng = np.random.default_rng(3)
    cfg = UShapeConfig(delta=0.1, n_boot=200, min_seed_agreement=0.75)
    dip = 0.9 - planted_dip(X, 0.6, 8.5, 0.3)
    flat = np.full_like(X, 0.9)
    mats = [[sample_correct(c, 1000, rng).astype(float)] for c in (dip, flat, flat, flat)]
    us = analyse_curve(X, mats, cfg, 0, rng)  # mean curve dips 0.15; only 1 of 4 seeds shows it
    assert us and all(u["seed_agreement"] == 0.25 and not u["accepted"] for u in us)


def test_onset_index():
    assert onset_index(np.r_[0.5, 0.52, 0.56, 0.7], 0.05) == 2
    assert onset_index(np.r_[0.5, 0.5, 0.5], 0.05) == 3


def test_find_u_shapes_in_run_directories(tmp_path):
    rng = np.random.default_rng(4)
    steps = log_spaced_steps(24, 5000)
    x = log_tokens(steps * 1000)
    curves = np.stack([0.9 - planted_dip(x, 0.35, 6.0, 0.25), sigmoid_curve(x, 0.5, 0.95, 5.5, 4)], axis=1)
    runs = []
    for seed in (1, 2):
        spec = RunSpec(model="pythia-14m", budget=10**7, seed=seed, tokens_per_step=1000, steps=list(steps))
        runs.append(write_run(tmp_path / f"s{seed}", spec, np.clip(curves, 0, 1), ["attr", "simple"],
                              ["agreement", "agreement"], 400, rng))
    ev = load_runs(runs)
    df, notes = find_u_shapes_in_runs(ev, UShapeConfig(delta=0.1, n_boot=200))
    acc = df[df.accepted]
    para = acc[acc.level == "paradigm"]
    assert list(para.paradigm) == ["attr"]
    row = para.iloc[0]
    assert row.n_seeds == 2 and row.runs == "s1 s2"
    assert abs(np.log10(row.trough_tokens) - 6.0) <= 0.3
    assert row.peak_tokens < row.trough_tokens < row.recovery_tokens
    assert notes == []
