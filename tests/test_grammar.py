"""The built-in grammars: determinism, counts, and pairs that satisfy their templates.

Words are checked against the vocabulary files read here with the csv module, not by the engine."""
import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest

from probes.benchmarks.generator import GrammarError
from probes.benchmarks.grammar import GrammarConfig, benchmark_pairs, corpus_documents, load_grammar

GRAMMARS = Path(__file__).resolve().parents[1] / "probes" / "benchmarks" / "grammars"
SMALL = GrammarConfig(n_documents=30, sentences_per_document=5, pairs_per_paradigm=60)
N_PARADIGMS = {"en": 5, "zh": 4}


def vocab(name):
    with open(GRAMMARS / name, encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["expression"]]
    out = {}
    for r in rows:
        out.setdefault(r["expression"], []).append({k: set(filter(None, v.split("/"))) for k, v in r.items() if v})
    return out


EN = vocab("en_vocab.tsv")
ZH = vocab("zh_vocab.tsv")


def feat(lex, word, key):
    """Union of a feature's values over the word's entries (a word must be in the vocabulary)."""
    assert word in lex, f"{word!r} is not in the vocabulary"
    return set().union(*(e.get(key, set()) for e in lex[word]))


def spans(pair):
    return {r.name: (pair.good[slice(*r.good)], pair.bad[slice(*r.bad)]) for r in pair.regions}


@pytest.fixture(scope="module", params=["en", "zh"])
def generated(request):
    cfg = replace(SMALL, variant=request.param)
    return cfg, corpus_documents(cfg), benchmark_pairs(cfg)


def test_deterministic_and_seed_dependent(generated):
    cfg, docs, pairs = generated
    assert corpus_documents(cfg) == docs and benchmark_pairs(cfg) == pairs
    other = replace(cfg, seed=1)
    assert corpus_documents(other) != docs
    assert [p.good for p in benchmark_pairs(other)] != [p.good for p in pairs]


def test_counts_uniqueness_and_labels(generated):
    cfg, docs, pairs = generated
    assert len(docs) == 30
    assert len(pairs) == cfg.pairs_per_paradigm * N_PARADIGMS[cfg.variant]
    assert all(p.good != p.bad for p in pairs)
    assert len({(p.paradigm, p.good, p.bad) for p in pairs}) == len(pairs)
    assert len({(p.paradigm, p.pair_id) for p in pairs}) == len(pairs)
    assert {p.benchmark for p in pairs} == {"grammar" if cfg.variant == "en" else "grammar_zh"}
    assert all(p.phenomenon for p in pairs)


def test_regions_tile_the_sentences(generated):
    cfg, _, pairs = generated
    sep = " " if cfg.variant == "en" else ""
    for p in pairs:
        for side in ("good", "bad"):
            text = getattr(p, side)
            words = [text[slice(*getattr(r, side))] for r in p.regions]
            assert sep.join(words).replace(" .", ".") == text
            ends = [getattr(r, side) for r in p.regions]
            assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:]))


def test_english_pairs_satisfy_their_templates():
    pairs = benchmark_pairs(replace(SMALL, variant="en"))
    num = lambda w: feat(EN, w, "num")  # noqa: E731
    seen = set()
    for p in pairs:
        s = spans(p)
        seen.add(p.paradigm)
        differ = {k for k, (g, b) in s.items() if g != b}
        assert p.good.endswith(".") and p.bad.endswith(".")
        subj = s["subject"][0]
        assert s["subject"][0] == s["subject"][1] and feat(EN, subj, "animate") == {"1"}
        if p.paradigm.startswith("sv_agreement"):
            assert p.phenomenon == "subject_verb_agreement" and differ == {"verb"}
            gv, bv = s["verb"]
            assert num(gv) == num(subj) and num(bv) != num(subj)
            assert feat(EN, gv, "lemma") == feat(EN, bv, "lemma")
            assert feat(EN, gv, "trans") == {"0"}
            if "attractor" in s:  # the nearest noun disagrees with the head noun, and so with the good verb
                att = s["attractor"][0]
                assert num(att) != num(subj) and num(att) == num(bv)
                assert feat(EN, att, "lemma") != feat(EN, subj, "lemma")
            if p.paradigm == "sv_agreement_rc_attractor":
                assert s["comp"][0] == "that" and num(s["rc_verb"][0]) == num(s["attractor"][0])
        elif p.paradigm == "determiner_noun_agreement":
            assert differ == {"object"}
            det, (go, bo) = s["det2"][0], s["object"]
            assert num(det) == num(go) and num(det) != num(bo) and feat(EN, go, "lemma") == feat(EN, bo, "lemma")
            assert num(s["verb"][0]) == num(subj)
        elif p.paradigm == "anaphor_number_agreement":
            assert differ == {"reflexive"}
            gr, br = s["reflexive"]
            assert num(gr) == num(subj) and num(br) != num(subj)
            assert feat(EN, gr, "gender") & feat(EN, subj, "gender")
            assert feat(EN, s["verb"][0], "refl") == {"1"}
    assert len(seen) == 5


