"""U-shapes in learning curves (DESIGN.md): a drop of at least delta from an earlier peak to a
trough, followed by a recovery of at least delta.

`find_u_shapes` is the plain geometric finder on one curve (used by `probes curves`).
`probes.ushape_stats` adds smoothing on log tokens, agreement across seeds and the paired bootstrap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


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


# ------------------------------------------------------------------ statistical U-shapes (issue 5)

KINDS = ("learned_then_lost", "early_heuristic", "chance_dip")


@dataclass
class UShapeConfig:
    """Statistical U-shape detection. Defaults are chosen for ~300 pairs per paradigm and a
    ~47-checkpoint log-spaced schedule (one binomial standard error is ~0.029 at 300 pairs)."""

    delta: float = 0.05  # minimum drop and recovery of the smoothed curve, in accuracy
    bandwidth: float = 0.15  # Gaussian smoothing sd in decades of tokens (log10); 0 = no smoothing
    min_neighbours: int = 2  # ... widened per point to reach its k-th nearest checkpoint, so sparse
    #                         early checkpoints (step 0, 1, 2, 4 ...) are smoothed too, not left raw
    min_seed_agreement: float = 0.5  # fraction of seeds that must show the U on their own curve
    seed_delta_fraction: float = 0.5  # a seed shows it when its drop and recovery at the U's positions >= this x delta
    n_boot: int = 1000  # paired bootstrap resamples over pairs
    alpha: float = 0.05  # one-sided level for the drop and the recovery
    require_recovery: bool = True  # also demand a significant recovery, not only a significant drop
    chance: float = 0.5
    onset_gain: float = 0.05  # the model counts as near-random until its mean accuracy over the
    #                          benchmark has risen this much above the first checkpoint's
    metric: str = "mlp"  # mlp | sum
    seed: int = 0  # of the bootstrap generator

    def __post_init__(self) -> None:
        if self.delta <= 0 or self.bandwidth < 0 or self.n_boot < 10 or not 0 < self.alpha < 1:
            raise ValueError(f"UShapeConfig: bad values {self}")
        if self.metric not in ("mlp", "sum"):
            raise ValueError(f"UShapeConfig.metric must be 'mlp' or 'sum', got {self.metric!r}")


def smoothing_matrix(x: np.ndarray, bandwidth: float, min_neighbours: int = 0) -> np.ndarray:
    """Local-linear Gaussian-kernel smoother on x (log10 tokens) as a matrix: smoothed = W @ y.

    Row i fits a weighted line around x_i (weights exp(-d^2 / 2h_i^2)) and keeps its value at x_i.
    A local *linear* fit, not a weighted mean, because a weighted mean at the ends of a rising curve
    is pulled toward the interior: the first checkpoints would look higher than they are and a
    rising curve would show a spurious early "peak". h_i = max(bandwidth, distance to the
    min_neighbours-th nearest checkpoint): on a log axis the first checkpoints lie decades apart and
    a fixed bandwidth would leave them raw. The smoother is linear in the per-pair outcomes, which
    lets the paired bootstrap resample pairs and recompute the smoothed drop exactly.
    """
    x = np.asarray(x, dtype=float)
    if bandwidth <= 0 or len(x) < 3:
        return np.eye(len(x))
    d = x[None, :] - x[:, None]  # d[i, j] = x_j - x_i
    h = np.full(len(x), float(bandwidth))
    k = max(int(min_neighbours), 2)  # a line needs two neighbours
    if k < len(x):
        h = np.maximum(h, np.sort(np.abs(d), axis=1)[:, k])
    w = np.exp(-0.5 * (d / h[:, None]) ** 2)
    s0, s1, s2 = w.sum(1, keepdims=True), (w * d).sum(1, keepdims=True), (w * d * d).sum(1, keepdims=True)
    return w * (s2 - d * s1) / (s0 * s2 - s1 ** 2)


def _impute(m: np.ndarray) -> np.ndarray:
    """Missing pairs (NaN) take their checkpoint's mean, so they move no contrast."""
    if not np.isnan(m).any():
        return m
    col = np.nanmean(m, axis=1, keepdims=True)
    return np.where(np.isnan(m), col, m)


