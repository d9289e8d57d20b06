"""Agreement with minicons (a dev dependency), the field's scorer: with bos_token=True it conditions the
first word on the start token, as our convention does, and its per-sentence sum of token log-probs is
ours up to float32 rounding; without it, it drops the first word's log-prob (DESIGN: scoring conventions)."""
from __future__ import annotations

import numpy as np
import torch
from minicons import scorer  # a dev dependency (pyproject.toml): installed wherever the tests run

from numerics import sentence_lp_tol
from probeutil import tiny_neox, word_tokenizer
from probes.benchmarks.pairs import Pair
from probes.scoring.primitive import score_pairs, sentence_ids

SENTENCES = [("the cat runs .", "the cat run ."), ("the dogs see a cat .", "the dogs sees a cat ."),
             ("a dog runs", "a dogs runs"), ("cats see the dog .", "cats sees the dog .")]


def test_minicons_with_bos_token_gives_our_sentence_log_probs():
    tok, model = word_tokenizer(), tiny_neox().eval()
    pairs = [Pair("m", "p", "x", str(i), good, bad) for i, (good, bad) in enumerate(SENTENCES)]
    ours = score_pairs(model, tok, pairs, batch_size=3)
    lm = scorer.IncrementalLMScorer(model, device="cpu", tokenizer=tok)
    for side in ("good", "bad"):
        texts = [getattr(p, side) for p in pairs]
        theirs = np.array(lm.sequence_score(texts, reduction=lambda x: x.sum(0).item(), bos_token=True))
        lp = ours[f"lp_{side}"].to_numpy()
        tol = np.array([sentence_lp_tol(model, ids) for ids in sentence_ids(tok, texts)])
        # another batch shape and padding: equal up to float32 rounding (tests/numerics.py)
        assert (np.abs(theirs - lp) <= tol).all(), (theirs - lp, tol)
        # minicons' default drops the first word's log-prob: another quantity, not a rounding away
        dropped = np.array(lm.sequence_score(texts, reduction=lambda x: x.sum(0).item()))
        assert (np.abs(dropped - lp) > 10 * tol).all(), (dropped - lp, tol)
