"""ZhoBLiMP's human validation as a reference: our reading of the authors' CSV, and the report's line/column."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from probes.analysis import report
from probes.benchmarks.registry import benchmarks_root
from probes.analysis.table4 import PAPER_HUMAN, PAPER_HUMAN_OVERALL, default_path, human_by_phenomenon, load_human
from synthetic import RunSpec, log_spaced_steps, write_run

ZHOBLIMP = benchmarks_root() / "zhoblimp" / "data" / "ZhoBLiMP"


def _released() -> pd.DataFrame:
    """paradigm -> phenomenon as the released benchmark files label them (first line of each file)."""
    rows = [json.loads(f.open(encoding="utf-8").readline()) for f in sorted(ZHOBLIMP.glob("*.jsonl"))]
    return pd.DataFrame({"paradigm": [r["UID"] for r in rows], "phenomenon": [r["phenomenon"] for r in rows]})


def test_our_reading_of_the_human_csv_beside_the_papers_figure():
    human = load_human(default_path())
    assert len(human) == 129  # 118 released + 11 excluded paradigms
    table, overall = human_by_phenomenon(human, _released())
    # Counted by hand (awk over the CSV): the 118 released paradigms pool 2787 correct of 2968.
    assert (int(table.correct.sum()), int(table.total.sum())) == (2787, 2968)
    assert overall == pytest.approx(2787 / 2968) == pytest.approx(0.939, abs=5e-4)
    ba = table.set_index("phenomenon").loc["BA"]
    assert (ba.correct, ba.total, ba.n_paradigms) == (285, 304, 13)
    assert len(table) == 15 and table.n_paradigms.sum() == 118
    # The paper's 94.6 % (§3.3) and Table 4 column, quoted beside ours: ours is 0.7 points lower and
    # no reading of this CSV we tried reproduces it (probes/analysis/table4.py lists them).
    assert PAPER_HUMAN_OVERALL == 0.946 and abs(overall - PAPER_HUMAN_OVERALL) < 0.01
    assert set(PAPER_HUMAN) == set(table.phenomenon)
    assert table.set_index("phenomenon").human_acc_paper["BA"] == 0.962


def test_a_bad_human_csv_names_file_and_line(tmp_path):
    bad = tmp_path / "h.csv"
    bad.write_text("UID,correct,total\nBA_deletion,28,28\nBA_inversion,x,22\n")
    with pytest.raises(ValueError, match=r"h.csv, line 3: correct='x' is not a count"):
        load_human(bad)
    bad.write_text("UID,correct\nBA_deletion,28\n")
    with pytest.raises(ValueError, match=r"h.csv: missing column\(s\) total"):
        load_human(bad)


def test_the_report_draws_the_human_baseline_per_phenomenon(tmp_path):
    rng = np.random.default_rng(0)
    steps = log_spaced_steps(8, 1000)
    paradigms = ["BA_deletion", "BA_inversion", "anaphor_gender_agreement"]
    runs = []
    for model in ("pythia-14m", "pythia-70m"):
        spec = RunSpec(model=model, budget=10**7, seed=0, tokens_per_step=1000, steps=list(steps), benchmark="zhoblimp")
        curves = np.tile(np.linspace(0.5, 0.8, len(steps))[:, None], (1, 3))
        runs.append(write_run(tmp_path / model, spec, curves, paradigms, ["BA", "BA", "anaphor"], 50, rng))
    out = tmp_path / "rep"
    assert report.main([*map(str, runs), "--out", str(out), "--n-boot", "50"]) == 0
    md = (out / "report.md").read_text()
    # the Table-4-style table: our models, then the human rows labelled by source
    assert "| _human (validation CSV, our pooled reading)_ |" in md and "| _human (paper)_ |" in md
    t = pd.read_csv(out / "tables" / "table4_zhoblimp.csv").set_index("row")
    csv = pd.read_csv(default_path()).set_index("UID")
    want = csv.loc[["BA_deletion", "BA_inversion"]]
    assert t.loc["human (validation CSV, our pooled reading)", "BA"] == pytest.approx(want.correct.sum() / want.total.sum())
    assert t.loc["human (paper)", "anaphor"] == 0.856
    assert {"pythia-14m · 10M", "pythia-70m · 10M"} <= set(t.index)


def test_blimps_human_aggregate_is_the_mean_of_its_67_paradigms(shared):
    """Warstadt et al. 2020's human aggregate, 88.6 %, is the mean of the 67 released paradigms' validation
    means in the BLiMP repository's CSV (it lists 69 conditions; the README's 96.4 % is majority agreement)."""
    import json

    import pandas as pd

    from probes.analysis.table4 import blimp_human

    rows = []
    for f in sorted(shared("benchmarks", "blimp", "data").glob("*.jsonl")):
        first = json.loads(f.read_text().splitlines()[0])
        rows.append({"benchmark": "blimp", "paradigm": first["UID"], "phenomenon": first["linguistics_term"]})
    per_phen, overall = blimp_human(pd.DataFrame(rows))
    assert len(rows) == 67 and round(100 * overall, 1) == 88.6 and len(per_phen) == 13
