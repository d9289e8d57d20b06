"""The syntax-questions section of `python -m probes report`: curves per model x budget, one table.

Runs of one model x budget are seeds: every curve is their mean with a 95 % t-interval over seeds (as the
minimal-pair curves), from ``syntax_qa_table``; the two modes are named everywhere, never averaged together.
Outputs: tables/syntax_qa.csv (seed means), tables/syntax_qa_final.csv (each run's last checkpoint), figures.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from probes.analysis.aggregate import seed_summary
from probes.analysis.bands import MIN_SEEDS_T
from probes.analysis.plotting import colors, finish_legend, new_figure, plot_line, token_axis
from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.scaling import budget_label
from probes.syntaxqa.curves import (PARTS, draw_baseline, draw_knowledge_points, draw_question_types,
                                    score_limits, syntax_qa_table)

Run = tuple[str, Path, str, Optional[int]]  # name, run directory, model, budget (None = whole corpus)
GROUP = ["model", "budget", "mode"]  # mode: which way the questions were asked (curves module doc)


def seed_means(table: pd.DataFrame) -> pd.DataFrame:
    """Per model x budget x kp x metric x step: n_seeds, tokens, mean, sd, lo, hi (95 % t over seeds)."""
    s = seed_summary(table, [*GROUP, "kp", "metric", "step"], values=("value",))
    s = s.rename(columns={"value_mean": "mean", "value_sd": "sd", "value_lo": "lo", "value_hi": "hi"})
    s["tokens"] = s["tokens"].round().astype("int64")  # seeds of one model x budget share the schedule
    return s[[*GROUP, "kp", "metric", "step", "tokens", "n_seeds", "mean", "sd", "lo", "hi"]]


def final_table(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's last probed checkpoint per mode: OA, OA_random, the parts and (paper mode) the share of
    answers not in the format, all knowledge points."""
    last = table.groupby(["run", "mode"])["step"].transform("max")
    d = table[(table.step == last) & (table.kp == "all")]
    # pivot on run and mode alone: a budget of None is NaN, and NaN keys would drop the row
    cols = [*PARTS, "unparsed"]
    wide = d.pivot_table(index=["run", "mode"], columns="metric", values="value").reindex(columns=cols)
    keys = d[["run", *GROUP, "step", "tokens"]].drop_duplicates(["run", "mode"])
    return keys.merge(wide.reset_index(), on=["run", "mode"])[["run", *GROUP, "step", "tokens", *cols]]


def _groups(seeds: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    return list(seeds.groupby(GROUP, dropna=False, sort=True))


def _label(model, budget, mode, n_seeds: int) -> str:
    return f"{model} · {budget_label(budget)} · {mode} ({n_seeds} seed{'s' if n_seeds > 1 else ''})"


def plot_oa(seeds: pd.DataFrame, path: Path) -> Path:
    """OA per model x budget (seed mean, band over seeds) with its OA_random dashed in the same colour."""
    ref = seeds["tokens"].to_numpy()
    groups = _groups(seeds)
    fig, axes = new_figure()
    ax = axes[0, 0]
    for ((model, budget, mode), g), c in zip(groups, colors(len(groups))):
        oa = g[(g.kp == "all") & (g.metric == "OA")].sort_values("step")
        if len(oa):
            n = int(oa.n_seeds.max())
            # a t-band from 2 seeds spans the axis (probes.analysis.bands): drawn from 3 seeds on
            band = (oa["lo"].clip(0, 1).to_numpy(), oa["hi"].clip(0, 1).to_numpy()) if n >= MIN_SEEDS_T else None
            plot_line(ax, oa.tokens.to_numpy(), oa["mean"].to_numpy(), ref, _label(model, budget, mode, n), c,
                      band=band)
        rnd = g[(g.kp == "all") & (g.metric == "OA_random")].sort_values("step")
        if len(rnd):
            draw_baseline(ax, rnd.tokens.to_numpy(), rnd["mean"].to_numpy(), ref, c)
    token_axis(ax, ref, ylabel="overall accuracy (OA)", chance=False)
    score_limits(ax, seeds.loc[seeds.metric.isin(["OA", "OA_random"]), "hi"].fillna(seeds["mean"]))
    several = bool((seeds.n_seeds >= MIN_SEEDS_T).any())
    ax.set_title("syntax questions: OA (dashed: OA_random of the same items)\n"
                 + ("band: 95 % t-interval over seeds (groups of 3+ seeds)" if several
                    else f"fewer than {MIN_SEEDS_T} seeds per model · budget: no band (seed values: the CSV)"),
                 fontsize=10)
    finish_legend(ax, len(groups), "model · budget · mode")
    return save_figure(fig, path)


def _panels(seeds: pd.DataFrame, draw, title: str, path: Path) -> Path:
    """One panel per model x budget (seed means, no bands: many lines), one shared legend."""
    groups = _groups(seeds)
    ncols = min(3, len(groups))
    nrows = int(np.ceil(len(groups) / ncols))
    fig, axes = new_figure(5.2 * ncols + 2.2, 3.8 * nrows, nrows, ncols, sharey=True)
    ref = seeds["tokens"].to_numpy()
    for ax, ((model, budget, mode), g) in zip(axes.flat, groups):
        draw(ax, g.rename(columns={"mean": "value"}), ref)
        token_axis(ax, ref, ylabel="score", chance=False)
        ax.set_title(_label(model, budget, mode, int(g.n_seeds.max())), fontsize=9)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    score_limits(axes.flat[0], seeds["mean"])
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)  # "upper" runs into the title
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path)


