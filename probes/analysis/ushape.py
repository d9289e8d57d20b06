"""U-shapes in learning curves (docs/report.md, "U-shapes and the paper's U's"): a drop of at least delta from an
earlier peak to a trough, then a recovery of at least delta, that is not noise. `find_u_shapes` proposes candidates;
`analyse_curve` / `find_u_shapes_in_runs` (called by `probes report` and `probes curves` alike) decide."""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import isotonic_regression
from threadpoolctl import threadpool_limits

from probes.analysis.evalfile import MISSING, MLP, SUM
from probes.analysis.evalset import log_tokens
from probes.analysis.scaling import budget_label
from probes.analysis.unoise import (MIN_RESIDUALS, _impute, _resample_counts, dispersion, min_pairs,
                                    paired_cov, shock_ratio, smoothing_matrix, u_thresholds, unit_sd,
                                    unit_u_threshold)
from probes.evals.files import ALL_SUFFIX


@dataclass(frozen=True)
class UShape:
    """Indices into the curve (sorted by x) and their values."""

    peak: int
    trough: int
    recovery: int  # first point after the trough that is >= trough + delta
    peak_y: float
    trough_y: float
    recovery_y: float
    recovered_to: float  # highest value after the trough before the next drop of delta (or the end)

    @property
    def depth(self) -> float:
        return self.peak_y - self.trough_y


def find_u_shapes(y: Sequence[float], delta: float) -> list[UShape]:
    """All U's of a curve given in x order, as the swings of a delta-zigzag (peak, then `delta` down to the
    trough, then `delta` up: the recovery, where the walk starts again); they do not overlap; NaNs skipped."""
    if delta <= 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    y = np.asarray(y, dtype=np.float64)
    idx = np.flatnonzero(np.isfinite(y))
    if len(idx) < 3:
        return []
    found: list[tuple[int, int, int]] = []
    i_max, i_min, falling = idx[0], -1, False
    for t in idx[1:]:
        if not falling:
            if y[t] > y[i_max]:
                i_max = t
            elif y[i_max] - y[t] >= delta:
                falling, i_min = True, t
        else:
            if y[t] < y[i_min]:
                i_min = t
            elif y[t] - y[i_min] >= delta:
                found.append((i_max, i_min, t))
                falling, i_max = False, t
    ends = [f[1] for f in found[1:]] + [len(y)]  # recovered_to: up to the next trough
    return [UShape(int(p), int(tr), int(rec), float(y[p]), float(y[tr]), float(y[rec]), float(np.nanmax(y[tr:end])))
            for (p, tr, rec), end in zip(found, ends)]


KINDS = ("learned_then_lost", "early_heuristic", "chance_dip")
VERDICTS = ("accepted", "too_thin", "below_noise", "not_significant", "seeds_disagree")


@dataclass
class UShapeConfig:
    """U-shape detection on the raw checkpoints (a dip over 2-4 sparse checkpoints, which smoothing flattens)
    and on the curve smoothed on log tokens (a wide shallow dip); docs/probing.md states when a candidate is
    accepted (the noise threshold that makes looking at every checkpoint honest, the bootstrap, the seeds)."""

    delta: float = 0.05  # minimum drop and recovery of the curve (at its scale), in accuracy
    bandwidth: float = 0.15  # Gaussian smoothing sd in decades of tokens (log10); 0 = raw scale only
    min_neighbours: int = 2  # ... widened per point to its k-th nearest checkpoint (sparse early ones too)
    raw: bool = True  # also look at the unsmoothed checkpoints (narrow dips where checkpoints are sparse)
    min_seed_agreement: float = 0.5  # fraction of seeds that must show the U on their own curve
    seed_delta_fraction: float = 0.5  # a seed shows it when its drop and recovery at the U's positions >= this x delta
    n_boot: int = 1000  # bootstrap resamples (seeds, then pairs)
    n_null: int = 4000  # Monte Carlo draws of binomial noise for the noise threshold
    alpha: float = 0.05  # one-sided level for the drop and the recovery; also of the noise threshold
    require_recovery: bool = True  # also demand a significant recovery, not only a significant drop
    chance: float = 0.5
    onset_gain: float = 0.05  # near-random until the benchmark's mean accuracy rose this much above step 0's
    metric: str = "mlp"  # mlp | sum
    seed: int = 0  # of the bootstrap and Monte Carlo generator

    def __post_init__(self) -> None:
        if self.delta <= 0 or self.bandwidth < 0 or self.n_boot < 10 or self.n_null < 100 or not 0 < self.alpha < 1:
            raise ValueError(f"UShapeConfig: bad values {self}")
        if not self.raw and self.bandwidth == 0:
            raise ValueError("UShapeConfig: raw=False needs bandwidth > 0 (no scale left to look at)")
        if self.metric not in ("mlp", "sum"):
            raise ValueError(f"UShapeConfig.metric must be 'mlp' or 'sum', got {self.metric!r}")


