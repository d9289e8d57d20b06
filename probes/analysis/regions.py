"""Regions over training: each paradigm's generic region deltas (summed lp good - lp bad, mean over pairs), and per U
which region's delta moves first from peak to recovery (phrase regions: probes.analysis.casestudy)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from probes.analysis.evalset import REGIONS
from probes.analysis.outputs import save_figure
from probes.analysis.plotting import accuracy_over_deltas, layout_figure, plot_line

REGION_COLORS = {"prefix": "tab:gray", "critical": "tab:red", "suffix": "tab:blue", "total": "black"}


@dataclass
class RegionConfig:
    move_fraction: float = 0.5  # share of a region's largest change in the U window that counts as "moved"
    min_move: float = 0.1  # nats: a region changing less than this inside the window did not move
    max_plots: int = 8  # region figures per report (paradigms with U's first; ~1 s each to draw)


def group_region_curves(table: pd.DataFrame) -> pd.DataFrame:
    """Seed means of accuracy and region deltas per model x budget x benchmark x unit (paradigm or phenomenon) x step."""
    unit = ["phenomenon", "paradigm"] if "paradigm" in table.columns else ["phenomenon"]
    cols = ["acc_mlp", "acc_sum", "delta_total", *[f"delta_{r}" for r in REGIONS]]
    g = table.groupby(["model", "budget", "benchmark", *unit, "step"], dropna=False, sort=True)
    out = g[cols].mean()
    out["tokens"] = g["tokens"].mean()
    return out.reset_index()


def first_mover(curve: pd.DataFrame, peak_step: int, end_step: int, cfg: RegionConfig) -> dict:
    """Which region's delta moves first inside [peak_step, end_step] of one unit's curve."""
    w = curve[(curve.step >= peak_step) & (curve.step <= end_step)].sort_values("step")
    res: dict = {}
    onsets = {}
    for r in REGIONS:
        d = w[f"delta_{r}"].to_numpy(dtype=float)
        if len(d) < 2 or not np.isfinite(d).all():
            res[f"{r}_onset_tokens"], res[f"{r}_max_change"] = np.nan, np.nan
            continue
        change = np.abs(d - d[0])
        biggest = float(change.max())
        res[f"{r}_max_change"] = biggest
        if biggest < cfg.min_move:
            res[f"{r}_onset_tokens"] = np.nan
            continue
        i = int(np.argmax(change >= cfg.move_fraction * biggest))
        onsets[r] = float(w["tokens"].iloc[i])
        res[f"{r}_onset_tokens"] = onsets[r]
    if not onsets:
        res["moves_first"] = "none (no region data)" if not any(
            np.isfinite(res.get(f"{r}_max_change", np.nan)) for r in REGIONS) else "none (below min_move)"
    else:
        first = min(onsets.values())
        res["moves_first"] = "+".join(r for r in REGIONS if onsets.get(r) == first)
    return res


def _positions(curves: pd.DataFrame, keys: list[str]) -> dict[tuple, np.ndarray]:
    k = curves[keys].assign(budget=pd.to_numeric(curves["budget"]).fillna(-1).astype("int64"))
    return {key if isinstance(key, tuple) else (key,): idx for key, idx in k.groupby(keys, sort=False).indices.items()}


def u_region_table(ushapes: pd.DataFrame, par_curves: pd.DataFrame, phen_curves: pd.DataFrame,
                   cfg: RegionConfig | None = None) -> pd.DataFrame:
    """For every accepted U: the region whose delta moves first, and each region's onset."""
    cfg = cfg or RegionConfig()
    rows = []
    # row positions per curve, found once: a boolean mask per U over a grid's 330k rows took seconds
    keys = {"paradigm": ["model", "budget", "benchmark", "phenomenon", "paradigm"],
            "phenomenon": ["model", "budget", "benchmark", "phenomenon"]}
    where = {level: _positions(curves, keys[level])
             for level, curves in (("paradigm", par_curves), ("phenomenon", phen_curves))}
    for _, u in ushapes[ushapes.accepted].iterrows():
        level = "paradigm" if u.level == "paradigm" else "phenomenon"
        curves = par_curves if level == "paradigm" else phen_curves
        # a whole-corpus run (no budget) as a key that equals itself, as _positions makes it
        key = tuple((-1 if pd.isna(u[k]) else int(u[k])) if k == "budget" else u[k] for k in keys[level])
        sel = where[level].get(key, np.arange(0))
        res = first_mover(curves.iloc[sel], int(u.peak_step), int(u.recovery_step), cfg)
        rows.append({k: u[k] for k in ("model", "budget", "benchmark", "level", "phenomenon", "paradigm",
                                       "kind", "peak_tokens", "trough_tokens", "recovery_tokens")} | res)
    return pd.DataFrame(rows)


def plot_regions(curve: pd.DataFrame, title: str, path, ushapes: pd.DataFrame | None = None, metric: str = "acc_mlp"):
    """Accuracy (top) and mean region deltas (bottom) against tokens, U windows shaded. The axes are
    built once per process for all such figures of a report (plotting.layout_figure)."""
    c = curve.sort_values("step")
    tok = c["tokens"].to_numpy()
    step0 = bool((tok <= 0).any())  # the x label says where step 0 is drawn

    fig, axes = layout_figure(("plot_regions", metric, step0), partial(
        accuracy_over_deltas, tok, np.array([0.0 if step0 else 1.0]), metric,
        "Δ summed log-prob of the region\n(good − bad), mean over pairs, nats", 6.0, 0.11, 0.92))
    top, bottom = axes[:, 0]
    plot_line(top, tok, c[metric].to_numpy(), tok, "accuracy", "tab:green")
    for r in (*REGIONS, "total"):
        y = c[f"delta_{r}"].to_numpy(dtype=float)
        if np.isfinite(y).any():
            plot_line(bottom, tok, y, tok, f"{r}" if r != "total" else "whole sentence", REGION_COLORS[r],
                      lw=1.2 if r == "total" else 1.6)
    bottom.legend(fontsize=8, loc="best", title="region", title_fontsize=8)
    if ushapes is not None:
        pos = tok[tok > 0]
        floor = pos.min() / 10 if len(pos) else 1.0
        for _, u in ushapes.iterrows():
            lo, hi = max(u.peak_tokens, floor), max(u.recovery_tokens, floor)
            for ax in (top, bottom):
                ax.axvspan(lo, hi, color="orange", alpha=0.12, lw=0)
                ax.axvline(max(u.trough_tokens, floor), color="orange", lw=1, ls=":")
    shaded = ushapes is not None and len(ushapes) > 0
    top.set_title(title + ("; U windows shaded (peak to recovery; dotted: trough)" if shaded else ""), fontsize=10, y=1.0)
    return save_figure(fig, path)
