"""The engine on the real ZhoBLiMP templates, phrases and vocabulary (skipped without ../shared;
failing under CI=true).

Generated pairs are checked against the vocabulary TSV read here with the csv module."""
import csv
import json
from pathlib import Path

import pytest

from probes.benchmarks.generator import GrammarError
from probes.benchmarks.zhoblimp_templates import load_engine, read_phrases, read_template, read_vocabulary, template_paths
from tests.probeutil import generate_pairs as generate

SHARED = Path(__file__).resolve().parents[2] / "shared"
ROOT = SHARED / "benchmarks" / "zhoblimp"


@pytest.fixture(autouse=True)
def _real_templates(shared):
    shared("benchmarks", "zhoblimp", "projects")


@pytest.fixture(scope="module")
def engine():
    return load_engine(ROOT)


@pytest.fixture(scope="module")
def lex():
    out = {}
    with open(ROOT / "assets" / "zh_vocab_saved.tsv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["expression"]:
                out.setdefault(row["expression"], []).append({k: set(filter(None, v.split("/"))) for k, v in row.items() if v})
    return out


def feat(lex, word, key):
    assert word in lex, f"{word!r} is not in the ZhoBLiMP vocabulary"
    return set().union(*(e.get(key, set()) for e in lex[word]))


def slots(pair):
    return [(pair.good[slice(*r.good)], pair.bad[slice(*r.bad)]) for r in pair.regions]


def pairs_for(engine, stem, n=60):
    return generate(engine, read_template(ROOT / "projects" / "ZhoBLiMP" / f"{stem}.json"), n, seed=0)


def test_readers_on_the_real_files():
    vocab = read_vocabulary(ROOT / "assets" / "zh_vocab_saved.tsv")
    with open(ROOT / "assets" / "zh_vocab_saved.tsv", encoding="utf-8") as f:
        named = sum(1 for line in list(f)[1:] if line.split("\t")[0].strip())
    assert len(vocab.entries) == named  # blank rows and the one nameless row are dropped
    assert feat_set(vocab, "他", "gender") == {"male"}
    phrases = read_phrases(ROOT / "assets" / "zh_phrase.json")
    # the files' own counts, by hand: zh_phrase.json has 23 keys and Person 2 alternatives (json.load); the
    # folder projects/ZhoBLiMP holds 131 template files (more than the 118 released paradigms; the
    # templates carry their own names, so which extra 13 they are is not read off the names)
    assert len(phrases) == 23 and len(phrases["Person"]) == 2
    assert len(template_paths(ROOT)) == 131


def feat_set(vocab, word, key):
    return set().union(*(e.values(key) for e in vocab.by_expression[word]))


def test_all_131_templates_generate(engine):
    pairs = [p for path in template_paths(ROOT) for p in generate(engine, read_template(path), 15, seed=0)]
    assert len(pairs) == 131 * 15
    assert len({p.paradigm for p in pairs}) == 131
    assert all(p.good != p.bad and " " not in p.good for p in pairs)


def test_lexical_and_literal_slots(engine, lex):
    for p in pairs_for(engine, "classifier_noun_agreement_zhiheng"):
        s = slots(p)
        assert s[0][0] in {"这边", "那边"} and s[1][0] in {"站", "坐", "躺"} and s[2] == ("着", "着")
        assert [i for i, (g, b) in enumerate(s) if g != b] == [4]
        gm, bm, noun = s[4][0], s[4][1], s[5][0]
        assert feat(lex, gm, "pos") == {"M"} and "person" in feat(lex, gm, "subcat")
        assert feat(lex, bm, "subcat") & {"food", "beverage", "animal"}
        assert "person" in feat(lex, noun, "subcat") and feat(lex, s[3][0], "pos") == {"CD"}


def test_matched_and_mismatched_gender(engine, lex):
    for p in pairs_for(engine, "anaphor_gender_agreement_yikang"):
        s = slots(p)
        (g0, b0), pn = s[0], s[2][0]
        assert feat(lex, g0, "gender") & feat(lex, pn, "gender")  # matched
        assert not feat(lex, b0, "gender") & feat(lex, pn, "gender")  # mismatched
        assert feat(lex, pn, "number") == {"singular"} and s[3] == ("自己", "自己")
        assert len(p.good) == len(p.bad)  # strict_MP


def test_expression_match_and_word_order_copies(engine, lex):
    for p in pairs_for(engine, "question_A_not_A_yeting"):
        s = [g for g, _ in slots(p)]
        assert s[5] == s[1] and s[6] == s[2] and s[3] == "" and s[4] == "不"
        assert feat(lex, s[1], "tran_verb") & feat(lex, s[2], "tran_verb")
        assert slots(p)[3][1] == s[0]  # bad 'phrase:Person' copies the good subject
    for p in pairs_for(engine, "BA_negation_yikang"):
        s = slots(p)
        good, bad = [g for g, _ in s], [b for _, b in s]
        assert (bad[1], bad[2], bad[3]) == (good[2], good[3], good[1]) == ("把", good[3], "没有")
        assert feat(lex, good[3], "tran_verb") & feat(lex, good[4], "tran_verb")
        assert feat(lex, good[4], "transitivity") == {"tran"} and feat(lex, good[0], "subcat") == {"person"}


def test_shared_expression_copy_follows_the_changed_slot(engine, lex):
    # ellipsis_adj: "X V了N，Y也V了" vs "X V'了一天，Y也V'了": slot 7 copies slot 1 in both sentences
    for p in pairs_for(engine, "ellipsis_adj_zhiheng"):
        s = slots(p)
        assert s[7][0] == s[1][0] and s[7][1] == s[1][1] and s[1][0] != s[1][1]
        assert feat(lex, s[1][0], "transitivity") == {"tran"} and feat(lex, s[1][1], "transitivity") == {"intran"}
        assert s[3][1] in {"一小时", "一会儿", "一分钟", "一天", "很久"} and s[0][0] == s[0][1]


def write_template(tmp_path, good, bad):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"good_rule": good, "bad_rule": bad, "sep": "", "strict_MP": False,
                                "phenomenon": "x", "uid": "mine", "user": "me"}), encoding="utf-8")
    return path


def test_missing_phrase_and_unsatisfiable_query_name_file_and_slot(engine, tmp_path):
    path = write_template(tmp_path, ["phrase:Person", "phrase:NoSuch", "。"], ["phrase:Person", "了", "。"])
    with pytest.raises(GrammarError, match=r"mine\.json: template 'mine' good slot 1 \(slot1\) 'phrase:NoSuch': unknown phrase 'NoSuch'"):
        generate(engine, read_template(path), 5, seed=0)
    path = write_template(tmp_path, ["phrase:Person", "pos:NN subcat:unicorn", "。"], ["phrase:Person", "了", "。"])
    with pytest.raises(GrammarError, match=r"mine\.json: template 'mine' good slot 1 .*unsatisfiable query pos:NN subcat:unicorn"):
        generate(engine, read_template(path), 5, seed=0)
    (tmp_path / "broken.json").write_text("{\"good_rule\": [", encoding="utf-8")
    with pytest.raises(GrammarError, match=r"broken\.json: not a ZhoBLiMP template"):
        read_template(tmp_path / "broken.json")
