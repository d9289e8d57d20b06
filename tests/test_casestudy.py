"""The case study (ZhoBLiMP §5.4, Figure 6): phrase regions from template slots, mean-per-token deltas.

Eval files are written with probes.scoring.store.write_pairs (the contract a probed run writes), read back
by the analysis the way a report reads real runs."""
import numpy as np
import pandas as pd
import pytest

from probes.analysis.casestudy import CaseStudyConfig, case_study_runs, load_phrase_regions, pick_paradigms
from probes.analysis.evalset import EvalInputError, load_runs
from probes.analysis.report import ReportConfig, build_report
from probes.scoring.store import write_pairs

P = "npi_renhe_wh_question_subj"
SLOTS = [f"slot{i}" for i in range(7)]


def _pair(pid, good, bad, straddle=False):
    """One per-pair row; good/bad: per slot (lp, ntok), None = the pair has no slots; straddle: the
    good VP's first token also holds the end of the NP (服务|员会)."""
    row = {"benchmark": "zhoblimp", "paradigm": P, "phenomenon": "npi_licensing", "pair_id": str(pid),
           "good": "g", "bad": "b"}
    for side, slots in (("good", good), ("bad", bad)):
        lp = sum(x[0] for x in slots) if slots else -10.0
        n = sum(x[1] for x in slots) if slots else 5
        row[f"lp_{side}"], row[f"ntok_{side}"] = lp, n
        for r in ("prefix", "critical", "suffix"):  # the generic split, as score_pairs writes it
            row[f"lp_{side}_{r}"], row[f"ntok_{side}_{r}"] = lp / 3, 1
        for s, x in zip(SLOTS, slots or [None] * 7):
            row[f"lp_{side}_slot_{s}"] = np.nan if x is None else x[0]
            row[f"ntok_{side}_slot_{s}"] = np.nan if x is None else x[1]
            row[f"xtok_{side}_slot_{s}"] = np.nan if x is None else int(straddle and side == "good" and s == "slot3")
    return row


# 那个人会做什么？ / 任何人会做什么？ per slot (lp, ntok): 那|个|人|会|做|什么|？ ; 任何|(empty)|人|…
ROWS = [
    _pair(0, good=[(-2, 1), (-1, 1), (-3, 1), (-1, 1), (-4, 1), (-2, 2), (-0.5, 1)],
          bad=[(-5, 2), (0, 0), (-3, 1), (-2, 1), (-4, 1), (-2, 2), (-0.5, 1)]),
    _pair(1, good=[(-1, 1), (-1, 1), (-6, 2), (-1, 1), (-3, 1), (-3, 1), (-1, 1)],
          bad=[(-4, 1), (0, 0), (-4, 2), (-1, 1), (-6, 1), (-3, 1), (-1, 1)], straddle=True),
    _pair(2, good=None, bad=None),  # a pair the alignment missed: counted for accuracy only
]
# by hand. NP = slot0-2, VP = slot3-6
#   pair 0: NP good -6/3 = -2, bad -8/3 -> +0.6667 ; VP good -7.5/5 = -1.5, bad -8.5/5 = -1.7 -> +0.2
#   pair 1: NP good -8/4 = -2, bad -8/3 -> +0.6667 ; VP good -8/4 = -2,     bad -11/4 = -2.75 -> +0.75
NP_MEAN, VP_MEAN = (2 / 3 + 2 / 3) / 2, (0.2 + 0.75) / 2
NP_SUM, VP_SUM = (2 + 0) / 2, (1 + 3) / 2


def _run(tmp_path, name, seed, rows_by_step, extra=None):
    d = tmp_path / name
    d.mkdir()
    (d / "config.yaml").write_text(f"experiment: t\nseed: {seed}\nmodel:\n  name: pythia-14m\ndata:\n  budget_tokens: null\n")
    for step, rows in rows_by_step.items():
        df = pd.DataFrame(rows)
        if extra is not None:
            df = pd.concat([df, extra], ignore_index=True)
        write_pairs(df, d / "evals" / f"step{step}" / "zhoblimp.parquet", {"step": step, "tokens": step * 1000,
                                                                              "benchmark": "zhoblimp"})
    return d


def test_region_delta_is_mean_per_token_difference_averaged_over_pairs(tmp_path):
    d = _run(tmp_path, "r1", 1, {0: ROWS, 10: ROWS})
    runs, spec = case_study_runs(load_runs([d], cache=False), "zhoblimp", P, load_phrase_regions())
    assert spec.source == "template slots" and list(spec.regions) == ["NP", "VP"]
    last = runs[runs.step == 10].iloc[0]
    assert last.mean_NP == pytest.approx(NP_MEAN) and last.mean_VP == pytest.approx(VP_MEAN)
    assert last.sum_NP == pytest.approx(NP_SUM) and last.sum_VP == pytest.approx(VP_SUM)
    assert (last.n_region_pairs, last.n_straddle_pairs, last.n_pairs) == (2, 1, 3)
    # accuracy on all pairs (MLP): pair 0 -13.5/8 > -16.5/8, pair 1 -16/8 > -19/7, pair 2 a tie: wrong
    assert last.acc_mlp == pytest.approx(2 / 3)


