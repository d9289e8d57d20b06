"""Syntax-questions curves: OA and its parts per knowledge point against tokens seen.

Reads the summaries in the metadata of every ``<run>/evals/step<N>/syntax_qa.parquet`` and
``syntax_qa_paper.parquet`` (nothing is re-scored); ``mode`` says which wrote a number (files older than
modes are ``likelihood``). The question types' random baselines are the item rows' ``rand_acc``, ``rand_f1``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.plotting import colors, draw_baseline, finish_legend, new_figure, plot_line, token_axis
from probes.evals.files import eval_file_meta
from probes.syntaxqa.config import KIND
from probes.syntaxqa.records import BENCHMARK, KNOWLEDGE_POINTS, PAPER_BENCHMARK

PARTS = ("OA", "OA_random", "TF_acc", "MC_acc", "FITB_acc", "FITB_F1")
UNPARSED = ("unparsed", "TF_unparsed", "MC_unparsed", "FITB_unparsed")  # paper mode: answers not in the format
QUESTION_TYPES = ("TF_acc", "MC_acc", "FITB_acc", "FITB_F1")
# "<part>_random": a question type's expected random-guess score, from these item columns
RANDOM_OF = {"TF_acc": ("TF", "rand_acc"), "MC_acc": ("MC", "rand_acc"),
             "FITB_acc": ("FITB", "rand_acc"), "FITB_F1": ("FITB", "rand_f1")}
COLUMNS = ["run", "mode", "step", "tokens", "kp", "metric", "value"]


def _random_rows(path: Path) -> list[tuple[str, str, float]]:
    """(kp, "<part>_random", value) for "all" and each knowledge point of one file's items."""
    items = pq.read_table(path, columns=["kp", "qtype", "correct", "rand_acc", "rand_f1"]).to_pandas()
    fitb_scored = items.loc[items.qtype == "FITB", "correct"].notna().any()
    out = []
    for kp, d in [("all", items), *items.groupby("kp", sort=True)]:
        for part, (qtype, col) in RANDOM_OF.items():
            if qtype == "FITB" and not fitb_scored:
                continue  # generation skipped: no FITB score to compare with (as summarize does)
            v = d.loc[d.qtype == qtype, col].dropna()
            if len(v):
                out.append((kp, f"{part}_random", float(v.mean())))
    return out


def _mode(meta: dict) -> str:
    return meta.get("mode") or (meta.get("config") or {}).get("mode") or "likelihood"