def _resample_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n): how often each pair is drawn in each bootstrap resample of n pairs."""
    idx = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
    return np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


def analyse_curve(x: np.ndarray, mats: list[list[np.ndarray]], cfg: UShapeConfig,
                  onset_index: int = 0, rng: np.random.Generator | None = None) -> list[dict]:
    """Statistical U's of one unit (a paradigm, or a phenomenon = several paradigms).

    x: (n_steps,) log10 tokens. mats[s][k]: (n_steps, n_pairs_k) 0/1 outcomes of seed s on paradigm
    k, pairs in the same order for every seed (then the bootstrap is paired across seeds too).
    The unit's accuracy is the mean over paradigms of the pair means; it is smoothed on x and
    averaged over seeds; U candidates come from find_u_shapes(delta) on that curve. Each candidate
    gets: seed agreement; a paired bootstrap over pairs (the same resampled pairs at every
    checkpoint) of the smoothed drop, recovery and peak level; its kind.
    onset_index: first checkpoint at which the model is no longer near-random (see UShapeConfig).
    """
    rng = rng or np.random.default_rng(cfg.seed)
    W = smoothing_matrix(x, cfg.bandwidth, cfg.min_neighbours)
    mats = [[_impute(np.asarray(m, dtype=float)) for m in seed] for seed in mats]
    seed_curves = np.array([W @ np.mean([m.mean(axis=1) for m in seed], axis=0) for seed in mats])
    curve = seed_curves.mean(axis=0)
    out = []
    for u in find_u_shapes(curve, cfg.delta):
        seg_end = len(curve)
        r_max = u.trough + int(np.argmax(curve[u.trough:seg_end] >= u.recovered_to - 1e-12))
        need = cfg.seed_delta_fraction * cfg.delta
        shows = [(sc[u.peak] - sc[u.trough] >= need) and (sc[r_max] - sc[u.trough] >= need)
                 for sc in seed_curves]
        # contrasts on the checkpoint axis: drop, recovery, peak level
        C = np.stack([W[u.peak] - W[u.trough], W[r_max] - W[u.trough], W[u.peak]])
        boot = np.zeros((3, cfg.n_boot))
        n_par = len(mats[0])
        for k in range(n_par):
            sizes = {seed[k].shape[1] for seed in mats}
            # each pair's contribution to each contrast, per seed: (seeds, 3, n)
            V = [C @ seed[k] for seed in mats]
            if len(sizes) == 1:  # same pairs in every seed: one resample of pairs for all (paired)
                counts = _resample_counts(sizes.pop(), cfg.n_boot, rng)
                boot += np.einsum("skn,bn->kb", np.stack(V), counts) / (V[0].shape[1] * len(mats) * n_par)
            else:
                for v in V:
                    counts = _resample_counts(v.shape[1], cfg.n_boot, rng)
                    boot += (v @ counts.T) / (v.shape[1] * len(mats) * n_par)
        p_drop = (1 + np.sum(boot[0] <= 0)) / (cfg.n_boot + 1)
        p_rec = (1 + np.sum(boot[1] <= 0)) / (cfg.n_boot + 1)
        p_peak = (1 + np.sum(boot[2] <= cfg.chance)) / (cfg.n_boot + 1)
        peak_above = bool(p_peak < cfg.alpha)
        kind = KINDS[2] if not peak_above else (KINDS[1] if u.peak < onset_index else KINDS[0])
        agreement = float(np.mean(shows))
        significant = p_drop < cfg.alpha and (p_rec < cfg.alpha or not cfg.require_recovery)
        out.append({
            "peak": u.peak, "trough": u.trough, "recovery": u.recovery, "recovery_max": r_max,
            "peak_acc": curve[u.peak], "trough_acc": curve[u.trough], "recovery_acc": curve[u.recovery],
            "recovered_to": u.recovered_to, "depth": u.depth,
            "drop_lo": float(np.quantile(boot[0], cfg.alpha / 2)),
            "drop_hi": float(np.quantile(boot[0], 1 - cfg.alpha / 2)),
            "p_drop": float(p_drop), "p_recovery": float(p_rec), "p_peak_at_chance": float(p_peak),
            "peak_above_chance": peak_above, "kind": kind, "n_seeds": len(mats),
            "seed_agreement": agreement, "significant": bool(significant),
            "accepted": bool(significant and agreement >= cfg.min_seed_agreement),
        })
    return out


def _paradigm_columns(o) -> dict[str, np.ndarray]:
    """paradigm -> row indices of a PairOutcomes, ordered by pair_id (aligns seeds pair by pair)."""
    order = np.lexsort((o.pair_ids.astype(str), o.row_paradigm))
    bounds = np.searchsorted(o.row_paradigm[order], np.arange(len(o.paradigms) + 1))
    return {p: order[bounds[i]:bounds[i + 1]] for i, p in enumerate(o.paradigms)}


def _paradigm_means(block: np.ndarray, cols: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
    """(n_steps, len(names)) mean outcome per paradigm, NaN (missing pairs) ignored."""
    order = np.concatenate([cols[p] for p in names])
    bounds = np.cumsum([0] + [len(cols[p]) for p in names])[:-1]
    sub = block[:, order]
    present = ~np.isnan(sub)
    sums = np.add.reduceat(np.where(present, sub, 0.0), bounds, axis=1)
    counts = np.add.reduceat(present, bounds, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def onset_index(acc_by_step: np.ndarray, gain: float) -> int:
    """First checkpoint whose accuracy is `gain` above the first one's (len if never)."""
    acc = np.asarray(acc_by_step, dtype=float)
    hit = np.flatnonzero(acc - acc[0] >= gain)
    return int(hit[0]) if len(hit) else len(acc)


STAT_COLUMNS = ["model", "budget", "benchmark", "level", "phenomenon", "paradigm", "metric", "n_seeds",
                "peak_step", "peak_tokens", "trough_step", "trough_tokens", "recovery_step",
                "recovery_tokens", "peak_acc", "trough_acc", "recovery_acc", "recovered_to", "depth",
                "drop_lo", "drop_hi", "p_drop", "p_recovery", "peak_above_chance", "kind",
                "seed_agreement", "significant", "accepted", "runs"]


