"""Plot helpers every figure of the suite draws with (`probes curves`, `probes report`, the families' figures), so
their axes look and read the same: a pyplot-free Figure, the log-token axis with step 0 and chance, bands, legends."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np

from probes.analysis.evalset import log_tokens
from probes.analysis.outputs import save_figure, write_csv

CHANCE = 0.5


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(s)).strip("_") or "unnamed"


def new_figure(width: float = 7.5, height: float = 4.5, nrows: int = 1, ncols: int = 1,
               layout: str | None = "constrained", **kw):
    """A Figure with an Agg canvas, without pyplot's global state. layout=None for figures drawn by the dozen whose
    margins are known: constrained layout draws every figure twice (once to measure)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def wrap_title(text: str, width_in: float, fontsize: float) -> str:
    """`text` broken into lines that fit `width_in` inches at `fontsize` points (a character ~0.6 em at most):
    matplotlib centres a title without breaking it, and one wider than its figure was cut at both edges."""
    import textwrap

    per_line = max(int(width_in * 72 / (0.6 * fontsize)), 12)
    return "\n".join(textwrap.fill(line, per_line) for line in text.split("\n"))


_LAYOUTS: dict = {}  # layout key -> (figure, axes, the artists its build made): figures kept for reuse


def layout_figure(key, build):
    """(fig, axes) of the layout `key` (hashable: everything build() sets up, which must not depend on the data):
    made by build() once per process, later the same figure with every artist added since removed. Creating axes
    and ticks is half of drawing a small-multiples figure, and a report draws dozens of one layout."""
    got = _LAYOUTS.get(key)
    if got is None:
        fig, axes = build()
        static = {ax: (set(_added(ax)), ax.get_legend()) for ax in fig.axes}
        _LAYOUTS[key] = (fig, axes, static)
        return fig, axes
    fig, axes, static = got
    for ax in fig.axes:
        keep, legend = static[ax]
        for artist in _added(ax):
            if artist not in keep:
                artist.remove()
        if ax.get_legend() is not None and ax.get_legend() is not legend:
            ax.get_legend().remove()
        ax.relim()  # the data limits of what is left: the next data's alone, as in a new figure
    for legend in list(fig.legends):
        legend.remove()
    return fig, axes


def _added(ax) -> list:
    return [*ax.lines, *ax.collections, *ax.patches, *ax.texts, *ax.images]


def inch_margins(fig, left: float, right: float, top: float, bottom: float, wspace: float = 0.0,
                 hspace: float = 0.0) -> None:
    """Place a layout=None figure's grid of axes by margins and gaps in inches (what the labels need),
    so a figure of any size keeps the same room for its texts."""
    w, h = fig.get_size_inches()
    nrows, ncols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    aw = (w - left - right - (ncols - 1) * wspace) / ncols
    ah = (h - top - bottom - (nrows - 1) * hspace) / nrows
    fig.subplots_adjust(left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h,
                        wspace=wspace / aw, hspace=hspace / ah)


