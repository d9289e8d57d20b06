"""Age of acquisition and forgettability (after Chang, Tu & Bergen 2023).

A sigmoid y = lo + (hi - lo) / (1 + exp(-slope (x - mid))) is fitted to each accuracy curve on x = log10
tokens (trained checkpoints only); the AoA is where it crosses halfway between chance and its best over the
checkpoints. Forgettability: the sum of all drops of the smoothed curve (the U-detector's smoother).
The fit starts from a grid over (mid, slope) with (lo, hi) in closed form, then Levenberg-Marquardt with mid
and slope kept in bounds by a sine transform (scipy's bounded trust-region solvers: 10-20x slower here and
often a worse optimum on flat curves).
"""
from __future__ import annotations

import contextlib
import hashlib
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd
import scipy
from scipy.optimize import leastsq

from probes.analysis.evalfile import MISSING, MLP, SUM
from probes.analysis.evalset import log_tokens
from probes.analysis.unoise import smoothing_matrix
from probes.analysis.ushape import _paradigm_columns
from train.files import atomic_open


@dataclass
class AoAConfig:
    chance: float = 0.5
    min_points: int = 5  # trained checkpoints needed to fit four parameters with a little to spare
    min_gain: float = 0.05  # the best fitted accuracy must exceed chance by this to count as acquired
    min_rise_rmse: float = 3.0  # ... and its rise this many residual RMSEs (not a chance bump at one end)
    bandwidth: float = 0.15  # smoothing for forgettability, decades of tokens (as UShapeConfig)
    n_boot: int = 100  # resamples (seeds, then pairs) of a phenomenon's AoA interval (aoa_intervals)
    min_neighbours: int = 2
    metric: str = "mlp"  # mlp | sum

    def __post_init__(self) -> None:
        if self.min_points < 4:
            raise ValueError(f"AoAConfig.min_points must be >= 4 (four parameters), got {self.min_points}")
        if self.metric not in ("mlp", "sum"):
            raise ValueError(f"AoAConfig.metric must be 'mlp' or 'sum', got {self.metric!r}")


def sigmoid(x, lo, hi, mid, slope):
    z = np.clip(np.asarray(slope)[..., None] * (np.asarray(x) - np.asarray(mid)[..., None]), -60, 60)
    return np.asarray(lo)[..., None] + (np.asarray(hi) - np.asarray(lo))[..., None] / (1 + np.exp(-z))


class _Box:
    """mid and slope kept inside [lower, upper] for MINPACK, which takes no bounds: fitted as angles u,
    value lower + (upper - lower) (sin u + 1) / 2 (MINUIT's and lmfit's transform)."""

    def __init__(self, lower: np.ndarray, upper: np.ndarray):
        self.lower, self.half = lower, (upper - lower) / 2
        (self._lo_mid, self._lo_k), (self._half_mid, self._half_k) = map(float, lower), map(float, self.half)

    def inside(self, u: np.ndarray) -> np.ndarray:
        return self.lower + self.half * (np.sin(u) + 1)

    def angle(self, v: np.ndarray) -> np.ndarray:
        return np.arcsin(np.clip((v - self.lower) / self.half - 1, -1, 1))

    # residual and jacobian (~70 calls each per MINPACK fit): `inside` and the sigmoid operation for
    # operation (the same bits) on Python floats and in place, without np.clip/np.stack dispatch; the
    # Jacobian reuses the residual's 1 + exp(-z) and is built as rows (col_deriv: no transpose).
    _last: tuple = (None, None, None, None)

    def _mid_k(self, u: np.ndarray) -> tuple[float, float]:
        s_mid, s_k = np.sin(u)
        return self._lo_mid + self._half_mid * (float(s_mid) + 1), self._lo_k + self._half_k * (float(s_k) + 1)

    @staticmethod
    def _denominator(x: np.ndarray, mid: float, k: float) -> np.ndarray:
        z = x - mid
        z *= k
        np.minimum(z, 60, out=z)
        np.maximum(z, -60, out=z)
        np.negative(z, out=z)
        np.exp(z, out=z)
        z += 1
        return z  # 1 + exp(-clip(k (x - mid), -60, 60))

    def residual(self, theta, x, y):
        mid, k = self._mid_k(theta[2:])
        lo = float(theta[0])
        d = self._denominator(x, mid, k)
        self._last = (theta.tobytes(), mid, k, d)
        r = (float(theta[1]) - lo) / d
        r += lo
        r -= y
        return r  # lo + (hi - lo) / d - y

    def jacobian(self, theta, x, y):
        key, mid, k, d = self._last
        if key != theta.tobytes():
            mid, k = self._mid_k(theta[2:])
            d = self._denominator(x, mid, k)
        c_mid, c_k = np.cos(theta[2:])
        s = 1 / d
        ds = (float(theta[1]) - float(theta[0])) * s * (1 - s)
        J = np.empty((4, len(x)))
        np.subtract(1, s, out=J[0])
        J[1] = s
        np.multiply(-k * ds, self._half_mid * float(c_mid), out=J[2])
        np.multiply((x - mid) * ds, self._half_k * float(c_k), out=J[3])
        return J


