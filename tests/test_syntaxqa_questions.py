"""Questions, balanced sampling, prompts, metrics and the OA formula on hand-computed numbers."""
from __future__ import annotations

import math
from collections import Counter

import pandas as pd
import pytest

from probes.syntaxqa.metrics import exact_match, overall_accuracy, strict_f1, words
from probes.syntaxqa.ptb import read_ptb
from probes.syntaxqa.questions import (balanced_sample, build_prompt, candidates, continuations, distractors, render,
                                       statistics_table)
from probes.syntaxqa.score import SyntaxQAConfig, build_items_and_reports, summarize

TREE = """\
( (S (NP-SBJ (DT The) (JJ old) (NN bank) ) (VP (VBD gave) (NP (PRP its) (NNS clients) ) (NP (DT a) (JJ small) (NN refund) )
   (PP-TMP (IN in) (NP (NNP May) ))) (. .) ))
( (S (NP-SBJ (NNP Ann) (CC and) (NNP Bo) ) (VP (MD will) (VP (VB paint) (NP (DT the) (NN fence) )
   (PP-LOC (IN behind) (NP (DT the) (NN house) )))) (. .) ))
"""


@pytest.fixture
def facts(tmp_path):
    p = tmp_path / "t.mrg"
    p.write_text(TREE)
    return read_ptb(p)[1]


def test_words_and_strict_f1():
    assert words("Pierre Vinken , 61 years old") == words("Pierre Vinken, 61 years old") == \
        ["pierre", "vinken", "61", "years", "old"]
    assert words("加速度很快。") == ["加", "速", "度", "很", "快"]
    assert exact_match("the board", ["The Board."]) == 1.0
    assert exact_match("board", ["the board"]) == 0.0
    # in-order overlap: "board the" vs "the board" shares one word in order → P = R = 1/2
    assert strict_f1("board the", ["the board"]) == pytest.approx(0.5)
    # "the big board" vs "the board": LCS 2, P = 2/3, R = 1 → F1 = 0.8
    assert strict_f1("the big board", ["the board"]) == pytest.approx(0.8)
    assert strict_f1("", ["the board"]) == 0.0
    assert strict_f1("x", ["y", "x"]) == 1.0  # best over the gold answers


def test_overall_accuracy_hand_computed():
    # (0.8 + 0.5 + (0.2 + 0.4) / 2) / 3 = 1.6 / 3
    assert overall_accuracy(0.8, 0.5, 0.2, 0.4) == pytest.approx(1.6 / 3)
    assert math.isnan(overall_accuracy(0.8, 0.5, float("nan"), 0.4))


def test_summarize_hand_computed():
    rows = [
        # kp, qtype, correct, f1, rand_acc, rand_f1
        ("GS", "TF", 1.0, None, 0.5, None), ("GS", "TF", 0.0, None, 0.5, None),
        ("GS", "MC", 1.0, None, 0.25, None), ("GS", "FITB", 1.0, 1.0, 0.25, 0.5),
        ("DO", "TF", 1.0, None, 0.5, None), ("DO", "MC", 0.0, None, 0.25, None),
        ("DO", "FITB", 0.0, 0.5, 0.5, 0.6),
    ]
    df = pd.DataFrame(rows, columns=["kp", "qtype", "correct", "f1", "rand_acc", "rand_f1"]).astype(
        {"f1": float, "rand_f1": float})
    s = summarize(df)
    # TF 2/3, MC 1/2, FITB acc 1/2, FITB F1 3/4 → (2/3 + 1/2 + 5/8) / 3
    assert s["TF_acc"] == pytest.approx(2 / 3) and s["FITB_F1"] == pytest.approx(0.75)
    assert s["OA"] == pytest.approx((2 / 3 + 0.5 + 0.625) / 3)
    # random: TF 1/2, MC 1/4, FITB acc 3/8, F1 11/20 → (0.5 + 0.25 + 0.4625) / 3
    assert s["OA_random"] == pytest.approx((0.5 + 0.25 + (0.375 + 0.55) / 2) / 3)
    assert s["GS/OA"] == pytest.approx((0.5 + 1.0 + 1.0) / 3)
    assert s["DO/OA"] == pytest.approx((1.0 + 0.0 + 0.25) / 3)
    assert s["n_items"] == 7 and "IO/OA" not in s
    no_gen = df.assign(correct=df["correct"].where(df.qtype != "FITB"), f1=float("nan"))
    s2 = summarize(no_gen)
    assert math.isnan(s2["OA"]) and math.isnan(s2["OA_random"]) and s2["OA_likelihood"] == pytest.approx((2 / 3 + 0.5) / 2)


