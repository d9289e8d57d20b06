"""Template slots recovered on sentences the templates produced: generated pairs and the real
ZhoBLiMP pairs (skipped without ../shared, failing under CI=true), scored into phrase regions by the real scorer."""
import dataclasses
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tokenizers import Regex, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Split
from transformers import PreTrainedTokenizerFast

from probes.benchmarks import grammar
from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
from probes.analysis.casestudy import load_phrase_regions, pair_deltas, region_spec
from probes.scoring.primitive import score_pairs, sentence_ids, token_logprobs
from probes.benchmarks.generator import Engine, Template
from probes.benchmarks.pairs import Pair
from probes.benchmarks.slotalign import SlotParser
from probes.benchmarks.vocabulary import Vocabulary
from probes.benchmarks.zhoblimp_templates import load_engine, read_template
from tests.probeutil import generate_pairs as generate, tiny_neox

SHARED = Path(__file__).resolve().parents[2] / "shared"
ZHO = SHARED / "benchmarks" / "zhoblimp"
CASE = ZHO / "data" / "ZhoBLiMP" / "npi_renhe_wh_question_subj.jsonl"
needs_zho = pytest.mark.usefixtures("real_case_study_pairs")


@pytest.fixture
def real_case_study_pairs(shared):
    return shared("benchmarks", "zhoblimp", "data", "ZhoBLiMP", CASE.name)


def _texts(p):
    return [(r.name, p.good[slice(*r.good)], p.bad[slice(*r.bad)]) for r in p.regions]


@pytest.mark.parametrize("variant", ["en", "zh"])
def test_generated_grammar_pairs_align_to_the_slots_the_generator_recorded(variant):
    g = grammar.load_grammar(variant)
    parser = SlotParser(g.engine)
    for t in g.paradigms:
        pairs = g.engine.pairs(t, 40, random.Random(t.name), "grammar")
        for p in pairs:
            got = parser.attach(t, dataclasses.replace(p, regions=None))
            assert got.regions == p.regions, (t.name, p.good, p.bad)


def test_an_ambiguous_split_keeps_shared_slots_identical():
    # "abc" splits as a|bc or ab|c; the bad sentence's shared slot 1 can only be "c"
    t = Template("toy", good=["a | ab", "bc | c"], bad=["xyb", "bc | c"], sep="")
    parser = SlotParser(Engine(Vocabulary([]), {}))
    p = parser.attach(t, Pair("toy", "toy", "toy", "0", "abc", "xybc"))
    assert _texts(p) == [("slot0", "ab", "xyb"), ("slot1", "c", "c")]
    assert parser.attach(t, Pair("toy", "toy", "toy", "1", "abd", "xybc")).regions is None  # no parse: no slots


@needs_zho
def test_generated_case_study_pairs_align_to_their_recorded_slots():
    t = read_template(ZHO / "projects" / "ZhoBLiMP" / "npi_renhe_wh_question_subj_yikang.json")
    engine = load_engine(ZHO)
    parser = SlotParser(engine)
    for p in generate(engine, t, 100, seed=3):
        assert parser.attach(t, dataclasses.replace(p, regions=None)).regions == p.regions, p.good


@needs_zho
def test_real_case_study_pairs_carry_slots_and_the_noun_is_in_the_np():
    pairs = load_benchmark(BenchmarkConfig(name="zhoblimp", path=str(CASE)))
    # (aligned, pairs): 300 pairs is the file's (and the paper's 300 per paradigm); all 300 aligning is a
    # regression pin of our parser (the README's "35,400 of 35,400 align" is the same code's count), not
    # an independent figure; pair 9's slots below are the hand check
    assert pairs.report.slots == {"npi_renhe_wh_question_subj": (300, 300)}
    p = next(p for p in pairs if p.pair_id == "9")
    assert (p.good, p.bad) == ("那个服务员会前往哪些东西？", "任何服务员会前往哪些东西？")
    assert _texts(p) == [("slot0", "那", "任何"), ("slot1", "个", ""), ("slot2", "服务员", "服务员"),
                         ("slot3", "会", "会"), ("slot4", "前往", "前往"), ("slot5", "哪些东西", "哪些东西"),
                         ("slot6", "？", "？")]

    # scored by the real scorer (one token per character): the NP region of the case study is
    # 那个服务员 / 任何服务员 (5 tokens each), its VP 会前往哪些东西？; the generic split puts only
    # 那个 / 任何 in the critical span and the shared noun in the suffix with the VP
    chars = sorted(set(p.good + p.bad))
    vocab = {w: i for i, w in enumerate(["[UNK]", "<bos>", "<eos>"] + chars)}
    tk = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = Split(Regex("."), behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", unk_token="[UNK]")
    model = tiny_neox(vocab=len(vocab))
    df = score_pairs(model, tok, [p])
    lps = token_logprobs(model, sentence_ids(tok, [p.good, p.bad]))
    spec = region_spec(list(df.columns), p.paradigm, load_phrase_regions(), has_slots=True)
    assert spec.regions == {"NP": ["slot0", "slot1", "slot2"], "VP": ["slot3", "slot4", "slot5", "slot6"]}
    row = df.iloc[0]
    np_good = sum(row[f"lp_good_slot_slot{i}"] for i in range(3))
    np_bad = sum(row[f"lp_bad_slot_slot{i}"] for i in range(3))
    assert np_good == pytest.approx(float(lps[0][:5].sum())) and np_bad == pytest.approx(float(lps[1][:5].sum()))
    assert sum(row[f"ntok_good_slot_slot{i}"] for i in range(3)) == 5
    assert sum(row[f"ntok_bad_slot_slot{i}"] for i in range(3, 7)) == 8
    assert (row.ntok_good_critical, row.ntok_good_suffix) == (2, 11)  # the diff-based split, for contrast
    d = pair_deltas(df, spec).iloc[0]
    assert d.mean_NP == pytest.approx(np_good / 5 - np_bad / 5)
    assert d.mean_VP == pytest.approx(float(lps[0][5:].mean() - lps[1][5:].mean()))


@needs_zho
def test_a_token_across_the_np_vp_boundary_is_counted():
    # a vocabulary with the piece 员会 (as in 委员会): 服务员会 -> 服 务 员会, and 员会 ends in the VP
    p = next(p for p in load_benchmark(BenchmarkConfig(name="zhoblimp", path=str(CASE))) if p.pair_id == "9")
    vocab = {w: i for i, w in enumerate(["[UNK]", "<bos>", "<eos>", "员会"] + sorted(set(p.good + p.bad)))}
    tk = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = Split(Regex("员会|."), behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", unk_token="[UNK]")
    row = score_pairs(tiny_neox(vocab=len(vocab)), tok, [p]).iloc[0]
    assert (row.ntok_good_slot_slot2, row.ntok_good_slot_slot3) == (2, 1)  # 服务 | 员会
    assert (row.xtok_good_slot_slot3, row.xtok_bad_slot_slot3, row.xtok_good_slot_slot2) == (1, 1, 0)


@needs_zho
def test_templates_can_be_turned_off_or_named(tmp_path):
    pairs = load_benchmark(BenchmarkConfig(name="zhoblimp", path=str(CASE), templates=""))
    assert all(p.regions is None for p in pairs) and pairs.report.slots == {}
    with pytest.raises(FileNotFoundError, match="BenchmarkConfig.templates"):
        load_benchmark(BenchmarkConfig(name="zhoblimp", path=str(CASE), templates=str(tmp_path)))
