"""Small pictures of the accepted U-shapes (the MAX_PANELS deepest), one panel per U, numbered as the report's
U table, with its peak, trough and recovery marked and its evidence in the title."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from probes.analysis.bands import band_caption
from probes.analysis.outputs import save_figure
from probes.analysis.paperfigs import draw_model_lines, pick
from probes.analysis.plotting import new_figure, token_axis
from probes.analysis.scaling import budget_label

MAX_PANELS = 12


def plot_u_gallery(us: pd.DataFrame, bands: pd.DataFrame, units: pd.DataFrame, path: Path, ylabel: str) -> Path:
    """us: accepted U rows with a `u_id` column, deepest first; bands/units: the curves (phenomenon and
    paradigm rows, `paradigm` empty for phenomena) of probes.analysis.bands."""
    us = us.head(MAX_PANELS)
    ncols = min(4, len(us))
    nrows = -(-len(us) // ncols)
    fig, axes = new_figure(3.2 * ncols, 2.7 * nrows + 0.5, nrows, ncols, sharey=True)
    shown = []
    for ax, u in zip(axes.flat, us.to_dict("records")):
        sel = dict(model=u["model"], budget=u["budget"], benchmark=u["benchmark"], phenomenon=u["phenomenon"],
                   paradigm=u["paradigm"] if isinstance(u["paradigm"], str) else "")
        b, n = pick(bands, **sel), pick(units, **sel)
        shown.append(b)
        ref = b.tokens.to_numpy()
        draw_model_lines(ax, b, n, ref, {u["model"]: "C0"})
        token_axis(ax, ref, ylabel="")
        ax.set_xlabel("")
        for k, mk in (("peak", "^"), ("trough", "v"), ("recovery", "o")):
            t = u[f"{k}_tokens"]
            y = u[f"{k}_acc"]
            ax.plot([t if t > 0 else ref[ref > 0].min() / 10], [y], ls="none", marker=mk, ms=7, color="C3")
        ax.set_ylim(-0.02, 1.02)
        name = u["paradigm"] if isinstance(u["paradigm"], str) and u["paradigm"] else u["phenomenon"]
        ax.set_title(f"#{u['u_id']} {name}\n{u['model']} · {budget_label(u['budget'])}: depth {u['u_depth']:.2f} "
                     f"> noise {u['noise_threshold']:.2f}, seeds {u['seed_agreement']:.0%}", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(us):]:
        ax.set_visible(False)
    fig.supylabel(ylabel, fontsize=8)
    fig.supxlabel("tokens seen (log); ▲ peak ▼ trough ● recovery", fontsize=8)
    cap = band_caption(pd.concat(shown)) if shown else ""
    fig.suptitle(f"Accepted U-shapes (numbered as the report's table)\n{cap}", fontsize=9)
    return save_figure(fig, path)


def number_us(acc: pd.DataFrame) -> pd.DataFrame:
    """Accepted U's deepest first, with u_id 1, 2, ... (the gallery's panel numbers)."""
    acc = acc.sort_values("u_depth", ascending=False, ignore_index=True).copy()
    acc.insert(0, "u_id", np.arange(1, len(acc) + 1))
    acc["in_gallery"] = acc["u_id"] <= MAX_PANELS
    return acc