def human_tokens(v: float) -> str:
    """1e6 -> '1M', 3e9 -> '3B'; the token counts of the x axes."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:g}{unit}"
    return f"{v:g}"


def accuracy_label(metric: str = "acc_mlp") -> str:
    """The y label of an accuracy curve, with the scoring rule spelt out: a linguist reads "MLP" as a
    multilayer perceptron, not as the mean log-prob per token that decides each pair."""
    if metric == "acc_mlp":
        return "accuracy (MLP: mean log-prob\nper token, good > bad)"
    return "accuracy (sum-LP: summed\nlog-prob, good > bad)"


def token_axis(ax, all_tokens: np.ndarray, ylabel: str = accuracy_label(), chance: bool = True) -> None:
    """Log-token x axis with the step-0 position explained, chance line, labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_xscale("log")
    # Plain "10M"-style labels and no minor ticks: mathtext 10^x labels and hundreds of minor
    # ticks made drawing a grid report's figures take minutes.
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_tokens(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    pos = np.asarray(all_tokens)[np.asarray(all_tokens) > 0]
    label = "tokens seen (log scale)"
    if len(pos) < len(all_tokens):
        label += "; hollow marker = step 0, drawn 1 decade left"
    ax.set_xlabel(label)
    ax.set_ylabel(ylabel)
    if chance:
        ax.axhline(CHANCE, color="0.4", lw=1, ls="--", zorder=0)
        ax.text(0.995, CHANCE, "chance ", transform=ax.get_yaxis_transform(), va="bottom",
                ha="right", fontsize=8, color="0.35")
    ax.grid(True, which="major", alpha=0.3)


def accuracy_over_deltas(tok: np.ndarray, delta_tok: np.ndarray, metric: str, delta_label: str, height: float,
                         left: float, top: float):
    """(fig, axes: top and bottom in a column): accuracy over the regions' Δ on one log-token axis, the regions' and the case
    study's figure; `delta_tok`: the bottom axis' tokens (where step 0 is said)."""
    fig, axes = new_figure(7.5, height, 2, 1, layout=None, sharex=True)
    fig.subplots_adjust(left=left, right=0.97, bottom=0.09, top=top, hspace=0.08)
    upper, lower = axes[0, 0], axes[1, 0]
    token_axis(upper, tok, ylabel=accuracy_label(metric))
    upper.set_ylim(-0.02, 1.02)
    upper.set_xlabel("")
    token_axis(lower, delta_tok, ylabel=delta_label, chance=False)
    lower.axhline(0, color="0.4", lw=1, ls="--", zorder=0)
    return fig, axes


def add_line(ax, x: np.ndarray, y: np.ndarray, **style):
    """ax.plot(x, y, **style) for float arrays and a style given in full: the Line2D made and added
    directly, without plot()'s argument parsing and property cycling (a fifth of drawing a figure of
    many lines; the same pixels: tests/test_figures.py)."""
    from matplotlib.lines import Line2D

    line = ax.add_line(Line2D(x, y, **style))
    ax.autoscale(enable=None)  # as plot() does: the view is recomputed from the data when drawn
    return line


def draw_baseline(ax, tokens, y, ref, color, label: Optional[str] = None, lw: float = 1.2) -> None:
    """A random-guess baseline: dashed, no markers, so it never reads as a learning curve."""
    x = 10 ** log_tokens(np.asarray(tokens), np.asarray(ref))
    order = np.argsort(x, kind="stable")
    ax.plot(x[order], np.asarray(y, dtype=float)[order], color=color, lw=lw, ls="--", label=label)


def plot_line(ax, tokens: np.ndarray, y: np.ndarray, ref_tokens: np.ndarray, label: str, color,
              band: Optional[tuple[np.ndarray, np.ndarray]] = None, lw: float = 1.6, ls: str = "-") -> None:
    x = 10 ** log_tokens(tokens, ref_tokens)
    order = np.argsort(x, kind="stable")
    x, y = x[order], np.asarray(y, dtype=float)[order]
    add_line(ax, x, y, color=color, lw=lw, ls=ls, marker="o", ms=3, label=label)
    init = np.asarray(tokens)[order] == 0
    if init.any():
        add_line(ax, x[init], y[init], ls="none", marker="o", ms=7, mfc="white", mec=color, mew=1.5)
    if band is not None:
        lo, hi = (np.asarray(b, dtype=float)[order] for b in band)
        if np.isfinite(lo).all() and np.isfinite(hi).all() and np.isfinite(x).all():
            # the band's polygon as fill_between makes it, without its per-call masking and splitting
            from matplotlib.collections import PolyCollection

            verts = np.concatenate([np.column_stack([x, hi]), np.column_stack([x[::-1], lo[::-1]])])
            # its data limits from its vertices, as add_collection would take them, without add_collection's
            # autoscaling of the view on every call (a tenth of drawing a figure of many bands)
            ax.add_collection(PolyCollection([verts], facecolors=color, alpha=0.18, lw=0, zorder=1), autolim=False)
            ax.update_datalim(verts)
        else:  # gaps: fill_between splits the band there
            ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)


def colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def finish_legend(ax, n: int, title: Optional[str] = None) -> None:
    if n == 0:
        return
    if n <= 6:
        ax.legend(fontsize=8, loc="best", title=title, title_fontsize=8)
    else:  # many lines: outside on the right so the curves stay visible
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title=title,
                  title_fontsize=8, ncol=1 if n <= 24 else 2, frameon=False)


def short_label(label: str, limit: int = 40) -> str:
    """A legend label cut to `limit` characters (long paradigm names push the curves aside)."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


def write_run_figures(table, out, name: str, sort: list, draw, ylabel: str, title: str) -> list:
    """`<out>/<name>.csv` (the tidy table) and per run one figure `<out>/plots/<name>_<run>.png`: the
    probes-curves view of a probe family (ELAGENT tasks, lm-eval tasks). draw(ax, run_rows, ref) -> lines."""
    out = Path(out)
    written = [write_csv(out / f"{name}.csv", table.sort_values(sort))]
    for run, df in table.groupby("run"):
        ref = df["tokens"].to_numpy()
        fig, axes = new_figure(8.5, 4.6)
        n = draw(axes[0, 0], df, ref)
        token_axis(axes[0, 0], ref, ylabel=ylabel, chance=False)
        axes[0, 0].set_ylim(-0.02, 1.02)
        axes[0, 0].set_title(title.format(run=run), fontsize=10)
        finish_legend(axes[0, 0], n)
        written.append(save_figure(fig, out / "plots" / f"{name}_{run}.png"))
    return written
