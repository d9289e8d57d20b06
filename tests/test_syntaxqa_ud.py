"""UD .conllu reader and dependency patterns: hand-written sentences, broken heads, real treebanks."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from probes.syntaxqa.items import EmptyKnowledgePointWarning, SourceErrorWarning, collect_facts
from probes.syntaxqa.questions import distractors
from probes.syntaxqa.ud import ConlluError, read_conllu

SHARED = Path(__file__).resolve().parents[2] / "shared"
EWT_DEV = SHARED / "treebanks" / "ud_english_ewt" / "en_ewt-ud-dev.conllu"
GSD = SHARED / "treebanks" / "ud_chinese_gsdsimp"


def row(i, form, upos, head, rel, misc="_"):
    return f"{i}\t{form}\t{form.lower()}\t{upos}\t_\t_\t{head}\t{rel}\t_\t{misc}"


GAVE = "\n".join([
    "# sent_id = gave", "# text = The cat that I saw gave the boy a ball.",
    row(1, "The", "DET", 2, "det"), row(2, "cat", "NOUN", 6, "nsubj"), row(3, "that", "PRON", 5, "obj"),
    row(4, "I", "PRON", 5, "nsubj"), row(5, "saw", "VERB", 2, "acl:relcl"), row(6, "gave", "VERB", 0, "root"),
    row(7, "the", "DET", 8, "det"), row(8, "boy", "NOUN", 6, "iobj"), row(9, "a", "DET", 10, "det"),
    row(10, "ball", "NOUN", 6, "obj", "SpaceAfter=No"), row(11, ".", "PUNCT", 6, "punct"),
]) + "\n\n"
HAPPY = "\n".join([
    "# sent_id = happy",
    row(1, "She", "PRON", 4, "nsubj"), row(2, "is", "AUX", 4, "cop"), row(3, "not", "PART", 4, "advmod"),
    row(4, "happy", "ADJ", 0, "root"), row(5, "with", "ADP", 7, "case"), row(6, "the", "DET", 7, "det"),
    row(7, "results", "NOUN", 4, "obl", "SpaceAfter=No"), row(8, ".", "PUNCT", 4, "punct"),
]) + "\n\n"
DONT = "\n".join([
    "# sent_id = dont",
    row(1, "I", "PRON", 4, "nsubj"), "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_",
    row(2, "do", "AUX", 4, "aux"), row(3, "n't", "PART", 4, "advmod"), row(4, "like", "VERB", 0, "root"),
    row(5, "cats", "NOUN", 4, "obj"), row(6, "and", "CCONJ", 7, "cc"), row(7, "dogs", "NOUN", 5, "conj"),
    "7.1\tlike\tlike\tVERB\t_\t_\t_\t_\t0:root\t_",
    row(8, "in", "ADP", 10, "case"), row(9, "the", "DET", 10, "det"),
    row(10, "house", "NOUN", 4, "obl", "SpaceAfter=No"), row(11, ".", "PUNCT", 4, "punct"),
]) + "\n\n"
BROKEN = [
    "\n".join(["# sent_id = out-of-range", row(1, "Dogs", "NOUN", 2, "nsubj"), row(2, "bark", "VERB", 7, "root")]),
    "\n".join(["# sent_id = cycle", row(1, "A", "NOUN", 2, "nsubj"), row(2, "B", "VERB", 1, "obj"),
               row(3, "C", "VERB", 0, "root")]),
    "\n".join(["# sent_id = two-roots", row(1, "Go", "VERB", 0, "root"), row(2, "now", "ADV", 0, "root")]),
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _facts(facts, sent_id):
    return {(f.kp, f.anchor_text, f.answer_text, f.category) for f in facts if f.sentence.sent_id == sent_id}


def test_subtrees_are_whole_phrases(tmp_path):
    sents, facts, errors = read_conllu(_write(tmp_path, "en_x.conllu", GAVE + HAPPY + DONT))
    assert errors == []
    assert [s.text for s in sents] == ["The cat that I saw gave the boy a ball.", "She is not happy with the results.",
                                       "I don't like cats and dogs in the house."]
    gave = _facts(facts, "gave")
    assert ("GS", "gave", "The cat that I saw", "NOUN") in gave
    assert ("GS", "saw", "I", "PRON") in gave
    assert ("IO", "gave", "the boy", "NOUN") in gave
    assert ("DO", "gave", "a ball", "NOUN") in gave
    assert ("ADJ", "The cat", "that I saw", "relative") in gave
    assert ("MVP", "", "gave", "single") in gave
    # distractors: content-word subtrees and verb groups only (no lone "the"), none overlapping an answer
    gs = next(f for f in facts if f.kp == "GS" and f.anchor_text == "gave")
    assert distractors(gs) == ["the boy", "a ball"]
    mvp = next(f for f in facts if f.kp == "MVP" and f.sentence.sent_id == "gave")
    assert "saw" in distractors(mvp) and "that I saw" in distractors(mvp)
    happy = _facts(facts, "happy")
    assert ("SC", "is", "happy", "ADJ") in happy  # negation and the obl stay out of the complement
    assert ("GS", "is", "She", "PRON") in happy
    dont = _facts(facts, "dont")
    assert ("MVP", "", "don't like", "multi") in dont  # multiword token rendered as one word
    assert ("DO", "like", "cats and dogs", "NOUN") in dont
    assert ("CO", "cats", "dogs", "NOUN") in dont
    assert ("PPA", "in the house", "don't like", "verb") in dont
    assert ("ADV", "like", "in the house", "obl") in dont


def test_broken_heads_are_reported_and_skipped(tmp_path):
    text = GAVE + "\n\n".join(BROKEN) + "\n\n" + HAPPY
    p = _write(tmp_path, "en_broken.conllu", text)
    sents, facts, errors = read_conllu(p)
    assert [s.sent_id for s in sents] == ["gave", "happy"]
    assert len(errors) == 3 and all(isinstance(e, ConlluError) for e in errors)
    msgs = [str(e) for e in errors]
    lines = text.split("\n")
    bark_line = next(i for i, r in enumerate(lines, start=1) if r.startswith("2\tbark"))
    assert msgs[0].startswith(f"{p}:{bark_line}:") and "head 7" in msgs[0]
    assert "cycle" in msgs[1] and "2 roots" in msgs[2]
    with pytest.warns(SourceErrorWarning, match="3 unreadable"):
        out, reports = collect_facts([str(p)], ["GS", "SC", "DO", "IO", "MVP", "ADJ"])
    assert reports[0].sentences == 2 and len(reports[0].errors) == 3


def test_empty_knowledge_point_is_reported(tmp_path):
    p = _write(tmp_path, "en_small.conllu", HAPPY)
    with pytest.warns(EmptyKnowledgePointWarning, match=r"no items for knowledge point\(s\) DO, IO"):
        facts, reports = collect_facts([str(p)], ["GS", "DO", "IO"])
    assert reports[0].empty == ["DO", "IO"] and reports[0].facts == {"GS": 1, "DO": 0, "IO": 0}


def test_chinese_relative_clause_precedes_the_noun(tmp_path):
    zh = "\n".join([
        "# sent_id = zh1",
        row(1, "我", "PRON", 2, "nsubj", "SpaceAfter=No"), row(2, "买", "VERB", 4, "acl:relcl", "SpaceAfter=No"),
        row(3, "的", "PART", 2, "mark:rel", "SpaceAfter=No"), row(4, "书", "NOUN", 6, "nsubj", "SpaceAfter=No"),
        row(5, "很", "ADV", 6, "advmod", "SpaceAfter=No"), row(6, "好", "ADJ", 0, "root", "SpaceAfter=No"),
        row(7, "。", "PUNCT", 6, "punct", "SpaceAfter=No"),
    ]) + "\n"
    sents, facts, errors = read_conllu(_write(tmp_path, "zh_hand.conllu", zh))
    assert sents[0].lang == "zh" and sents[0].text == "我买的书很好。"
    assert ("ADJ", "书", "我买的", "relative") in _facts(facts, "zh1")


def test_real_treebank_counts(shared):
    shared(*EWT_DEV.relative_to(SHARED).parts), shared(*GSD.relative_to(SHARED).parts)
    en_sents, en, en_err = read_conllu(EWT_DEV)
    zh, zh_sents = [], []
    for p in sorted(GSD.glob("*.conllu")):
        s, f, e = read_conllu(p)
        zh, zh_sents = zh + f, zh_sents + s
        assert e == []
    assert en_err == []
    # published: each treebank's stats.xml (EWT dev 2,001 sentences; GSDSimp dev 500 + test 500)
    assert (len(en_sents), len(zh_sents)) == (2001, 1000)
    print(dict(Counter(f.kp for f in en)), dict(Counter(f.kp for f in zh)))
    assert Counter(f.kp for f in en) == EXPECTED_EWT_DEV
    assert Counter(f.kp for f in zh) == EXPECTED_GSDSIMP


# Facts per knowledge point: REGRESSION PINS -- what our UD patterns (probes/syntaxqa/ud.py) extracted when
# they were written, not a published or hand-counted figure (the paper, papers/000, builds its questions
# from PTB, not UD). A change here is a change of patterns: check it on sentences by hand, then re-pin.
EXPECTED_EWT_DEV = {"GS": 2008, "SC": 491, "DO": 1124, "IO": 73, "MVP": 1000, "ADJ": 355, "ADV": 1758, "CO": 411, "PPA": 1538}
EXPECTED_GSDSIMP = {"GS": 1634, "SC": 188, "DO": 1386, "IO": 14, "MVP": 812, "ADJ": 158, "ADV": 1652, "CO": 367, "PPA": 557}
