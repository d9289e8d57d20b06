"""A model without the knowledge scores the ELAGENT baseline it is drawn against (issue 27, item 1).

Scoring each option's *text*, an untrained model picked the shortest text: 0.00 on every transitive task
against a baseline of 1/7. Answered by letter with the right option at a uniformly random letter, an untrained
model -- here one with a sharpened output layer, so its fixed token preferences are strong -- must be within
3 binomial standard errors of 1 / options on every paradigm, and the right letter must be uniform. The context
pair (probes.elagent.score) must be within 3 standard errors of its 0.5."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch
from scipy.stats import chisquare
from tokenizers import Regex, Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Split
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from probes.elagent.score import ElagentConfig, build_items, score_items, summarize


def char_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """One token per character: option texts of different lengths are different token counts."""
    chars = sorted(set("".join(texts)))
    tok = Tokenizer(WordLevel({c: i for i, c in enumerate(["[UNK]", "<|endoftext|>", *chars])}, unk_token="[UNK]"))
    tok.pre_tokenizer = Split(Regex(r"[\s\S]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="[UNK]")


def untrained(vocab: int, positions: int) -> GPTNeoXForCausalLM:
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64,
                                             max_position_embeddings=positions))
    with torch.no_grad():  # strong fixed preferences among tokens: a length or letter bias would show
        model.get_output_embeddings().weight.mul_(10.0)
    return model.eval()


def test_the_right_letter_is_uniform_in_every_paradigm():
    items = build_items(ElagentConfig(items_per_paradigm=200))
    for paradigm in sorted({it.paradigm for it in items}):
        its = [it for it in items if it.paradigm == paradigm]
        k = len(its[0].options)
        counts = Counter(it.answer for it in its)
        # chi-square against the uniform: a fixed right position (the paper's fixed Task 6 order) gives p ~ 0
        assert chisquare([counts[j] for j in range(k)]).pvalue > 1e-3, (paradigm, counts)
        assert {it.labels for it in its} == {its[0].labels}  # the same letters are scored in every item


def test_an_untrained_model_scores_the_drawn_baseline():
    torch.set_num_threads(1)
    cfg = ElagentConfig(items_per_paradigm=100, shots=0)  # 100 items: 3 SE of 1/7 is 0.105, below 1/7 itself
    items = build_items(cfg)
    tok = char_tokenizer([it.prompt for it in items] + [it.matched for it in items] + ["(a)(b)(c)(d)(e)(f)(g)"])
    model = untrained(len(tok), 2 + max(max(len(it.prompt), len(it.cloze), len(it.matched)) +
                                        len(max(it.options, key=len)) for it in items))
    summary = summarize(score_items(model, tok, items, batch_size=64))
    for paradigm in sorted({it.paradigm for it in items}):
        acc, p, n = (summary[f"{paradigm}/{m}"] for m in ("acc", "acc_random", "n_items"))
        se = math.sqrt(p * (1 - p) / n)
        assert abs(acc - p) <= 3 * se, f"{paradigm}: acc {acc:.3f} vs baseline {p:.3f} (3 SE = {3 * se:.3f})"
        # the context pair: credits in [0, 1] with mean 0.5 have a variance of at most 0.25
        pair, se = summary[f"{paradigm}/acc_pair"], 0.5 / math.sqrt(n)
        assert abs(pair - 0.5) <= 3 * se, f"{paradigm}: acc_pair {pair:.3f} vs 0.5 (3 SE = {3 * se:.3f})"
    assert np.isclose(summary["predicates/acc_random"], 1 / 7) and np.isclose(summary["babi/acc_random"], 1 / 4)
