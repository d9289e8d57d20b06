"""How the report's figures are drawn fast (probes/analysis/plotting.py, outputs.save_figure): a layout built
once per process and reused, lines added without plot(), PNGs written by Pillow. Each must give the very
pixels of matplotlib's own way, which is what the report drew before."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from probes.analysis import plotting
from probes.analysis.bands import seed_bands, unit_curves
from probes.analysis.evalset import load_runs
from probes.analysis.outputs import save_figure
from probes.analysis.paperfigs import plot_budgets
from probes.analysis.plotting import add_line, new_figure
from probes.analysis.regions import plot_regions
from synthetic import RunSpec, log_spaced_steps, sigmoid_curve, write_run


def pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """Two budgets x two seeds, four paradigms in two phenomena: bands, seed curves and region rows."""
    root = tmp_path_factory.mktemp("grid")
    rng = np.random.default_rng(2)
    steps = log_spaced_steps(12, 2000)
    runs = []
    for budget in (10**5, 10**6):
        x = np.log10(np.maximum(steps, 1) * budget / 2000)
        curves = np.stack([sigmoid_curve(x, 0.5, 0.9 - 0.1 * p, 3.0 + 0.3 * p, 2.0) for p in range(4)], axis=1)
        for seed in (1, 2):
            d = write_run(root / f"m_{budget}_s{seed}", RunSpec(model="pythia-14m", budget=budget, seed=seed,
                                                                 tokens_per_step=budget // 2000, steps=list(steps),
                                                                 benchmark="synth"),
                          curves, [f"par{p}" for p in range(4)], ["ph_a", "ph_a", "ph_b", "ph_b"], 40, rng)
            runs.append(d)
    ev = load_runs(runs)
    u = unit_curves(ev.table, "acc_mlp")
    return ev, u, seed_bands(u, ["model", "budget", "benchmark", "phenomenon", "step"])


def test_a_reused_layout_draws_a_fresh_figures_pixels(grid, tmp_path):
    # phenomenon A, then B and A again on the same figure (one worker draws them all): the pixels of B
    # and A drawn on a figure of their own, human line included (an artist that must go again)
    ev, u, b = grid
    plotting._LAYOUTS.clear()
    args = {ph: (b[b.phenomenon == ph], u[u.phenomenon == ph]) for ph in ("ph_a", "ph_b")}
    reused = [plot_budgets(*args[ph], tmp_path / f"r{i}.png", "acc", f"synth · {ph}", 0.9 if ph == "ph_a" else None)
              for i, ph in enumerate(("ph_a", "ph_b", "ph_a"))]
    assert len(plotting._LAYOUTS) == 1
    fresh = []
    for ph, human in (("ph_b", None), ("ph_a", 0.9)):
        plotting._LAYOUTS.clear()
        fresh.append(plot_budgets(*args[ph], tmp_path / f"f_{ph}.png", "acc", f"synth · {ph}", human))
    assert np.array_equal(pixels(reused[1]), pixels(fresh[0]))
    assert np.array_equal(pixels(reused[2]), pixels(fresh[1]))
    assert not np.array_equal(pixels(reused[0]), pixels(reused[1]))


def test_a_reused_region_layout_with_u_windows(grid, tmp_path):
    # the region figure: shaded U windows (patches) and the autoscaled delta panel of the figure before
    # must not show on the next one
    ev, _, _ = grid
    t = ev.table
    # a's deltas lie far above b's: b's panel must not keep a's data limits
    a = t[(t.run == t.run.iloc[0]) & (t.paradigm == "par0")].assign(delta_total=lambda d: d.delta_total + 40)
    b = t[(t.run == t.run.iloc[0]) & (t.paradigm == "par3")]
    us = pd.DataFrame({"peak_tokens": [a.tokens.iloc[3]], "trough_tokens": [a.tokens.iloc[5]],
                       "recovery_tokens": [a.tokens.iloc[8]]})
    plotting._LAYOUTS.clear()
    plot_regions(a, "a", tmp_path / "a.png", us)
    ((_fig, axes, _),) = plotting._LAYOUTS.values()
    assert axes[0, 0].get_title().startswith("a; U windows shaded")
    reused = plot_regions(b, "b", tmp_path / "b.png")
    assert axes[0, 0].get_title() == "b"  # nothing shaded, nothing said (issue 36 item 8)
    plot_regions(b, "b", tmp_path / "b.png", us.iloc[:0])  # the report's selection with no U of this paradigm
    assert axes[0, 0].get_title() == "b"
    plotting._LAYOUTS.clear()
    fresh = plot_regions(b, "b", tmp_path / "b_fresh.png")
    assert np.array_equal(pixels(reused), pixels(fresh))


def test_add_line_is_plot_and_save_figure_is_savefig(tmp_path):
    x = np.geomspace(1e2, 1e9, 30)
    y = 0.5 + 0.4 / (1 + np.exp(-(np.log10(x) - 5)))
    styles = [dict(color="C2", lw=1.6, ls="-", marker="o", ms=3, label="line"),
              dict(ls="none", marker="o", ms=7, mfc="white", mec="C1", mew=1.5),
              dict(color="C3", lw=0.6, ls="--", alpha=0.45)]
    figs = []
    for direct in (False, True):
        fig, axes = new_figure(5, 3, layout=None)
        ax = axes[0, 0]
        ax.set_xscale("log")
        for s in styles:
            (add_line(ax, x, y - 0.1 * len(ax.lines), **s) if direct else ax.plot(x, y - 0.1 * len(ax.lines), **s))
        ax.legend()
        figs.append(fig)
    mpl = io.BytesIO()
    figs[0].savefig(mpl, format="png", dpi=110)
    ours = save_figure(figs[1], tmp_path / "ours.png")
    assert np.array_equal(np.asarray(Image.open(mpl).convert("RGB")), pixels(ours))
    assert Image.open(ours).mode == "RGB"  # opaque: no alpha channel written


@pytest.mark.parametrize("which", ["overall", "heatmap"])
def test_a_long_title_stays_inside_its_figure(which):
    """The overall curve's and the scaling heatmap's titles were cut at both edges ("erall accuracy over
    training", "final accuracy per phenomer"): each is broken into lines of the figure's width."""
    from probes.analysis.paperfigs import _finish
    from probes.analysis.scaling import heatmap

    if which == "overall":  # one budget: plot_overall's narrowest figure, with its title
        fig, axes = new_figure(7.0, 4.4, 1, 1, layout=None)
        add_line(axes[0, 0], np.array([1.0, 2.0]), np.array([0.5, 0.6]), color="C0", label="m")
        _finish(fig, axes, 1, "Overall accuracy over training (mean of all paradigms; y axis zoomed); x: tokens seen "
                "(log), hollow marker = step 0\n95 % t-interval over 3 seeds (mean ± t·s/√n)", axes[0, 0],
                left=0.95, wspace=0.12, hspace=0.75)
    else:  # one model, one budget: plot_grid_phenomena's narrowest figure
        fig, axes = new_figure(2.5 + 0.75, 1.5 + 0.32 * 12)
        heatmap(axes[0, 0], np.full((12, 1), 0.7), [f"phenomenon_{i}" for i in range(12)], ["tiny"],
                "zhoblimp_all: final accuracy per phenomenon (%)", "model", "phenomenon")
    fig.canvas.draw()
    box = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (box, fig.bbox)
