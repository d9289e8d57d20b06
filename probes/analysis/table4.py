"""The Table-4-style table: final accuracy per model (x budget) x phenomenon, beside humans and the paper
(docs/report.md). "overall" is the mean over paradigms, as the paper's (its Zh-Pythia-14M column averages to
66.4 over phenomena but reads 69.9 overall).

Humans (ZhoBLiMP's data/human_validation_result.csv): a phenomenon's accuracy is sum(correct) / sum(total) pooled
over the paradigms the benchmark files assign to it (the CSV's phenomenon column is blank for 13 rows): 93.9 %
overall; no reading we tried gives the paper's 94.6 %, so the report shows both, each labelled."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import pandas as pd

from probes.analysis.bands import CLAIMS_95, COVERAGE
from probes.analysis.paperfigs import model_order, pick
from probes.analysis.scaling import budget_label, budget_order
from probes.benchmarks.registry import benchmarks_root

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
    """BLiMP's human reference for the blimp rows (None without rows or file): means of its per-paradigm validation
    means (total_mean), 88.6 % over the 67 released paradigms as in Warstadt et al. 2020 (its README's 96.4 % is
    majority-vote agreement, another measure)."""
    rows = table[table["benchmark"].isin(["blimp", "blimp_all"])]
    path = Path(path) if path is not None else benchmarks_root() / BLIMP_CSV
    if rows.empty or not path.is_file():
        return None
    h = pd.read_csv(path).rename(columns={"Condition": "paradigm", "total_mean": "human_acc"})
    m = rows[["paradigm", "phenomenon"]].drop_duplicates("paradigm").merge(h[["paradigm", "human_acc"]], on="paradigm")
    return m.groupby("phenomenon", as_index=False)["human_acc"].mean(), float(m.human_acc.mean())


# ZhoBLiMP Table 4, Zh-Pythia columns (3B tokens), keyed by the benchmark files' phenomenon names.
_PHEN = list(PAPER_HUMAN)  # the same 15 phenomena, in the paper's column order
PAPER_ZH_PYTHIA = {
    "Zh-Pythia-14M": dict(zip(_PHEN, [75.1, 43.6, 65.1, 48.6, 82.7, 34.9, 71.6, 58.1, 53.4, 67.9, 51.4, 77.0,
                                      85.1, 91.9, 89.8]), overall=69.9),
    "Zh-Pythia-160M": dict(zip(_PHEN, [83.9, 39.9, 75.5, 71.4, 92.8, 46.5, 86.8, 70.5, 72.0, 80.5, 50.9, 92.1,
                                       89.3, 86.4, 94.7]), overall=80.3),
    "Zh-Pythia-1.4B": dict(zip(_PHEN, [86.1, 56.4, 77.5, 79.3, 94.2, 50.9, 91.3, 72.8, 81.8, 80.6, 49.9, 92.0,
                                       93.0, 88.2, 94.0]), overall=83.0),
}
# the paper's column heads, for a table that fits a page
SHORT = {"BA": "BA", "anaphor": "Anaph", "argument_structure": "ArgStr", "classifier": "Clf",
         "control_raising": "CtrlR", "ellipsis": "Ellip", "fci_licensing": "FCI", "nominal_expression": "NomE",
         "npi_licensing": "NPI", "passive": "Pass", "quantifiers": "Quant", "question": "Quest",
         "relativization": "Rel", "topicalization": "Topic", "verb_phrase": "VP"}


def table4(final: pd.DataFrame, benchmark: str, metric: str, human: tuple[pd.DataFrame, float] | None = None,
           heldout: pd.DataFrame | None = None, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per model x budget (source "ours"), then the reference rows; a column per phenomenon and "overall"
    (accuracies in [0, 1]), `val_loss` from `heldout` (heldout.final_heldout), and with `cells` (bands.final_bands
    per phenomenon and "overall") each cell's 95 % interval as <column>_lo / <column>_hi and the row's `band`."""
    f = final[final.benchmark == benchmark]
    phens = sorted(f.phenomenon.unique())
    rows = []
    for budget in budget_order(f):
        fb = pick(f, budget=budget)
        for model in model_order(fb):
            g = fb[fb.model == model]
            row = {"row": f"{model} · {budget_label(budget)}", "source": f"ours ({benchmark}, last checkpoint)",
                   "model": model, "budget": budget, "n_seeds": int(g.n_seeds.max()),
                   "n_paradigms": int(g.paradigm.nunique())}
            row.update(g.groupby("phenomenon")[metric].mean().to_dict())
            row["overall"] = float(g[metric].mean())
            if heldout is not None:
                row["val_loss"] = pick(heldout, model=model, budget=budget).val_loss.mean()
            if cells is not None:
                c = pick(cells, benchmark=benchmark, model=model, budget=budget)
                row["band"] = "/".join(sorted(set(c.band)))
                row.update({f"{ph}_{e}": v for ph, lo, hi in zip(c.phenomenon, c.lo, c.hi)
                            for e, v in (("lo", lo), ("hi", hi))})
            rows.append(row)
    if benchmark.removesuffix("_all") == "zhoblimp":
        if human is not None:
            h, overall = human
            rows.append({"row": "human (validation CSV, our pooled reading)", "source": "authors' CSV",
                         **dict(zip(h.phenomenon, h.human_acc)), "overall": overall})
        rows.append({"row": "human (paper)", "source": "ZhoBLiMP Table 4", **PAPER_HUMAN,
                     "overall": PAPER_HUMAN_OVERALL})
        for name, vals in PAPER_ZH_PYTHIA.items():
            rows.append({"row": f"paper: {name} · 3B", "source": "ZhoBLiMP Table 4",
                         **{k: v / 100 for k, v in vals.items()}})
    elif human is not None:  # BLiMP's (blimp_human)
        h, overall = human
        rows.append({"row": "human (validation CSV, mean of paradigms)", "source": "BLiMP repository",
                     **dict(zip(h.phenomenon, h.human_acc)), "overall": overall})
    out = pd.DataFrame(rows)
    cols = ["row", "source", "model", "budget", "n_seeds", "n_paradigms", *phens, "overall"] + \
        (["val_loss"] if heldout is not None else [])
    if cells is not None:
        cols += ["band", *[f"{p}_{e}" for p in [*phens, "overall"] for e in ("lo", "hi")]]
    out = out.reindex(columns=cols)
    return out.astype({"budget": "Int64", "n_seeds": "Int64", "n_paradigms": "Int64"})