def _md_row(values) -> str:
    return "| " + " | ".join(values) + " |"


def _fmt(v) -> str:
    return "" if pd.isna(v) else f"{v:.3f}"


def syntax_qa_section(runs: list[Run], out: Path) -> tuple[list[str], list[tuple[str, Path]]]:
    """Markdown lines and (title, png) figures of the syntax-questions probe; ([], []) without its files.

    Writes out/tables/syntax_qa.csv, out/tables/syntax_qa_final.csv and out/figures/syntax_qa_*.png.
    """
    out = Path(out)
    table = syntax_qa_table([r[1] for r in runs], names=[r[0] for r in runs])
    if table.empty:
        return [], []
    info = pd.DataFrame([(name, model, budget) for name, _, model, budget in runs], columns=["run", "model", "budget"])
    table = table.merge(info, on="run", how="left")
    seeds = seed_means(table)
    final = final_table(table)
    write_csv(out / "tables" / "syntax_qa.csv", seeds)
    write_csv(out / "tables" / "syntax_qa_final.csv", final)
    fdir = out / "figures"
    figs = [("Syntax questions: OA per model × budget", plot_oa(seeds, fdir / "syntax_qa_oa.png")),
            ("Syntax questions: OA per knowledge point",
             _panels(seeds, draw_knowledge_points, "syntax questions: OA per knowledge point (seed means)",
                     fdir / "syntax_qa_knowledge_points.png")),
            ("Syntax questions: question types",
             _panels(seeds, draw_question_types, "syntax questions: question types (seed means)",
                     fdir / "syntax_qa_question_types.png"))]
    md = ["## Syntax questions", "",
          "Questions about the syntax of treebank sentences (`probes.syntaxqa`, nine knowledge points such as "
          "grammatical subject or PP attachment), in one of two modes (column `mode`). `likelihood`: our wording, "
          "true/false (TF) and multiple choice (MC) scored by the likelihood of each answer, fill-in-the-blank "
          "(FITB) by greedy generation. `paper`: the paper's templates and prompts (5 exemplars of the same "
          "knowledge point and type, 3 exemplar seeds averaged), every answer generated greedily and parsed; an "
          "answer not in the format counts wrong and its share is `unparsed`. FITB is scored by exact match "
          "(FITB_acc) and in-order word F1 (FITB_F1). "
          "OA = (TF_acc + MC_acc + (FITB_acc + FITB_F1)/2)/3. OA_random is the same formula over each item's "
          "expected random-guess score (TF 1/2, MC 1/number of options, FITB a random phrase of the sentence), "
          "so only OA above OA_random is knowledge. Curves: mean over seeds (runs of one model × budget), "
          "band = 95 % t-interval over seeds where a group has 3 or more (none with fewer). Every number: `tables/syntax_qa.csv`.", "",
          "Final probed checkpoint of each run (`tables/syntax_qa_final.csv`):", "",
          _md_row(["run", "model", "budget", "mode", "step", "tokens", *PARTS, "unparsed"]),
          "|" + "---|" * (7 + len(PARTS))]
    for r in final.itertuples(index=False):
        md.append(_md_row([str(r.run), str(r.model), budget_label(r.budget), str(r.mode), str(r.step), f"{r.tokens:,}",
                           *(_fmt(getattr(r, p)) for p in [*PARTS, "unparsed"])]))
    md.append("")
    md += [f"![{t}]({p.relative_to(out).as_posix()})" for t, p in figs] + [""]
    return md, figs