def syntax_qa_table(run_dirs: Sequence[Path], names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Tidy rows: run, mode, step, tokens, kp ("all" or a knowledge point), metric, value.

    Metrics: PARTS (and, paper mode, UNPARSED) from the stored summaries, plus "<part>_random" for
    each question type.
    ``names`` labels the runs (default: each directory's name), e.g. the unique names of ``load_runs``.
    """
    run_dirs = [Path(r) for r in run_dirs]
    names = [r.name for r in run_dirs] if names is None else list(names)
    if len(names) != len(run_dirs):
        raise ValueError(f"syntax_qa_table: {len(names)} names for {len(run_dirs)} run directories")
    rows = []
    for run, name in zip(run_dirs, names):
        paths = [p for b in (BENCHMARK, PAPER_BENCHMARK) for p in sorted((run / "evals").glob(f"step*/{b}.parquet"))]
        for path in paths:
            meta = eval_file_meta(path)
            if meta["kind"] != KIND:
                continue
            at = {"run": name, "mode": _mode(meta), "step": meta["step"], "tokens": meta["tokens"]}
            for key, value in (meta.get("summary") or {}).items():
                kp, _, metric = key.rpartition("/")
                if (metric in PARTS or metric in UNPARSED) and value is not None:
                    rows.append({**at, "kp": kp or "all", "metric": metric, "value": float(value)})
            rows += [{**at, "kp": kp, "metric": m, "value": v} for kp, m, v in _random_rows(path)]
    return pd.DataFrame(rows, columns=COLUMNS)


def task_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Fill-in-the-blank accuracy as a generated task of the pairs-vs-tasks view (probes.analysis.formuse): the
    model produces the phrase. Each mode is a probe of its own: the two modes' numbers are never averaged."""
    q = table[(table.kp == "all") & table.metric.isin(["FITB_acc", "FITB_acc_random"])]
    q = q.pivot_table(index=["run", "mode", "step", "tokens"], columns="metric", values="value").reset_index()
    if "FITB_acc" not in q:  # absent where generation was skipped
        return pd.DataFrame()
    probe = np.where(q["mode"] == "likelihood", "syntax_qa:FITB_acc", "syntax_qa_" + q["mode"] + ":FITB_acc")
    return pd.DataFrame({"run": q.run, "step": q.step, "tokens": q.tokens, "probe": probe, "acc": q.FITB_acc,
                         "chance": q.get("FITB_acc_random", np.nan)})


# The drawers take tidy rows (kp, metric, tokens, value) of one run, or of one model x budget with
# the seeds already averaged; `ref` is every token count drawn on the figure (step 0's position).


def _curve(df: pd.DataFrame, kp: str, metric: str) -> pd.DataFrame:
    return df[(df.kp == kp) & (df.metric == metric)].sort_values("tokens")


def _line(ax, d: pd.DataFrame, ref, label: str, color, baseline: bool = False, **kw) -> int:
    """Draws curve ``d`` (tokens, value), dashed when ``baseline``; 1 when it has points, else 0."""
    if not len(d):
        return 0
    x, y = d.tokens.to_numpy(), d.value.to_numpy()
    draw_baseline(ax, x, y, ref, color, label, **kw) if baseline else plot_line(ax, x, y, ref, label, color, **kw)
    return 1


def draw_knowledge_points(ax, df: pd.DataFrame, ref) -> int:
    """OA of every knowledge point, the overall OA (black, thick) and OA_random; returns the line count."""
    kps = [kp for kp in KNOWLEDGE_POINTS if len(_curve(df, kp, "OA"))]
    n = sum(_line(ax, _curve(df, kp, "OA"), ref, kp, c, lw=1.1) for kp, c in zip(kps, colors(len(kps))))
    n += _line(ax, _curve(df, "all", "OA"), ref, "all points", "black", lw=2.4)
    return n + _line(ax, _curve(df, "all", "OA_random"), ref, "OA_random (all points)", "black", baseline=True)


def draw_question_types(ax, df: pd.DataFrame, ref) -> int:
    """TF/MC/FITB scores over all points, each with its random baseline dashed in its colour, and OA."""
    n = 0
    for part, c in zip(QUESTION_TYPES, colors(len(QUESTION_TYPES))):
        n += _line(ax, _curve(df, "all", part), ref, part, c)
        n += _line(ax, _curve(df, "all", f"{part}_random"), ref, f"{part} random", c, baseline=True, lw=1.0)
    return n + _line(ax, _curve(df, "all", "OA"), ref, "OA", "black", lw=2.4)


def score_limits(ax, values) -> None:
    """0 at the bottom; the top just above the highest score, so near-random curves are not flattened."""
    v = np.asarray(values, dtype=float)
    top = float(np.nanmax(v)) if np.isfinite(v).any() else 1.0
    ax.set_ylim(0.0, min(1.02, max(0.1, top * 1.1 + 0.02)))


def write_syntax_qa_curves(table: pd.DataFrame, out: Path) -> list[Path]:
    """syntax_qa.csv, and per run and mode one figure: OA per knowledge point | the question types
    (plots/syntax_qa_<run>.png for the likelihood mode, plots/syntax_qa_paper_<run>.png for the paper's)."""
    out = Path(out)
    written = [write_csv(out / "syntax_qa.csv", table.sort_values(["run", "mode", "kp", "metric", "step"]))]
    for (run, mode), df in table.groupby(["run", "mode"]):
        ref = df["tokens"].to_numpy()
        fig, axes = new_figure(13.0, 4.8, 1, 2, sharey=True)
        n_left = draw_knowledge_points(axes[0, 0], df, ref)
        n_right = draw_question_types(axes[0, 1], df, ref)
        for ax, n, title in ((axes[0, 0], n_left, "overall accuracy (OA) per knowledge point"),
                             (axes[0, 1], n_right, "question types, all points (dashed: random guess)")):
            token_axis(ax, ref, ylabel="score", chance=False)
            ax.set_title(title, fontsize=10)
            finish_legend(ax, n)
        score_limits(axes[0, 0], df["value"])
        fig.suptitle(f"syntax questions · run {run} · {mode} mode", fontsize=11)
        stem = "syntax_qa" if mode == "likelihood" else f"syntax_qa_{mode}"
        written.append(save_figure(fig, out / "plots" / f"{stem}_{run}.png"))
    return written
