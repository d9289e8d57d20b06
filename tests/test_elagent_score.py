"""Multiple-choice scoring by likelihood of the answer letter: the letter's log-prob against the primitive,
strict ties, the sum and mean reductions, the summary."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.elagent.items import MCItem
from probes.elagent.score import option_sequences, score_items, summarize
from probes.scoring.primitive import sentence_ids, token_logprobs

WORDS = "the a b c cat cats dog dogs runs run sees see . Answer : ( )".split()


def _items():
    return [MCItem("babi", "babi_base", "i0", "the cat sees a dog .\nAnswer:", ("dog", "cat", "the dogs"), 0),
            MCItem("babi", "babi_base", "i1", "a dog runs .\nAnswer:", ("runs", "sees"), 1),
            MCItem("predicates", "predicates_t_s_ranpred", "i2", "the dogs see .\nAnswer:", ("cats", "a cat"), 1)]


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


def test_options_the_tokenizer_cannot_tell_apart_are_refused():
    tok = word_tokenizer([w for w in WORDS if w not in ("b", "c")])
    item = MCItem("precedence", "precedence_1move", "p0", "the cat .\nAnswer:", ("[52]", "[1]", "[7]"), 0)
    with pytest.raises(ValueError, match=r"item p0: the tokenizer cannot tell its answer letters"):
        option_sequences(tok, item)  # (b) and (c) are both ( [UNK] )
