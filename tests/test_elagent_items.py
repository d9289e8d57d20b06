"""ELAGENT items against answers worked out by hand, and against the paper's own worked examples."""
from __future__ import annotations

from fractions import Fraction

import pytest

from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
from probes.elagent.deduction import TEMPLATE, deduction_items, entailed
from probes.benchmarks.language_a import NP, PP, Clause, LanguageAConfig, Translator, benchmark_pairs, english
from probes.elagent.precedence import STANDARD, evaluate, precedence_items, rule_text
from probes.elagent.score import ElagentConfig


def slots(**kw) -> dict[str, int]:
    s = dict(STANDARD)
    s.update({{"plus": "+", "minus": "-", "times": "*", "div": "/"}[k]: v for k, v in kw.items()})
    return s


def test_precedence_reproduces_the_papers_worked_examples():
    # Table 1 / App. F: "If 8 - 4 * 4 + 9 = 52" under '+' > '*' = '-': 4 + 9 = 13, then 8 - 4 = 4, 4 * 13 = 52
    new = slots(plus=1, times=3, minus=3)
    assert rule_text(["-", "*", "+"], new) == "'+' > '*' = '-'"
    assert evaluate([8, 4, 4, 9], ["-", "*", "+"], new) == 52
    assert evaluate([8, 4, 4, 9], ["-", "*", "+"], STANDARD) == 1  # 8 - 16 + 9
    # App. F's example choices for 3 * 9 + 4 - 9: A (all equal) 22, B ('+' = '-' > '*') 12, C ('-' > '+' > '*') 12,
    # D ('+' > '*' > '-') 30
    e = ([3, 9, 4, 9], ["*", "+", "-"])
    assert evaluate(*e, slots(times=3, plus=3, minus=3)) == 22
    assert evaluate(*e, slots(plus=1, minus=1, times=3)) == 12
    assert evaluate(*e, slots(minus=1, plus=2, times=3)) == 12
    assert evaluate(*e, slots(plus=1, times=3, minus=4)) == 30
    # App. E: 2 - 7 + 2 * 5 under '+' = '*' > '-' is [-43] (7 + 2 = 9, 9 * 5 = 45, 2 - 45)
    assert evaluate([2, 7, 2, 5], ["-", "+", "*"], slots(plus=2, times=2, minus=4)) == -43
    # Table 26: 62 * 19 + 57 / 74 under '+' = '/' > '*' is [63.67567567567567]
    v = evaluate([62, 19, 57, 74], ["*", "+", "/"], slots(plus=1, div=1, times=3))
    assert v == Fraction(62 * 76, 74) and float(v) == pytest.approx(63.67567567567567)


def test_generated_precedence_items_by_hand():
    first = precedence_items(2, 1, seed=0)
    item = first[0]
    assert item.prompt == (
        "We redefine the priorities of elementary arithmetic operators as follows: '*' > '+' > '-'\n\n"
        # new rule: 8*3 = 24, 24 + 4 = 28, 4 - 28 = -24; usual rule: 4 - 24 + 4 = -16
        "What is the value of 4 - 8 * 3 + 4?\n(a) [-16] (b) [-24]\nAnswer: (b)\n\n"
        "Based on the new priorities, what is the value of 3 - 2 * 6 + 3?\n(a) [-12] (b) [-6]\nAnswer:")
    # new rule: 2 * 6 = 12, 12 + 3 = 15, 3 - 15 = -12; usual rule: 3 - 12 + 3 = -6
    assert item.options == ("[-12]", "[-6]") and item.answer == 0 and item.labels == ("(a)", "(b)")
    two = [it for it in first if it.paradigm == "precedence_2moves"][0]
    assert two.prompt.startswith("We redefine the priorities of elementary arithmetic operators as follows: "
                                 "'+' = '-' > '*'\n\nWhat is the value of 9 * 5 + 1 - 5?\n(a) [9] (b) [41]\n"
                                 "Answer: (a)")  # 5 + 1 = 6, 6 - 5 = 1, 9 * 1 = 9; usual 45 + 1 - 5 = 41
    assert two.prompt.endswith("what is the value of 4 * 8 - 8 + 9?\n(a) [33] (b) [36]\nAnswer:")
    # new rule: 8 - 8 = 0, 0 + 9 = 9, 4 * 9 = 36; usual: 32 - 8 + 9 = 33
    assert two.options[two.answer] == "[36]" and two.answer == 1
    # every generated item: the right option is the new rule's value, and it differs from the usual one; every
    # question (examples too) lists its options and is answered by a letter
    for it in precedence_items(20, 2, seed=3, n_options=3):
        assert len(set(it.options)) == 3 and it.prompt.count("(c) [") == 3
        assert sum(f"Answer: ({c})" in it.prompt for c in "abc") >= 1 and it.prompt.count("Answer: (") == 2


