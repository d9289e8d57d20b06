"""The form-vs-use view on planted curves: which probe feeds which group, group means, each group's AoA."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from probes.analysis.evalset import TABLE_COLUMNS, EvalSet, RunInfo
from probes.analysis.formuse import formuse_section, group_aoa, group_curves, probe_curves

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
    return pd.DataFrame(rows)


def test_probes_are_grouped_and_averaged(tmp_path):
    ev = _evalset(tmp_path)
    qa = pd.DataFrame([{"run": "r", "step": 8, "tokens": int(TOKENS[8]), "kp": kp, "metric": m, "value": v}
                       for kp, m, v in (("all", "FITB_acc", 0.3), ("all", "FITB_acc_random", 0.1),
                                        ("all", "TF_acc", 0.9), ("GS", "FITB_acc", 0.7))])
    probes = probe_curves(ev, "acc_mlp", _elagent(), qa)
    members = probes.groupby("probe").group.first().to_dict()
    # grammar_all (the last checkpoint only) and the per-paradigm key babi_base feed nothing
    assert members == {"grammar": "form", "blimp": "form", "elagent_word_order": "use", "elagent:babi": "use",
                       "syntax_qa:FITB_acc": "use"}
    fitb = probes[probes.probe == "syntax_qa:FITB_acc"].iloc[0]
    assert (fitb.step, fitb.acc, fitb.chance) == (8, 0.3, 0.1)
    g = group_curves(probes[probes.probe != "syntax_qa:FITB_acc"])
    at = g[g.step == 5].set_index("group")
    x = X[4]
    # form: grammar = mean(p1, p2) = form_acc, blimp = form_acc; use: word order 0.5 and bAbI, chance (0.5 + 0.25)/2
    assert at.loc["form", "acc"] == pytest.approx(form_acc(x)) and at.loc["form", "chance"] == 0.5
    assert at.loc["use", "acc"] == pytest.approx((0.5 + babi_acc(x)) / 2)
    assert at.loc["use", "chance"] == pytest.approx(0.375) and at.loc["use", "n_probes"] == 2


def test_each_group_gets_its_own_age_of_acquisition(tmp_path):
    ev = _evalset(tmp_path)
    aoa = group_aoa(group_curves(probe_curves(ev, "acc_mlp", _elagent()))).set_index("group")
    # form: a sigmoid from 0.5 to 1 halfway at x = 5; AoA is halfway between chance and the best fitted value
    best = form_acc(7.0)
    assert aoa.loc["form", "status"] == "ok"
    assert aoa.loc["form", "aoa_log10_tokens"] == pytest.approx(5 + math.log(((best - .5) / 2) / (.5 - (best - .5) / 2)) / 4,
                                                                abs=0.01)
    # use: (0.5 + babi)/2 = 0.375 + 0.1 sig(3(x - 6)), chance 0.375: below 0.5 all along, acquired all the same,
    # halfway between 0.375 and its best at x = 7
    b = sig(3.0)
    assert aoa.loc["use", "status"] == "ok" and aoa.loc["use", "chance"] == pytest.approx(0.375)
    assert aoa.loc["use", "aoa_log10_tokens"] == pytest.approx(6 + math.log((b / 2) / (1 - b / 2)) / 3, abs=0.01)


def test_section_writes_tables_figure_and_says_which_probe_feeds_which_group(tmp_path):
    ev = _evalset(tmp_path)
    md, figs = formuse_section(ev, tmp_path / "out", "acc_mlp", _elagent())
    text = "\n".join(md)
    assert "| form | `blimp` | 0.500 | 1 |" in text and "| use | `elagent:babi` | 0.250 | 1 |" in text
    assert figs[0][1].is_file() and figs[0][1].stat().st_size > 10_000
    s = pd.read_csv(tmp_path / "out" / "tables" / "formuse.csv")
    assert set(s.group) == {"form", "use"} and (s.n_seeds == 1).all()
    a = pd.read_csv(tmp_path / "out" / "tables" / "formuse_aoa.csv")
    assert list(a.status) == ["ok", "ok"] and a.aoa_tokens.between(1e4, 1e7).all()
    # without any use probe the view says so and draws form alone
    md, _ = formuse_section(EvalSet(ev.runs, ev.table[ev.table.benchmark == "grammar"], {}, ev.convention),
                            tmp_path / "out2")
    assert any("No use probe in these runs" in line for line in md)
