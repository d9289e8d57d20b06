"""Human agreement with ZhoBLiMP's gold labels (the authors' data/human_validation_result.csv) beside model accuracy.

A phenomenon's human accuracy is the pooled sum(correct) / sum(total) over the released paradigms the benchmark
files assign to it (the CSV's phenomenon column is blank for 13 rows). That gives 93.9 % overall, the paper 94.6 %;
no reading we tried reproduces the paper's numbers, so the report shows both, each labelled (docs/scoring.md).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import pandas as pd

# ZhoBLiMP Table 4, column "Human", keyed by the benchmark files' phenomenon names.
PAPER_HUMAN = {
    "BA": 0.962, "anaphor": 0.856, "argument_structure": 0.959, "classifier": 0.940,
    "control_raising": 0.945, "ellipsis": 0.921, "fci_licensing": 0.986, "nominal_expression": 0.923,
    "npi_licensing": 0.933, "passive": 0.950, "quantifiers": 0.964, "question": 0.975,
    "relativization": 0.902, "topicalization": 0.975, "verb_phrase": 0.939,
}
PAPER_HUMAN_OVERALL = 0.946  # §3.3: "an overall agreement of 94.6% with our gold labels"
HUMAN_CSV = Path("zhoblimp") / "data" / "human_validation_result.csv"  # under benchmarks_root()
_COLUMNS = ("UID", "correct", "total")


def default_path() -> Path:
    from probes.benchmarks.registry import benchmarks_root

    return benchmarks_root() / HUMAN_CSV


def load_human(path: Union[str, Path, None] = None) -> pd.DataFrame:
    """paradigm, correct, total per row of the CSV; a missing column or a bad count names the file and line."""
    path = Path(path) if path is not None else default_path()
    df = pd.read_csv(path)
    missing = [c for c in _COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(df.columns)})")
    for col in ("correct", "total"):
        bad = pd.to_numeric(df[col], errors="coerce")
        rows = df.index[bad.isna() | (bad < 0)]
        if len(rows):
            raise ValueError(f"{path}, line {rows[0] + 2}: {col}={df.loc[rows[0], col]!r} is not a count")
    if ((df["correct"] > df["total"]) | (df["total"] == 0)).any():
        i = df.index[(df["correct"] > df["total"]) | (df["total"] == 0)][0]
        raise ValueError(f"{path}, line {i + 2}: correct={df.loc[i, 'correct']} of total={df.loc[i, 'total']}")
    return df.rename(columns={"UID": "paradigm"})[["paradigm", "correct", "total"]]


def human_by_phenomenon(human: pd.DataFrame, paradigms: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Per phenomenon of ``paradigms`` (the benchmark's own labels): pooled human accuracy over its paradigms in
    the CSV, n_paradigms and the paper's Table 4 value; and the pooled overall accuracy."""
    m = paradigms[["paradigm", "phenomenon"]].drop_duplicates("paradigm").merge(human, on="paradigm")
    g = m.groupby("phenomenon", sort=True).agg(correct=("correct", "sum"), total=("total", "sum"),
                                               n_paradigms=("paradigm", "nunique")).reset_index()
    g["human_acc"] = g["correct"] / g["total"]
    g["human_acc_paper"] = g["phenomenon"].map(PAPER_HUMAN)
    overall = float(m["correct"].sum() / m["total"].sum()) if len(m) else float("nan")
    return g, overall


def zhoblimp_human(table: pd.DataFrame, path: Union[str, Path, None] = None,
                   benchmark: str = "zhoblimp") -> Optional[tuple[pd.DataFrame, float]]:
    """The human reference for the ``benchmark`` rows of an eval table, or None without such rows or file."""
    # "<benchmark>_all": the full benchmark at each run's last checkpoint (probes.final_all_pairs)
    rows = table[table["benchmark"].isin([benchmark, f"{benchmark}_all"])] if "benchmark" in table else table.iloc[:0]
    path = Path(path) if path is not None else default_path()
    if rows.empty or not path.is_file():
        return None
    return human_by_phenomenon(load_human(path), rows)


BLIMP_CSV = Path("blimp") / "raw_results" / "summary" / "human_validation_summary.csv"  # under benchmarks_root()


def blimp_human(table: pd.DataFrame, path: Union[str, Path, None] = None) -> Optional[tuple[pd.DataFrame, float]]:
    """BLiMP's human reference for the blimp rows of an eval table (None without rows or file): the BLiMP
    repository's per-paradigm validation means (Condition, total_mean); a phenomenon is the mean of its
    paradigms', overall the mean of all paradigms' -- 88.6 % over the 67 released ones, the human aggregate
    of Warstadt et al. 2020 (its README's 96.4 % is majority-vote agreement, another measure)."""
    from probes.benchmarks.registry import benchmarks_root

    rows = table[table["benchmark"].isin(["blimp", "blimp_all"])]
    path = Path(path) if path is not None else benchmarks_root() / BLIMP_CSV
    if rows.empty or not path.is_file():
        return None
    h = pd.read_csv(path).rename(columns={"Condition": "paradigm", "total_mean": "human_acc"})
    m = rows[["paradigm", "phenomenon"]].drop_duplicates("paradigm").merge(h[["paradigm", "human_acc"]], on="paradigm")
    return m.groupby("phenomenon", as_index=False)["human_acc"].mean(), float(m.human_acc.mean())