U_LEVELS = ("phenomenon",)  # the curves searched by default (the paper's level), by `probes report` and `curves`
FALSE_U_BUDGET = 0.5  # false U's expected at most in one search (a report, or `probes curves`' output)


def curve_benchmarks(table) -> list[str]:
    """Benchmarks with a curve: scored at two or more checkpoints of some run. "<name>_all" (every pair
    at the last checkpoint only) is not one: it feeds the final-accuracy table and the scaling view."""
    n = table.groupby(["benchmark", "run"])["step"].nunique().groupby("benchmark").max()
    return sorted(b for b, k in n.items() if k >= 2 and not str(b).endswith(ALL_SUFFIX))


def search_config(ev, cfg: UShapeConfig, levels=U_LEVELS, false_u_budget: float = FALSE_U_BUDGET,
                  alpha: float | None = None) -> tuple[int, UShapeConfig]:
    """(curves a U search of ev's curve benchmarks looks at, cfg at the per-curve level that keeps the expected
    false U's of the whole search <= false_u_budget (Bonferroni over curves; `alpha` instead if given), with
    bootstrap and null draws enough for it). `probes report` and `probes curves` both search with it: the same
    runs get the same answer from both."""
    t = ev.table[ev.table.benchmark.isin(curve_benchmarks(ev.table))]
    n = 0
    for _, g in t.groupby(["model", "budget", "benchmark"], dropna=False):
        if g.step.nunique() >= 4:
            n += g.phenomenon.nunique() * ("phenomenon" in levels) + g.paradigm.nunique() * ("paradigm" in levels)
    alpha = min(cfg.alpha, false_u_budget / max(n, 1)) if alpha is None else alpha
    return n, dataclasses.replace(cfg, alpha=alpha, n_boot=max(cfg.n_boot, math.ceil(10 / alpha)),
                                  n_null=max(cfg.n_null, math.ceil(40 / alpha)))


def scales(x: np.ndarray, cfg: UShapeConfig) -> list[tuple[str, np.ndarray]]:
    """(name, matrix) of the curves the detector looks at: raw checkpoints and/or smoothed."""
    return ([("raw", np.eye(len(x)))] if cfg.raw else []) + (
        [("smoothed", smoothing_matrix(x, cfg.bandwidth, cfg.min_neighbours))] if cfg.bandwidth > 0 else [])