def test_babi_items_by_hand():
    items = {it.paradigm: it for it in deduction_items(1, 1, seed=0) if it.task == "babi"}
    base = items["babi_base"]
    test = base.prompt.split("\n\n")[-1]
    assert test == ("(1) Mice are afraid of sheep. (2) Bernhard is a wolf. (3) John is a mouse. (4) Cats are afraid "
                    "of mice. (5) Gertrude is a cat. (6) Sheep are afraid of wolves. (7) Wolves are afraid of mice. "
                    "(8) Jessica is a sheep.\nBased on the above sentences, what is Gertrude afraid of?\n"
                    "(a) sheep (b) wolf (c) mouse (d) cat\nAnswer:")
    # Gertrude is a cat, cats are afraid of mice
    assert base.options == ("sheep", "wolf", "mouse", "cat") and base.options[base.answer] == "mouse"
    assert base.labels[base.answer] == "(c)" and base.prompt.split("\n\n")[-2].endswith(("Answer: (a)", "Answer: (b)",
                                                                                      "Answer: (c)", "Answer: (d)"))
    ext = items["babi_extended"]  # one step more: the answer is the person of the feared kind
    assert ext.prompt.split("\n\n")[-1] == (
        "(1) Mice are afraid of sheep. (2) Mary is a mouse. (3) Julius is a cat. (4) Sheep are afraid of cats. "
        "(5) Cats are afraid of wolves. (6) Jessica is a sheep. (7) Wolves are afraid of cats. (8) Brian is a wolf.\n"
        "Based on the above sentences, who is Jessica afraid of?\n(a) Julius (b) Brian (c) Jessica (d) Mary\nAnswer:")
    # Jessica is a sheep, sheep are afraid of cats, Julius is a cat
    assert ext.options[ext.answer] == "Julius"


@pytest.mark.parametrize("transitive, symmetric, gold", [
    (False, False, {"b"}), (True, False, {"b", "c"}), (False, True, {"b", "d"}), (True, True, {"b", "c", "d"})])
def test_predicate_types_entail_the_papers_answers(transitive, symmetric, gold):
    # C.6: (1) X1 p X2, (2) X2 p X3, (3) X4 p X1; what does X1 p?
    assert entailed(TEMPLATE, "a", transitive, symmetric) == gold


def test_predicate_items_by_hand():
    items = {it.paradigm: it for it in deduction_items(1, 1, seed=0) if it.task == "predicates"}
    fears = items["predicates_nt_ns_ranpred"]
    last = fears.prompt.split("\n\n")[-1]
    assert last == ("'X Eaic Y' means 'X fears Y'. Suppose (1) X4 Eaic X3, (2) X3 Eaic X2, and (3) X2 Eaic X1. "
                    "What does X3 Eaic?\n(a) X2 and X4 (b) Only X1 (c) X1, X2, and X4 (d) X1 and X4 (e) Only X2 "
                    "(f) Only X4 (g) X1 and X2\nAnswer:")  # the paper's seven options, in this item's order
    assert fears.options[fears.answer] == "Only X2" and fears.labels[fears.answer] == "(e)"  # fearing: neither
    taller = items["predicates_t_ns_ranent"]
    assert "Suppose (1) Fnuzx is taller than Uott, (2) Jfxloo is taller than Tqkcx, and (3) Tqkcx is taller " \
           "than Fnuzx. Who is Tqkcx taller than?" in taller.prompt
    # Tqkcx > Fnuzx > Uott: transitive, so both; not Jfxloo (taller than Tqkcx, not shorter)
    assert taller.options[taller.answer] == "Fnuzx and Uott" and len(taller.options) == 7


