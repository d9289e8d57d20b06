"""The minimal-pairs-vs-generated-tasks view on planted curves: which probe feeds which group, group means of
chance-corrected scores computed by hand, each group's AoA."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from probes.analysis.evalset import TABLE_COLUMNS, EvalSet, RunInfo
from probes.analysis.formuse import formuse_section, group_aoa, group_curves, probe_curves
from probes.elagent.report import task_rows as elagent_tasks
from probes.syntaxqa.report import task_rows as syntax_qa_tasks

X = np.linspace(3, 7, 9)  # log10 tokens of the trained checkpoints; step 0 has 0 tokens
TOKENS = np.concatenate([[0], 10 ** X]).round().astype(int)


def sig(z):
    return 1 / (1 + np.exp(-z))


def form_acc(x):
    return 0.5 + 0.5 * sig(4 * (x - 5))  # rises from chance 0.5, halfway at x = 5


def babi_acc(x):
    return 0.25 + 0.2 * sig(3 * (x - 6))  # chance 0.25 (four options); never above 0.5


def _evalset(tmp_path) -> EvalSet:
    rows = []
    for step, tok in enumerate(TOKENS):
        x = np.log10(tok) if tok else 2.0
        for bench, par, acc in (("grammar", "p1", form_acc(x) + 0.1), ("grammar", "p2", form_acc(x) - 0.1),
                                ("blimp", "q", form_acc(x)), ("elagent_word_order", "all_rules", 0.5),
                                ("grammar_all", "p1", 0.0)):
            if bench == "grammar_all" and step != len(TOKENS) - 1:
                continue
            rows.append({"run": "r", "model": "tiny", "budget": pd.NA, "seed": 0, "step": step, "tokens": int(tok),
                         "benchmark": bench, "phenomenon": "ph", "paradigm": par, "n_pairs": 10, "acc_mlp": acc,
                         "acc_sum": acc})
    table = pd.DataFrame(rows).reindex(columns=TABLE_COLUMNS)
    return EvalSet([RunInfo("r", str(tmp_path), "tiny", None, 0)], table, {}, "start_token_all_tokens_v2")


def _elagent() -> pd.DataFrame:
    rows = []
    for step, tok in enumerate(TOKENS):
        x = np.log10(tok) if tok else 2.0
        rows += [{"run": "r", "step": step, "tokens": int(tok), "key": "babi", "metric": "acc", "value": babi_acc(x)},
                 {"run": "r", "step": step, "tokens": int(tok), "key": "babi", "metric": "acc_random", "value": 0.25},
                 {"run": "r", "step": step, "tokens": int(tok), "key": "babi_base", "metric": "acc", "value": 1.0}]
    return elagent_tasks(pd.DataFrame(rows))


def test_probes_are_grouped_and_averaged(tmp_path):
    ev = _evalset(tmp_path)
    qa = pd.DataFrame([{"run": "r", "mode": "likelihood", "step": 8, "tokens": int(TOKENS[8]), "kp": kp, "metric": m,
                        "value": v}
                       for kp, m, v in (("all", "FITB_acc", 0.3), ("all", "FITB_acc_random", 0.1),
                                        ("all", "TF_acc", 0.9), ("GS", "FITB_acc", 0.7))])
    probes = probe_curves(ev, "acc_mlp", [_elagent(), syntax_qa_tasks(qa)])
    members = probes.groupby("probe").group.first().to_dict()
    # grammar_all (the last checkpoint only) and the per-paradigm key babi_base feed nothing
    P, T = "minimal_pairs", "generated_tasks"
    assert members == {"grammar": P, "blimp": P, "elagent_word_order": T, "elagent:babi": T, "syntax_qa:FITB_acc": T}
    fitb = probes[probes.probe == "syntax_qa:FITB_acc"].iloc[0]
    assert (fitb.step, fitb.acc, fitb.chance) == (8, 0.3, 0.1) and fitb.score == pytest.approx(0.2 / 0.9)
    g = group_curves(probes[probes.probe != "syntax_qa:FITB_acc"])
    at = g[g.step == 5].set_index("group")
    x = X[4]
    # minimal pairs: grammar = mean(p1, p2) = form_acc and blimp = form_acc, each (acc - 0.5) / 0.5
    assert at.loc[P, "score"] == pytest.approx((form_acc(x) - 0.5) / 0.5) and at.loc[P, "chance"] == 0
    # generated tasks: word order at chance scores 0; bAbI (acc - 1/4) / (3/4); their mean. (A mean of raw
    # accuracies, (0.5 + babi) / 2 against a mixed chance of 0.375, is what this replaced.)
    babi = (babi_acc(x) - 0.25) / 0.75
    assert at.loc[T, "score"] == pytest.approx((0.0 + babi) / 2) and at.loc[T, "n_probes"] == 2
    assert at.loc[T, "score"] == pytest.approx(0.2 * sig(3 * (x - 6)) / 0.75 / 2)


def test_each_group_gets_its_own_age_of_acquisition(tmp_path):
    ev = _evalset(tmp_path)
    aoa = group_aoa(group_curves(probe_curves(ev, "acc_mlp", [_elagent()]))).set_index("group")
    # minimal pairs: score sig(4(x - 5)) from 0 to its best at x = 7, sig(8); AoA halfway between 0 and the best
    h = sig(8.0) / 2
    assert aoa.loc["minimal_pairs", "status"] == "ok" and aoa.loc["minimal_pairs", "chance"] == 0
    assert aoa.loc["minimal_pairs", "aoa_log10_tokens"] == pytest.approx(5 + math.log(h / (1 - h)) / 4, abs=0.01)
    # generated tasks: (0 + (babi - 1/4) / (3/4)) / 2 = (2/15) sig(3(x - 6)); halfway to its best at x = 7,
    # (2/15) sig(3), where sig(3(x - 6)) = sig(3) / 2
    b = sig(3.0)
    assert aoa.loc["generated_tasks", "status"] == "ok"
    assert aoa.loc["generated_tasks", "aoa_log10_tokens"] == pytest.approx(6 + math.log((b / 2) / (1 - b / 2)) / 3,
                                                                          abs=0.01)
    assert aoa.loc["generated_tasks", "final_score"] == pytest.approx(2 / 15 * b, rel=1e-6)


def test_section_writes_tables_figure_and_says_which_probe_feeds_which_group(tmp_path):
    ev = _evalset(tmp_path)
    md, figs = formuse_section(ev, tmp_path / "out", "acc_mlp", [_elagent()])
    text = "\n".join(md)
    assert "| minimal_pairs | `blimp` | 0.500 | 1 |" in text and "| generated_tasks | `elagent:babi` | 0.250 | 1 |" in text
    assert "FAC²E" in text and "not FAC²E's knowledge-vs-use measure" in text  # named for what it is
    assert figs[0][1].is_file() and figs[0][1].stat().st_size > 10_000
    s = pd.read_csv(tmp_path / "out" / "tables" / "formuse.csv")
    assert set(s.group) == {"minimal_pairs", "generated_tasks"} and (s.n_seeds == 1).all()
    a = pd.read_csv(tmp_path / "out" / "tables" / "formuse_aoa.csv")
    assert list(a.status) == ["ok", "ok"] and a.aoa_tokens.between(1e4, 1e7).all()
    # without any generated task the view says so and draws the minimal pairs alone
    md, _ = formuse_section(EvalSet(ev.runs, ev.table[ev.table.benchmark == "grammar"], {}, ev.convention),
                            tmp_path / "out2")
    assert any("No generated-task probe in these runs" in line for line in md)