def analyse_curve(x: np.ndarray, mats: list[list[np.ndarray]], cfg: UShapeConfig,
                  onset_index: int = 0, rng: np.random.Generator | None = None, shock: float = 1.0) -> list[dict]:
    """Statistical U's of one unit (a paradigm, or a phenomenon: the mean of its paradigms), one dict each
    (docs/probing.md states the rule). x: (n_steps,) log10 tokens; mats[s][k]: (n_steps, n_pairs_k) 0/1 outcomes
    of seed s on paradigm k. Each candidate of find_u_shapes at each scale gets its scale's noise threshold, seed
    agreement, a bootstrap of its drop, recovery and peak level, its kind and a verdict (VERDICTS); of a dip both
    scales find, the accepted (else the relatively deeper) one is kept. onset_index: first checkpoint no longer
    near-random; shock: the noise the checkpoints add beyond the pairs' own, in binomial variances (group_shock;
    NaN: 1, as if unpaired). The noise a U must beat is paired: the same pairs at every checkpoint vary together
    (paired_cov, mostly a shift of the whole curve), and only the model's own moves between checkpoints make dips."""
    rng = rng or np.random.default_rng(cfg.seed)
    shock = shock if np.isfinite(shock) else 1.0
    sd, n_unit = unit_sd(mats)
    sd_worst, _ = unit_sd(mats, worst_case=True)
    n_seeds, n_par = len(mats), len(mats[0])
    mats = [[_impute(np.asarray(m, dtype=float)) for m in seed] for seed in mats]
    cov = paired_cov(mats) + np.diag(shock * sd ** 2)
    raw_seed = np.array([np.mean([m.mean(axis=1) for m in seed], axis=0) for seed in mats])
    looks = scales(x, cfg)
    # The null: the closest monotone curve (isotonic, rising or falling) plus the noise; at its bends the
    # smoother overshoots and draws a dip of its own, which the threshold then includes.
    mean = raw_seed.mean(axis=0)
    iso = min((isotonic_regression(mean, increasing=up).x for up in (True, False)), key=lambda f: np.sum((f - mean) ** 2))
    thresholds = u_thresholds(iso, cov, [W for _, W in looks], cfg.alpha, cfg.n_null, rng)
    c_units = unit_u_threshold([W for _, W in looks], cfg.alpha, cfg.n_null, cfg.seed)
    cands = []  # (scale, W, curve, seed curves, UShape, r_max, threshold, one-seed threshold)
    for (name, W), c, c_unit in zip(looks, thresholds, c_units):
        seed_curves = raw_seed @ W.T
        curve = seed_curves.mean(axis=0)
        c_thin = float(np.max(sd_worst) / 0.5 * c_unit)  # same draws' law at p = 0.5, this unit's pairs
        for u in find_u_shapes(curve, cfg.delta):
            r_max = u.trough + int(np.argmax(curve[u.trough:] >= u.recovered_to - 1e-12))
            cands.append((name, W, curve, seed_curves, u, r_max, c, c_thin))
    if not cands:
        return []
    # One bootstrap of drop, recovery and peak level for every candidate above the noise threshold (only
    # they can be accepted; the bootstrap is where the time goes); the peak's level on the smoothed curve.
    depths = [float(min(cv[u.peak], cv[r]) - cv[u.trough]) for _, _, cv, _, u, r, *_ in cands]
    tested = [i for i, (d, cand) in enumerate(zip(depths, cands))
              if d > cand[6] and not (n_seeds == 1 and d <= cand[7])]
    Ws = looks[-1][1]
    C = np.concatenate([np.zeros((0, len(x)))] + [np.stack([W[u.peak] - W[u.trough], W[r] - W[u.trough], Ws[u.peak]])
                                                  for _, W, _, _, u, r, *_ in (cands[i] for i in tested)])
    # Seeds resampled, then pairs within paradigm and seed (as bands.py): a U's depth interval then holds
    # the seeds' own spread, not item noise alone. drawn[i, b]: the seed in slot i of resample b.
    drawn = rng.integers(0, n_seeds, (n_seeds, cfg.n_boot)) if n_seeds > 1 else np.zeros((1, cfg.n_boot), int)
    boot = np.zeros((len(C), cfg.n_boot))
    for k in range(n_par if tested else 0):
        V = [C @ seed[k] for seed in mats]  # each pair's contribution to each contrast, per seed
        for slot in drawn:
            for s, v in enumerate(V):
                b = slot == s
                if b.any():
                    boot[:, b] += v @ _resample_counts(v.shape[1], int(b.sum()), rng).T / (v.shape[1] * n_seeds * n_par)
    row_of = {i: j for j, i in enumerate(tested)}
    out = []
    for i, (name, W, curve, seed_curves, u, r_max, c, c_thin) in enumerate(cands):
        u_depth = depths[i]
        need = cfg.seed_delta_fraction * cfg.delta
        shows = [(sc[u.peak] - sc[u.trough] >= need) and (sc[r_max] - sc[u.trough] >= need)
                 for sc in seed_curves]
        agreement = float(np.mean(shows))
        p_drop = p_rec = p_peak = drop_lo = drop_hi = float("nan")
        kind, peak_above = "", False  # not tested: below the noise threshold
        if i in row_of:
            b = boot[3 * row_of[i]: 3 * row_of[i] + 3]
            p_drop, p_rec = (1 + np.sum(b[:2] <= 0, axis=1)) / (cfg.n_boot + 1)
            drop_lo, drop_hi = np.quantile(b[0], [cfg.alpha / 2, 1 - cfg.alpha / 2])
            # The peak is the highest of u.trough checkpoints, which at chance is "above chance" at its own
            # level: Bonferroni over them, with the bootstrap's normal approximation to resolve small p's.
            z = (b[2].mean() - cfg.chance) / max(float(b[2].std()), 1e-12)
            p_peak = min(1.0, max(u.trough, 1) * 0.5 * math.erfc(z / math.sqrt(2)))
            peak_above = bool(p_peak < cfg.alpha)
            kind = KINDS[2] if not peak_above else (KINDS[1] if u.peak < onset_index else KINDS[0])
        boot_ok = bool(p_drop < cfg.alpha and (p_rec < cfg.alpha or not cfg.require_recovery))
        if n_seeds == 1 and u_depth <= c_thin:  # the pairs it would need: the run's one figure (pairs_needed)
            verdict = "too_thin"
            reason = (f"{n_unit:.0f} pairs per paradigm: too few to accept a U of depth {u_depth:.2f} "
                      f"with one seed (binomial noise alone makes U's of {c_thin:.2f} on this schedule)")
        elif u_depth <= c:
            verdict = "below_noise"
            reason = (f"depth {u_depth:.3f} <= {c:.3f}, the deepest U noise makes on the closest monotone curve (the "
                      f"pairs' paired noise + {shock:.2f} binomial variances of checkpoint noise)")
        elif not boot_ok:
            verdict, reason = "not_significant", f"bootstrap (seeds, then pairs) p_drop={p_drop:.3f}, p_recovery={p_rec:.3f}"
        elif agreement < cfg.min_seed_agreement:
            verdict, reason = "seeds_disagree", f"{sum(shows)} of {n_seeds} seeds show it"
        else:
            verdict, reason = "accepted", ""
        out.append({
            "scale": name, "peak": u.peak, "trough": u.trough, "recovery": u.recovery, "recovery_max": r_max,
            "peak_acc": curve[u.peak], "trough_acc": curve[u.trough], "recovery_acc": curve[u.recovery],
            "recovered_to": u.recovered_to, "depth": u.depth, "u_depth": u_depth, "noise_threshold": c,
            "n_pairs": n_unit, "drop_lo": float(drop_lo), "drop_hi": float(drop_hi), "p_drop": float(p_drop),
            "p_recovery": float(p_rec), "p_peak_at_chance": float(p_peak), "peak_above_chance": peak_above,
            "kind": kind, "n_seeds": n_seeds, "seed_agreement": agreement, "significant": bool(boot_ok and u_depth > c),
            "accepted": verdict == "accepted", "verdict": verdict, "reason": reason, "_margin": u_depth - c})
    # one row per dip: where both scales found it, keep the accepted / relatively deeper one
    out.sort(key=lambda r: (not r["accepted"], -r["_margin"]))
    kept: list[dict] = []
    for r in out:
        if all(r["recovery_max"] < k["peak"] or r["peak"] > k["recovery_max"] for k in kept):
            kept.append(r)
    for r in kept:
        del r["_margin"]
    return sorted(kept, key=lambda r: r["peak"])


