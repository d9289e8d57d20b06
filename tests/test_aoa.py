"""Sigmoid fit, age of acquisition and forgettability on hand-computable curves."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from probes.analysis.aoa import AoAConfig, aoa_from_fit, aoa_table, fit_sigmoids, forgettability, sigmoid

X = np.linspace(6.0, 11.0, 30)


def test_known_sigmoid_recovered_and_aoa_by_hand():
    y = 0.5 + 0.4 / (1 + np.exp(-2.0 * (X - 8.0)))
    fit = fit_sigmoids(X, y[None, :])
    assert fit["lo"][0] == pytest.approx(0.5, abs=1e-4)
    assert fit["hi"][0] == pytest.approx(0.9, abs=1e-4)
    assert fit["mid"][0] == pytest.approx(8.0, abs=1e-3)
    assert fit["slope"][0] == pytest.approx(2.0, abs=1e-3)
    aoa, best, status = aoa_from_fit(X, fit, 0.5, 0.05)
    # best = f(11) = 0.5 + 0.4 s(6); halfway target 0.5 + 0.2 s(6) -> s = s(6)/2 of the amplitude
    s6 = 1 / (1 + math.exp(-6.0))
    q = s6 / 2
    assert best[0] == pytest.approx(0.5 + 0.4 * s6, abs=1e-4)
    assert aoa[0] == pytest.approx(8.0 + math.log(q / (1 - q)) / 2.0, abs=2e-3)
    assert status[0] == "ok"


def test_noisy_batch_fit_and_statuses():
    rng = np.random.default_rng(0)
    clean = sigmoid(X, np.r_[0.5, 0.52, 0.9, 0.8], np.r_[0.95, 0.52, 0.6, 0.95], np.r_[9.0, 8.0, 7.5, 4.0],
                    np.r_[3.0, 1.0, 3.0, 2.0])
    fit = fit_sigmoids(X, clean + rng.normal(0, 0.01, clean.shape))
    aoa, best, status = aoa_from_fit(X, fit, 0.5, 0.05)
    assert abs(fit["mid"][0] - 9.0) < 0.1 and status[0] == "ok"
    assert list(status[1:]) == ["not_acquired", "decreasing", "above_halfway_at_first_checkpoint"]
    assert np.isnan(aoa[1:]).all()


def test_forgettability_sums_drops():
    x = np.arange(5.0)
    assert forgettability(x, np.array([[0.5, 0.7, 0.6, 0.8, 0.75]]), 0.0, 0)[0] == pytest.approx(0.15)
    assert forgettability(x, np.array([[0.5, 0.6, 0.7, 0.8, 0.9]]), 0.0, 0)[0] == pytest.approx(0.0)


def _table(steps, accs):
    return pd.DataFrame({"run": "r", "model": "m", "budget": 10, "seed": 1, "benchmark": "b",
                         "phenomenon": "ph", "paradigm": "p", "step": steps, "tokens": np.asarray(steps) * 1000,
                         "n_pairs": 100, "acc_mlp": accs, "acc_sum": accs})


def test_aoa_table_too_few_checkpoints_is_said_not_raised():
    t = _table([0, 1, 2, 4], [0.5, 0.6, 0.7, 0.8])
    ph = t.drop(columns="paradigm")
    out = aoa_table(t, ph, AoAConfig())
    assert set(out.status) == {"too_few_checkpoints"} and out.aoa_tokens.isna().all()
    assert set(out.level) == {"paradigm", "phenomenon"}


def test_aoa_table_on_a_curve():
    steps = np.r_[0, np.unique(np.geomspace(1, 10**6, 25).astype(int))]
    x = np.log10(steps[1:] * 1000)
    acc = np.r_[0.5, 0.5 + 0.45 / (1 + np.exp(-3 * (x - 6.5)))]
    t = _table(steps, acc)
    out = aoa_table(t, t.drop(columns="paradigm"))
    row = out[out.level == "paradigm"].iloc[0]
    assert row.status == "ok" and row.fit_mid == pytest.approx(6.5, abs=0.01)
    assert row.aoa_log10_tokens == pytest.approx(6.5, abs=0.05)
    assert row.final_acc == pytest.approx(acc[-1]) and row.forgettability == pytest.approx(0, abs=1e-3)


def test_fit_is_the_previous_solvers_optimum_and_stays_in_its_box():
    # Regression pin: the curves of test_noisy_batch_fit_and_statuses that have a well-defined optimum
    # (0: acquired, 2: decreasing), as fitted by the batched Levenberg-Marquardt this module had before
    # scipy (30 iterations, converged on these two). scipy's fit must land on the same point.
    rng = np.random.default_rng(0)
    clean = sigmoid(X, np.r_[0.5, 0.52, 0.9, 0.8], np.r_[0.95, 0.52, 0.6, 0.95], np.r_[9.0, 8.0, 7.5, 4.0],
                    np.r_[3.0, 1.0, 3.0, 2.0])
    fit = fit_sigmoids(X, clean + rng.normal(0, 0.01, clean.shape))
    before = {"lo": [0.5005914076709436, 0.8984378220206939], "hi": [0.9451581395875644, 0.60247856879684],
              "mid": [8.995175408210056, 7.50977261867454], "slope": [3.3412482810519775, 3.1790328599815023]}
    for k, v in before.items():
        assert fit[k][[0, 2]] == pytest.approx(v, abs=1e-6), k
    # curve 1 is flat noise: its least-squares optimum is a step far from the data; the slope is held
    # at 200 / span (40 here) and mid within a span of the observed x
    assert fit["slope"][1] == pytest.approx(40.0, abs=1e-6)
    assert (fit["slope"] <= 40.0 + 1e-9).all() and (np.abs(fit["mid"] - 8.5) <= 7.5 + 1e-9).all()


def test_batched_fit_reaches_minpacks_optimum_and_crawlers_are_minpacks_own():
    # The batched Levenberg-Marquardt must land where MINPACK (scipy least_squares, method="lm", the
    # fitter before it) lands from the same start; a fit it leaves unconverged goes to MINPACK itself.
    from scipy.optimize import least_squares

    from probes.analysis.aoa import _Box, _grid_start

    rng = np.random.default_rng(1)
    lo, hi = rng.uniform(0.45, 0.6, 200), rng.uniform(0.5, 0.98, 200)
    Y = sigmoid(X, lo, hi, rng.uniform(6.5, 10.5, 200), rng.uniform(0.3, 6.0, 200)) + rng.normal(0, 0.03, (200, 30))
    span = X.max() - X.min()
    box = _Box(np.array([X.min() - span, 1e-3 / span]), np.array([X.max() + span, 200.0 / span]))
    th = _grid_start(X, Y, span)
    ref = []
    for i in range(len(Y)):
        # box.jacobian returns rows (leastsq's col_deriv layout); least_squares takes points x parameters
        f = least_squares(box.residual, np.r_[th[i, :2], box.angle(th[i, 2:])],
                          jac=lambda t, x, y: box.jacobian(t, x, y).T, args=(X, Y[i]),
                          method="lm", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=200)
        ref.append(np.r_[f.x[:2], box.inside(f.x[2:])])
    ref = np.array(ref)
    sse_ref = ((sigmoid(X, *ref.T) - Y) ** 2).sum(1)
    fit = fit_sigmoids(X, Y)
    sse = fit["rmse"] ** 2 * X.size
    # never a worse optimum; equal SSE up to the solvers' relative tolerance (1e-12) of a sum of 30 squares
    assert np.all(sse <= sse_ref * (1 + 1e-9))
    got = np.stack([fit[k] for k in ("lo", "hi", "mid", "slope")], axis=1)
    crawl = ~np.isclose(got, ref, rtol=0, atol=1e-4).all(axis=1)
    assert np.array_equal(got[crawl], ref[crawl])  # a fit far from MINPACK's can only be MINPACK's own


def test_fit_store_returns_a_fresh_fits_bits_and_refits_what_changed(tmp_path, monkeypatch):
    # A later report reuses the fits of unchanged curves: they must be the bits a fresh fit gives (a
    # stale fit under a matching key would be a wrong AoA in the table), and any change to the curves,
    # to max_nfev or to the fitting code must miss.
    import probes.analysis.aoa as aoa_mod
    from probes.analysis.aoa import FitStore

    rng = np.random.default_rng(3)
    Y = sigmoid(X, rng.uniform(0.45, 0.6, 40), rng.uniform(0.6, 0.95, 40), rng.uniform(7, 10, 40),
                rng.uniform(0.5, 4, 40)) + rng.normal(0, 0.03, (40, 30))
    fresh = fit_sigmoids(X, Y)
    first = FitStore(tmp_path / "none.npz")
    made = first.fit(X, Y)
    assert all(np.array_equal(made[k], fresh[k]) for k in fresh)
    assert (first.hits, first.misses) == (0, 1)
    first.save(tmp_path / "fits.npz")

    again = FitStore(tmp_path / "fits.npz")
    got = again.fit(X, Y)
    assert (again.hits, again.misses) == (1, 0)
    assert all(np.array_equal(got[k], fresh[k]) for k in fresh)
    Y2 = Y.copy()
    Y2[7, 12] += 1e-12  # one number of one curve
    again.fit(X, Y2)
    again.fit(X, Y, max_nfev=50)
    assert (again.hits, again.misses) == (1, 2)
    monkeypatch.setattr(aoa_mod, "_CODE_VERSION", aoa_mod._CODE_VERSION + b" edited")
    changed = FitStore(tmp_path / "fits.npz")
    changed.fit(X, Y)
    assert (changed.hits, changed.misses) == (0, 1)


def test_fit_store_ignores_a_torn_file_and_keeps_only_what_was_used(tmp_path):
    from probes.analysis.aoa import FitStore

    (tmp_path / "fits.npz").write_bytes(b"PK\x03\x04 torn")
    store = FitStore(tmp_path / "fits.npz")
    Y = sigmoid(X, 0.5, 0.9, 8.0, 2.0)[None, :] + np.zeros((2, 1))
    store.fit(X, Y)
    store.fit(X[:-1], Y[:, :-1])
    assert (store.hits, store.misses) == (0, 2)
    store.save(tmp_path / "fits.npz")
    later = FitStore(tmp_path / "fits.npz")
    later.fit(X, Y)
    later.save(tmp_path / "fits.npz")
    with np.load(tmp_path / "fits.npz") as z:
        assert len(z.files) == 1  # the batch not asked for again is gone


def test_minpack_callbacks_are_the_sigmoids_arithmetic_bit_for_bit():
    # residual and jacobian do the sigmoid's arithmetic with the parameters as Python floats and in place;
    # their bits are those of the plain numpy expressions (sin/cos/exp stay numpy's), steep slopes and
    # the clip at +-60 included: MINPACK's crawling fits follow every last bit
    from probes.analysis.aoa import _Box

    rng = np.random.default_rng(9)
    span = X.max() - X.min()
    lower, upper = np.array([X.min() - span, 1e-3 / span]), np.array([X.max() + span, 200.0 / span])
    box = _Box(lower, upper)
    half = (upper - lower) / 2
    y = rng.uniform(0.4, 0.9, X.size)
    for theta in rng.normal(0, 2, (200, 4)):
        mid, k = lower + half * (np.sin(theta[2:]) + 1)
        d = 1 + np.exp(-np.maximum(np.minimum(k * (X - mid), 60), -60))
        assert np.array_equal(box.residual(theta, X, y), theta[0] + (theta[1] - theta[0]) / d - y)
        s = 1 / d
        ds = (theta[1] - theta[0]) * s * (1 - s)
        dmid, dk = half * np.cos(theta[2:])
        J = box.jacobian(theta, X, y)
        assert np.array_equal(J, np.stack([1 - s, s, -k * ds * dmid, (X - mid) * ds * dk]))
        box._last = (None, None, None, None)  # a Jacobian at a point whose residual was not taken last
        assert np.array_equal(box.jacobian(theta, X, y), J)


def test_aoa_table_fitted_by_a_worker_is_the_same_table(tmp_path):
    # The report hands its fits to a worker (FigureJobs.compute): the same table, bit for bit, and the
    # store keeps what was fitted there, so that the next report fits nothing
    from probes.analysis.aoa import FitStore, start_aoa_table
    from probes.analysis.outputs import FigureJobs

    rng = np.random.default_rng(4)
    rows = []
    for run in ("r1", "r2"):
        for p in range(6):
            acc = sigmoid(X, 0.5, rng.uniform(0.6, 0.95), rng.uniform(7, 10), rng.uniform(0.5, 3)) + rng.normal(0, 0.03, X.size)
            rows += [{"run": run, "model": "m", "budget": 10, "seed": int(run[1]), "step": i + 1,
                      "tokens": 10 ** x, "benchmark": "b", "phenomenon": f"ph{p % 2}", "paradigm": f"p{p}",
                      "acc_mlp": a} for i, (x, a) in enumerate(zip(X, acc))]
    t = pd.DataFrame(rows)
    phen = t.groupby(["run", "model", "budget", "seed", "step", "tokens", "benchmark", "phenomenon"],
                     as_index=False).acc_mlp.mean()
    here = aoa_table(t, phen)
    store = FitStore(None)
    with FigureJobs(2) as jobs:
        there = start_aoa_table(t, phen, AoAConfig(), store, jobs.compute)()
    pd.testing.assert_frame_equal(there, here)
    assert store.hits == 0 and store.misses > 0
    store.save(tmp_path / "fits.npz")
    again = FitStore(tmp_path / "fits.npz")
    with FigureJobs(2) as jobs:
        pd.testing.assert_frame_equal(start_aoa_table(t, phen, AoAConfig(), again, jobs.compute)(), here)
    assert again.misses == 0 and again.hits == store.misses


def test_aoa_interval_over_seeds_and_pairs(tmp_path):
    """Two seeds, 12 checkpoints over 4 decades: a phenomenon rising 0.5 -> 0.95 at mid 5.0 with 200 pairs per
    paradigm gets a determined AoA interval around its point estimate, inside the run; one at chance whose
    point AoA a seed's fit made up is not determined; one rising past the last checkpoint is not acquired;
    the generator is seeded (the same interval again)."""
    from probes.analysis.aoa import aoa_intervals
    from probes.analysis.curves import phenomenon_table
    from probes.analysis.evalset import load_runs
    from synthetic import RunSpec, log_spaced_steps, sigmoid_curve, write_run

    steps = log_spaced_steps(12, 10000)
    x = np.log10(np.maximum(steps, 1) * 100)
    curves = np.stack([sigmoid_curve(x, 0.5, 0.95, 5.0, 3.0), np.full(len(x), 0.5),
                       sigmoid_curve(x, 0.5, 0.95, 6.3, 6.0)], axis=1)
    rng = np.random.default_rng(3)
    runs = [write_run(tmp_path / f"s{s}", RunSpec(budget=10**6, seed=s, tokens_per_step=100, steps=list(steps),
                                                  benchmark="synth"), curves, ["rise", "flat", "late"],
                      ["rise", "flat", "late"], 200, rng) for s in (1, 2)]
    ev = load_runs(runs)
    cfg = AoAConfig(n_boot=60)
    a = aoa_table(ev.table, phenomenon_table(ev.table), cfg)
    ph = a[a.level == "phenomenon"].groupby(["model", "budget", "benchmark", "phenomenon"], dropna=False).agg(
        aoa_log10_tokens=("aoa_log10_tokens", "mean")).reset_index()
    got = aoa_intervals(ev.outcomes, ev.runs, ph, a, ev.table, cfg).set_index("phenomenon")
    r = got.loc["rise"]
    assert r.aoa_interval == "determined" and r.aoa_lo < r.aoa_log10_tokens < r.aoa_hi
    assert r.aoa_hi - r.aoa_lo < 0.5  # 200 pairs, 2 seeds: a fraction of a decade
    # the flat one: a seed's fit "acquires" it by chance (a point AoA exists), its interval reaches the end
    flat = got.loc["flat"]
    assert np.isfinite(flat.aoa_log10_tokens) and flat.aoa_hi == pytest.approx(6.0) and \
        flat.aoa_interval == "not determined"
    assert got.loc["late"].aoa_interval == "not acquired"
    again = aoa_intervals(ev.outcomes, ev.runs, ph, a, ev.table, cfg).set_index("phenomenon")
    assert (again.aoa_lo.loc["rise"], again.aoa_hi.loc["rise"]) == (r.aoa_lo, r.aoa_hi)


def _old_loop_intervals(outcomes, runs, summary, aoa, table, cfg, seed, pair_counts, seed_draws):
    """The per-seed loop aoa_intervals was (897388b), verbatim but for its random draws: each paradigm's
    multinomial counts and each group's seed draws are the ones given (those the batched code drew)."""
    from probes.analysis.evalfile import MISSING, MLP, SUM
    from probes.analysis.evalset import log_tokens
    from probes.analysis.ushape import _paradigm_columns

    bit = MLP if cfg.metric == "mlp" else SUM
    members = table[["benchmark", "phenomenon", "paradigm"]].drop_duplicates()
    members = members.groupby(["benchmark", "phenomenon"]).paradigm.agg(set).to_dict()
    fits = aoa[aoa.level == "phenomenon"].set_index(["run", "benchmark", "phenomenon"])
    B = cfg.n_boot
    out = summary.copy()
    out["aoa_lo"], out["aoa_hi"], out["aoa_interval"] = np.nan, np.nan, "not acquired"
    todo = out[np.isfinite(out.aoa_log10_tokens.astype(float))]
    info = {r.name: r for r in runs}
    for (model, budget, bench), rows in todo.groupby(["model", "budget", "benchmark"], dropna=False):
        outs = sorted((o for (run, b), o in outcomes.items() if b == bench and info[run].model == model and (
            info[run].budget is None if pd.isna(budget) else info[run].budget == budget)), key=lambda o: o.run)
        phens = list(rows.phenomenon)
        per_seed = []
        for o in outs:
            keep = o.tokens > 0
            x = log_tokens(o.tokens[keep].astype(float))
            cols = _paradigm_columns(o)
            Y = np.zeros((len(phens), B, len(x)))
            counts = iter(next(pair_counts))
            for j, ph in enumerate(phens):
                pars = [p for p in sorted(members.get((bench, ph), ())) if len(cols.get(p, ()))]
                for p in pars:
                    c = o.correct[keep][:, cols[p]]
                    ok = ((c & bit) > 0) & ((c & MISSING) == 0)
                    w = next(counts)
                    Y[j] += (w @ ok.T.astype(float)) / len(cols[p]) / len(pars)
            f0 = fits.reindex([(o.run, bench, ph) for ph in phens])[["fit_lo", "fit_hi", "fit_mid", "fit_slope"]]
            fit = fit_sigmoids(x, Y.reshape(-1, len(x)), polish=False, iters=30,
                               start=np.repeat(f0.to_numpy(dtype=float), B, axis=0))
            a, _best, st = aoa_from_fit(x, fit, cfg.chance, cfg.min_gain, cfg.min_rise_rmse)
            per_seed.append(np.where(st == "ok", a, np.where(st == "above_halfway_at_first_checkpoint", x.min(),
                                                             x.max())).reshape(len(phens), B))
        A = np.stack(per_seed)
        S = len(A)
        draws = next(seed_draws)
        stat = A[draws, :, (np.arange(B)[:, None] + np.arange(S)) % B].mean(axis=1)
        lo, hi = np.quantile(stat, [0.025, 0.975], axis=0)
        inside = (x.min() < lo) & (hi < x.max())
        out.loc[rows.index, "aoa_lo"], out.loc[rows.index, "aoa_hi"] = lo, hi
        out.loc[rows.index, "aoa_interval"] = np.where(inside, "determined", "not determined")
    return out


