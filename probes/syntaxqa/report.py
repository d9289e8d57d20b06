"""Syntax-question curves and report section from the summaries in the eval files' metadata: runs of one model x
budget are seeds (mean with a 95 % t-interval); ``mode`` (files older than modes: ``likelihood``) is named
everywhere, the two modes never averaged together."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from probes.analysis.aggregate import seed_summary
from probes.analysis.bands import MIN_SEEDS_T
from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.plotting import colors, draw_baseline, finish_legend, new_figure, plot_line, token_axis
from probes.analysis.scaling import budget_label
from probes.scoring.store import kind_files
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


def syntax_qa_table(run_dirs: Sequence[Path], names: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Tidy rows: run, mode, step, tokens, kp ("all" or a knowledge point), metric (PARTS, paper mode's UNPARSED,
    "<part>_random" per question type), value. ``names`` labels the runs (default: each directory's name)."""
    rows = []
    files = [f"{b}.parquet" for b in (BENCHMARK, PAPER_BENCHMARK)]
    for name, path, meta in kind_files(run_dirs, names, files, KIND, skip_torn=False):
        mode = meta.get("mode") or (meta.get("config") or {}).get("mode") or "likelihood"
        at = {"run": name, "mode": mode, "step": meta["step"], "tokens": meta["tokens"]}
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


Run = tuple[str, Path, str, Optional[int]]  # name, run directory, model, budget (None = whole corpus)
GROUP = ["model", "budget", "mode"]  # mode: which way the questions were asked (module doc)


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


def _label(model, budget, mode, n_seeds: int) -> str:
    return f"{model} · {budget_label(budget)} · {mode} ({n_seeds} seed{'s' if n_seeds > 1 else ''})"


def plot_oa(seeds: pd.DataFrame, path: Path) -> Path:
    """OA per model x budget (seed mean, band over seeds) with its OA_random dashed in the same colour."""
    ref = seeds["tokens"].to_numpy()
    groups = list(seeds.groupby(GROUP, dropna=False, sort=True))
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
    groups = list(seeds.groupby(GROUP, dropna=False, sort=True))
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
    """Markdown lines and (title, png) figures of the syntax-questions probe, ([], []) without its files; writes
    out/tables/syntax_qa.csv, out/tables/syntax_qa_final.csv and out/figures/syntax_qa_*.png."""
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
