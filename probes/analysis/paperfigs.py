"""The report's curve figures, laid out as the ZhoBLiMP paper draws them (overall, Figure 5, per phenomenon, the
U gallery): seed means with the band of probes.analysis.bands, each seed a thin line. A grid report draws dozens:
margins fixed in inches (constrained layout draws twice), titles at y=1.0 (not placed by measuring tick labels).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from probes.analysis.bands import band_caption
from probes.analysis.evalset import log_tokens, parse_model_params
from probes.analysis.outputs import save_figure
from probes.analysis.scaling import budget_label, budget_order
from probes.analysis.plotting import add_line, inch_margins, layout_figure, new_figure, plot_line, token_axis, wrap_title


def model_order(df: pd.DataFrame) -> list[str]:
    return sorted(df["model"].unique(), key=lambda m: (parse_model_params(str(m)) or float("inf"), str(m)))


def pick(df: pd.DataFrame, **eq) -> pd.DataFrame:
    """Rows where each column equals its value; a NaN/NA value selects the missing ones (budget null)."""
    m = np.ones(len(df), dtype=bool)
    for col, v in eq.items():
        m &= (df[col].isna() if pd.isna(v) else df[col] == v).to_numpy(dtype=bool, na_value=False)  # NA == v: no
    return df[m]


def _colors(models: list[str]) -> dict:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return {m: cmap(0.9 * i / max(len(models) - 1, 1)) for i, m in enumerate(models)}


def draw_model_lines(ax, bands: pd.DataFrame, units: pd.DataFrame, ref: np.ndarray, colors: dict,
                     ls: str = "-", label_suffix: str = "") -> None:
    """Seed mean + band per model, and each seed (run) as a thin line of the same colour: a model's seeds
    are one Line2D broken by NaN between runs (one artist instead of one per seed: a grid figure's drawing
    time is mostly per-artist overhead)."""
    u = units.sort_values(["model", "run", "step"], kind="stable")
    u_model, u_run = u["model"].to_numpy(), u["run"].to_numpy()
    u_x, u_y = 10 ** log_tokens(u["tokens"].to_numpy(), ref), u["acc"].to_numpy(dtype=float)
    # the columns once as arrays: a pandas selection per model and panel cost more than the lines
    b = {c: bands[c].to_numpy() for c in ("model", "step", "tokens", "acc_mean", "lo", "hi", "n_seeds")}
    for model in model_order(bands):
        i = np.flatnonzero(b["model"] == model)
        i = i[np.argsort(b["step"][i], kind="stable")]
        n = int(b["n_seeds"][i].max())
        plot_line(ax, b["tokens"][i], b["acc_mean"][i], ref,
                  f"{model}{label_suffix} ({n} seed{'s' if n > 1 else ''})", colors[model],
                  band=(b["lo"][i], b["hi"][i]), ls=ls)
        rows = np.flatnonzero(u_model == model)
        runs = u_run[rows]
        breaks = np.flatnonzero(runs[1:] != runs[:-1]) + 1  # where the next run starts
        if len(breaks):
            x, y = np.insert(u_x[rows], breaks, np.nan), np.insert(u_y[rows], breaks, np.nan)
            add_line(ax, x, y, color=colors[model], lw=0.6, ls=ls, alpha=0.45)


def _finish(fig, axes, n_used: int, title: str, legend_ax, left: float, wspace: float, hspace: float,
            xticks: float = 0.3) -> None:
    """Legend below the panels, title above, and fixed margins in inches (drawn once, not measured and drawn again by
    constrained layout): `left` for the y labels, `xticks` for the bottom row's tick labels, gaps between panels."""
    for ax in list(axes.flat)[n_used:]:
        ax.set_visible(False)
    handles, labels = legend_ax.get_legend_handles_labels()
    ncol = max(min(len(labels), 4), 1)
    rows = -(-len(labels) // ncol)
    # below the panels: beside them it collides with a long title on a one-panel figure
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), fontsize=8, frameon=False, ncol=ncol)
    title = wrap_title(title, fig.get_figwidth() - 0.2, 9)
    fig.suptitle(title, fontsize=9, y=1 - 0.08 / fig.get_figheight(), va="top")
    top = 0.1 + 0.16 * (title.count("\n") + 1) + 0.25  # the title's lines, then one line of panel titles
    inch_margins(fig, left=left, right=0.15, top=top, bottom=xticks + 0.1 + 0.19 * rows, wspace=wspace, hspace=hspace)