def table4_markdown(t: pd.DataFrame) -> str:
    """Percentages with one decimal, the paper's short column heads; reference rows in italics; the overall
    cell's interval in a column after it where the table has intervals (the others are in its CSV), with its
    measured coverage where it cannot reach 95 % (bands.band_label)."""
    fixed = ("row", "source", "model", "budget", "n_seeds", "n_paradigms", "band", "val_loss")
    phens = [c for c in t.columns if c not in fixed and not c.endswith(("_lo", "_hi"))]
    ci, val = "overall_lo" in t.columns, "val_loss" in t.columns
    head = "| model · corpus | seeds | " + " | ".join(SHORT.get(p, p) for p in phens) + (" | interval" if ci else "") \
        + (" | held-out loss" if val else "") + " |\n"
    head += "|---|---|" + "---:|" * (len(phens) + ci + val) + "\n"
    body = ""
    for d in t.to_dict("records"):
        ours = str(d["source"]).startswith("ours")
        name = d["row"] if ours else f"_{d['row']}_"
        seeds = "" if pd.isna(d["n_seeds"]) else str(d["n_seeds"])
        vals = ["" if pd.isna(d[p]) else f"{100 * d[p]:.1f}" for p in phens]
        if ci:
            weak = [k for k in str(d["band"]).split("/") if k not in CLAIMS_95 and not pd.isna(d["band"])]
            vals.append("" if pd.isna(d["overall_lo"]) else f"{100 * d['overall_lo']:.1f}–{100 * d['overall_hi']:.1f}"
                        + "".join(f" ({COVERAGE.get(k, '')})" for k in weak))
        if val:
            vals.append("" if pd.isna(d["val_loss"]) else f"{d['val_loss']:.3f}")
        body += f"| {name} | {seeds} | " + " | ".join(vals) + " |\n"
    legend = ", ".join(f"{SHORT[p]} = {p}" for p in phens if p in SHORT and SHORT[p] != p)
    return head + body + (f"\n{legend}.\n" if legend else "")
