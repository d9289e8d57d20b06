"""ELAGENT curves per task against tokens, context pair and letter each beside its chance line, from the summaries
stored in the eval files (nothing is re-scored); Language A's minimal pairs are drawn with every benchmark's."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from probes.analysis.aggregate import seed_summary
from probes.analysis.bands import MIN_SEEDS_T
from probes.analysis.plotting import colors, draw_baseline, new_figure, plot_line, token_axis, write_run_figures
from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.scaling import budget_label
from probes.scoring.store import kind_files
from probes.elagent.config import BENCHMARK, ELAGENT_TASKS as TASKS, KIND  # not .score: that imports torch

COLUMNS = ["run", "step", "tokens", "key", "metric", "value"]
METRICS = ("acc", "acc_se", "acc_mean", "acc_random", "acc_pair", "acc_pair_se")
ABOUT = {"precedence": "redefined operator precedence (Task 1)", "babi": "bAbI deduction (Task 5)",
         "predicates": "transitive / symmetric predicates (Task 6)"}
Run = tuple[str, Path, str, Optional[int]]  # name, run directory, model, budget
GROUP = ["model", "budget"]


def elagent_table(run_dirs: Sequence[Path], names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Tidy rows: run, step, tokens, key ("all", a task or a paradigm), metric (acc, acc_mean, acc_random),
    value."""
    rows = []
    for name, _, meta in kind_files(run_dirs, names, [f"{BENCHMARK}.parquet"], KIND):
        for k, v in (meta.get("summary") or {}).items():
            key, _, metric = k.rpartition("/")
            if metric in METRICS and v is not None:
                rows.append({"run": name, "step": meta["step"], "tokens": meta["tokens"], "key": key,
                             "metric": metric, "value": float(v)})
    return pd.DataFrame(rows, columns=COLUMNS)