def group_shock(x: np.ndarray, units: list[list[list[np.ndarray]]]) -> float:
    """unoise.shock_ratio of a group's curves (units: each unit's mats, as analyse_curve takes them): the
    checkpoint noise beyond the pairs' own, in binomial variances, that analyse_curve adds (its `shock`)."""
    curves, covs, binom = [], [], []
    for mats in units:
        sd, _ = unit_sd(mats)
        mats = [[_impute(np.asarray(m, dtype=float)) for m in seed] for seed in mats]
        curves.append(np.mean([np.mean([m.mean(axis=1) for m in seed], axis=0) for seed in mats], axis=0))
        covs.append(paired_cov(mats))
        binom.append(sd ** 2)
    return shock_ratio(x, np.array(curves), np.array(covs), np.array(binom)) if units else float("nan")


def count_ushapes(us) -> dict[str, int]:
    """Accepted U's of a STAT_COLUMNS table: "learning" (peak above chance after step 0), "chance_dip" (peak
    after step 0 but not above chance: no knowledge lost) and "from_step0" (the untrained model's accuracy is
    its initialisation's: such a dip is no evidence of unlearning)."""
    if us is None or not len(us):
        return {"learning": 0, "chance_dip": 0, "from_step0": 0}
    acc = us[us["accepted"].astype(bool)]
    step0 = acc["peak_step"] == 0
    chance = int(((acc["kind"] == "chance_dip") & ~step0).sum())
    return {"learning": len(acc) - int(step0.sum()) - chance, "chance_dip": chance, "from_step0": int(step0.sum())}


