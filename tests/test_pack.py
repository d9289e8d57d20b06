"""Trie-packed scoring (probes/scoring/pack.py) gives every token the lp of the unpacked computation.

Tolerance, per token, from float32 arithmetic (tests/numerics.py): a token's lp is z_y - logsumexp(z);
packed and unpacked add the same terms in other orders (other GEMM shapes, other attention rows), so they
differ by at most sum_tol(2 max|z| + log V, chain) with chain the additions behind the token (lm_terms
with the token's context length). The keys a packed row masks out add exact zeros (exp(-inf) = 0, and
exp(finfo.min - max) underflows to 0 in eager attention), so they lengthen no chain.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig,
                          LlamaForCausalLM)

from numerics import F32_EPS, sum_tol
from probes.scoring import pack, primitive
from probes.scoring.head import _split_head

VOCAB = 40


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    neox = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64))
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64))
    eager = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=64, max_position_embeddings=64,
                                             attn_implementation="eager"))
    out = {"gpt_neox": neox, "gpt2": gpt2, "llama": llama, "gpt_neox eager": eager}
    for m in out.values():
        with torch.no_grad():  # near-uniform at init: spread the logits so a wrong context shows
            m.get_output_embeddings().weight.mul_(20.0)
        m.eval()
    return out


def sequences() -> list[list[int]]:
    """Shared prefixes, several lengths, repeats, a sequence that is a prefix of another, one id
    only, and enough distinct prefixes (> 512) for several whole head chunks and a partial one."""
    rng = np.random.default_rng(0)
    seqs = [[0, 5, 6, 7], [0, 5, 8], [0, 5, 6, 7], [0], [0, 5, 6], [0, 5, 6, 7, 9, 9, 9], [1, 5], [0, 5, 6, 7],
            [0, *range(2, 32)]]  # 31 ids: longer than the rows of 8 tried below
    for _ in range(150):
        stem = [0, int(rng.integers(2, 6)), int(rng.integers(2, 6))]
        seqs.append(stem + rng.integers(2, VOCAB, size=int(rng.integers(0, 10))).tolist())
    return seqs


def unpacked(model, seqs, batch_size):
    """The right-padded path token_logprobs takes for attention without 4D masks."""
    out = [np.zeros(0) if len(s) == 1 else None for s in seqs]
    todo = [i for i, s in enumerate(seqs) if len(s) > 1]
    with torch.inference_mode():
        primitive._batched(model, _split_head(model), seqs, todo, out, batch_size, torch.device("cpu"), False, False)
    return out


def token_tols(model, s: list[int]) -> np.ndarray:
    """Per scored position: sum_tol over the additions behind its lp (module docstring)."""
    cfg = model.config
    hidden = cfg.hidden_size
    inner = getattr(cfg, "intermediate_size", None) or 4 * hidden
    with torch.no_grad():
        z = copy.deepcopy(model).double()(input_ids=torch.tensor([s])).logits[0, :-1]
    magnitude = (2 * z.abs().amax(-1) + np.log(z.shape[-1])).numpy()
    context = np.arange(1, len(s))
    chain = cfg.num_hidden_layers * (2 * hidden + context + 2 * inner) + hidden + cfg.vocab_size
    return np.array([sum_tol(m, int(c), F32_EPS) for m, c in zip(magnitude, chain)])


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    return models(), sequences()


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2", "llama", "gpt_neox eager"])
def test_packed_lps_equal_unpacked_within_float32_rounding(setup, arch, monkeypatch):
    all_models, seqs = setup
    model = all_models[arch]
    assert model.config._attn_implementation in pack.ATTENTION  # token_logprobs packs this model
    tols = [token_tols(model, s) for s in seqs]
    ref = unpacked(model, seqs, batch_size=7)
    worst = 0.0
    for row_cap, batch_size, threads in ((pack.ROW_CAP, 64, 2), (8, 3, 1), (8, 1, 1)):
        monkeypatch.setattr(pack, "ROW_CAP", row_cap)
        torch.set_num_threads(threads)  # 2: the head's chunks in two worker threads
        got = primitive.token_logprobs(model, seqs, batch_size=batch_size)
        assert torch.get_num_threads() == threads  # the body's share is given back
        for s, a, b, tol in zip(seqs, got, ref, tols):
            assert a.dtype == np.float64 and a.shape == (len(s) - 1,)
            assert (np.abs(a - b) <= tol).all(), (arch, row_cap, batch_size, s, np.abs(a - b), tol)
            worst = max(worst, float(np.abs(a - b).max(initial=0)))
    # the lps differ between tokens by far more than the tolerance: a wrong context would show
    spread = np.ptp(np.concatenate(ref))
    assert spread > 1000 * max(t.max() for t in tols if len(t)) and spread > 1.0
    torch.set_num_threads(1)


def test_head_workers_never_oversubscribe_by_more_than_one():
    assert pack._head_workers(1) == (1, 1) and pack._head_workers(2) == (1, 2)
    for threads in range(3, 33):
        body, workers = pack._head_workers(threads)
        assert body + workers == threads and body >= 1 and workers >= 2


def test_rows_compute_every_prefix_once_with_its_ancestors():
    seqs = [s for s in sequences() if len(s) > 1]
    trie = pack.build_trie(seqs)
    rows = pack.pack_rows(trie, 8)
    longest = max(map(len, seqs)) - 1
    budget = pack.token_budget(trie, 3)
    groups = pack.forwards(rows, budget)
    assert sum(map(len, groups)) == len(rows)
    for group in groups:  # a forward: no more positions than the largest unpacked batch, 3 x longest
        assert len(group) * max(map(pack._row_len, group)) <= max(max(map(pack._row_len, group)), budget) <= 3 * longest
    # rows of 8 positions, or of the path that opens them when longer (the 31-id sequence: 30)
    assert all(pack._row_len(r) <= max(8, r[0][2]) for r in rows) and max(map(pack._row_len, rows)) == longest
    ids, pos, node, fresh = pack._layout(trie, rows)
    width = ids.shape[1]
    body = {tuple(s[:j + 1]) for s in seqs for j in range(len(s) - 1)}  # every fed prefix, once
    assert fresh.sum() == len(body) == len(set(node[fresh].tolist()))
    assert (node >= 0).sum(1).max() <= width
    prefix = {}  # node id -> its prefix, from the flat arrays
    for k, i in enumerate(trie.order):
        for j in range(len(seqs[i])):
            prefix.setdefault(int(trie.nodes[trie.offsets[k] + j]), tuple(seqs[i][:j + 1]))
    for b in range(len(rows)):
        here = {prefix[int(n)] for n in node[b] if n >= 0}
        assert all(p[:d] in here for p in here for d in range(1, len(p)))  # ancestors in the row
        for n, t, d in zip(node[b], ids[b], pos[b]):
            if n >= 0:
                assert prefix[int(n)][-1] == t and len(prefix[int(n)]) == d + 1


def test_tree_mask_sees_ancestors_and_itself_only():
    # a row: 0 -> 1 -> {2, 3}, 0 -> 4 -> 5, then padding
    depth = np.array([[0, 1, 2, 2, 1, 2, -1, -1]])
    parent = {1: 0, 2: 1, 3: 1, 4: 0, 5: 4}
    want = np.zeros((8, 8), dtype=bool)
    for p in range(8):
        want[p, p] = True
        q = p
        while q in parent:
            q = parent[q]
            want[p, q] = True
    np.testing.assert_array_equal(pack.tree_mask(depth)[0], want)
