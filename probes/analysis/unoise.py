"""The U-detector's noise model: the smoother it looks through, the pairs' paired covariance across checkpoints
and the checkpoints' own noise beyond it, the deepest U that noise makes around a monotone curve (Monte Carlo),
the binomial standard error of a unit's curve, and the pairs a curve needs. Pure numpy, no configuration:
`probes.analysis.ushape` decides with it."""
from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import brentq


def smoothing_matrix(x: np.ndarray, bandwidth: float, min_neighbours: int = 0) -> np.ndarray:
    """Local-linear Gaussian-kernel smoother on x (log10 tokens) as a matrix: smoothed = W @ y.

    Linear, not a weighted mean, which at the ends of a rising curve is pulled inward and draws a spurious
    early "peak". h_i = max(bandwidth, distance to the min_neighbours-th nearest checkpoint): the first
    checkpoints lie decades apart. A matrix, so the bootstrap recomputes a smoothed drop exactly."""
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


def max_u_depth(y: np.ndarray) -> np.ndarray:
    """max over i <= t <= j of min(y[..., i], y[..., j]) - y[..., t] along the last axis: the deepest U of a
    curve (drop and recovery both at least that), which bounds the u_depth of every U find_u_shapes finds."""
    left = np.maximum.accumulate(y, axis=-1)
    right = np.flip(np.maximum.accumulate(np.flip(y, axis=-1), axis=-1), axis=-1)
    return np.max(np.minimum(left, right) - y, axis=-1)


def u_thresholds(mu: np.ndarray, cov: np.ndarray, Ws: list[np.ndarray], alpha: float, n_null: int,
                 rng: np.random.Generator) -> list[float]:
    """Per scale W, the depth a U of the curve W @ (mu + e), e ~ N(0, cov) over the checkpoints, exceeds on
    some scale with probability alpha: a parametric bootstrap of the deepest U under mu, the monotone curve
    closest to the data (the null a U is tested against; the smoother's overshoot at mu's bends included).
    The scales share one level, set on the same draws so that any of them exceeds with probability alpha
    (the scales' U's are correlated: less than Bonferroni's alpha / scales each)."""
    vals, vecs = np.linalg.eigh(cov)
    e = rng.standard_normal((n_null, len(mu))) @ (vecs * np.sqrt(np.clip(vals, 0, None))).T + mu[None, :]
    D = np.stack([max_u_depth(e @ W.T) for W in Ws])  # (scales, draws)
    ranks = np.argsort(np.argsort(D, axis=1), axis=1) / n_null  # each draw's level on each scale
    level = float(np.quantile(ranks.max(axis=0), 1 - alpha))
    return [float(np.quantile(d, level)) for d in D]


def paired_cov(mats: list[list[np.ndarray]]) -> np.ndarray:
    """(steps, steps) covariance of a unit's seed-mean curve over the pairs it could have drawn (pairs within
    paradigm and seed resampled, the same pairs at every checkpoint: the paired bootstrap's, in closed form):
    sum_s sum_k Cov_i(o_i) / n_sk / (S K)^2. Pairs that persist make it mostly a shift of the whole curve,
    which makes no U; mats[s][k]: (steps, pairs) 0/1 outcomes, missing ones imputed."""
    S, K = len(mats), len(mats[0])
    out = np.zeros((mats[0][0].shape[0],) * 2)
    for seed in mats:
        for m in seed:
            c = m - m.mean(axis=1, keepdims=True)
            out += (c @ c.T) / max(m.shape[1] - 1, 1) / max(m.shape[1], 1)
    return out / (S * K) ** 2


def shock_ratio(x: np.ndarray, curves: np.ndarray, covs: np.ndarray, binom: np.ndarray) -> float:
    """How many binomial variances of noise the checkpoints add beyond the pairs' own (paired_cov): the model
    moving between checkpoints on whole templates, seeds fed alike. Each interior checkpoint of each unit's
    seed-mean curve (curves: units x steps; covs: their paired_cov; binom: their binomial variances) is compared
    with the line through its neighbours: residual^2 ~ (paired variance + k x binomial variance) chi^2_1; k is
    the upper 90 % limit of the value that puts the median of the scaled residuals at chi^2_1's (a median: real
    dips move it little; the limit: an underestimate lets false U's through, bench_ushape --part null's shared
    shocks). NaN with fewer than MIN_RESIDUALS residuals."""
    x = np.asarray(x, float)
    if len(x) < 3 or not len(curves):
        return float("nan")
    w = (x[2:] - x[1:-1]) / np.maximum(x[2:] - x[:-2], 1e-12)
    A = np.zeros((len(x) - 2, len(x)))
    i = np.arange(len(x) - 2)
    A[i, i], A[i, i + 1], A[i, i + 2] = -w, 1.0, -(1 - w)
    r, P, B = curves @ A.T, np.einsum("ti,uij,tj->ut", A, covs, A), binom @ (A ** 2).T
    ok = np.isfinite(r) & np.isfinite(P) & np.isfinite(B)
    r2, P, B = r[ok] ** 2, P[ok], B[ok]
    if len(r2) < MIN_RESIDUALS:
        return float("nan")

    q = min(1.0, 0.5 + 1.2816 * 0.5 / np.sqrt(len(r2)))

    def excess(k: float) -> float:
        return float(np.quantile(r2 / np.maximum(P + k * B, 1e-12), q)) - 0.45494
    return 0.0 if excess(0.0) <= 0 else float(brentq(excess, 0.0, 1e6, xtol=1e-6))


