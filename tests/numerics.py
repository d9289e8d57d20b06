"""Tolerances from arithmetic: how far two float computations of one quantity may differ when they add
the same terms in another order (another batch shape, thread count, process split or kernel blocking).

Derivation (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §4.2): a recursive sum of n
terms in a floating-point format with unit roundoff u = eps/2 is within (n - 1) u sum|x_i| of the exact
sum, whatever the order; pairwise and blocked sums are within less. Two such sums of the same terms are
therefore within 2 (n - 1) u sum|x_i| < n eps sum|x_i| of each other. Every quantity compared here is
such a sum: a sentence log-prob adds one log-prob per token, each itself the end of dot products over the
hidden size; a mean loss adds batch x sequence per-token losses. `terms` is the length of the longest
chain of additions that feeds the quantity (sum the chain lengths of nested sums: they add up to first
order), and `magnitude` bounds sum|x_i| along it.

This is a worst case, not a typical error: rounding errors mostly cancel (~sqrt(n) u), which is why one
machine's observed difference (1.9e-6 for a 24-nat sentence of ~20 tokens) sits far inside it. The bound
is still tight enough to catch a real bug: a wrong token, a missing start token or a doubled gradient
moves these quantities by 1e-2 and more.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

F32_EPS = float(np.finfo(np.float32).eps)  # 2**-23 = 1.19e-7
BF16_EPS = float(torch.finfo(torch.bfloat16).eps)  # 2**-7 = 7.8e-3: 8 significant bits


def sum_tol(magnitude: float, terms: int, eps: float = F32_EPS) -> float:
    """The largest difference between two sums of the same `terms` addends (sum of |addend| at most
    `magnitude`) computed in different orders in a format with machine epsilon `eps`."""
    return terms * eps * magnitude


def lm_terms(config, tokens: int) -> int:
    """The longest chain of additions behind a sentence log-prob of `tokens` tokens from a GPT-NeoX-like
    `config`: per layer the attention projections (hidden), the attention over the context (tokens), the
    output projection and the MLP's two matmuls (hidden, intermediate); then the output layer's dot
    product (hidden), the logsumexp over the vocabulary, and the sum over the tokens."""
    hidden, inner = config.hidden_size, config.intermediate_size
    per_layer = 2 * hidden + tokens + inner + inner
    return config.num_hidden_layers * per_layer + hidden + config.vocab_size + tokens


def sentence_lp_tol(model, ids: list[int]) -> float:
    """How far two float32 computations of one sentence log-prob (token ids `ids`, start token first) may
    differ: sum_tol over the additions behind it (lm_terms). The magnitude is that of the logits, not
    of the log-prob: a token predicted with near certainty has lp ~ 0 from z_y - logsumexp(z) with both
    terms large, and each carries rounding of its own size. Per token |z_y| + |logsumexp(z)| is at
    most 2 max|z| + log(vocab); the model's logits are computed once here, in float64."""
    with torch.no_grad():
        z = copy.deepcopy(model).double()(input_ids=torch.tensor([ids])).logits[0, :-1]
    magnitude = float((2 * z.abs().amax(-1) + np.log(z.shape[-1])).sum())
    return sum_tol(magnitude, lm_terms(model.config, len(ids) - 1))


def loss_tol(config, seq_len: int, tokens: int, loss: float) -> float:
    """How far two float32 computations of one step's mean training loss (`tokens` tokens of sequences of
    `seq_len`, a GPT-NeoX-like `config`) may differ when the batch is split over other processes or
    micro-batches: sum_tol over the chain behind one token's loss (lm_terms) plus the sum over the
    tokens, with the loss itself as the magnitude (the mean of the non-negative per-token losses). It
    does not bound the drift of the weights that earlier steps' rounding leaves behind: use it on short
    runs (29 steps of the tiny model: observed within 2.4e-7 of a bound near 1e-3, where a wrong batch or
    gradient moves the loss by 1e-2 and more)."""
    return sum_tol(abs(loss), lm_terms(config, seq_len) + tokens)
