"""ELAGENT scoring: by likelihood of the answer letter (the letter's log-prob against the primitive, strict
ties, the sum and mean reductions, the summary) and by the context pair (its four log-probs against the
primitive, its credit by hand, chance exactly 0.5 for a model that does not relate answer and context)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.elagent.items import MCItem
from probes.elagent.score import check_lengths, option_sequences, pair_credit, score_items, summarize
from probes.scoring.primitive import sentence_ids, token_logprobs

WORDS = "the a b c cat cats dog dogs runs run sees see . Answer : ( )".split()


def _items():
    return [MCItem("babi", "babi_base", "i0", "the cat sees a dog .\nAnswer:", ("dog", "cat", "the dogs"), 0,
                   "the cat sees a dog .\nAnswer:", "the dog sees a cat .\nAnswer:", "cat"),
            MCItem("babi", "babi_base", "i1", "a dog runs .\nAnswer:", ("runs", "sees"), 1,
                   "a dog sees .\nAnswer:", "a dog runs .\nAnswer:", "runs"),
            MCItem("predicates", "predicates_t_s_ranpred", "i2", "the dogs see .\nAnswer:", ("cats", "a cat"), 1,
                   "the dogs see a cat .\nAnswer:", "the cats see .\nAnswer:", "the dogs")]


def test_an_options_lp_is_its_letters_tokens_after_the_prompt():
    torch.set_num_threads(1)
    tok = word_tokenizer(WORDS)
    model = tiny_neox(len(tok), seed=3)
    df = score_items(model, tok, _items(), batch_size=2)
    for it, row in zip(_items(), df.itertuples()):
        (prompt,) = sentence_ids(tok, [it.prompt])
        assert row.labels == ["(a)", "(b)", "(c)"][:len(it.options)]
        for k, letter in enumerate(row.labels):
            (full,) = sentence_ids(tok, [f"{it.prompt} {letter}"])
            n = len(full) - len(prompt)  # the word tokenizer never merges across the space
            lp = token_logprobs(model, [full])[0]
            assert row.ntok[k] == n == 3  # "(", "a", ")": Whitespace splits punctuation from the letter
            assert row.lp[k] == pytest.approx(lp[-n:].sum(), abs=1e-5)  # the option's own tokens, nothing of the prompt
        sums = np.array(row.lp)
        means = sums / np.array(row.ntok)
        assert row.pred_sum == int(np.argmax(sums)) and row.pred_mean == int(np.argmax(means))
        assert row.correct_sum == bool(sums[it.answer] > np.delete(sums, it.answer).max())
        assert row.rand_acc == pytest.approx(1 / len(it.options))
    s = summarize(df)
    assert s["all/acc"] == pytest.approx(df.correct_sum.mean()) and s["all/n_items"] == 3
    assert s["babi/acc_random"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert s["predicates_t_s_ranpred/acc_random"] == 0.5 and s["babi_base/n_items"] == 2


def test_a_tie_is_wrong():
    tok = word_tokenizer(WORDS)
    model = tiny_neox(len(tok), seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()  # every next token equally likely: one-token options tie
    df = score_items(model, tok, _items()[:2])
    assert np.allclose(df.lp[0][:2], df.lp[0][0]) and not df.correct_sum.any() and not df.correct_mean.any()
    assert (df.correct_pair == 0.5).all()  # the context pair: a tie is half right, so a blank model is at chance


def test_options_the_tokenizer_cannot_tell_apart_are_refused():
    tok = word_tokenizer([w for w in WORDS if w not in ("b", "c")])
    item = MCItem("precedence", "precedence_1move", "p0", "the cat .\nAnswer:", ("[52]", "[1]", "[7]"), 0,
                  "the cat .\nAnswer:", "the dog .\nAnswer:", "[1]")
    with pytest.raises(ValueError, match=r"item p0: the tokenizer cannot tell its answers \('\(a\)', '\(b\)', '\(c\)'\)"):
        option_sequences(tok, item)  # (b) and (c) are both ( [UNK] )
    with pytest.raises(ValueError, match=r"item p0: the tokenizer cannot tell its answers \('\[52\]', '\[1\]'\)"):
        score_items(tiny_neox(len(tok)), tok, [MCItem("precedence", "precedence_1move", "p0", item.prompt,
                                                      ("[52]", "[1]"), 0, item.cloze, item.matched, "[1]")])
        # its letters differ, its values do not: [52] and [1] are both [UNK] [UNK] [UNK]


def test_the_context_pair_by_hand():
    """The four log-probs are the answers' own tokens after each context (the primitive, called here by
    hand), and the credit is worked out from them: pair 1 A|C > A|C', pair 2 B|C' > B|C, a tie half."""
    torch.set_num_threads(1)
    tok = word_tokenizer(WORDS)
    model = tiny_neox(len(tok), seed=5)
    df = score_items(model, tok, _items(), batch_size=3)
    for it, row in zip(_items(), df.itertuples()):
        a, b = it.options[it.answer], it.matched_answer
        assert row.pair_texts == [a, b]
        want = []
        for ctx in (it.cloze, it.matched):
            for text in (a, b):
                (full,) = sentence_ids(tok, [f"{ctx} {text}"])
                n = len(text.split())  # the word tokenizer: one token per word
                want.append(token_logprobs(model, [full])[0][-n:].sum())
        assert row.pair_lp == pytest.approx(want, abs=1e-5)
        lp_ac, lp_bc, lp_am, lp_bm = want
        credit = ((lp_ac > lp_am) + 0.5 * (lp_ac == lp_am) + (lp_bm > lp_bc) + 0.5 * (lp_bm == lp_bc)) / 2
        assert row.correct_pair == credit
    # the worked example: A|C = -1, B|C = -5, A|C' = -3, B|C' = -2: both pairs right; one tie: half
    assert pair_credit([-1.0, -5.0, -3.0, -2.0]) == 1.0 and pair_credit([-1.0, -5.0, -3.0, -9.0]) == 0.5
    assert pair_credit([-1.0, -5.0, -1.0, -6.0]) == 0.25 and pair_credit([-4.0, -1.0, -3.0, -2.0]) == 0.0
    s = summarize(df)
    assert s["all/acc_pair"] == pytest.approx(df.correct_pair.mean())
    assert s["all/acc_pair_se"] == pytest.approx(df.correct_pair.std(ddof=1) / np.sqrt(3))


def test_chance_is_exact_for_a_model_that_does_not_relate_answer_and_context():
    """Counterbalance: with lp(text | context) = f(text) + g(context) -- any length or frequency preference of the
    text, any likelihood of the context, ties included -- every item's credit is exactly 0.5."""
    rng = np.random.default_rng(0)
    # (A, B) and (C, C'): halves in [-40, 40], exact in floating point; g(C) == g(C') in ~1/160 of the rows
    f, g = rng.integers(-80, 80, (1000, 2)) / 2, rng.integers(-80, 80, (1000, 2)) / 2
    lp = np.stack([f[:, 0] + g[:, 0], f[:, 1] + g[:, 0], f[:, 0] + g[:, 1], f[:, 1] + g[:, 1]], axis=1)
    assert (pair_credit(lp) == 0.5).all()
    # a real model with no attention reads no context but the last token ("Answer:" in every context): ties
    tok = word_tokenizer(WORDS)
    model = tiny_neox(len(tok), seed=1)
    with torch.no_grad():
        for layer in model.gpt_neox.layers:
            layer.attention.dense.weight.zero_()
            layer.attention.dense.bias.zero_()
    assert (score_items(model, tok, _items()).correct_pair == 0.5).all()