def task_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Each task as a generated task of the pairs-vs-tasks view (probes.analysis.formuse): its context-pair
    accuracy against 0.5 (the letter curve of a small model sits at chance whatever it knows); the letter
    accuracy for eval files from before the context pair."""
    e = table[table.key.isin(TASKS)]
    e = e.pivot_table(index=["run", "step", "tokens", "key"], columns="metric", values="value").reset_index()
    if not len(e):
        return pd.DataFrame()
    pair = "acc_pair" in e
    return pd.DataFrame({"run": e.run, "step": e.step, "tokens": e.tokens, "probe": "elagent:" + e.key,
                         "acc": e.acc_pair if pair else e.acc, "chance": 0.5 if pair else e.acc_random})


def _curve(df: pd.DataFrame, key: str, metric: str, value: str = "value") -> pd.DataFrame:
    return df[(df.key == key) & (df.metric == metric)].sort_values("tokens")


def draw_tasks(ax, df: pd.DataFrame, ref, value: str = "value", band: bool = False) -> int:
    """Per task: the context-pair accuracy (solid) with its chance 0.5 (grey dashed), and the letter accuracy
    (dotted) with its random baseline (dashed, the task's colour)."""
    keys = [t for t in TASKS if len(_curve(df, t, "acc"))]
    n = 0
    for key, c in zip(keys, colors(len(keys))):
        for metric, about, ls in (("acc_pair", "context pair", "-"), ("acc", "letter", ":")):
            d = _curve(df, key, metric)
            if not len(d):
                continue
            b = (d["lo"].clip(0, 1).to_numpy(), d["hi"].clip(0, 1).to_numpy()) if band and (d.n_seeds >= MIN_SEEDS_T).all() else None
            plot_line(ax, d.tokens.to_numpy(), d[value].to_numpy(), ref, f"{ABOUT[key]} · {about}", c, band=b,
                      lw=2.0 if metric == "acc_pair" else 1.2, ls=ls)
            n += 1
        r = _curve(df, key, "acc_random")
        draw_baseline(ax, r.tokens.to_numpy(), r[value].to_numpy(), ref, c)
    if n:
        ax.axhline(0.5, color="0.5", lw=1.2, ls="--", label="context pair: chance 0.5")
    return n + bool(n)


def write_elagent_curves(table: pd.DataFrame, out: Path) -> list[Path]:
    """elagent.csv, and per run one figure of task accuracies, both curves (``probes curves``)."""
    return write_run_figures(table, out, "elagent", ["run", "key", "metric", "step"], draw_tasks, "accuracy",
                             "ELAGENT tasks · run {run} (solid: context pair, chance 0.5 grey; dotted: answer "
                             "letter, its 1/options dashed)")


def seed_means(table: pd.DataFrame) -> pd.DataFrame:
    s = seed_summary(table, [*GROUP, "key", "metric", "step"], values=("value",))
    s = s.rename(columns={"value_mean": "mean", "value_sd": "sd", "value_lo": "lo", "value_hi": "hi"})
    s["tokens"] = s["tokens"].round().astype("int64")
    return s[[*GROUP, "key", "metric", "step", "tokens", "n_seeds", "mean", "sd", "lo", "hi"]]


def _fmt(v) -> str:
    return "" if pd.isna(v) else f"{v:.3f}"


def elagent_section(runs: list[Run], out: Path) -> tuple[list[str], list[tuple[str, Path]]]:
    """Markdown lines and (title, png) figures of the ELAGENT probe; ([], []) where no run has its files.

    Writes out/tables/elagent.csv (seed mean per model x budget x task/paradigm x metric x step),
    out/tables/elagent_final.csv (each run's last checkpoint) and out/figures/elagent_tasks.png."""
    out = Path(out)
    table = elagent_table([r[1] for r in runs], names=[r[0] for r in runs])
    if table.empty:
        return [], []
    table = table.merge(pd.DataFrame([(n, m, b) for n, _, m, b in runs], columns=["run", *GROUP]), on="run", how="left")
    seeds = seed_means(table)
    last = table[table.step == table.groupby("run")["step"].transform("max")]
    final = last.pivot_table(index=["run", "key"], columns="metric", values="value").reset_index()
    final = last[["run", *GROUP, "step", "tokens"]].drop_duplicates("run").merge(final, on="run")
    write_csv(out / "tables" / "elagent.csv", seeds)
    write_csv(out / "tables" / "elagent_final.csv", final)

    groups = list(seeds.groupby(GROUP, dropna=False, sort=True))
    ncols = min(3, len(groups))
    nrows = int(np.ceil(len(groups) / ncols))
    fig, axes = new_figure(5.2 * ncols + 2.6, 3.9 * nrows, nrows, ncols, sharey=True)
    ref = seeds["tokens"].to_numpy()
    for ax, ((model, budget), g) in zip(axes.flat, groups):
        draw_tasks(ax, g, ref, value="mean", band=True)
        token_axis(ax, ref, ylabel="accuracy", chance=False)
        n = int(g.n_seeds.max())
        ax.set_title(f"{model} · {budget_label(budget)} ({n} seed{'s' if n > 1 else ''})", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=7, frameon=False)
    fig.suptitle("ELAGENT tasks: context pair (solid; chance 0.5, grey) and answer letter (dotted; 1/options dashed); "
                 "band: 95 % t over seeds where 3+", fontsize=10)
    figs = [("ELAGENT tasks: accuracy per model × budget", save_figure(fig, out / "figures" / "elagent_tasks.png"))]

    md = ["## ELAGENT tasks (generated reasoning probes)", "",
          "New tasks generated from the rules of Li et al. (ELAGENT; `probes.elagent`), so no item can be in the "
          "training data: arithmetic under a redefined operator precedence (Task 1), bAbI basic deduction with "
          "bAbI's or random names (Task 5) and deduction with (non-)transitive / (non-)symmetric predicates "
          "(Task 6), each item after k solved examples of its paradigm. Two curves (docs/elagent.md):", "",
          "- **context pair** (`acc_pair`, chance 0.5 exactly): the right answer text A is scored after its own "
          "question and after a matched one that changes one thing (another person or entity asked about, the "
          "usual precedence) and has another answer B, and B likewise; right when each text is likelier after "
          "the context that licenses it (a tie half right). No letters, each text compared with itself, and "
          "counterbalanced: a model that does not relate the answer to the context scores 0.5 on every item. "
          "Above 0.5 the answer follows the context; it does not say by which route (a cue the change also moves "
          "counts).",
          "- **answer letter** (`acc`, the ELAGENT layout): options listed as (a), (b), ... in a random order, the "
          "item right when its letter is likeliest; chance 1 / options. Small models do not bind answers to "
          "letters, so this curve can stay at chance whatever they know.", "",
          "These are likelihood choices, not comparable to the paper's accuracies of generated answers. Language A "
          "word order (Tasks 3-4) is the minimal-pair benchmark `elagent_word_order` in the sections above. "
          "Every number: `tables/elagent.csv`.", "",
          "Last checkpoint of each run (`tables/elagent_final.csv`; ± one standard error over items):", "",
          "| run | model | budget | step | task | context pair | letter | letter chance |", "|---|---|---|---|---|---|---|---|"]
    for r in final[final.key.isin([*TASKS, "all"])].itertuples(index=False):
        pair, letter = ((f"{_fmt(r.acc_pair)} ± {_fmt(r.acc_pair_se)}", f"{_fmt(r.acc)} ± {_fmt(r.acc_se)}")
                        if "acc_pair" in final else ("", _fmt(r.acc)))  # files from before: the letter alone
        md.append(f"| {r.run} | {r.model} | {budget_label(r.budget)} | {r.step} | {r.key} | {pair} | {letter} | "
                  f"{_fmt(r.acc_random)} |")
    md += [""] + [f"![{t}]({p.relative_to(out).as_posix()})" for t, p in figs] + [""]
    return md, figs
