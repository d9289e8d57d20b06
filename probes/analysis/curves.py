"""`python -m probes curves RUN_DIR... --out DIR`: tidy accuracy table, learning-curve PNGs, U list.

Outputs under DIR:
    curves.csv / curves.parquet      one row per run x step x benchmark x paradigm (acc_mlp, acc_sum)
    phenomena.csv / .parquet         the same per phenomenon (mean over its paradigms)
    ushapes.csv                      U-shape candidates and verdicts by the report's rule (runs of one
                                     model x budget are its seeds; probes.analysis.ushape.find_u_shapes_in_runs);
                                     only rows with accepted=True are U-shapes
    problems.txt                     missing checkpoints / benchmarks (only when there are any)
    plots/<benchmark>/<phenomenon>.png   x = tokens seen (log); lines per paradigm (one run) or per run
    plots/<benchmark>/overview.png       one line per phenomenon; one panel per model x budget
    .curves-files                    what it wrote (outputs.py's rule: a file of the user's there is refused)
Step 0 (no tokens seen) is drawn one decade left of the first trained checkpoint, as a hollow
marker, and the x label says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from probes.analysis.evalset import EvalInputError, EvalSet, load_runs
from probes.analysis.outputs import check_owned_output, save_figure, staged_output, write_csv, write_table, write_text
from probes.analysis.plotting import accuracy_label, colors, finish_legend, new_figure, plot_line, safe_name, short_label, token_axis
from probes.analysis.ushape import U_LEVELS, UShapeConfig, count_text, curve_benchmarks, find_u_shapes_in_runs, search_config
from probes.families import families
from train.errors import UserError

TIDY_COLUMNS = ["run", "model", "budget", "seed", "step", "tokens", "benchmark", "phenomenon",
                "paradigm", "n_pairs", "acc_mlp", "acc_sum"]
GROUP_RUN = ["run", "model", "budget", "seed"]
# its entries in --out and their list; a probe family's <name>.csv is checked as it is written
OWNED = (("curves.csv", "curves.parquet", "phenomena.csv", "phenomena.parquet", "ushapes.csv", "problems.txt",
          "plots", ".curves-files"), ".curves-files")


def phenomenon_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per phenomenon: the mean of its paradigms' accuracies (each paradigm weighs the same, as in
    BLiMP/ZhoBLiMP reporting), n_pairs summed, n_paradigms counted."""
    keys = [*GROUP_RUN, "step", "tokens", "benchmark", "phenomenon"]
    cols = [c for c in table.columns if c.startswith(("acc_", "delta_"))]
    g = table.groupby(keys, dropna=False, sort=True)
    out = g[cols].mean()
    out["n_pairs"] = g["n_pairs"].sum()
    out["n_paradigms"] = g["paradigm"].nunique()
    return out.reset_index()


def plot_phenomenon(table: pd.DataFrame, phen_table: pd.DataFrame, benchmark: str, phenomenon: str,
                    path: Path, metric: str = "acc_mlp") -> Path:
    sub = table[(table.benchmark == benchmark) & (table.phenomenon == phenomenon)]
    ref = table.loc[table.benchmark == benchmark, "tokens"].to_numpy()
    fig, axes = new_figure()
    ax = axes[0, 0]
    runs = sub["run"].unique()
    if len(runs) == 1:  # one run: every paradigm of the phenomenon
        groups = list(sub.groupby("paradigm", sort=True))
        legend_title = "paradigm"
    else:  # many runs: the phenomenon mean of each run
        ph = phen_table[(phen_table.benchmark == benchmark) & (phen_table.phenomenon == phenomenon)]
        groups = list(ph.groupby("run", sort=True))
        legend_title = "run"
    for (name, cur), c in zip(groups, colors(len(groups))):
        plot_line(ax, cur["tokens"].to_numpy(), cur[metric].to_numpy(), ref, short_label(str(name)), c)
    token_axis(ax, ref, ylabel=accuracy_label(metric))
    ax.set_ylim(-0.02, 1.02)
    who = f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs"
    ax.set_title(f"{benchmark} · {phenomenon} ({who})", fontsize=10)
    finish_legend(ax, len(groups), legend_title)
    return save_figure(fig, path)


def plot_overview(phen_table: pd.DataFrame, benchmark: str, path: Path, metric: str = "acc_mlp") -> Path:
    """One panel per model x budget (seeds averaged), one line per phenomenon."""
    sub = phen_table[phen_table.benchmark == benchmark].copy()
    sub["budget_s"] = sub["budget"].astype("string").fillna("full")
    panels = list(sub.groupby(["model", "budget_s"], sort=True))
    ncols = min(3, len(panels))
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = new_figure(5.2 * ncols + 2.0, 3.6 * nrows, nrows, ncols, sharey=True)
    ref = sub["tokens"].to_numpy()
    phens = sorted(sub["phenomenon"].unique())
    cmap = dict(zip(phens, colors(len(phens))))
    for ax, ((model, budget), cur) in zip(axes.flat, panels):
        for ph in phens:
            c = cur[cur.phenomenon == ph].groupby("step").agg(tokens=("tokens", "mean"), y=(metric, "mean"))
            if len(c):
                plot_line(ax, c["tokens"].to_numpy(), c["y"].to_numpy(), ref, short_label(ph, 28), cmap[ph], lw=1.3)
        token_axis(ax, ref, ylabel=accuracy_label(metric))
        n_seeds = cur["run"].nunique()
        ax.set_title(f"{model}, budget {budget} ({n_seeds} run{'s' if n_seeds > 1 else ''})", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7, title="phenomenon",
               title_fontsize=8, frameon=False, ncol=1 if len(phens) <= 24 else 2)
    fig.suptitle(f"{benchmark}: all phenomena", fontsize=11)
    return save_figure(fig, path)