def _grid_start(x: np.ndarray, Y: np.ndarray, span: float) -> np.ndarray:
    """(m, 4) starting points: the best (mid, slope) of a grid, with (lo, hi) exact for each."""
    mids = np.linspace(x.min() - 0.25 * span, x.max() + 0.25 * span, 32)
    slopes = np.geomspace(0.3 / span, 60.0 / span, 18)
    gm, gk = (a.ravel() for a in np.meshgrid(mids, slopes, indexing="ij"))
    S = 1 / (1 + np.exp(-np.clip(gk[:, None] * (x[None, :] - gm[:, None]), -60, 60)))  # (G, n)
    a11, a12, a22 = ((1 - S) ** 2).sum(1), (S * (1 - S)).sum(1), (S ** 2).sum(1)
    det = a11 * a22 - a12 ** 2
    r1, r2 = (1 - S) @ Y.T, S @ Y.T  # (G, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = (a22[:, None] * r1 - a12[:, None] * r2) / det[:, None]
        hi = (a11[:, None] * r2 - a12[:, None] * r1) / det[:, None]
        sse = (Y ** 2).sum(1)[None, :] - (lo * r1 + hi * r2)
    sse[~np.isfinite(sse) | (det[:, None] < 1e-9)] = np.inf
    best = np.argmin(sse, axis=0)
    cols = np.arange(Y.shape[0])
    return np.stack([lo[best, cols], hi[best, cols], gm[best], gk[best]], axis=1)


def _batched_lm(box: _Box, x: np.ndarray, Y: np.ndarray, theta: np.ndarray, iters: int) -> np.ndarray:
    """Levenberg-Marquardt on every curve at once, in MINPACK's parameters (Marquardt's diagonal scaling);
    theta updated in place. Returns bool (m,): converged (an undamped step changing the SSE < 1e-13
    relative, or damping past 1e12); the rest, crawling along flat valleys, go to MINPACK (fit_sigmoids)."""
    def sse_of(t, y):
        mid, k = box.inside(t[:, 2:]).T
        s = 1 / (1 + np.exp(-np.clip(k[:, None] * (x - mid[:, None]), -60, 60)))
        return s, (t[:, :1] + (t[:, 1:2] - t[:, :1]) * s - y)

    s, r = sse_of(theta, Y)
    cur = np.einsum("ij,ij->i", r, r)
    lam = np.full(len(theta), 1e-3)
    done = np.zeros(len(theta), dtype=bool)
    eye = np.eye(4)
    for _ in range(iters):
        act = np.flatnonzero(~done)
        if not len(act):
            break
        t, sa, ra = theta[act], s[act], r[act]
        mid, k = box.inside(t[:, 2:]).T
        dmid, dk = (box.half * np.cos(t[:, 2:])).T
        ds = (t[:, 1] - t[:, 0])[:, None] * sa * (1 - sa)
        J = np.stack([1 - sa, sa, -(k * dmid)[:, None] * ds, (x - mid[:, None]) * ds * dk[:, None]], axis=2)
        Jt = J.transpose(0, 2, 1)
        A = Jt @ J
        g = (Jt @ ra[..., None])[..., 0]
        diag = np.maximum(np.diagonal(A, axis1=1, axis2=2), 1e-12)
        with np.errstate(all="ignore"):
            step = -np.linalg.solve(A + lam[act, None, None] * eye * diag[:, None, :], g[..., None])[..., 0]
        cand = t + step
        sc, rc = sse_of(cand, Y[act])
        new = np.einsum("ij,ij->i", rc, rc)
        better = np.isfinite(new) & (new < cur[act])
        # converged: a nearly undamped (Gauss-Newton) step that no longer lowers the SSE; a small gain
        # under heavy damping is a crawl along a valley, not an optimum
        small = better & (cur[act] - new <= 1e-13 * cur[act] + 1e-300) & (lam[act] <= 1e-6)
        ib = act[better]
        theta[ib], s[ib], r[ib], cur[ib] = cand[better], sc[better], rc[better], new[better]
        lam[act] = np.where(better, np.maximum(lam[act] / 10, 1e-12), lam[act] * 10)
        done[act[small | (~better & (lam[act] > 1e12))]] = True
    return done


