"""The template engine on tiny hand-written templates, with exact expected outputs."""
import random

import pytest

from probes.benchmarks.generator import Engine, GrammarError, Template, Vocabulary, join, parse_rule, Direct, Lexical, Matched, PhraseRef

VOCAB = """expression\tpos\tnum\tlemma\tgender
cat\tN\tsg\tcat\tn
cats\tN\tpl\tcat\tn
dog\tN\tsg\tdog\tn
dogs\tN\tpl\tdog\tn
boy\tN\tsg\tboy\tm
runs\tV\tsg\trun\t
run\tV\tpl\trun\t
sleeps\tV\tsg\tsleep\t
sleep\tV\tpl\tsleep\t
\t\t\t\t
themselves\tREFL\tpl\t\tm/f/n
himself\tREFL\tsg\t\tm
"""


def engine(phrases=None, max_depth=6):
    vocab = Vocabulary.from_tsv("tiny.tsv", VOCAB)
    parsed = {k: [[parse_rule(r) for r in alt] for alt in alts] for k, alts in (phrases or {}).items()}
    return Engine(vocab, parsed, max_depth=max_depth)


def sentences(e, good, n=200, **kw):
    t = Template("t", good, **kw)
    e.check(t)
    rng = random.Random(0)
    return {e.sentence(t, rng) for _ in range(n)}


def test_vocabulary_reader_splits_values_and_skips_blank_rows():
    v = Vocabulary.from_tsv("tiny.tsv", VOCAB)
    assert len(v.entries) == 11
    them = v.by_expression["themselves"][0]
    assert them.values("gender") == {"m", "f", "n"} and them.values("expression") == {"themselves"}
    assert v.by_expression["runs"][0].values("gender") == frozenset()


def test_vocabulary_reader_names_file_and_line():
    with pytest.raises(GrammarError, match=r"bad\.tsv:3: 4 columns, header has 2"):
        Vocabulary.from_tsv("bad.tsv", "expression\tpos\ncat\tN\ndog\tN\tx\ty\n")
    with pytest.raises(GrammarError, match=r"bad\.tsv:1: .*'expression'"):
        Vocabulary.from_tsv("bad.tsv", "word\tpos\ncat\tN\n")


def test_parse_rule_notation():
    assert parse_rule("the") == (Direct(("the",)),)
    assert parse_rule("马上 可能 就") == (Direct(("马上", "可能", "就")),)
    assert parse_rule("") == (Direct(("",)),)
    assert parse_rule("好|不好") == (Direct(("好",)), Direct(("不好",)))
    (lex,) = parse_rule("pos:N num:sg/pl")
    assert lex == Lexical((("num", frozenset({"sg", "pl"})), ("pos", frozenset({"N"}))))
    (m,) = parse_rule("pos:V mPos:1 mPro:num/gender mmPos:0 mmPro:lemma")
    assert isinstance(m, Matched)
    assert (m.match_pos, m.match_props, m.mismatch_pos, m.mismatch_props) == (1, ("num", "gender"), 0, ("lemma",))
    (m2,) = parse_rule("pos:V matchedPosition:2 matchedProperties:num")
    assert (m2.match_pos, m2.match_props) == (2, ("num",))
    (p,) = parse_rule("phrase:NP -1:<num:pl gender:n>")
    assert p == PhraseRef("NP", ((-1, (("gender", frozenset({"n"})), ("num", frozenset({"pl"})))),))
    with pytest.raises(GrammarError, match="mixes literals"):
        parse_rule("the pos:N", "tmpl slot 0")


def test_lexical_query_and_literal_exact():
    e = engine()
    assert sentences(e, ["the", "pos:N num:pl gender:n lemma:cat", "."]) == {"the cats."}
    assert sentences(e, ["pos:N num:sg lemma:cat|pos:N num:sg lemma:boy", "sleeps"]) == {"cat sleeps", "boy sleeps"}
    # whitespace-separated literals are alternatives; an empty alternative leaves no double space
    assert sentences(e, ["a b", "|big", "cat"]) == {"a cat", "b cat", "a big cat", "b big cat"}


def test_matched_and_mismatched():
    e = engine()
    assert sentences(e, ["the", "pos:N lemma:dog", "pos:V lemma:run mPos:1 mPro:num", "."]) == {"the dog runs.", "the dogs run."}
    assert sentences(e, ["the", "pos:N lemma:dog", "pos:V lemma:run mmPos:1 mmPro:num", "."]) == {"the dog run.", "the dogs runs."}
    # match on several properties (num and gender): boy -> himself; plural cats -> themselves
    out = sentences(e, ["pos:N lemma:boy/cat", "pos:REFL mPos:0 mPro:num/gender"])
    assert out == {"boy himself", "cats themselves"}
    # an expression match copies the word, also from a literal not in the vocabulary
    assert sentences(e, ["hello|bye", "mPos:0 mPro:expression"]) == {"hello hello", "bye bye"}


def test_mismatch_draws_from_the_reference_slots_range():
    # as in ZhoBLiMP: the other word comes from what the reference slot could have been (cat/dog), not boy
    e = engine()
    assert sentences(e, ["pos:N lemma:cat/dog num:sg", "pos:N num:sg mmPos:0 mmPro:expression"]) == {"cat dog", "dog cat"}


def test_shared_expression_copy_follows_a_changed_slot():
    e = engine()
    t = Template("echo", ["pos:V num:sg lemma:run", "and", "mPos:0 mPro:expression"],
                 ["pos:V num:sg lemma:sleep", "and", "mPos:0 mPro:expression"])
    (p,) = e.pairs(t, 1, random.Random(0), "tiny")
    assert (p.good, p.bad) == ("runs and runs", "sleeps and sleeps")
    assert [(r.good, r.bad) for r in p.regions] == [((0, 4), (0, 6)), ((5, 8), (7, 10)), ((9, 13), (11, 17))]


