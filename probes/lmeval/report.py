"""lm-eval task curves and report section, from lm-eval's aggregate stored in every
``<run>/evals/step<N>/lmeval_<task>.parquet`` (nothing is re-scored)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.plotting import colors, finish_legend, new_figure, plot_line, token_axis, write_run_figures
from probes.analysis.scaling import budget_label
from probes.lmeval.hook import KIND, PREFIX
from probes.scoring.store import kind_files

COLUMNS = ["run", "step", "tokens", "task", "metric", "value"]
PLOTTED = "acc"  # the metric drawn (every metric is in the tables)


def lmeval_table(run_dirs: Sequence[Path], names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    rows = [{"run": name, "step": meta["step"], "tokens": meta["tokens"],
             "task": meta.get("task", path.stem[len(PREFIX):]), "metric": metric, "value": float(v)}
            for name, path, meta in kind_files(run_dirs, names, [f"{PREFIX}*.parquet"], KIND)
            for metric, v in (meta.get("summary") or {}).items() if metric != "sample_len" and v is not None]
    return pd.DataFrame(rows, columns=COLUMNS)


def _draw(ax, df: pd.DataFrame, ref, value: str = "value") -> int:
    d = df[df.metric == PLOTTED]
    tasks = sorted(d.task.unique())
    for task, c in zip(tasks, colors(len(tasks))):
        t = d[d.task == task].sort_values("tokens")
        plot_line(ax, t.tokens.to_numpy(), t[value].to_numpy(), ref, task, c)
    return len(tasks)


def write_lmeval_curves(table: pd.DataFrame, out: Path) -> list[Path]:
    """lm_eval.csv, and per run one figure of its tasks' accuracy (``probes curves``)."""
    return write_run_figures(table, out, "lm_eval", ["run", "task", "metric", "step"], _draw,
                             f"lm-eval {PLOTTED}", "lm-eval tasks · run {run}")


def lmeval_section(runs: list[tuple[str, Path, str, Optional[int]]], out: Path
                   ) -> tuple[list[str], list[tuple[str, Path]]]:
    """Markdown lines and (title, png) of the lm-eval tasks; ([], []) where no run has their files.
    Writes out/tables/lm_eval.csv (mean over seeds per model x budget x task x metric x step) and
    out/figures/lm_eval_tasks.png."""
    out = Path(out)
    table = lmeval_table([r[1] for r in runs], names=[r[0] for r in runs])
    if table.empty:
        return [], []
    info = pd.DataFrame([(n, m, b) for n, _, m, b in runs], columns=["run", "model", "budget"])
    table = table.merge(info, on="run", how="left")
    keys = ["model", "budget", "task", "metric", "step"]
    means = (table.groupby(keys, dropna=False).agg(tokens=("tokens", "mean"), value=("value", "mean"),
                                                   n_seeds=("run", "nunique")).reset_index())
    write_csv(out / "tables" / "lm_eval.csv", means)
    groups = list(means.groupby(["model", "budget"], dropna=False, sort=True))
    fig, axes = new_figure(5.2 * len(groups) + 2.6, 3.9, 1, len(groups), sharey=True)
    ref = means["tokens"].to_numpy()
    n = 0
    for ax, ((model, budget), g) in zip(axes.flat, groups):
        n = _draw(ax, g, ref)
        token_axis(ax, ref, ylabel=f"lm-eval {PLOTTED}", chance=False)
        ax.set_title(f"{model} · {budget_label(budget)}", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
    finish_legend(axes.flat[0], n)
    fig.suptitle(f"lm-eval tasks ({PLOTTED}, mean over seeds)", fontsize=10)
    png = save_figure(fig, out / "figures" / "lm_eval_tasks.png")
    last = table[table.step == table.groupby("run")["step"].transform("max")]
    final = last.pivot_table(index=["run", "task"], columns="metric", values="value").reset_index()
    md = ["## lm-eval tasks (lm-evaluation-harness at every checkpoint)", "",
          "Each task's aggregate as lm-eval computes it (`probes.lm_eval.tasks`; per-sample log-likelihoods in "
          "evals/step<N>/lmeval_<task>.parquet; docs/lm_eval.md). Tasks of `probes lm-eval-tasks` score our "
          "pairs with our convention: their `acc` is the sum-LP accuracy.", "",
          f"![lm-eval tasks]({png.relative_to(out).as_posix()})", "",
          "Last checkpoint of each run:", "", *_md(final), ""]
    return md, [("lm-eval tasks", png)]


def _md(df: pd.DataFrame) -> list[str]:
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    return (["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
            + ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)])