def _minpack_fit(box: _Box, x: np.ndarray, y: np.ndarray, start: np.ndarray, max_nfev: int) -> np.ndarray:
    """One curve by MINPACK's Levenberg-Marquardt (leastsq: least_squares(method="lm")'s lmder call, bit for bit);
    tight tolerances (AoA reads mid and slope); max_nfev bounds the crawl along a flat valley."""
    return leastsq(box.residual, start, args=(x, y), Dfun=box.jacobian, col_deriv=True, ftol=1e-12, xtol=1e-12,
                   gtol=1e-12, maxfev=max_nfev, factor=100.0)[0]


def fit_sigmoids(x: np.ndarray, Y: np.ndarray, max_nfev: int = 200, polish: bool = True,
                 start: Optional[np.ndarray] = None, iters: int = 100) -> dict[str, np.ndarray]:
    """Least-squares sigmoid fits of every row of Y (m, n) on the shared x (n,): arrays lo, hi, mid, slope
    (> 0: a falling curve has hi < lo), rmse. All curves at once by _batched_lm; those not converged in
    `iters` by MINPACK from the same start (polish=False leaves them: the bootstrap's resamples).
    start: (m, 4) lo, hi, mid, slope instead of the grid (a resample from its curve's fit)."""
    x = np.asarray(x, dtype=float)
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    span = max(x.max() - x.min(), 1e-6)
    # a flat noisy curve pulls mid far outside the data and the slope towards a step: keep both in bounds
    box = _Box(np.array([x.min() - span, 1e-3 / span]), np.array([x.max() + span, 200.0 / span]))
    th = _grid_start(x, Y, span) if start is None else np.asarray(start, dtype=float)
    start = np.concatenate([th[:, :2], box.angle(th[:, 2:])], axis=1)
    theta = start.copy()
    done = _batched_lm(box, x, Y, theta, iters=iters)
    with warnings.catch_warnings():  # "reached maxfev": the cap is deliberate (see _minpack_fit)
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in np.flatnonzero(~done) if polish else ():
            theta[i] = _minpack_fit(box, x, Y[i], start[i], max_nfev)
    th = np.concatenate([theta[:, :2], box.inside(theta[:, 2:])], axis=1)
    sse = ((sigmoid(x, th[:, 0], th[:, 1], th[:, 2], th[:, 3]) - Y) ** 2).sum(1)
    return {"lo": th[:, 0], "hi": th[:, 1], "mid": th[:, 2], "slope": th[:, 3],
            "rmse": np.sqrt(sse / Y.shape[1])}