def test_phrase_recursion_depth_and_extra_constraints():
    phrases = {"NP": [["pos:N num:sg"], ["pos:N num:sg", "of", "phrase:NP"]]}
    lengths = {len(s.split(" of ")) for s in sentences(engine(phrases, max_depth=2), ["phrase:NP"], n=400)}
    assert lengths == {1, 2, 3}  # depth 2 stops the recursion; repeats of a lemma are rejected (3 nouns)
    assert sentences(engine(phrases, max_depth=0), ["phrase:NP"]) == {"cat", "dog", "boy"}
    # -1:<...> adds constraints to the phrase's last position
    ph = {"Pair": [["pos:N lemma:dog", "pos:V"]]}
    assert sentences(engine(ph), ["phrase:Pair -1:<num:pl lemma:sleep>"]) == {"dog sleep", "dogs sleep"}


def test_pairs_regions_and_good_counterpart():
    e = engine()
    t = Template("sv", ["the", "pos:N", "pos:V mPos:1 mPro:num", "."],
                 ["the", "pos:N", "pos:V mPos:2 mPro:lemma mmPos:1 mmPro:num", "."],
                 phenomenon="agr", roles=["det", "subj", "verb", "end"])
    pairs = e.pairs(t, 10, random.Random(1), "tiny")
    assert len(pairs) == 10 and len({p.good for p in pairs}) == 10  # 5 noun forms x 2 verbs
    for p in pairs:
        assert [r.name for r in p.regions] == ["det", "subj", "verb", "end"]
        det, subj, verb, end = p.regions
        g, b = p.good.split(), p.bad.split()
        assert p.good[slice(*subj.good)] == g[1] == b[1] == p.bad[slice(*subj.bad)]
        assert p.good[slice(*verb.good)] + "." == g[2] and p.bad[slice(*verb.bad)] + "." == b[2]
        assert p.good[slice(*end.good)] == "." and end.good == (len(p.good) - 1, len(p.good))
        # same verb lemma, other number: sleeps <-> sleep, runs <-> run
        gv, bv = g[2][:-1], b[2][:-1]
        assert gv.rstrip("s") == bv.rstrip("s") and gv != bv
        assert g[1].endswith("s") == (not gv.endswith("s"))  # good verb agrees with the subject
    assert {p.pair_id for p in pairs} == {str(i) for i in range(10)}


def test_word_order_contrast_copies_good_fillers():
    e = engine()
    t = Template("order", ["pos:N num:sg", "pos:V num:sg", "."], ["pos:V num:sg", "pos:N num:sg", "."], sep="")
    for p in e.pairs(t, 4, random.Random(0), "tiny"):
        n, v = p.regions[0], p.regions[1]
        assert p.bad == p.good[slice(*v.good)] + p.good[slice(*n.good)] + "."
        assert p.bad[slice(*n.bad)] == p.good[slice(*v.good)]


def test_join_attaches_punctuation():
    assert join(["the", "cat", "", "."], " ") == ("the cat.", [(0, 3), (4, 7), (7, 7), (7, 8)])
    assert join(["张三", "没有", "。"], "") == ("张三没有。", [(0, 2), (2, 4), (4, 5)])


def test_errors_name_template_and_slot():
    e = engine({"NP": [["pos:N", "phrase:Missing"]]})
    t = Template("tmpl", ["the", "pos:N num:du"], source="x.json")
    with pytest.raises(GrammarError, match=r"x\.json: template 'tmpl' good slot 1 \(slot1\) 'pos:N num:du': unsatisfiable query num:du pos:N"):
        e.check(t)
    t = Template("tmpl", ["the", "phrase:Nope"], roles=["det", "subject"])
    with pytest.raises(GrammarError, match=r"template 'tmpl' good slot 1 \(subject\) 'phrase:Nope': unknown phrase 'Nope'"):
        e.check(t)
    t = Template("tmpl", ["phrase:NP"])
    with pytest.raises(GrammarError, match=r"slot 0 .* -> phrase 'NP' alternative 0 position 1: unknown phrase 'Missing'"):
        e.check(t)
    t = Template("tmpl", ["pos:N", "pos:V mPos:5 mPro:num"])
    with pytest.raises(GrammarError, match=r"slot 1 .*matched position 5 outside 0\.\.1"):
        e.check(t)
    t = Template("tmpl", ["pos:N"], ["pos:N", "pos:V"])
    with pytest.raises(GrammarError, match="good has 1 slots, bad 2"):
        e.check(t)


def test_too_few_unique_pairs_is_a_clear_error():
    e = engine()
    t = Template("tiny", ["pos:N lemma:cat", "pos:V lemma:run mPos:0 mPro:num"],
                 ["pos:N lemma:cat", "pos:V lemma:run mmPos:0 mmPro:num"], source="x.json")
    assert len(e.pairs(t, 2, random.Random(0), "b")) == 2
    with pytest.raises(GrammarError, match=r"x\.json: template 'tiny': only 2 of 3 unique pairs .*duplicate good sentence"):
        e.pairs(t, 3, random.Random(0), "b", max_attempts=200)
    assert len(e.pairs(t, 3, random.Random(0), "b", max_attempts=200, allow_fewer=True)) == 2
    same = Template("same", ["pos:N"], ["pos:N"])
    with pytest.raises(GrammarError, match="good == bad"):
        e.pairs(same, 1, random.Random(0), "b", max_attempts=50)