def count_text(us) -> str:
    """'1 learning U, 2 chance dips (peak not above chance), 0 dips peaking at step 0 (the untrained model)':
    the console's and report.md's count."""
    c = count_ushapes(us)
    n = lambda k, one, many: f"{k} {one if k == 1 else many}"  # noqa: E731
    return ", ".join([n(c["learning"], "learning U", "learning U's"),
                      n(c["chance_dip"], "chance dip", "chance dips") + " (peak not above chance)",
                      n(c["from_step0"], "dip", "dips") + " peaking at step 0 (the untrained model)"])


def _paradigm_columns(o) -> dict[str, np.ndarray]:
    """paradigm -> row indices of a PairOutcomes, ordered by pair_id (aligns seeds pair by pair)."""
    order = np.lexsort((o.pair_ids.astype(str), o.row_paradigm))
    bounds = np.searchsorted(o.row_paradigm[order], np.arange(len(o.paradigms) + 1))
    return {p: order[bounds[i]:bounds[i + 1]] for i, p in enumerate(o.paradigms)}


def _paradigm_means(hit: np.ndarray, present: np.ndarray, o, names: list[str]) -> np.ndarray:
    """(n_steps, len(names)) mean outcome per paradigm over the pairs present (hit, present: bool (n_steps,
    n_rows) of PairOutcomes o), by exact byte counts (the bits of a float mean, at a tenth of the cost)."""
    order = np.argsort(o.row_paradigm, kind="stable")
    codes = o.row_paradigm[order]
    if np.array_equal(order, np.arange(len(order))):  # rows already grouped by paradigm: no gather
        order = slice(None)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.zeros(0, int)
    seg = {int(codes[i]): j for j, i in enumerate(starts)}

    def counts(mask):
        return np.add.reduceat(mask[:, order].view(np.uint8), starts, axis=1, dtype=np.int64) if len(starts) \
            else np.zeros((mask.shape[0], 0), np.int64)

    h, n = counts(hit), counts(present)
    where = {p: i for i, p in enumerate(o.paradigms)}
    out = np.full((hit.shape[0], len(names)), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        for j, p in enumerate(names):
            k = seg.get(where[p])
            if k is not None:
                out[:, j] = h[:, k] / n[:, k]
    return out


# "pairs needed" is where a planted U is found 80 % of the time: z of 0.8, and the factor on the pairs by which
# the formula fell short of that on bench_ushape --part laptop (depth 0.10: recall 0.70 at 24 pairs and 0.82 at
# 30, 60 groups each: 80 % at ~29 by probit in sqrt(pairs), where the formula alone says 16.3)
RECALL_Z, RECALL_CAL = 0.8416, 1.77


def pairs_needed(rows, cfg: UShapeConfig) -> dict:
    """The one "pairs or seeds needed" figure of a model x budget x benchmark (rows: its EvalSet table rows;
    docs/report.md says where it is quoted) and its sentence (`needed`), at the checkpoints' measured noise D
    (dispersion of these rows' phenomenon curves; 1 where unmeasured). At n pairs (times paradigms and seeds)
    the noise, the threshold and the depth estimate all scale as 1 / sqrt(n), so a depth d is found 80 % of the
    time where d = (c1 + 0.84 s1) sqrt(D / n): c1 the threshold at one pair (sd 0.5 at each checkpoint), s1 =
    0.5 sqrt(2) a drop's sd at one pair; the n this gives times RECALL_CAL, its shortfall on the bench."""
    metric = f"acc_{cfg.metric}"
    by_step = rows.groupby("step").tokens.mean()
    x = log_tokens(by_step.to_numpy(dtype=float))
    ri, runs = pd.factorize(rows.run, sort=True)
    si = np.searchsorted(by_step.index.to_numpy(), rows.step.to_numpy())
    pi, pars = pd.factorize(rows.paradigm, sort=True)
    means, counts = np.full((len(runs), len(x), len(pars)), np.nan), np.zeros((len(runs), len(x), len(pars)))
    means[ri, si, pi], counts[ri, si, pi] = rows[metric].to_numpy(dtype=float), rows.n_pairs.to_numpy(dtype=float)
    units = [list(g) for g in pd.Series(pi).groupby(rows.phenomenon.to_numpy()).agg(lambda v: sorted(set(v)))]
    D = dispersion(x, means, counts, units)
    D = D if np.isfinite(D) else 1.0
    c1 = min(unit_u_threshold([W for _, W in scales(x, cfg)], cfg.alpha, cfg.n_null, cfg.seed))
    c_unit = (c1 + RECALL_Z * 0.5 * math.sqrt(2)) * math.sqrt(D)
    K = int(rows.groupby("phenomenon").paradigm.nunique().median())
    n_pp, S = float(rows.n_pairs.median()), rows.run.nunique()
    need = math.ceil(RECALL_CAL * min_pairs(cfg.delta, c_unit, K) / S)
    seeds = math.ceil(RECALL_CAL * (c_unit / cfg.delta) ** 2 / (K * max(n_pp, 1)))
    return {"n_seeds": S, "u_depth": cfg.delta, "paradigms_per_phenomenon": K, "pairs_per_paradigm": n_pp,
            "checkpoint_dispersion": D, "pairs_needed_per_seed": need, "seeds_needed": seeds,
            "needed": f"a U of depth {cfg.delta} on a phenomenon ({K} paradigms) needs {need} pairs per paradigm per "
                      f"seed at {S} seed{'s' if S > 1 else ''}, or {seeds} seeds at these {n_pp:.0f} pairs, to be "
                      f"found 80 % of the time (checkpoint noise {D:.2f} binomial variances)"}


def thin_note(label: str, rows, cfg: UShapeConfig) -> str:
    """What one seed can show on this schedule, with the run's pairs_needed figure."""
    d = pairs_needed(rows, cfg)
    verdict = "too few to accept" if d["pairs_per_paradigm"] < d["pairs_needed_per_seed"] else "enough for"
    return (f"{label}: one seed, {d['pairs_per_paradigm']:.0f} pairs per paradigm: {verdict} a U of depth "
            f"{cfg.delta} ({d['needed']})")


def onset_index(acc_by_step: np.ndarray, gain: float) -> int:
    """First checkpoint whose accuracy is `gain` above the first one's (len if never)."""
    acc = np.asarray(acc_by_step, dtype=float)
    hit = np.flatnonzero(acc - acc[0] >= gain)
    return int(hit[0]) if len(hit) else len(acc)


STAT_COLUMNS = ["model", "budget", "benchmark", "level", "phenomenon", "paradigm", "metric", "n_seeds", "peak_step",
                "peak_tokens", "trough_step", "trough_tokens", "recovery_step", "recovery_tokens", "peak_acc",
                "trough_acc", "recovery_acc", "recovered_to", "depth", "u_depth", "scale", "noise_threshold",
                "noise_dispersion", "n_pairs", "drop_lo", "drop_hi", "p_drop", "p_recovery", "peak_above_chance",
                "kind", "seed_agreement", "significant", "accepted", "verdict", "reason", "runs"]


# One BLAS thread: the products are small (4,000 noise draws x 47 checkpoints), where OpenBLAS's threads cost
# 10x the arithmetic on a shared CPU; the same bits on one thread (bench/compare_report_tables.py).
@threadpool_limits.wrap(limits=1, user_api="blas")
def find_u_shapes_in_runs(ev, cfg: UShapeConfig | None = None, levels=("phenomenon", "paradigm"),
                          evidence: list[str] | None = None):
    """(DataFrame of STAT_COLUMNS, notes): every candidate U per model x budget (its runs are the seeds),
    benchmark and phenomenon/paradigm of an EvalSet; accepted=True rows are U-shapes (verdict says why
    not). The one-seed note (thin_note) goes to `evidence` if given, else to the notes."""
    cfg = cfg or UShapeConfig()
    rng = np.random.default_rng(cfg.seed)
    bit = MLP if cfg.metric == "mlp" else SUM
    metric = f"acc_{cfg.metric}"
    info = {r.name: r for r in ev.runs}
    notes: list[str] = []
    rows: list[dict] = []
    n_curves, spread = 0, []
    groups: dict[tuple, list[str]] = {}
    for (run, bench) in ev.outcomes:
        r = info[run]
        groups.setdefault((r.model, r.budget, bench), []).append(run)
    pb = ev.table[["benchmark", "paradigm", "phenomenon"]].drop_duplicates(["benchmark", "paradigm"])
    phen_by_bench = {b: dict(zip(g.paradigm, g.phenomenon)) for b, g in pb.groupby("benchmark")}
    for (model, budget, bench), runs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        cell = f"{model}/{budget_label(budget)}/{bench}"  # in notes: "full" for the whole corpus, not None
        outs = [ev.outcomes[(run, bench)] for run in sorted(runs)]
        steps = functools.reduce(np.intersect1d, [o.steps for o in outs])
        if any(len(o.steps) != len(steps) for o in outs):
            notes.append(f"{cell}: seeds differ in checkpoints; using the {len(steps)} they share")
        if len(steps) < 4:
            notes.append(f"{cell}: only {len(steps)} checkpoint(s); too few for U-shapes")
            continue
        tokens = np.mean([o.tokens[np.searchsorted(o.steps, steps)] for o in outs], axis=0)
        x = log_tokens(tokens)
        hits, present = [], []
        for o in outs:
            c = o.correct[np.searchsorted(o.steps, steps)]
            present.append((c & MISSING) == 0)
            hits.append(((c & bit) > 0) & present[-1])
        # nanmean's arithmetic (an exact count over an exact count), without a float copy of every pair
        overall = np.mean([h.sum(axis=1) / p.sum(axis=1) for h, p in zip(hits, present)], axis=0)

        @functools.cache
        def per_pair():  # per-pair floats (NaN = missing) and pair_id order: only for candidates
            return [np.where(p, h, np.nan) for h, p in zip(hits, present)], [_paradigm_columns(o) for o in outs]

        onset = onset_index(overall, cfg.onset_gain)
        phen_of = phen_by_bench.get(bench, {})
        units: list[tuple[str, str, str, list[str]]] = []
        have = [set(o.paradigms) for o in outs]
        if "phenomenon" in levels:
            by_ph: dict[str, list[str]] = {}
            for p in sorted(have[0]):
                by_ph.setdefault(phen_of.get(p, "?"), []).append(p)
            units += [("phenomenon", ph, "", ps) for ph, ps in sorted(by_ph.items())]
        if "paradigm" in levels:
            units += [("paradigm", phen_of.get(p, "?"), p, [p]) for p in sorted(have[0])]
        # Screen every unit with one matrix product (each paradigm's seed-mean curve at each scale): only
        # units with a geometric U go on to the per-pair bootstrap.
        names = [p for p in sorted(have[0]) if all(p in h for h in have)]
        seed_par = np.stack([_paradigm_means(h, p, o, names) for h, p, o in zip(hits, present, outs)])
        par_curve = seed_par.mean(axis=0)
        at_scale = [dict(zip(names, (W @ np.nan_to_num(par_curve, nan=0.5)).T)) for _, W in scales(x, cfg)]
        if len(outs) == 1:
            rows_g = ev.table[ev.table.run.isin(runs) & (ev.table.benchmark == bench)]
            (notes if evidence is None else evidence).append(thin_note(cell, rows_g, cfg))
        # the noise this group's checkpoints add beyond the pairs' own, per level (in binomial variances)
        col = set(names)
        @functools.cache
        def shock(lv: str) -> float:  # once a curve of the level has a candidate (per-pair data costs)
            spread.append(group_shock(x, [[[b[:, c[p]] for p in ps] for b, c in zip(*per_pair())]
                                          for v, _, _, ps in units if v == lv and all(p in col for p in ps)]))
            return spread[-1]
        for level, ph, par, paradigms in units:
            if not all(p in h for h in have for p in paradigms):
                notes.append(f"{cell}/{par or ph}: not in every seed; skipped")
                continue
            n_curves += 1
            if not any(find_u_shapes(np.mean([s[p] for p in paradigms], axis=0), cfg.delta) for s in at_scale):
                continue
            mats = [[b[:, c[p]] for p in paradigms] for b, c in zip(*per_pair())]
            for u in analyse_curve(x, mats, cfg, onset, rng, shock(level)):
                row = {"model": model, "budget": budget, "benchmark": bench, "level": level, "noise_dispersion": shock(level),
                       "phenomenon": ph, "paradigm": par, "metric": metric, "runs": " ".join(sorted(runs))}
                for name in ("peak", "trough", "recovery"):
                    row[f"{name}_step"] = int(steps[u[name]])
                    row[f"{name}_tokens"] = int(round(tokens[u[name]]))
                row.update({k: v for k, v in u.items() if k in STAT_COLUMNS})
                rows.append(row)
    df = pd.DataFrame(rows, columns=STAT_COLUMNS)
    df["budget"] = df["budget"].astype("Int64")
    if n_curves:  # each curve is one test at level alpha: say what that means for the whole list
        (notes if evidence is None else evidence).append(
            f"{n_curves} curve(s) examined (paradigms and phenomena, per model x budget x benchmark); each has at "
            f"most a {cfg.alpha:.0%} chance of a false U (curves flat at chance; rising curves far less, see "
            f"bench/bench_ushape.py), so up to {cfg.alpha * n_curves:.1f} accepted U's could be noise, most likely "
            "among chance_dip ones; the noise to beat is the pairs' own (the same pairs at every checkpoint) plus "
            "the noise the checkpoints add beyond it, measured on the curves "
            + (f"(here {np.nanmin(spread):.2f}-{np.nanmax(spread):.2f} binomial variances, column noise_dispersion)"
               if np.isfinite(spread).any() else "(not measured: no curve had a candidate)" if not spread else
               f"(not measured: fewer than {MIN_RESIDUALS} checkpoint residuals; one binomial variance assumed)"))
    return df, notes