@functools.lru_cache(maxsize=64)
def _unit_u(Ws: tuple[bytes, ...], n: int, alpha: float, n_null: int, seed: int) -> tuple[float, ...]:
    Ws = [np.frombuffer(W).reshape(n, n) for W in Ws]
    return tuple(u_thresholds(np.zeros(n), np.eye(n) / 4, Ws, alpha, n_null, np.random.default_rng(seed)))


def unit_u_threshold(Ws, alpha: float, n_null: int, seed: int) -> tuple[float, ...]:
    """u_thresholds of a flat curve at one pair (sd 0.5 at each checkpoint, independent: p = 0.5), per scale
    W: at n pairs a depth must clear this / sqrt(n). Once per schedule."""
    return _unit_u(tuple(np.ascontiguousarray(W, float).tobytes() for W in Ws), len(Ws[0]), alpha, n_null, seed)


def _impute(m: np.ndarray) -> np.ndarray:
    """Missing pairs (NaN) take their checkpoint's mean, so they move no contrast."""
    if not np.isnan(m).any():
        return m
    return np.where(np.isnan(m), np.nanmean(m, axis=1, keepdims=True), m)


def _resample_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n): how often each pair is drawn in each bootstrap resample of n pairs."""
    idx = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
    return np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


def unit_sd(mats: list[list[np.ndarray]], worst_case: bool = False) -> tuple[np.ndarray, float]:
    """Binomial standard error of the unit's seed-mean accuracy at each checkpoint, and its pairs per
    paradigm (harmonic mean over paradigms and seeds): var_t = sum_s sum_k p_kt (1 - p_kt) / n_skt / (S K)^2,
    p_kt pooled over seeds with one success and one failure added (300/300 is not zero variance);
    worst_case=True: p = 0.5."""
    S, K = len(mats), len(mats[0])
    var = np.zeros(mats[0][0].shape[0])
    inv_n = []
    for k in range(K):
        n_sk = [np.sum(~np.isnan(seed[k]), axis=1) for seed in mats]  # (steps,) per seed
        if worst_case:
            p = np.full(len(var), 0.5)
        else:
            hits = sum(np.nansum(seed[k], axis=1) for seed in mats)
            p = (hits + 1.0) / (sum(n_sk) + 2.0)
        for n in n_sk:
            var += p * (1 - p) / np.maximum(n, 1)
            inv_n.append(np.mean(1.0 / np.maximum(n, 1)))
    return np.sqrt(var) / (S * K), round(float(1.0 / np.mean(inv_n)), 6)


def min_pairs(depth: float, c_unit: float, n_paradigms: int = 1) -> int:
    """Pairs per paradigm a one-seed curve needs before a U of `depth` can be told from noise: the threshold
    at n pairs in each of K paradigms is c_unit / sqrt(n K) (c_unit: unit_threshold's, at one pair)."""
    return int(np.ceil((c_unit / depth) ** 2 / max(n_paradigms, 1)))


MIN_RESIDUALS = 20  # checkpoint residuals (interior checkpoints x curves) dispersion needs


def dispersion(x: np.ndarray, means: np.ndarray, counts: np.ndarray, units: list[list[int]]) -> float:
    """How many times the binomial variance a group's curves move from checkpoint to checkpoint (pairs_needed's
    D), from per-paradigm means and counts: means, counts (seeds, steps, paradigms) of one model x budget x
    benchmark; x: log10 tokens; units: the paradigm columns of each curve. As in shock_ratio (its reasons hold),
    with binomial variance alone: the upper 90 % limit of the median of residual^2 / variance over chi^2_1's
    median (0.455); NaN with fewer than MIN_RESIDUALS residuals."""
    x = np.asarray(x, float)
    if len(x) < 3 or not units:
        return float("nan")
    S = means.shape[0]
    y = np.nanmean(means, axis=0)
    n = counts.sum(axis=0)
    p = (y * n + 1) / (n + 2)
    v = p * (1 - p) * np.sum(1 / np.maximum(counts, 1), axis=0) / S ** 2
    Y = np.stack([y[:, u].mean(axis=1) for u in units], axis=1)
    V = np.stack([v[:, u].sum(axis=1) / len(u) ** 2 for u in units], axis=1)
    w = ((x[2:] - x[1:-1]) / np.maximum(x[2:] - x[:-2], 1e-12))[:, None]
    r = Y[1:-1] - (w * Y[:-2] + (1 - w) * Y[2:])
    e = V[1:-1] + w ** 2 * V[:-2] + (1 - w) ** 2 * V[2:]
    ratio = (r ** 2 / np.maximum(e, 1e-12))[np.isfinite(r)]
    if len(ratio) < MIN_RESIDUALS:
        return float("nan")
    return float(np.quantile(ratio, min(1.0, 0.5 + 1.2816 * 0.5 / np.sqrt(len(ratio)))) / 0.45494)