def test_distractors_avoid_answers_and_anchor(facts):
    gs = next(f for f in facts if f.kp == "GS" and f.anchor_text == "gave")
    d = distractors(gs)
    assert gs.answer_text == "The old bank"
    assert "its clients" in d and "a small refund" in d
    assert not any("bank" in x or "gave" in x for x in d)  # nothing overlapping the answer or the verb


def test_render_every_type(facts):
    cands = candidates(facts, seed=3)
    by_type = Counter(c.qtype for c in cands)
    assert by_type["TF"] == 4 * by_type["FITB"] - 2 * sum(1 for f in facts if not distractors(f))
    gs = [c for c in cands if c.key.startswith(facts[0].sentence.sent_id) and "|GS|" in c.key]
    items = {c.variant or c.qtype: render(c, facts, 3) for c in gs}
    assert items["pos-True"].question == "'The old bank' is the subject of the verb 'gave'." and items["pos-True"].answer == "True"
    assert items["neg-False"].question == "'The old bank' is not the subject of the verb 'gave'." and items["neg-False"].answer == "False"
    assert items["pos-False"].answer == "False" and "'The old bank'" not in items["pos-False"].question
    mc = items["MC"]
    assert len(mc.options) == 4 and mc.options["ABCD".index(mc.answer)] == "The old bank" and mc.answer == mc.category
    fitb = items["FITB"]
    assert fitb.answer == "The old bank" and fitb.golds == ["The old bank"]
    # random FITB guess: any phrase of the sentence outside the anchor; exactly one of them is the answer
    n = 1 + len(distractors(facts[[f.kp == "GS" for f in facts].index(True)]))
    assert n == 5 and fitb.rand_acc == pytest.approx(1 / n)
    assert fitb.rand_f1 == pytest.approx(1 / n)  # no distractor shares a word with "The old bank"
    assert build_prompt(mc) == (
        "Read the sentence and answer the question with one of the options A, B, C or D.\n\n"
        "Sentence: The old bank gave its clients a small refund in May.\n"
        "Question: What is the subject of the verb 'gave'?\n"
        + "".join(f"{L}. {o}\n" for L, o in zip("ABCD", mc.options))
        + 'Answer: The answer is "')
    assert continuations(mc) == ["A", "B", "C", "D"] and continuations(items["pos-True"]) == ["True", "False"]
    ex = build_prompt(fitb, [items["pos-True"]])
    assert ex.split("\n\n")[1].endswith('Answer: The answer is "True"')


def test_balanced_sampling_is_seeded_and_capped(facts):
    cands = candidates(facts, seed=0)
    a = balanced_sample(cands, k=1, seed=0)
    assert a == balanced_sample(cands, k=1, seed=0)
    groups = Counter((c.qtype, c.kp, c.category) for c in cands)
    assert Counter((c.qtype, c.kp, c.category) for c in a) == {g: 1 for g in groups}
    k2 = balanced_sample(cands, k=2, seed=0)
    assert all(n == min(2, groups[g]) for g, n in Counter((c.qtype, c.kp, c.category) for c in k2).items())
    assert any(balanced_sample(cands, k=1, seed=s) != a for s in range(1, 6))
    capped = balanced_sample(cands, k=2, seed=0, max_items=5)
    assert len(capped) == 5 and len({(c.qtype, c.kp, c.category) for c in capped}) == 5  # round-robin


def test_build_items_statistics_and_fewshot(tmp_path):
    p = tmp_path / "t.mrg"
    p.write_text(TREE)
    cfg = SyntaxQAConfig(sources=[str(p)], knowledge_points=["GS", "DO", "PPA"], k_per_tuple=1, shots=1, shot_seeds=2)
    items = build_items_and_reports(cfg)[0]
    table = statistics_table(items)
    assert list(table.columns) == ["TF", "MC", "FITB", "total"] and table.loc["total", "total"] == len(items)
    assert table.loc["IO", "total"] == 0 and table.loc["GS", "TF"] == 4  # four TF answer categories × k=1
    for it in items:
        assert len(it.prompts) == 2
        blocks = it.prompts[0].split("\n\n")
        assert len(blocks) in (2, 3)  # instruction (+ exemplar from the other sentence, if any) + item
        if len(blocks) == 3:
            assert it.sentence not in blocks[1]  # an exemplar never shows the test sentence
    with pytest.raises(ValueError, match="syntax_qa.k_per_tuple"):
        SyntaxQAConfig(sources=[str(p)], k_per_tuple=0)