def test_a_prompt_longer_than_the_training_window_is_named(capsys):
    tok = word_tokenizer(WORDS)
    # with the start token and the longest continuation: 12 (letter), 10 (letter), 11 (the cloze + "the dogs")
    check_lengths(tok, _items(), 32, seq_len=10)  # fits the model's 32 positions, not the 10 it trained on
    err = capsys.readouterr().err
    assert err.startswith("warning: probes.elagent: 2 of 3 prompts (median 11 tokens, longest 12) are longer than "
                          "data.seq_len=10"), err
    check_lengths(tok, _items(), 32, seq_len=12)
    assert capsys.readouterr().err == ""


def test_the_corpus_holds_both_contexts_of_every_pair_and_no_probe_item():
    from probes.elagent.config import ElagentConfig
    from probes.elagent.score import build_items, corpus_documents
    from train.corpus import GrammarConfig

    docs = corpus_documents(GrammarConfig(n_documents=3 * 13 * 4))
    assert len(docs) == 3 * 13 * 4
    for it in build_items(ElagentConfig(items_per_paradigm=4, seed=-1)):  # the corpus's items, seed -1 - 0
        assert {f"{it.cloze} {it.options[it.answer]}", f"{it.matched} {it.matched_answer}"} <= set(docs)
    probe = build_items(ElagentConfig(items_per_paradigm=4))  # the probes' items, probes.elagent.seed=0
    contexts = [c for it in probe for c in (it.prompt, it.cloze, it.matched)]
    assert not [c for c in contexts if any(d.startswith(c) for d in docs)]