class FitStore:
    """Sigmoid fits already made, by content: a later report on unchanged curves reads them back. A batch's
    key hashes x, its curves, max_nfev, this file's source and numpy's and scipy's versions (a hit is the
    bits a fresh fit would give). A torn or foreign `path` is ignored; `save` writes only the batches used."""

    def __init__(self, path: Optional[Path] = None):
        self.old: dict[str, np.ndarray] = {}
        self.used: dict[str, np.ndarray] = {}
        self.hits = self.misses = 0
        if path is not None and Path(path).is_file():
            try:
                with np.load(path, allow_pickle=False) as z:
                    self.old = {k: z[k] for k in z.files}
            except Exception:  # torn by a crash or another format: fit afresh
                self.old = {}

    @staticmethod
    def key(*parts) -> str:
        """The key of a batch: its arrays' shapes and bytes and any strings (x, Y, max_nfev for a point fit)."""
        h = hashlib.sha256(_CODE_VERSION)
        for a in parts:
            a = np.ascontiguousarray(a if isinstance(a, np.ndarray) else np.asarray(a, dtype=float)) \
                if not isinstance(a, str) else np.frombuffer(a.encode(), np.uint8)
            h.update(f"{a.shape} {a.dtype}".encode())
            h.update(a.tobytes())
        return "f" + h.hexdigest()[:40]

    def fit(self, x: np.ndarray, Y: np.ndarray, max_nfev: int = 200) -> dict[str, np.ndarray]:
        k = self.key(x, Y, max_nfev)
        got = self.lookup(k, len(Y))
        return got if got is not None else self.keep(k, fit_sigmoids(x, Y, max_nfev))

    def lookup(self, key: str, m: int) -> Optional[dict[str, np.ndarray]]:
        """The stored fit of m curves under `key` (counted as a hit), or None (a miss: `keep` the fit made)."""
        got = self.old.get(key, self.used.get(key))
        if got is None or got.shape != (m, len(_FIT_KEYS)):
            self.misses += 1
            return None
        self.hits += 1
        self.used[key] = got
        return {c: got[:, i].copy() for i, c in enumerate(_FIT_KEYS)}

    def keep(self, key: str, fit: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.used[key] = np.stack([fit[c] for c in _FIT_KEYS], axis=1)
        return fit

    def save(self, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError), atomic_open(path, "wb", durable=False) as fh:  # a torn one is ignored
            np.savez(fh, **self.used)


_FIT_KEYS = ("lo", "hi", "mid", "slope", "rmse")
_CODE_VERSION = (Path(__file__).read_bytes() + f"numpy {np.__version__} scipy {scipy.__version__}".encode())


def aoa_from_fit(x: np.ndarray, fit: dict[str, np.ndarray], chance: float, min_gain: float,
                 min_rise_rmse: float = 0.0):
    """(aoa log10 tokens, best fitted accuracy, status) per fitted curve."""
    lo, hi, mid, k = fit["lo"], fit["hi"], fit["mid"], fit["slope"]
    ends = sigmoid(np.array([x.min(), x.max()]), lo, hi, mid, k)
    best = ends.max(axis=1)
    target = chance + (best - chance) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (target - lo) / (hi - lo)
        aoa = mid + np.log(s / (1 - s)) / k
    status = np.full(len(lo), "ok", dtype=object)
    status[best - chance < min_gain] = "not_acquired"
    rise = np.abs(ends[:, 1] - ends[:, 0])
    status[(status == "ok") & (rise < min_rise_rmse * fit["rmse"])] = "no_rise_above_noise"
    status[(status == "ok") & (hi <= lo)] = "decreasing"
    status[(status == "ok") & ((s <= 0) | (aoa < x.min()))] = "above_halfway_at_first_checkpoint"
    aoa = np.where(status == "ok", aoa, np.nan)
    return aoa, best, status


def forgettability(x: np.ndarray, Y: np.ndarray, bandwidth: float, min_neighbours: int) -> np.ndarray:
    """Sum of the drops between consecutive checkpoints of each smoothed curve (rows of Y)."""
    sm = np.atleast_2d(Y) @ smoothing_matrix(x, bandwidth, min_neighbours).T
    return np.clip(-np.diff(sm, axis=1), 0, None).sum(axis=1)


@dataclass
class AoAPlan:
    """The curves of an AoA table grouped into batches of one x (aoa_plan), before any fit."""
    curves: list  # (level, run, bench, meta rows, unit names, Y units x trained steps, x)
    offsets: np.ndarray  # row of each curve's first unit in the table
    batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (x, table rows, Y) of each batch
    metric: str


def aoa_plan(table: pd.DataFrame, phen_table: pd.DataFrame, cfg: AoAConfig) -> AoAPlan:
    """Every paradigm (table) and phenomenon (phen_table) curve per run x benchmark, in batches of identical
    x: a grid of 60 runs of one schedule is a handful of batched fits."""
    metric = f"acc_{cfg.metric}"
    curves = []
    for level, t in (("phenomenon", phen_table), ("paradigm", table)):
        unit = "paradigm" if level == "paradigm" else "phenomenon"
        for (run, bench), g in t.groupby(["run", "benchmark"], sort=True):
            # units x steps matrix by factorised indices (pivot_table is slow on a whole grid)
            ui, units = pd.factorize(g[unit], sort=True)
            si, steps = pd.factorize(g["step"], sort=True)
            wide = np.full((len(units), len(steps)), np.nan)
            wide[ui, si] = g[metric].to_numpy(dtype=float)
            tok = np.zeros(len(steps))
            tok[si] = g["tokens"].to_numpy(dtype=float)
            keep = tok > 0
            meta = g.iloc[np.unique(ui, return_index=True)[1]]
            curves.append((level, run, bench, meta, np.asarray(list(units), dtype=object), wide[:, keep],
                           log_tokens(tok[keep])))
    n_rows = [len(c[5]) for c in curves]
    offsets = np.concatenate([[0], np.cumsum(n_rows)]).astype(int)
    # batch key: the x values a curve was observed at (its non-missing checkpoints)
    batches: dict[bytes, tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]] = {}
    for ci, (_l, _r, _b, _m, _n, Y, x) in enumerate(curves):
        masks = ~np.isnan(Y)
        for mask in {tuple(m) for m in masks}:
            m = np.array(mask, dtype=bool)
            if m.sum() < cfg.min_points:
                continue
            rows = np.flatnonzero((masks == m).all(axis=1))
            batches.setdefault(x[m].tobytes(), (x[m], []))[1].append((offsets[ci] + rows, Y[np.ix_(rows, m)]))
    return AoAPlan(curves, offsets, [(xm, np.concatenate([i for i, _ in parts]), np.concatenate([y for _, y in parts]))
                                     for xm, parts in batches.values()], metric)