def test_without_slots_the_generic_split_is_used_and_said(tmp_path):
    rows = [{k: v for k, v in r.items() if "_slot_" not in k} for r in ROWS]
    d = _run(tmp_path, "r1", 1, {0: rows, 10: rows})
    runs, spec = case_study_runs(load_runs([d], cache=False), "zhoblimp", P, load_phrase_regions())
    assert spec.source == "generic split" and list(spec.regions) == ["prefix", "critical", "suffix"]
    assert "generic split" in spec.describe() and runs.mean_critical.notna().all()
    # slot columns that are empty for this paradigm's pairs (its alignment failed): generic split too
    d = _run(tmp_path, "r2", 1, {0: [_pair(i, None, None) for i in range(3)]})
    runs, spec = case_study_runs(load_runs([d], cache=False), "zhoblimp", P, load_phrase_regions())
    assert spec.source == "generic split" and runs.mean_critical.notna().all()


def test_report_writes_the_case_study_figure_and_table_with_seed_bands(tmp_path):
    shifted = [dict(r, lp_good_slot_slot0=r["lp_good_slot_slot0"] - 0.5, lp_good=r["lp_good"] - 0.5) for r in ROWS]
    other = pd.DataFrame([dict(_pair(0, None, None), paradigm="other")])
    dirs = [_run(tmp_path, "s1", 1, {0: ROWS, 10: ROWS, 100: ROWS}, other),
            _run(tmp_path, "s2", 2, {0: shifted, 10: shifted, 100: shifted}, other)]
    out = tmp_path / "report"
    build_report(load_runs(dirs, cache=False), out, ReportConfig(), workers=1)
    figs = list((out / "figures").glob(f"case_study_zhoblimp_{P}_*.png"))
    assert len(figs) == 1 and figs[0].stat().st_size > 10_000
    s = pd.read_csv(out / "tables" / f"case_study_zhoblimp_{P}.csv")
    last = s[s.step == 10].iloc[0]
    # seed 2's good NP is 0.5 nats lower: over 3 tokens in pair 0, over 4 in pair 1
    assert last.n_seeds == 2 and last.mean_NP_mean == pytest.approx(NP_MEAN - (0.5 / 3 + 0.5 / 4) / 4)
    assert last.mean_NP_lo < last.mean_NP_mean < last.mean_NP_hi
    assert last.mean_VP_mean == pytest.approx(VP_MEAN) and last.sum_NP_mean == pytest.approx(NP_SUM - 0.25)
    md = (out / "report.md").read_text()
    assert f"## Case study: zhoblimp · {P}" in md and "NP = slot0 + slot1 + slot2" in md
    assert "difference in MLP per region" in md and "2 of 3 pairs" not in md  # counted over both runs
    assert "4 of 6 pairs" in md and figs[0].name in md
    assert "Pairs with a token straddling a region boundary" in md and "员会): 2 of 4." in md


def test_a_paradigm_without_a_grouping_shows_its_own_slots(tmp_path):
    # another paradigm's slot columns are in the same file; only this one's slots are regions
    rows = [dict(r, paradigm="mine") for r in ROWS[:2]]
    other = pd.DataFrame([{**ROWS[0], "paradigm": "x", "lp_good_slot_verb": -1.0, "ntok_good_slot_verb": 1}])
    d = _run(tmp_path, "r1", 1, {0: rows}, other)
    runs, spec = case_study_runs(load_runs([d], cache=False), "zhoblimp", "mine", load_phrase_regions())
    assert spec.regions == {s: [s] for s in SLOTS} and not spec.grouped
    assert runs.iloc[0].mean_slot0 == pytest.approx((-2 + 5 / 2 + -1 + 4) / 2)


def test_case_study_choice(tmp_path):
    d = _run(tmp_path, "r1", 1, {0: ROWS})
    ev = load_runs([d], cache=False)
    assert pick_paradigms(ev, "auto") == [("zhoblimp", P)] and pick_paradigms(ev, "none") == []
    with pytest.raises(EvalInputError, match="no run has paradigm 'npi_renhe'.*similar"):
        pick_paradigms(ev, "npi_renhe")
    assert CaseStudyConfig().quantity == "mean"  # the paper's quantity is the default


def test_cli_refuses_a_paradigm_no_run_has(tmp_path, capsys):
    from probes.analysis.report import main

    d = _run(tmp_path, "r1", 1, {0: ROWS})
    assert main([str(d), "--out", str(tmp_path / "out"), "--case-study", "no_such_paradigm"]) == 2
    assert "--case-study no_such_paradigm: no run has paradigm" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before any work