def plot_overall(bands: pd.DataFrame, units: pd.DataFrame, path: Path, ylabel: str) -> Path:
    """Rows: benchmarks with curves; columns: corpus budgets; lines: model sizes."""
    benches, budgets = sorted(bands.benchmark.unique()), budget_order(bands)
    models = model_order(bands)
    colors = _colors(models)
    # zoomed to the data (chance included): an overall rise of 0.1 is the finding, not a sliver of [0, 1]
    ylim = (max(0.0, min(0.45, units.acc.min() - 0.05)), min(1.0, max(0.6, units.acc.max() + 0.05, bands.hi.max() + 0.02)))
    fig, axes = new_figure(max(3.6 * len(budgets) + 1.0, 7.0), 3.2 * len(benches) + 1.2, len(benches), len(budgets),
                           layout=None, sharey=True)
    for i, bench in enumerate(benches):
        ref = pick(bands, benchmark=bench).tokens.to_numpy()
        for j, budget in enumerate(budgets):
            ax = axes[i, j]
            b = pick(bands, benchmark=bench, budget=budget)
            draw_model_lines(ax, b, pick(units, benchmark=bench, budget=budget), ref, colors)
            token_axis(ax, ref, ylabel=f"{bench}: {ylabel}" if j == 0 else "")
            ax.set_xlabel("")  # said once below: the panel-wide label overlaps its neighbours
            ax.set_ylim(*ylim)
            ax.set_title(f"{bench} · corpus {budget_label(budget)}", fontsize=9, y=1.0)
    _finish(fig, axes, axes.size, f"Overall accuracy over training (mean of all paradigms; y axis zoomed); "
            "x: tokens seen (log), hollow marker = step 0\n"
            f"{band_caption(bands)}",
            axes[0, -1], left=0.95, wspace=0.12, hspace=0.75)
    return save_figure(fig, path)


def plot_all_phenomena(bands: pd.DataFrame, units: pd.DataFrame, benchmark: str, budget, path: Path,
                       ylabel: str, human: Optional[dict] = None, ncols: int = 5) -> Path:
    """The paper's Figure 5: one small panel per phenomenon (one benchmark, one budget)."""
    b = pick(bands, benchmark=benchmark, budget=budget)
    u = pick(units, benchmark=benchmark, budget=budget)
    phens = sorted(b.phenomenon.unique())
    ncols = min(ncols, len(phens))
    nrows = -(-len(phens) // ncols)
    colors = _colors(model_order(b))
    fig, axes = new_figure(max(2.7 * ncols + 0.6, 7.0), 2.3 * nrows + 1.4, nrows, ncols, layout=None, sharex=True,
                           sharey=True)
    ref = b.tokens.to_numpy()
    for ax, ph in zip(axes.flat, phens):
        draw_model_lines(ax, b[b.phenomenon == ph], u[u.phenomenon == ph], ref, colors)
        token_axis(ax, ref, ylabel="")
        ax.set_xlabel("")
        h = (human or {}).get(ph)
        if h is not None and h == h:
            ax.axhline(h, color="0.3", ls=":", lw=1.1, label="human (validation CSV)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{ph} ({int(b[b.phenomenon == ph].n_pairs.max())} pairs/seed)", fontsize=8, y=1.0)
        ax.tick_params(labelsize=7)
    fig.supylabel(ylabel, fontsize=8, x=0.08 / fig.get_figwidth())  # 0.08 in from the edge
    # the x label goes in the title: at the bottom it collides with the legend
    _finish(fig, axes, len(phens), f"{benchmark}: every phenomenon over training, corpus {budget_label(budget)} "
            f"(as ZhoBLiMP Figure 5); x: tokens seen (log), hollow marker = step 0\n{band_caption(b)}", axes.flat[0],
            left=0.75, wspace=0.12, hspace=0.35, xticks=0.25)
    return save_figure(fig, path)


def plot_budgets(bands: pd.DataFrame, units: pd.DataFrame, path: Path, ylabel: str, title: str,
                 human: Optional[float] = None, accuracy: bool = True, width: float = 3.4, height: float = 4.2) -> Path:
    """A panel per corpus budget, a line per model size (an accuracy: chance marked, y in [0, 1]). The panels,
    axes and labels are the same for every phenomenon of a report: built once per process (layout_figure)."""
    budgets = budget_order(bands)
    colors = _colors(model_order(bands))
    titles = tuple(f"corpus {budget_label(budget)}" for budget in budgets)

    def build():
        fig, axes = new_figure(max(width * len(budgets) + 1.0, 7.0), height, 1, len(budgets), layout=None, sharey=True)
        for ax, title in zip(axes.flat, titles):
            token_axis(ax, np.ones(1), ylabel=ylabel if ax is axes[0, 0] else "", chance=accuracy)
            ax.set_xlabel("")  # said once in the title: side by side the panels' labels ran into each other
            if accuracy:
                ax.set_ylim(-0.02, 1.02)
            ax.set_title(title, fontsize=9, y=1.0)
        return fig, axes

    fig, axes = layout_figure(("plot_budgets", titles, ylabel, accuracy, width, height), build)
    ref = bands.tokens.to_numpy()
    for ax, budget in zip(axes.flat, budgets):
        draw_model_lines(ax, pick(bands, budget=budget), pick(units, budget=budget), ref, colors)
        if human is not None and human == human:
            ax.axhline(human, color="0.3", ls=":", lw=1.1, label="human (validation CSV)")
    _finish(fig, axes, len(budgets), title, axes[0, 0], left=0.95, wspace=0.12, hspace=0.0)
    return save_figure(fig, path)


MAX_PANELS = 12  # U gallery panels: the deepest U's (the report's U table lists every one)


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