def find_u_shapes_in_runs(ev, cfg: UShapeConfig | None = None, levels=("phenomenon", "paradigm")):
    """Statistical U's for every model x budget group (its runs are the seeds), benchmark, and
    phenomenon/paradigm of an EvalSet. Returns (DataFrame of STAT_COLUMNS, list of notes)."""
    import pandas as pd

    from probes.evalfile import MISSING, MLP, SUM
    from probes.evalset import log_tokens

    cfg = cfg or UShapeConfig()
    rng = np.random.default_rng(cfg.seed)
    bit = MLP if cfg.metric == "mlp" else SUM
    metric = f"acc_{cfg.metric}"
    info = {r.name: r for r in ev.runs}
    notes: list[str] = []
    rows: list[dict] = []
    groups: dict[tuple, list[str]] = {}
    for (run, bench) in ev.outcomes:
        r = info[run]
        groups.setdefault((r.model, r.budget, bench), []).append(run)
    pb = ev.table[["benchmark", "paradigm", "phenomenon"]].drop_duplicates(["benchmark", "paradigm"])
    phen_by_bench: dict[str, dict[str, str]] = {}
    for b, p, ph in zip(pb.benchmark.tolist(), pb.paradigm.tolist(), pb.phenomenon.tolist()):
        phen_by_bench.setdefault(b, {})[p] = ph
    for (model, budget, bench), runs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        outs = [ev.outcomes[(run, bench)] for run in sorted(runs)]
        steps = outs[0].steps
        for o in outs[1:]:
            steps = np.intersect1d(steps, o.steps)
        if any(len(o.steps) != len(steps) for o in outs):
            notes.append(f"{model}/{budget}/{bench}: seeds differ in checkpoints; using the "
                         f"{len(steps)} they share")
        if len(steps) < 4:
            notes.append(f"{model}/{budget}/{bench}: only {len(steps)} checkpoint(s); too few for U-shapes")
            continue
        tokens = np.mean([o.tokens[np.searchsorted(o.steps, steps)] for o in outs], axis=0)
        x = log_tokens(tokens)
        blocks, cols = [], []
        for o in outs:
            c = o.correct[np.searchsorted(o.steps, steps)]
            block = ((c & bit) > 0).astype(np.float64)
            block[(c & MISSING) > 0] = np.nan
            blocks.append(block)
            cols.append(_paradigm_columns(o))
        overall = np.mean([np.nanmean(b, axis=1) for b in blocks], axis=0)
        onset = onset_index(overall, cfg.onset_gain)
        phen_of = phen_by_bench.get(bench, {})
        units: list[tuple[str, str, str, list[str]]] = []
        if "phenomenon" in levels:
            by_ph: dict[str, list[str]] = {}
            for p in sorted(cols[0]):
                by_ph.setdefault(phen_of.get(p, "?"), []).append(p)
            units += [("phenomenon", ph, "", ps) for ph, ps in sorted(by_ph.items())]
        if "paradigm" in levels:
            units += [("paradigm", phen_of.get(p, "?"), p, [p]) for p in sorted(cols[0])]
        # Screen every unit with one matrix product: the smoothed seed-mean curve of each paradigm
        # (a phenomenon's is the mean of its paradigms'). Only units whose curve has a geometric U
        # go on to the per-pair bootstrap, which is where the time goes.
        W = smoothing_matrix(x, cfg.bandwidth, cfg.min_neighbours)
        names = [p for p in sorted(cols[0]) if all(p in c for c in cols)]
        par_curve = dict(zip(names, np.mean([_paradigm_means(b, c, names) for b, c in zip(blocks, cols)],
                                            axis=0).T))
        smoothed = dict(zip(names, (W @ np.array([par_curve[p] for p in names]).T).T)) if names else {}
        for level, ph, par, paradigms in units:
            if not all(p in c for c in cols for p in paradigms):
                notes.append(f"{model}/{budget}/{bench}/{par or ph}: not in every seed; skipped")
                continue
            if not find_u_shapes(np.mean([smoothed[p] for p in paradigms], axis=0), cfg.delta):
                continue
            mats = [[b[:, c[p]] for p in paradigms] for b, c in zip(blocks, cols)]
            for u in analyse_curve(x, mats, cfg, onset, rng):
                row = {"model": model, "budget": budget, "benchmark": bench, "level": level,
                       "phenomenon": ph, "paradigm": par, "metric": metric, "runs": " ".join(sorted(runs))}
                for name in ("peak", "trough", "recovery"):
                    row[f"{name}_step"] = int(steps[u[name]])
                    row[f"{name}_tokens"] = int(round(tokens[u[name]]))
                row.update({k: v for k, v in u.items() if k in STAT_COLUMNS})
                rows.append(row)
    df = pd.DataFrame(rows, columns=STAT_COLUMNS)
    df["budget"] = df["budget"].astype("Int64")
    return df, notes