def seed_clause(past: bool = False) -> Clause:
    """C.3's seed sentence: The yellow dog with a small tail chases the black cat quickly across the park."""
    tail = NP("a", ("small",), ("tail", "tails"), False)
    dog = NP("the", ("yellow",), ("dog", "dogs"), False, PP("with", tail))
    cat = NP("the", ("black",), ("cat", "cats"), False)
    park = NP("the", (), ("park", "parks"), False)
    return Clause(dog, ("chase", "chases", "chased"), past, cat, "quickly", PP("across", park))


def test_language_a_translates_the_seed_sentence_by_the_rules():
    c = seed_clause()
    assert english(c) == "The yellow dog with a small tail chases the black cat quickly across the park."
    a = Translator("english")
    # S3: PP, determiner, adjectives (doubled, M3), S_noun (M1); S1: subject object verb; S2: PP, adverb, verb
    assert a.clause(c) == ("with a small small S_tail the yellow yellow S_dog the black black S_cat "
                           "across the S_park quickly chase_+ .")
    assert Translator("english", ()).clause(c) == ("the yellow yellow S_dog with a small small S_tail chase_+ "
                                                    "the black black S_cat quickly across the S_park .")
    assert Translator("english", ("S2", "S3")).clause(seed_clause(past=True)) == (
        "with a small small S_tail the yellow yellow S_dog across the S_park quickly chase_- the black black S_cat .")
    # App. G.3's 1-shot translation (SOV and S_ nouns only) reads "tgt_the tgt_black S_tgt_cat tgt_with tgt_a
    # tgt_small S_tgt_tail tgt_the S_tgt_food tgt_eats tgt_quietly tgt_in tgt_the S_tgt_room ."; with SOV alone
    # on, ours has the same order (plus the doubled adjectives and the tense suffix, always on here)
    cat = NP("the", ("black",), ("cat", "cats"), False, PP("with", NP("a", ("small",), ("tail", "tails"), False)))
    food = NP("the", (), ("food", "foods"), False)
    g3 = Clause(cat, ("eat", "eats", "ate"), False, food, "quietly", PP("in", NP("the", (), ("room", "rooms"), False)))
    assert Translator("tgt", ("S1",)).clause(g3) == (
        "tgt_the tgt_black tgt_black S_tgt_cat tgt_with tgt_a tgt_small tgt_small S_tgt_tail tgt_the S_tgt_food "
        "tgt_eat_+ tgt_quietly tgt_in tgt_the S_tgt_room .")


def test_language_a_pairs_share_the_demonstrations_and_differ_in_order_only():
    pairs = benchmark_pairs(LanguageAConfig(shots=2, pairs_per_paradigm=3, lexicon="tgt"))
    assert {p.paradigm for p in pairs} == {"all_rules", "S1_SOV", "S2_PV", "S3_PN"} and len(pairs) == 12
    for p in pairs:
        head_g, test_g = p.good.rsplit("Language A: ", 1)
        head_b, test_b = p.bad.rsplit("Language A: ", 1)
        assert head_g == head_b and head_g.count("Language A: ") == 2  # two demonstrations, then the test
        assert sorted(test_g.split()) == sorted(test_b.split()) and test_g != test_b  # same words, other order
    sov = next(p for p in pairs if p.paradigm == "S1_SOV")
    words_g, words_b = sov.good.rsplit(": ", 1)[1].split(), sov.bad.rsplit(": ", 1)[1].split()
    verb = next(w for w in words_g if w.endswith(("_+", "_-")))
    assert words_g[-2] == verb and words_b[-2] != verb  # SOV: the verb last; SVO: the object after it


def test_registry_loads_the_word_order_benchmark_and_refuses_bad_config():
    pairs = load_benchmark(BenchmarkConfig(name="elagent_word_order", language_a=LanguageAConfig(pairs_per_paradigm=2)))
    assert len(pairs) == 8 and pairs.report.source.startswith("probes.elagent(")
    with pytest.raises(ValueError, match="language_a.lexicon"):
        LanguageAConfig(lexicon="klingon")
    with pytest.raises(ValueError, match=r"probes.elagent.tasks: unknown.*'nope'"):
        ElagentConfig(tasks=["babi", "nope"])
    with pytest.raises(ValueError, match="probes.elagent.n_operators must be 2..2"):
        ElagentConfig(operators="+*", n_operators=3)
