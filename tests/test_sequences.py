"""Sequence stream on tiny stores with known ids: views, EOS, packing, shuffling, sharding, errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from train.sequences import SequenceStream
from train.token_store import write_token_store

EOS = 2


def _stream(store, **kw) -> SequenceStream:
    args = dict(seq_len=4, budget_tokens=None, epochs=1, order_seed=1234, seed=0, eos_id=EOS)
    args.update(kw)
    return SequenceStream(store, **args)


@pytest.fixture(scope="module")
def docs():
    # distinct ids (>= 10) so every window can be located; one empty document (just an EOS)
    rng = np.random.default_rng(7)
    out, nxt = [], 10
    for n in [*rng.integers(1, 12, size=29), 0]:
        out.append(list(range(nxt, nxt + int(n))))
        nxt += int(n)
    return out


@pytest.fixture(scope="module")
def store(docs, tmp_path_factory):
    return write_token_store(tmp_path_factory.mktemp("s") / "store", docs)


def _naive_stream(docs, order_seed=1234) -> list[int]:
    order = np.random.default_rng(order_seed).permutation(len(docs))
    return [t for i in order for t in (*docs[i], EOS)]


def test_hand_computed_single_document(tmp_path):
    store = write_token_store(tmp_path / "one", [[5, 6, 7, 8, 9]])
    s = _stream(store, seq_len=2)  # stream 5 6 7 8 9 EOS: two windows overlapping by one token
    assert (s.view_tokens, s.sequences_per_epoch) == (6, 2)
    assert sorted(s.sequence(k).tolist() for k in range(2)) == [[5, 6, 7], [7, 8, 9]]
    s = _stream(store, seq_len=2, budget_tokens=4)
    assert s.view_tokens == 4 and s.sequence(0).tolist() == [5, 6, 7]
    s = _stream(store, seq_len=5)
    assert s.sequence(0).tolist() == [5, 6, 7, 8, 9, EOS] and s.sequence(0).dtype == np.int64
    two = write_token_store(tmp_path / "two", [[5, 6], [7]])
    s = _stream(two, seq_len=1)
    assert [s.window(j).tolist() for j in range(4)] in (
        [[5, 6], [6, EOS], [EOS, 7], [7, EOS]], [[7, EOS], [EOS, 5], [5, 6], [6, EOS]])


def test_windows_tile_the_naive_stream_with_eos(docs, store):
    ref = _naive_stream(docs)
    s = _stream(store)
    assert s.stream_tokens == len(ref) == sum(map(len, docs)) + len(docs)
    rebuilt = [t for j in range(s.sequences_per_epoch) for t in s.window(j)[:-1].tolist()]
    rebuilt.append(int(s.window(s.sequences_per_epoch - 1)[-1]))
    assert rebuilt == ref[:s.sequences_per_epoch * 4 + 1]
    assert s.sequences_per_epoch == (len(ref) - 1) // 4
    # EOS exactly after each document's last token (an empty document is a lone EOS)
    assert ref.count(EOS) == len(docs)


def test_budget_views_are_prefixes_and_independent_of_seed(store):
    small = _stream(store, budget_tokens=41, seed=0)
    big = _stream(store, budget_tokens=97, seed=5)
    assert (small.view_tokens, small.sequences_per_epoch) == (41, 10)
    for j in range(small.sequences_per_epoch):
        assert np.array_equal(small.window(j), big.window(j))
    other_order = _stream(store, budget_tokens=41, order_seed=99)
    assert any(not np.array_equal(small.window(j), other_order.window(j)) for j in range(10))


def test_every_view_token_once_per_epoch_and_seeds_permute(store):
    s = _stream(store, budget_tokens=2 * 81, epochs=2, seed=0)
    assert (s.view_tokens, s.sequences_per_epoch, s.num_sequences) == (81, 20, 40)
    windows = sorted(s.window(j).tolist() for j in range(20))
    epochs = [[s.sequence(k).tolist() for k in range(e * 20, e * 20 + 20)] for e in range(2)]
    for seqs in epochs:
        assert sorted(seqs) == windows  # each window once: each view token predicted once
    assert epochs[0] != epochs[1]  # a fresh order each epoch
    t = _stream(store, budget_tokens=2 * 81, epochs=2, seed=1)
    other = [t.sequence(k).tolist() for k in range(20)]
    assert other != epochs[0] and sorted(other) == windows
    with pytest.raises(IndexError, match="40 sequences"):
        s.sequence(40)


def test_batch_is_pure_function_of_step_and_ranks_partition(store):
    s = _stream(store, seed=3)
    gb = 4
    assert s.steps(gb) == s.num_sequences // gb
    late = s.batch(s.steps(gb) - 1, gb)
    b2 = s.batch(2, gb)
    fresh = _stream(store, seed=3)
    assert torch.equal(fresh.batch(2, gb), b2) and torch.equal(fresh.batch(s.steps(gb) - 1, gb), late)
    assert b2.dtype == torch.int64 and b2.shape == (gb, 5)
    assert torch.equal(b2[1], torch.from_numpy(s.sequence(2 * gb + 1)))
    shards = [s.batch(2, gb, rank=r, world=2) for r in range(2)]
    assert all(x.shape == (2, 5) for x in shards)
    assert torch.equal(torch.stack([shards[0][0], shards[1][0], shards[0][1], shards[1][1]]), b2)
    with pytest.raises(ValueError, match="not divisible"):
        s.batch(0, 4, rank=0, world=3)
    with pytest.raises(IndexError, match="out of range"):
        s.batch(s.steps(gb), gb)


def test_budget_error_names_keys_and_sizes(store):
    n = _stream(store).stream_tokens
    with pytest.raises(ValueError, match=rf"data\.budget_tokens=1000.*data\.epochs=2.*only {n} tokens"):
        _stream(store, budget_tokens=1000, epochs=2)
    assert _stream(store, budget_tokens=2 * n, epochs=2).view_tokens == n  # exactly the corpus is fine
    with pytest.raises(ValueError, match="data.seq_len"):
        _stream(store, budget_tokens=3)
