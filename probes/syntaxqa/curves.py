"""Syntax-questions curves: OA and its parts per knowledge point against tokens seen.

Reads the summaries stored in every ``<run>/evals/step<N>/syntax_qa.parquet`` (their metadata holds
``summarize``'s numbers, so no rows are re-scored or re-read) and writes a tidy table plus plots.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from probes.evalset import log_tokens  # noqa: E402
from probes.outputs import save_figure, write_csv  # noqa: E402
from probes.store import META_KEY  # noqa: E402
from probes.syntaxqa.records import KNOWLEDGE_POINTS  # noqa: E402
from probes.syntaxqa.score import BENCHMARK  # noqa: E402

PARTS = ("OA", "OA_random", "TF_acc", "MC_acc", "FITB_acc", "FITB_F1")


def syntax_qa_table(run_dirs: list[Path]) -> pd.DataFrame:
    """Tidy rows: run, step, tokens, kp ("all" or a knowledge point), metric, value."""
    rows = []
    for run in map(Path, run_dirs):
        for path in sorted((run / "evals").glob(f"step*/{BENCHMARK}.parquet")):
            meta = json.loads(pq.read_schema(path).metadata[META_KEY])
            for key, value in (meta.get("summary") or {}).items():
                kp, _, metric = key.rpartition("/")
                if metric in PARTS and value is not None:
                    rows.append({"run": run.name, "step": meta["step"], "tokens": meta["tokens"],
                                 "kp": kp or "all", "metric": metric, "value": float(value)})
    return pd.DataFrame(rows, columns=["run", "step", "tokens", "kp", "metric", "value"])


def write_syntax_qa_curves(table: pd.DataFrame, out: Path) -> list[Path]:
    """syntax_qa.csv, one plot of OA per knowledge point and one of the question types, per run."""
    out = Path(out)
    written = [write_csv(out / "syntax_qa.csv", table.sort_values(["run", "kp", "metric", "step"]))]
    for run, df in table.groupby("run"):
        x_all = log_tokens(df["tokens"].to_numpy())
        df = df.assign(x=x_all)
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        for kp in ["all", *KNOWLEDGE_POINTS]:
            d = df[(df.kp == kp) & (df.metric == "OA")].sort_values("x")
            if len(d):
                axes[0].plot(d.x, d.value, marker=".", lw=2.5 if kp == "all" else 1.2, label=kp)
        for metric in ("TF_acc", "MC_acc", "FITB_acc", "FITB_F1", "OA_random"):
            d = df[(df.kp == "all") & (df.metric == metric)].sort_values("x")
            if len(d):
                axes[1].plot(d.x, d.value, marker=".", ls="--" if metric == "OA_random" else "-", label=metric)
        for ax, title in zip(axes, ("overall accuracy (OA) per knowledge point", "question types (all points)")):
            ax.set_title(title)
            ax.set_xlabel("log10 tokens seen (step 0 drawn one decade left)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, ncol=2)
        axes[0].set_ylabel("score")
        fig.suptitle(f"syntax questions · run {run}")
        written.append(save_figure(fig, out / "plots" / f"syntax_qa_{run}.png"))
        plt.close(fig)
    return written