def fit_batches(batches: list[tuple[np.ndarray, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """fit_sigmoids of each (x, Y); module-level, for a worker of the report (FigureJobs.compute)."""
    return [fit_sigmoids(x, Y) for x, Y in batches]


def aoa_table(table: pd.DataFrame, phen_table: pd.DataFrame, cfg: AoAConfig | None = None,
              fits: Optional[FitStore] = None) -> pd.DataFrame:
    """AoA, fit and forgettability per run x benchmark x paradigm (table) and phenomenon (phen_table).
    `fits`: where batches fitted before are looked up (the report keeps one beside its tables)."""
    return start_aoa_table(table, phen_table, cfg or AoAConfig(), fits or FitStore())()


def start_aoa_table(table: pd.DataFrame, phen_table: pd.DataFrame, cfg: AoAConfig, fits: FitStore,
                    compute=None) -> Callable[[], pd.DataFrame]:
    """aoa_table in two halves: now, look the batches up in `fits` and hand the others to `compute`
    (FigureJobs.compute: a worker; None: here); the function returned waits, keeps the fits and builds the
    table. With an empty store the whole computation goes to the worker, so the caller waits for nothing."""
    if compute is not None and not fits.old:
        pending = compute(_fitted_table, table, phen_table, cfg)

        def finish_there() -> pd.DataFrame:
            out, made = pending.result()
            for x, Y, fit in made:
                fits.misses += 1
                fits.keep(fits.key(x, Y, 200), fit)
            return out

        return finish_there
    plan = aoa_plan(table, phen_table, cfg)
    found = [fits.lookup(fits.key(x, Y, 200), len(Y)) for x, _rows, Y in plan.batches]
    todo = [(x, Y) for (x, _rows, Y), f in zip(plan.batches, found) if f is None]
    pending = compute(fit_batches, todo) if compute is not None and todo else None

    def finish() -> pd.DataFrame:
        new = iter(pending.result() if pending is not None else fit_batches(todo))
        fitted = [f if f is not None else fits.keep(fits.key(x, Y, 200), next(new))
                  for (x, _rows, Y), f in zip(plan.batches, found)]
        return aoa_rows(plan, fitted, cfg)

    return finish


def aoa_rows(plan: AoAPlan, fitted: list[dict[str, np.ndarray]], cfg: AoAConfig) -> pd.DataFrame:
    """The AoA table of `plan` from the fit of each of its batches."""
    offsets = plan.offsets
    out = {k: np.full(offsets[-1], np.nan) for k in ("lo", "hi", "mid", "slope", "rmse", "aoa", "best", "forget")}
    status = np.full(offsets[-1], "too_few_checkpoints", dtype=object)
    for (xm, idx, Yb), fit in zip(plan.batches, fitted):
        aoa, best, st = aoa_from_fit(xm, fit, cfg.chance, cfg.min_gain, cfg.min_rise_rmse)
        for k in _FIT_KEYS:
            out[k][idx] = fit[k]
        out["aoa"][idx], out["best"][idx], status[idx] = aoa, best, st
        out["forget"][idx] = forgettability(xm, Yb, cfg.bandwidth, cfg.min_neighbours)
    rows = []
    for ci, (level, run, bench, meta, names, Y, x) in enumerate(plan.curves):
        sl = slice(offsets[ci], offsets[ci + 1])
        finite = np.isfinite(Y)
        last = np.array([r[f][-1] if f.any() else np.nan for r, f in zip(Y, finite)])
        rows.append(pd.DataFrame({
            "run": run, **{c: meta[c].to_numpy() for c in ("model", "budget", "seed")}, "benchmark": bench,
            "level": level,
            "phenomenon": meta["phenomenon"].to_numpy() if level == "paradigm" else names,
            "paradigm": names if level == "paradigm" else "", "metric": plan.metric,
            "n_points": finite.sum(axis=1).astype(int), **{f"fit_{k}": out[k][sl] for k in _FIT_KEYS},
            "best_fitted_acc": out["best"][sl], "aoa_log10_tokens": out["aoa"][sl],
            "aoa_tokens": 10 ** out["aoa"][sl], "status": status[sl],
            "forgettability": out["forget"][sl], "final_acc": last,
        }))
    # no curve (a report on runs scored at one checkpoint): the columns still, for the report's filters
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=_AOA_COLUMNS)


_AOA_COLUMNS = ["run", "model", "budget", "seed", "benchmark", "level", "phenomenon", "paradigm", "metric", "n_points",
                "fit_lo", "fit_hi", "fit_mid", "fit_slope", "fit_rmse", "best_fitted_acc", "aoa_log10_tokens",
                "aoa_tokens", "status", "forgettability", "final_acc"]


def _fitted_table(table: pd.DataFrame, phen_table: pd.DataFrame, cfg: AoAConfig):
    """(aoa table, [(x, Y, fit) of every batch]): start_aoa_table's whole computation, in a worker."""
    plan = aoa_plan(table, phen_table, cfg)
    fitted = fit_batches([(x, Y) for x, _rows, Y in plan.batches])
    return aoa_rows(plan, fitted, cfg), [(x, Y, f) for (x, _rows, Y), f in zip(plan.batches, fitted)]


def aoa_intervals(outcomes: dict, runs: list, summary: pd.DataFrame, aoa: pd.DataFrame, table: pd.DataFrame,
                  cfg: AoAConfig, seed: int = 0, fits: Optional[FitStore] = None) -> pd.DataFrame:
    """summary (per model x budget x benchmark x phenomenon: mean AoA over seeds) with its 95 % bootstrap
    interval aoa_lo / aoa_hi (log10 tokens) and aoa_interval (docs/report.md, "Bands and intervals": the draws,
    the batched fits, "not determined"; "not acquired": no seed's own curve was). `aoa`: the per-run table, whose
    fits start the resamples' (30 batched iterations, no polish; AoA censored at the run's ends); `table`: an
    EvalSet table; `fits`: the report's FitStore, where unchanged inputs' resample fits are looked up."""
    fits = fits if fits is not None else FitStore()
    bit = MLP if cfg.metric == "mlp" else SUM
    members = table[["benchmark", "phenomenon", "paradigm"]].drop_duplicates()
    members = members.groupby(["benchmark", "phenomenon"]).paradigm.agg(set).to_dict()
    point = aoa[aoa.level == "phenomenon"].set_index(["run", "benchmark", "phenomenon"])
    B = cfg.n_boot
    out = summary.copy()
    out["aoa_lo"], out["aoa_hi"], out["aoa_interval"] = np.nan, np.nan, "not acquired"
    todo = out[np.isfinite(out.aoa_log10_tokens.astype(float))]
    info = {r.name: r for r in runs}
    groups = []  # (summary rows, phenomena, [(x, ok, sizes, per-paradigm weight, start)] per seed, key, rng)
    for (model, budget, bench), rows in todo.groupby(["model", "budget", "benchmark"], dropna=False):
        outs = sorted((o for (run, b), o in outcomes.items() if b == bench and info[run].model == model and (
            info[run].budget is None if pd.isna(budget) else info[run].budget == budget)), key=lambda o: o.run)
        phens = list(rows.phenomenon)
        seeds = []
        for o in outs:
            keep = o.tokens > 0
            x = log_tokens(o.tokens[keep].astype(float))
            f0 = point.reindex([(o.run, bench, ph) for ph in phens])[["fit_lo", "fit_hi", "fit_mid", "fit_slope"]]
            if len(x) < cfg.min_points or not np.isfinite(f0.to_numpy()).all():
                seeds = []
                break
            cols = _paradigm_columns(o)
            blocks = [[cols[p] for p in sorted(members.get((bench, ph), ())) if len(cols.get(p, ()))]
                      for ph in phens]  # paradigms by name, pairs by pair_id: not hash order
            c = o.correct[keep][:, np.concatenate([i for b in blocks for i in b])]
            ok = ((c & bit) > 0) & ((c & MISSING) == 0)  # (steps, pairs), phenomenon by phenomenon
            sizes = np.array([len(i) for b in blocks for i in b])
            weight = np.concatenate([np.full(len(b), 1 / len(b)) for b in blocks]) / sizes
            seeds.append((x, ok, sizes, weight, np.array([len(b) for b in blocks]), f0.to_numpy(dtype=float)))
        if not seeds:
            continue
        label = f"{model}|{budget}|{bench}"
        key = FitStore.key(np.array([B, seed, cfg.chance]), label, *(a for s in seeds for a in
                                                                      (s[0], np.packbits(s[1]), *s[2:])))
        groups.append((rows, phens, seeds, key, zlib.crc32(label.encode())))
    # every resample not in `fits`, by x: one batched fit each
    got = [fits.lookup(key, len(seeds) * len(phens) * B) for _rows, phens, seeds, key, _g in groups]
    batches: dict[bytes, tuple[np.ndarray, list]] = {}
    for (_rows, _phens, seeds, key, g), f in zip(groups, got):
        rng = np.random.default_rng([seed, g])
        for i, (x, ok, sizes, weight, n_par, f0) in enumerate(seeds if f is None else ()):
            Y = _resampled_curves(ok, sizes, weight, n_par, B, rng)
            batches.setdefault(x.tobytes(), (x, []))[1].append(((key, i), Y, np.repeat(f0, B, axis=0)))
    made: dict[tuple[str, int], dict] = {}
    for x, parts in batches.values():
        fit = fit_sigmoids(x, np.concatenate([Y for _k, Y, _s in parts]), polish=False, iters=30,
                           start=np.concatenate([s for _k, _Y, s in parts]))
        ends = np.cumsum([0] + [len(Y) for _k, Y, _s in parts])
        for (k, _Y, _s), a, b in zip(parts, ends[:-1], ends[1:]):
            made[k] = {c: fit[c][a:b] for c in _FIT_KEYS}
    for (rows, phens, seeds, key, g), f in zip(groups, got):
        if f is None:  # the seeds' fits in seed order
            f = fits.keep(key, {c: np.concatenate([made[key, i][c] for i in range(len(seeds))]) for c in _FIT_KEYS})
        per_seed = []  # (phenomena, B) censored AoA of each seed's resampled curves
        for i, (x, *_rest) in enumerate(seeds):
            sl = slice(i * len(phens) * B, (i + 1) * len(phens) * B)
            a, _best, st = aoa_from_fit(x, {c: f[c][sl] for c in _FIT_KEYS}, cfg.chance, cfg.min_gain,
                                        cfg.min_rise_rmse)
            per_seed.append(np.where(st == "ok", a, np.where(st == "above_halfway_at_first_checkpoint", x.min(),
                                                             x.max())).reshape(len(phens), B))
        A = np.stack(per_seed)  # (S, phenomena, B)
        S = len(A)
        draws = np.random.default_rng([seed, g, 1]).integers(S, size=(B, S))
        # draw i of resample b takes resample (b + i) of its seed: a seed drawn twice gets two pair resamples
        stat = A[draws, :, (np.arange(B)[:, None] + np.arange(S)) % B].mean(axis=1)  # (B, phenomena)
        lo, hi = np.quantile(stat, [0.025, 0.975], axis=0)
        inside = (x.min() < lo) & (hi < x.max())
        out.loc[rows.index, "aoa_lo"], out.loc[rows.index, "aoa_hi"] = lo, hi
        out.loc[rows.index, "aoa_interval"] = np.where(inside, "determined", "not determined")
    return out


def _resampled_curves(ok: np.ndarray, sizes: np.ndarray, weight: np.ndarray, n_par: np.ndarray, B: int,
                      rng: np.random.Generator) -> np.ndarray:
    """(phenomena x B, steps): B bootstrap resamples of each phenomenon's curve (the mean of its paradigms'),
    the pairs of each paradigm (consecutive columns of ok, `sizes` each) drawn with replacement, the same
    draw at every checkpoint; a paradigm's resampled hits are exact float32 counts (0/1 sums below 2^24)."""
    counts, c0 = _pair_counts(sizes, B, rng), np.cumsum(np.r_[0, sizes])
    okf, which = ok.astype(np.float32), np.repeat(np.arange(len(n_par)), n_par)
    Y = np.zeros((len(n_par), B, ok.shape[0]))
    for k, j in enumerate(which):
        Y[j] += (counts[:, c0[k]:c0[k + 1]] @ okf[:, c0[k]:c0[k + 1]].T) * weight[k]
    return Y.reshape(-1, ok.shape[0])


def _pair_counts(sizes: np.ndarray, B: int, rng: np.random.Generator) -> np.ndarray:
    """(B, pairs) float32: each pair's count in each of B resamples of its paradigm's pairs with replacement
    (a paradigm's multinomial counts, by one integer draw per pair)."""
    N = int(np.sum(sizes))
    idx = np.repeat(np.cumsum(sizes) - sizes, sizes) + (rng.random((B, N)) * np.repeat(sizes, sizes)).astype(np.int64)
    return np.bincount((idx + N * np.arange(B)[:, None]).ravel(), minlength=B * N).reshape(B, N).astype(np.float32)
