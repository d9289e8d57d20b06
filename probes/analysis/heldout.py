"""The held-out loss beside the syntax curves: `val/loss`, `val/ppl` of each run's logs/train.jsonl (the documents:
train/sequences.py), drawn as the overall curve is."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from probes.analysis.paperfigs import plot_budgets
from train.logger import read_log


def heldout_table(runs) -> pd.DataFrame:
    """One row per run x checkpoint with a held-out loss: run, model, budget, seed, step, tokens, val_loss,
    val_ppl. Empty where no run logged one (runs from before held-out splits, data.heldout_tokens=0)."""
    rows = [{"run": r.name, "model": r.model, "budget": r.budget, "seed": r.seed, "step": rec["step"],
             "tokens": rec.get("tokens"), "val_loss": rec["val/loss"], "val_ppl": rec.get("val/ppl")}
            for r in runs for rec in read_log(Path(r.path) / "logs" / "train.jsonl")
            if rec.get("event") == "checkpoint" and "val/loss" in rec]
    cols = ["run", "model", "budget", "seed", "step", "tokens", "val_loss", "val_ppl"]
    # a resumed run may log a checkpoint again: its last record counts
    return pd.DataFrame(rows, columns=cols).drop_duplicates(["run", "step"], keep="last").astype({"budget": "Int64"})


def final_heldout(table: pd.DataFrame) -> pd.DataFrame:
    """model, budget, val_loss: each run's last checkpoint, mean over seeds (the Table-4 run rows)."""
    last = table.sort_values("step").groupby("run").tail(1)
    return last.groupby(["model", "budget"], dropna=False, as_index=False)["val_loss"].mean()


def plot_heldout(table: pd.DataFrame, path: Path) -> Path:
    """Held-out loss against tokens seen; the band is the range over seeds."""
    t = table.rename(columns={"val_loss": "acc"})
    bands = t.groupby(["model", "budget", "step"], dropna=False, as_index=False).agg(
        tokens=("tokens", "first"), acc_mean=("acc", "mean"), lo=("acc", "min"), hi=("acc", "max"),
        n_seeds=("run", "nunique"))
    return plot_budgets(bands, t, path, "held-out loss (nats per token)", "Held-out loss over training (documents "
                        "no run trained on, val/loss); x: tokens seen (log), hollow marker = step 0\nlines: seed "
                        "means; band: range over seeds", accuracy=False, width=3.6, height=4.4)