def write_curves(ev: EvalSet, out: Path, delta: float = UShapeConfig.delta,
                 metric: str = "acc_mlp") -> dict[str, list]:
    """Tables and plots under `out`; returns the paths written ("tables", "plots") and what one seed
    can show about U-shapes ("notes", see probes.analysis.ushape.thin_note)."""
    out.mkdir(parents=True, exist_ok=True)
    table = ev.table
    phen = phenomenon_table(table)
    written: dict[str, list] = {"tables": [], "plots": []}
    written["tables"] += write_table(out / "curves", table[TIDY_COLUMNS])
    written["tables"] += write_table(out / "phenomena", phen)
    # The same rule as `probes report` (noise threshold, paired bootstrap, seeds, minimum pairs with
    # one seed): a list of every geometric dip of a 10-pair curve is noise, not U-shapes. And the report's
    # search (its levels, curve benchmarks and per-curve level for FALSE_U_BUDGET): a run's
    # end-of-run curves and a report of that run answer "is there a U?" alike
    evidence: list[str] = []
    cfg = search_config(ev, UShapeConfig(delta=delta, metric=metric.removeprefix("acc_")))[1]
    ev_c = dataclasses.replace(ev, outcomes={k: v for k, v in ev.outcomes.items() if k[1] in curve_benchmarks(table)})
    us, u_notes = find_u_shapes_in_runs(ev_c, cfg, levels=U_LEVELS, evidence=evidence)
    written["tables"].append(write_csv(out / "ushapes.csv", us))
    written["notes"] = evidence
    problems = list(ev.problems) + u_notes
    if problems:
        written["tables"].append(write_text(out / "problems.txt", "\n".join(problems) + "\n"))
    for bench in sorted(table.benchmark.unique()):
        bdir = out / "plots" / safe_name(bench)
        for ph in sorted(table.loc[table.benchmark == bench, "phenomenon"].unique()):
            written["plots"].append(plot_phenomenon(table, phen, bench, ph, bdir / f"{safe_name(ph)}.png", metric))
        written["plots"].append(plot_overview(phen, bench, bdir / "overview.png", metric))
    return written


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m probes curves",
                                description="Learning curves from the per-pair evals of run directories.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--delta", type=float, default=UShapeConfig.delta,
                   help=f"U-shape threshold: minimum drop and recovery in accuracy (default {UShapeConfig.delta},"
                        " as in probes report)")
    p.add_argument("--metric", choices=["mlp", "sum"], default="mlp",
                   help="accuracy used for plots and U's: mean log-prob per token (mlp) or sum-LP")
    return p


def main(argv: Optional[Sequence[str]] = None, own: bool = False) -> int:
    """own: --out is the run's own curves/ (CurvesHook, score-run), which this project alone writes."""
    args = build_parser().parse_args(argv)
    try:
        if not own:
            check_owned_output(args.out, *OWNED)
        ev = load_runs(args.run_dirs)
    except EvalInputError as exc:  # a run of other probe families only still gets their curves
        ev, failed = None, exc
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the other probe families' curves, where the runs have their files
    tables = [(fam, fam.load("table")(args.run_dirs)) for fam in families() if fam.table and fam.curves]
    tables = [(fam, t) for fam, t in tables if len(t)]
    if ev is None and not tables:
        print(f"error: {failed}", file=sys.stderr)
        return 2
    for msg in ev.problems if ev is not None else ():
        print(f"warning: {msg}", file=sys.stderr)
    try:
        with staged_output(args.out, *OWNED, check=not own) as stage:
            plots = [p for fam, t in tables for p in fam.load("curves")(t, stage) if p.suffix == ".png"]
            written = write_curves(ev, stage, args.delta, f"acc_{args.metric}") if ev is not None else {}
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ev is None:
        print(f"no minimal-pair curves ({failed}); plots: {args.out} ({len(plots)} PNG files)")
        return 0
    written["plots"] += plots
    us = pd.read_csv(args.out / "ushapes.csv")
    # e.g. "1 learning U, 0 chance dips (...), 1 dip peaking at step 0 (...) at delta=0.05 (of 31 candidates:
    # 25 too_thin, 4 below_noise)"
    rest = us.loc[~us["accepted"].astype(bool), "verdict"].value_counts() if len(us) else pd.Series(dtype=int)
    why = ", ".join(f"{n} {v}" for v, n in rest.items())
    print(f"{len(ev.runs)} run(s), {len(ev.table)} paradigm x checkpoint rows, convention {ev.convention}")
    print(f"tables: {args.out}/curves.csv, phenomena.csv, ushapes.csv ({count_text(us)} at delta={args.delta}"
          + (f" (of {len(us)} candidates: {why})" if why else "") + ")")
    print(f"plots:  {args.out / 'plots'} ({len(written['plots'])} PNG files)")
    for n in written["notes"]:
        print(f"U-shapes: {n}")
    return 0


class CurvesHook:
    """``probes curves RUN --out RUN/curves`` once the run has finished (train.curves_at_end)."""

    def post_checkpoint_saved(self, ckpt_dir, step, tokens, model) -> dict:
        return {}

    def close(self) -> None:
        pass

    def post_train(self, run_dir: Path) -> None:
        main([str(run_dir), "--out", str(Path(run_dir) / "curves")], own=True)