def test_batched_cached_aoa_intervals_are_the_old_loops(tmp_path, monkeypatch):
    """Three model x budget groups (two on one schedule, so their resamples share a batched fit), 2 seeds,
    paradigms of 40 and 25 pairs: the intervals of every resample fitted at once equal the old per-seed loop's
    fed the same draws to 1e-9 decades (summation order only); a second call with the same FitStore fits
    nothing and gives the same bits; a group's interval does not depend on which other groups are present."""
    from probes.analysis import aoa as aoa_mod
    from probes.analysis.aoa import FitStore, aoa_intervals
    from probes.analysis.curves import phenomenon_table
    from probes.analysis.evalset import load_runs
    from synthetic import RunSpec, log_spaced_steps, sigmoid_curve, write_run

    rng = np.random.default_rng(5)
    runs = []
    for model, budget, tps in (("pythia-14m", 10**6, 100), ("pythia-70m", 10**6, 100), ("pythia-14m", 10**7, 1000)):
        steps = log_spaced_steps(10, 10000)
        x = np.log10(np.maximum(steps, 1) * tps)
        curves = np.stack([sigmoid_curve(x, 0.5, 0.9, x[3] + 0.3 * k, 2.5) for k in range(4)], axis=1)
        for s in (1, 2):
            runs += [write_run(tmp_path / f"{model}_{budget}_{s}_a", RunSpec(
                model=model, budget=budget, seed=s, tokens_per_step=tps, steps=list(steps), benchmark="synth"),
                curves, ["a1", "a2", "b1", "b2"], ["a", "a", "b", "b"], 40, rng)]
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    for f in tmp_path.glob("*/evals/*/synth.parquet"):  # paradigm b2 keeps 25 of its 40 pairs
        t = pq.read_table(f)
        pq.write_table(t.filter(pc.invert(pc.and_(pc.equal(t["paradigm"], "b2"), pc.greater_equal(
            pc.cast(t["pair_id"], "int64"), 25)))), f)
    ev = load_runs(runs)
    assert ev.table[ev.table.paradigm == "b2"].n_pairs.max() == 25
    cfg = AoAConfig(n_boot=30)
    a = aoa_table(ev.table, phenomenon_table(ev.table), cfg)
    ph = a[a.level == "phenomenon"].groupby(["model", "budget", "benchmark", "phenomenon"], dropna=False).agg(
        aoa_log10_tokens=("aoa_log10_tokens", "mean")).reset_index()
    drawn, seeds_drawn = [], []
    real_counts = aoa_mod._pair_counts

    def record(sizes, B, rng):
        c = real_counts(sizes, B, rng)
        drawn.append(np.split(c.astype(float), np.cumsum(sizes)[:-1], axis=1))
        return c
    monkeypatch.setattr(aoa_mod, "_pair_counts", record)
    store = FitStore()
    got = aoa_intervals(ev.outcomes, ev.runs, ph, a, ev.table, cfg, fits=store)
    assert store.misses == 3 and store.hits == 0 and len(drawn) == 6
    import zlib
    for (model, budget, bench), g in ph.groupby(["model", "budget", "benchmark"], dropna=False):
        crc = zlib.crc32(f"{model}|{budget}|{bench}".encode())
        seeds_drawn.append(np.random.default_rng([0, crc, 1]).integers(2, size=(cfg.n_boot, 2)))
    old = _old_loop_intervals(ev.outcomes, ev.runs, ph, a, ev.table, cfg, 0, iter(drawn), iter(seeds_drawn))
    assert (got.aoa_interval == old.aoa_interval).all() and got.aoa_lo.notna().sum() == 6
    np.testing.assert_allclose(got[["aoa_lo", "aoa_hi"]].to_numpy(float), old[["aoa_lo", "aoa_hi"]].to_numpy(float),
                               rtol=0, atol=1e-9)
    again = aoa_intervals(ev.outcomes, ev.runs, ph, a, ev.table, cfg, fits=store)
    assert store.hits == 3 and store.misses == 3 and len(drawn) == 6  # nothing drawn, nothing fitted
    pd.testing.assert_frame_equal(again, got)
    one = ph[ph.model == "pythia-70m"]
    alone = aoa_intervals(ev.outcomes, ev.runs, one, a, ev.table, cfg)
    pd.testing.assert_frame_equal(alone, got[got.model == "pythia-70m"])
