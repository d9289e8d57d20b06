"""U-shapes in learning curves (docs/report.md, "U-shapes and the paper's U's"): a drop of at least delta from an
earlier peak to a trough, followed by a recovery of at least delta, that is not noise.

`find_u_shapes` is the plain geometric finder on one curve (it proposes candidates).
`analyse_curve` / `find_u_shapes_in_runs` decide which candidates are U-shapes: a noise threshold
for looking at every checkpoint (raw and smoothed; binomial noise times the checkpoints' measured
dispersion, unoise.dispersion), the paired bootstrap over pairs, agreement across seeds, and with one
seed a minimum number of pairs. `probes report` and the end-of-run `probes curves` both call
`find_u_shapes_in_runs`, so they list the same U's; `count_ushapes` counts learning U's apart from dips
that peak at step 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import isotonic_regression
from threadpoolctl import threadpool_limits

from probes.analysis.scaling import budget_label
from probes.analysis.unoise import (smoothing_matrix, noise_threshold, unit_threshold, _impute, _resample_counts, unit_sd, min_pairs,
                                    dispersion, max_drawdown, MIN_RESIDUALS)


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
    """All U's of a curve given in x order, as the swings of a delta-zigzag.

    Walk the curve keeping the highest point since the last recovery (the peak candidate); once the
    curve is `delta` below it, track the lowest point (the trough); once the curve is `delta` above
    the trough, a U is recorded and the walk starts again from that recovery point. Each U thus has
    drop >= delta and recovery >= delta, and the U's of one curve do not overlap. NaN points are
    skipped. A monotone curve, or one whose wiggles are all < delta, has none.
    """
    if delta <= 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    y = np.asarray(y, dtype=np.float64)
    idx = np.flatnonzero(np.isfinite(y))
    found: list[tuple[int, int, int]] = []
    if len(idx) < 3:
        return []
    i_max = idx[0]
    i_min = -1
    falling = False
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
    out = []
    for k, (p, tr, rec) in enumerate(found):
        end = found[k + 1][1] if k + 1 < len(found) else len(y)
        seg = y[tr:end]
        out.append(UShape(int(p), int(tr), int(rec), float(y[p]), float(y[tr]), float(y[rec]),
                          float(np.nanmax(seg))))
    return out


def above_chance(acc: float, n_pairs: float, chance: float = 0.5, z: float = 1.645) -> bool:
    """One-sided binomial z-test at 95 %: is `acc` over `n_pairs` pairs above `chance`?

    A peak of 0.56 on 40 pairs is noise; on 3,000 pairs it is not. Judging the peak against its own
    sampling error is what separates "above chance" from "a lucky checkpoint".
    """
    if not np.isfinite(acc) or n_pairs <= 0:
        return False
    se = np.sqrt(chance * (1 - chance) / n_pairs)
    return bool(acc - chance > z * se)


# ------------------------------------------------------------------ statistical U-shapes (issue 5, 11)

KINDS = ("learned_then_lost", "early_heuristic", "chance_dip")
VERDICTS = ("accepted", "too_thin", "below_noise", "not_significant", "seeds_disagree")


@dataclass
class UShapeConfig:
    """Statistical U-shape detection, on two scales of the seed-mean curve: the raw checkpoints (a
    dip spanning 2-4 sparse checkpoints, which any smoothing flattens) and a curve smoothed on log
    tokens (a wide shallow dip at dense checkpoints, where averaging neighbours beats the noise).

    A candidate is accepted when (1) its depth min(drop, recovery) exceeds the deepest drop that
    binomial noise alone makes anywhere on the schedule at this scale (Monte Carlo, 1 - alpha/scales;
    this is what makes looking at every checkpoint honest), (2) the paired bootstrap over pairs puts
    the drop and the recovery above 0, and (3) enough seeds show it on their own curves. With one seed
    only (1) and (2) can be checked; a U shallower than what binomial noise makes at p = 0.5 is
    reported as too thin for the number of pairs (see `min_pairs`)."""

    delta: float = 0.05  # minimum drop and recovery of the curve (at its scale), in accuracy
    bandwidth: float = 0.15  # Gaussian smoothing sd in decades of tokens (log10); 0 = raw scale only
    min_neighbours: int = 2  # ... widened per point to reach its k-th nearest checkpoint, so sparse
    #                         early checkpoints (step 0, 1, 2, 4 ...) are smoothed too, not left raw
    raw: bool = True  # also look at the unsmoothed checkpoints (narrow dips where checkpoints are sparse)
    min_seed_agreement: float = 0.5  # fraction of seeds that must show the U on their own curve
    seed_delta_fraction: float = 0.5  # a seed shows it when its drop and recovery at the U's positions >= this x delta
    n_boot: int = 1000  # paired bootstrap resamples over pairs
    n_null: int = 4000  # Monte Carlo draws of binomial noise for the noise threshold
    alpha: float = 0.05  # one-sided level for the drop and the recovery; also of the noise threshold
    require_recovery: bool = True  # also demand a significant recovery, not only a significant drop
    chance: float = 0.5
    onset_gain: float = 0.05  # the model counts as near-random until its mean accuracy over the
    #                          benchmark has risen this much above the first checkpoint's
    metric: str = "mlp"  # mlp | sum
    seed: int = 0  # of the bootstrap and Monte Carlo generator

    def __post_init__(self) -> None:
        if (self.delta <= 0 or self.bandwidth < 0 or self.n_boot < 10 or self.n_null < 100
                or not 0 < self.alpha < 1):
            raise ValueError(f"UShapeConfig: bad values {self}")
        if not self.raw and self.bandwidth == 0:
            raise ValueError("UShapeConfig: raw=False needs bandwidth > 0 (no scale left to look at)")
        if self.metric not in ("mlp", "sum"):
            raise ValueError(f"UShapeConfig.metric must be 'mlp' or 'sum', got {self.metric!r}")


def scales(x: np.ndarray, cfg: UShapeConfig) -> list[tuple[str, np.ndarray]]:
    """(name, matrix) of the curves the detector looks at: raw checkpoints and/or smoothed."""
    out = [("raw", np.eye(len(x)))] if cfg.raw else []
    if cfg.bandwidth > 0:
        out.append(("smoothed", smoothing_matrix(x, cfg.bandwidth, cfg.min_neighbours)))
    return out


def analyse_curve(x: np.ndarray, mats: list[list[np.ndarray]], cfg: UShapeConfig,
                  onset_index: int = 0, rng: np.random.Generator | None = None, dispersion: float = 1.0) -> list[dict]:
    """Statistical U's of one unit (a paradigm, or a phenomenon = several paradigms).

    x: (n_steps,) log10 tokens. mats[s][k]: (n_steps, n_pairs_k) 0/1 outcomes of seed s on paradigm
    k, pairs in the same order for every seed (then the bootstrap is paired across seeds too).
    The unit's accuracy is the mean over paradigms of the pair means, averaged over seeds. U
    candidates come from find_u_shapes(delta) on that curve at each scale (raw, smoothed); each gets
    the noise threshold of its scale, seed agreement, a paired bootstrap over pairs (the same
    resampled pairs at every checkpoint) of its drop, recovery and peak level, its kind and a
    verdict (VERDICTS). Where the two scales find the same dip (overlapping windows) the one that is
    accepted, or else the deeper relative to its threshold, is kept.
    onset_index: first checkpoint at which the model is no longer near-random (see UShapeConfig).
    dispersion: how many times the binomial variance the unit's checkpoints really vary (unoise.dispersion
    of its model x budget x benchmark); the noise thresholds use it where it is above 1 (not where it is
    below 1, or NaN: not measured).
    """
    rng = rng or np.random.default_rng(cfg.seed)
    inflate = math.sqrt(dispersion) if dispersion > 1 else 1.0
    sd, n_unit = unit_sd(mats)
    sd_worst, _ = unit_sd(mats, worst_case=True)
    sd = sd * inflate
    n_seeds, n_par = len(mats), len(mats[0])
    mats = [[_impute(np.asarray(m, dtype=float)) for m in seed] for seed in mats]
    raw_seed = np.array([np.mean([m.mean(axis=1) for m in seed], axis=0) for seed in mats])
    looks = scales(x, cfg)
    level = 1 - cfg.alpha / len(looks)  # Bonferroni over the scales looked at
    # The smoother is not monotone: at a sharp bend of a curve without any U it overshoots and draws a dip
    # of its own. The closest monotone curve to the data (isotonic, rising or falling), smoothed, shows
    # how deep that dip is on this curve (a U's depth is min(drop, rise): the smaller of the two on a
    # monotone curve is the smoother's); it is added to the noise threshold of each scale (0 on raw).
    mean = raw_seed.mean(axis=0)
    iso = min((isotonic_regression(mean, increasing=up).x for up in (True, False)), key=lambda f: np.sum((f - mean) ** 2))
    cands = []  # (scale, W, curve, seed curves, UShape, r_max, threshold, one-seed threshold)
    for name, W in looks:
        seed_curves = raw_seed @ W.T
        curve = seed_curves.mean(axis=0)
        found = find_u_shapes(curve, cfg.delta)
        if not found:
            continue
        c = noise_threshold(sd, W, level, cfg.n_null, rng) + float(min(max_drawdown(W @ iso), max_drawdown(-W @ iso)))
        c_unit = unit_threshold(x, W, level, cfg.n_null, cfg.seed) * inflate
        c_thin = float(np.max(sd_worst) / 0.5 * c_unit)  # same draws' law at p = 0.5, this unit's pairs
        for u in found:
            r_max = u.trough + int(np.argmax(curve[u.trough:] >= u.recovered_to - 1e-12))
            cands.append((name, W, curve, seed_curves, u, r_max, c, c_thin))
    if not cands:
        return []
    # The bootstrap of each candidate's drop, recovery and peak level, all at once, for the
    # candidates that clear the noise threshold (the others cannot be accepted; most raw-scale
    # candidates are noise, and the bootstrap is where the time goes). The peak's level is read on
    # the smoothed curve: whether the model knew the phenomenon there is a question about its level
    # around the peak, not about the luckiest checkpoint.
    depths = [float(min(cv[u.peak], cv[r]) - cv[u.trough]) for _, _, cv, _, u, r, *_ in cands]
    tested = [i for i, (d, cand) in enumerate(zip(depths, cands))
              if d > cand[6] and not (n_seeds == 1 and d <= cand[7])]
    Ws = looks[-1][1]
    C = np.zeros((0, len(x)))  # (3 x tested, steps)
    if tested:
        C = np.concatenate([np.stack([W[u.peak] - W[u.trough], W[r] - W[u.trough], Ws[u.peak]])
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
        nan = float("nan")
        p_drop = p_rec = p_peak = drop_lo = drop_hi = nan
        kind, peak_above = "", False  # not tested: below the noise threshold
        if i in row_of:
            b = boot[3 * row_of[i]: 3 * row_of[i] + 3]
            p_drop = (1 + np.sum(b[0] <= 0)) / (cfg.n_boot + 1)
            p_rec = (1 + np.sum(b[1] <= 0)) / (cfg.n_boot + 1)
            drop_lo, drop_hi = np.quantile(b[0], [cfg.alpha / 2, 1 - cfg.alpha / 2])
            # The peak is the highest of the u.trough checkpoints before the trough: on a flat curve
            # at chance the highest of many noisy points is "above chance" at its own level, smoothed
            # or not. Bonferroni over those points, with the bootstrap's normal approximation so that
            # small p's are resolved.
            z = (b[2].mean() - cfg.chance) / max(float(b[2].std()), 1e-12)
            p_peak = min(1.0, max(u.trough, 1) * 0.5 * math.erfc(z / math.sqrt(2)))
            peak_above = bool(p_peak < cfg.alpha)
            kind = KINDS[2] if not peak_above else (KINDS[1] if u.peak < onset_index else KINDS[0])
        boot_ok = bool(p_drop < cfg.alpha and (p_rec < cfg.alpha or not cfg.require_recovery))
        per_par = n_unit
        if n_seeds == 1 and u_depth <= c_thin:  # the pairs it would need: the run's one figure (pairs_needed)
            verdict = "too_thin"
            reason = (f"{per_par:.0f} pairs per paradigm: too few to accept a U of depth {u_depth:.2f} "
                      f"with one seed (binomial noise alone makes drops of {c_thin:.2f} on this schedule)")
        elif u_depth <= c:
            verdict = "below_noise"
            reason = f"depth {u_depth:.3f} <= {c:.3f}, the deepest drop noise makes on this schedule" + (
                f" (binomial variance x {inflate ** 2:.2f}, the checkpoints' measured dispersion)" if inflate > 1 else "")
        elif not boot_ok:
            verdict, reason = "not_significant", f"bootstrap (seeds, then pairs) p_drop={p_drop:.3f}, p_recovery={p_rec:.3f}"
        elif agreement < cfg.min_seed_agreement:
            verdict, reason = "seeds_disagree", f"{sum(shows)} of {n_seeds} seeds show it"
        else:
            verdict, reason = "accepted", ""
        out.append({
            "scale": name, "peak": u.peak, "trough": u.trough, "recovery": u.recovery, "recovery_max": r_max,
            "peak_acc": curve[u.peak], "trough_acc": curve[u.trough], "recovery_acc": curve[u.recovery],
            "recovered_to": u.recovered_to, "depth": u.depth, "u_depth": u_depth,
            "noise_threshold": c, "n_pairs": per_par,
            "drop_lo": float(drop_lo), "drop_hi": float(drop_hi),
            "p_drop": float(p_drop), "p_recovery": float(p_rec), "p_peak_at_chance": float(p_peak),
            "peak_above_chance": peak_above, "kind": kind, "n_seeds": n_seeds,
            "seed_agreement": agreement, "significant": bool(boot_ok and u_depth > c),
            "accepted": verdict == "accepted", "verdict": verdict, "reason": reason,
            "_margin": u_depth - c,
        })
    # one row per dip: where both scales found it, keep the accepted / relatively deeper one
    out.sort(key=lambda r: (not r["accepted"], -r["_margin"]))
    kept: list[dict] = []
    for r in out:
        if all(r["recovery_max"] < k["peak"] or r["peak"] > k["recovery_max"] for k in kept):
            kept.append(r)
    for r in kept:
        del r["_margin"]
    return sorted(kept, key=lambda r: r["peak"])


def count_ushapes(us) -> dict[str, int]:
    """Accepted U's of a STAT_COLUMNS table, counted apart by where the peak lies: "learning" (peak after
    step 0, a dip after learning began) and "from_step0" (peak at step 0: the untrained model's accuracy
    there is its initialisation's, not knowledge, so such a dip is no evidence of unlearning). Headline
    counts quote "learning" and name "from_step0" beside it."""
    if us is None or not len(us):
        return {"learning": 0, "from_step0": 0}
    acc = us[us["accepted"].astype(bool)]
    step0 = int((acc["peak_step"] == 0).sum())
    return {"learning": len(acc) - step0, "from_step0": step0}


def count_text(us) -> str:
    """'2 learning U-shape(s) (+1 peaking at step 0, the untrained model)': the console's count."""
    c = count_ushapes(us)
    return f"{c['learning']} learning U-shape(s) (+{c['from_step0']} peaking at step 0, the untrained model)"


def _paradigm_columns(o) -> dict[str, np.ndarray]:
    """paradigm -> row indices of a PairOutcomes, ordered by pair_id (aligns seeds pair by pair)."""
    order = np.lexsort((o.pair_ids.astype(str), o.row_paradigm))
    bounds = np.searchsorted(o.row_paradigm[order], np.arange(len(o.paradigms) + 1))
    return {p: order[bounds[i]:bounds[i + 1]] for i, p in enumerate(o.paradigms)}


def _paradigm_means(hit: np.ndarray, present: np.ndarray, o, names: list[str]) -> np.ndarray:
    """(n_steps, len(names)) mean outcome per paradigm over the pairs present (hit, present: bool
    (n_steps, n_rows) of PairOutcomes o). Counts of 0/1 are exact in any order, so byte sums over each
    paradigm's run of rows give the bits a float gather and reduceat gave, at a tenth of the cost."""
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


def pairs_needed(rows, cfg: UShapeConfig) -> dict:
    """The one "pairs or seeds needed" figure of a model x budget x benchmark (rows: its EvalSet table rows),
    which report.md's summary, the one-seed note and paper_ushapes.csv all quote: the pairs per paradigm per
    seed (or the seeds at these pairs) a U of depth cfg.delta on a phenomenon curve of the median number of
    paradigms needs to clear binomial noise on this schedule (unoise.min_pairs), and the sentence saying so."""
    from probes.analysis.evalset import log_tokens

    x = log_tokens(np.sort(rows.tokens.unique()))
    looks = scales(x, cfg)
    c_unit = min(unit_threshold(x, W, 1 - cfg.alpha / len(looks), cfg.n_null, cfg.seed) for _, W in looks)
    K = int(rows.groupby("phenomenon").paradigm.nunique().median())
    n_pp, S = float(rows.n_pairs.median()), rows.run.nunique()
    need = math.ceil(min_pairs(cfg.delta, c_unit, K) / S)
    seeds = math.ceil((c_unit / cfg.delta) ** 2 / (K * max(n_pp, 1)))
    return {"n_seeds": S, "u_depth": cfg.delta, "paradigms_per_phenomenon": K, "pairs_per_paradigm": n_pp,
            "pairs_needed_per_seed": need, "seeds_needed": seeds,
            "needed": f"a U of depth {cfg.delta} on a phenomenon ({K} paradigms) needs {need} pairs per paradigm per "
                      f"seed at {S} seed{'s' if S > 1 else ''}, or {seeds} seeds at these {n_pp:.0f} pairs"}


def thin_note(label: str, rows, cfg: UShapeConfig) -> str:
    """What one seed can show on this schedule, with the run's pairs_needed figure."""
    d = pairs_needed(rows, cfg)
    verdict = "too few to accept" if d["pairs_per_paradigm"] < d["pairs_needed_per_seed"] else "enough for"
    return f"{label}: one seed, {d['pairs_per_paradigm']:.0f} pairs per paradigm: {verdict} a U of depth {cfg.delta} ({d['needed']})"


def onset_index(acc_by_step: np.ndarray, gain: float) -> int:
    """First checkpoint whose accuracy is `gain` above the first one's (len if never)."""
    acc = np.asarray(acc_by_step, dtype=float)
    hit = np.flatnonzero(acc - acc[0] >= gain)
    return int(hit[0]) if len(hit) else len(acc)


STAT_COLUMNS = ["model", "budget", "benchmark", "level", "phenomenon", "paradigm", "metric", "n_seeds",
                "peak_step", "peak_tokens", "trough_step", "trough_tokens", "recovery_step",
                "recovery_tokens", "peak_acc", "trough_acc", "recovery_acc", "recovered_to", "depth",
                "u_depth", "scale", "noise_threshold", "noise_dispersion", "n_pairs", "drop_lo", "drop_hi", "p_drop",
                "p_recovery", "peak_above_chance", "kind", "seed_agreement", "significant", "accepted",
                "verdict", "reason", "runs"]


def find_u_shapes_in_runs(ev, cfg: UShapeConfig | None = None, levels=("phenomenon", "paradigm"),
                          evidence: list[str] | None = None):
    """Statistical U's for every model x budget group (its runs are the seeds), benchmark, and
    phenomenon/paradigm of an EvalSet. Returns (DataFrame of STAT_COLUMNS, list of notes).
    Every candidate is a row; only rows with accepted=True are U-shapes (verdict says why not).
    What one seed can show (thin_note, per group) goes to `evidence` if given, else to the notes.

    One BLAS thread: the detector's products are small (4,000 x 47 noise draws times a 47 x 47
    smoother, per unit), where OpenBLAS's threads cost 10x the arithmetic in start-up and spinning on
    a shared CPU; the same products give the same bits on one thread (bench/compare_report_tables.py)."""
    with threadpool_limits(1, user_api="blas"):
        return _find_u_shapes_in_runs(ev, cfg, levels, evidence)


def _find_u_shapes_in_runs(ev, cfg: UShapeConfig | None, levels, evidence: list[str] | None):
    import pandas as pd

    from probes.analysis.evalfile import MISSING, MLP, SUM
    from probes.analysis.evalset import log_tokens

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
    phen_by_bench: dict[str, dict[str, str]] = {}
    for b, p, ph in zip(pb.benchmark.tolist(), pb.paradigm.tolist(), pb.phenomenon.tolist()):
        phen_by_bench.setdefault(b, {})[p] = ph
    for (model, budget, bench), runs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        cell = f"{model}/{budget_label(budget)}/{bench}"  # in notes: "full" for the whole corpus, not None
        outs = [ev.outcomes[(run, bench)] for run in sorted(runs)]
        steps = outs[0].steps
        for o in outs[1:]:
            steps = np.intersect1d(steps, o.steps)
        if any(len(o.steps) != len(steps) for o in outs):
            notes.append(f"{cell}: seeds differ in checkpoints; using the "
                         f"{len(steps)} they share")
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
        blocks, cols = [], []  # per-pair floats (NaN = missing) and pair_id order: only for candidates

        def per_pair():
            if not blocks:
                for o, h, p in zip(outs, hits, present):
                    block = h.astype(np.float64)
                    block[~p] = np.nan
                    blocks.append(block)
                    cols.append(_paradigm_columns(o))
            return blocks, cols
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
        # Screen every unit with one matrix product: the smoothed seed-mean curve of each paradigm
        # (a phenomenon's is the mean of its paradigms'). Only units whose curve has a geometric U
        # go on to the per-pair bootstrap, which is where the time goes.
        names = [p for p in sorted(have[0]) if all(p in h for h in have)]
        seed_par = np.stack([_paradigm_means(h, p, o, names) for h, p, o in zip(hits, present, outs)])
        par_curve = seed_par.mean(axis=0)
        at_scale = [dict(zip(names, (W @ np.nan_to_num(par_curve, nan=0.5)).T)) for _, W in scales(x, cfg)]
        if len(outs) == 1:
            rows_g = ev.table[ev.table.run.isin(runs) & (ev.table.benchmark == bench)]
            (notes if evidence is None else evidence).append(thin_note(cell, rows_g, cfg))
        # how much more than binomial noise this group's curves move between checkpoints, per level
        col = {p: j for j, p in enumerate(names)}
        counts = np.stack([np.broadcast_to(np.bincount(o.row_paradigm, minlength=len(o.paradigms))[
            [list(o.paradigms).index(p) for p in names]], par_curve.shape) for o in outs]).astype(float)
        disp = {lv: dispersion(x, seed_par, counts, [[col[p] for p in ps] for v, _, _, ps in units
                                                     if v == lv and all(p in col for p in ps)]) for lv in levels}
        spread += list(disp.values())
        for level, ph, par, paradigms in units:
            if not all(p in h for h in have for p in paradigms):
                notes.append(f"{cell}/{par or ph}: not in every seed; skipped")
                continue
            n_curves += 1
            if not any(find_u_shapes(np.mean([s[p] for p in paradigms], axis=0), cfg.delta) for s in at_scale):
                continue
            mats = [[b[:, c[p]] for p in paradigms] for b, c in zip(*per_pair())]
            for u in analyse_curve(x, mats, cfg, onset, rng, disp[level]):
                row = {"model": model, "budget": budget, "benchmark": bench, "level": level, "noise_dispersion": disp[level],
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
            f"{n_curves} curve(s) examined (paradigms and phenomena, per model x budget x benchmark); each "
            f"has at most a {cfg.alpha:.0%} chance of a false U (curves flat at chance; rising curves far "
            f"less, see bench/bench_ushape.py), so up to {cfg.alpha * n_curves:.1f} accepted U's could be "
            "noise, most likely among chance_dip ones; the noise to beat is binomial noise times the checkpoints' "
            + (f"measured dispersion (here {np.nanmin(spread):.2f}-{np.nanmax(spread):.2f}; below 1 counts as 1)"
               if np.isfinite(spread).any() else f"measured dispersion (not measured: fewer than {MIN_RESIDUALS} "
               "checkpoint residuals; binomial assumed)"))
    return df, notes