def test_chinese_pairs_satisfy_their_templates():
    pairs = benchmark_pairs(replace(SMALL, variant="zh"))
    for p in pairs:
        s = spans(p)
        assert " " not in p.good and p.good.endswith("。")
        assert feat(ZH, s["subject"][0], "subcat") == {"person"}
        if p.phenomenon == "classifier_noun_agreement":
            noun = s["object"][0]
            gm, bm = s["classifier"]
            assert gm in feat(ZH, noun, "classifier") and bm not in feat(ZH, noun, "classifier")
            assert feat(ZH, bm, "pos") == {"M"}
            if "verb" in s and "aspect" in s:
                assert feat(ZH, s["verb"][0], "obj") & feat(ZH, noun, "obj")
        else:
            assert p.phenomenon == "ba_construction"
            # a word-order contrast: the bad sentence is a permutation of the good slots
            assert sorted(g for g, _ in s.values()) == sorted(b for _, b in s.values())
            assert "把" in p.good and "把" in p.bad
            if p.paradigm == "ba_negation_order":
                assert p.good.index("没有") < p.good.index("把") and p.bad.index("没有") > p.bad.index("把")
            else:
                noun, verb = s["slot2"][0], s["slot3"][0]
                assert p.good.index(noun) < p.good.index(verb) and p.bad.index(noun) > p.bad.index(verb)


def test_english_corpus_is_grammatical_and_mixed():
    docs = corpus_documents(GrammarConfig(n_documents=200, sentences_per_document=10))
    sentences = [s for d in docs for s in re.findall(r"[^.]+\.", d)]
    assert len(sentences) == 2000
    agree = disagree = 0
    for s in sentences:
        words = s.strip()[:-1].split()
        assert all(w in EN or w == "the" for w in words), s
        # "the N P the N V." : subject-verb agreement holds whatever the attractor's number
        if len(words) == 6 and words[0] == words[3] == "the" and feat(EN, words[2], "pos") == {"P"}:
            assert feat(EN, words[1], "num") == feat(EN, words[5], "num"), s
            same = feat(EN, words[1], "num") == feat(EN, words[4], "num")
            agree, disagree = agree + same, disagree + (not same)
    assert agree > 20 and disagree > 20  # both kinds of attractor occur naturally


def test_benchmark_sentences_are_not_copied_into_the_corpus():
    pairs = benchmark_pairs(replace(SMALL, variant="en"))
    docs = corpus_documents(GrammarConfig(n_documents=200, sentences_per_document=10))
    corpus = {s.strip() for d in docs for s in re.findall(r"[^.]+\.", d)}
    assert not any(p.bad in corpus for p in pairs)  # the corpus holds grammatical sentences only
    # attractor pairs live in a space of ~10^5 sentences: a 2000-sentence corpus meets them only by chance
    rare = [p for p in pairs if "attractor" in p.paradigm]
    assert sum(p.good in corpus for p in rare) <= 2


def test_bad_config_errors():
    with pytest.raises(GrammarError, match="grammar.variant: unknown variant 'fr'"):
        benchmark_pairs(GrammarConfig(variant="fr"))
    with pytest.raises(ValueError, match="grammar.pairs_per_paradigm must be >= 0"):
        benchmark_pairs(GrammarConfig(pairs_per_paradigm=-1))


def test_grammar_files_load_and_check():
    for variant in ("en", "zh"):
        g = load_grammar(variant)
        assert len(g.paradigms) == N_PARADIGMS[variant] and g.corpus_types
