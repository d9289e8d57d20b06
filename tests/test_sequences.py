"""Sequence stream on tiny stores with known ids: views, start/end tokens, packing, shuffling, sharding, errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from train.sequences import SequenceStream
from trainutil import write_token_store

START, END = 1, 2


def _stream(store, **kw) -> SequenceStream:
    args = dict(seq_len=4, budget_tokens=None, epochs=1, order_seed=1234, seed=0, start_id=START)
    args.update(kw)
    return SequenceStream(store, **args)


@pytest.fixture(scope="module")
def docs():
    # distinct ids (>= 10) so every window can be located; one empty document (just a start token)
    rng = np.random.default_rng(7)
    out, nxt = [], 10
    for n in [*rng.integers(1, 12, size=29), 0]:
        out.append(list(range(nxt, nxt + int(n))))
        nxt += int(n)
    return out


@pytest.fixture(scope="module")
def store(docs, tmp_path_factory):
    return write_token_store(tmp_path_factory.mktemp("s") / "store", docs)


def _naive_stream(docs, order_seed=1234, end=None) -> list[int]:
    order = np.random.default_rng(order_seed).permutation(len(docs))
    return [t for i in order for t in (START, *docs[i], *([end] if end is not None else []))]


def _rebuilt(s: SequenceStream) -> list[int]:
    """The view in stream order, from the windows (which overlap by one token)."""
    out = [t for j in range(s.sequences_per_epoch) for t in s.window(j)[:-1].tolist()]
    return out + [int(s.window(s.sequences_per_epoch - 1)[-1])]


def test_hand_computed_single_document(tmp_path):
    store = write_token_store(tmp_path / "one", [[5, 6, 7, 8, 9]])
    s = _stream(store, seq_len=2)  # stream START 5 6 7 8 9: two windows overlapping by one token
    assert (s.view_tokens, s.sequences_per_epoch) == (6, 2)
    assert sorted(s.sequence(k).tolist() for k in range(2)) == [[START, 5, 6], [6, 7, 8]]
    # a budget counts tokens trained on: 4 tokens = 2 windows of 2 inputs, the view one more (the last label)
    s = _stream(store, seq_len=2, budget_tokens=4)
    assert (s.view_tokens, s.sequences_per_epoch) == (5, 2) and s.window(1).tolist() == [6, 7, 8]
    s = _stream(store, seq_len=2, budget_tokens=3)
    assert (s.view_tokens, s.sequences_per_epoch) == (4, 1) and s.sequence(0).tolist() == [START, 5, 6]
    s = _stream(store, seq_len=5)
    assert s.sequence(0).tolist() == [START, 5, 6, 7, 8, 9] and s.sequence(0).dtype == np.int64
    two = write_token_store(tmp_path / "two", [[5, 6], [7]])
    s = _stream(two, seq_len=1)
    assert [s.window(j).tolist() for j in range(4)] in (
        [[START, 5], [5, 6], [6, START], [START, 7]], [[START, 7], [7, START], [START, 5], [5, 6]])
    # a tokenizer with a distinct EOS (Llama-style): START doc END for every document
    s = _stream(two, seq_len=6, end_id=END)
    assert s.stream_tokens == 7 and s.window(0).tolist() in (
        [START, 5, 6, END, START, 7, END], [START, 7, END, START, 5, 6, END])


@pytest.mark.parametrize("end", [None, END])
def test_every_document_is_preceded_by_the_start_token(docs, store, end):
    # The scorer conditions every sentence on the start token; training must have fed it before
    # every document, the very first of the stream included.
    ref = _naive_stream(docs, end=end)
    s = _stream(store, end_id=end)
    frame = 1 + (end is not None)
    assert s.stream_tokens == len(ref) == sum(map(len, docs)) + frame * len(docs)
    rebuilt = _rebuilt(s)
    assert rebuilt == ref[:s.sequences_per_epoch * 4 + 1]
    assert s.sequences_per_epoch == (len(ref) - 1) // 4
    order = np.random.default_rng(1234).permutation(len(docs))
    at, checked = 0, 0
    for i in order:
        if at + frame + len(docs[i]) > len(rebuilt):
            break
        assert rebuilt[at] == START, f"document {i} at stream position {at} is not preceded by the start token"
        assert rebuilt[at + 1:at + 1 + len(docs[i])] == docs[i]
        if end is not None:
            assert rebuilt[at + 1 + len(docs[i])] == END
        at += frame + len(docs[i])
        checked += 1
    assert checked >= len(docs) - 2
    assert rebuilt.count(START) == checked + (at < len(rebuilt))  # nowhere else


def test_budget_views_are_prefixes_and_independent_of_seed(store):
    small = _stream(store, budget_tokens=40, seed=0)
    big = _stream(store, budget_tokens=97, seed=5)
    assert (small.view_tokens, small.sequences_per_epoch) == (41, 10)
    for j in range(small.sequences_per_epoch):
        assert np.array_equal(small.window(j), big.window(j))
    other_order = _stream(store, budget_tokens=40, order_seed=99)
    assert any(not np.array_equal(small.window(j), other_order.window(j)) for j in range(10))


def test_nested_streams_train_a_larger_budget_first_on_the_smaller_runs_sequences(store):
    # budgets 20 and 60 tokens in windows of 4: 5 and 15 sequences. Nested, the 60-token run's first 5
    # sequences are the 20-token run's 5, in the same order (the same text at the same steps); then the rest of
    # its view, each window once.
    nest = [20, 60]
    small = _stream(store, budget_tokens=20, seed=3, nested_budgets=nest)
    big = _stream(store, budget_tokens=60, seed=3, nested_budgets=nest)
    assert (small.num_sequences, big.num_sequences) == (5, 15)
    first = [big.sequence(k).tolist() for k in range(5)]
    assert first == [small.sequence(k).tolist() for k in range(5)]
    assert sorted(big.sequence(k).tolist() for k in range(15)) == sorted(big.window(j).tolist() for j in range(15))
    assert first != sorted(first)  # still shuffled within the block
    # Not nested (the default): one shuffle over the whole view, so the larger run's first 5 sequences mostly
    # come from beyond the smaller view (what "larger budgets see the same text first" did not say)
    plain = _stream(store, budget_tokens=60, seed=3)
    small_windows = {tuple(small.window(j)) for j in range(5)}
    assert sum(tuple(plain.sequence(k)) in small_windows for k in range(5)) < 5


def test_nested_budgets_are_checked_naming_the_key():
    from train.corpus import DataConfig

    with pytest.raises(ValueError, match=r"data.nested_budgets must be distinct positive.*\[100, 10\]"):
        DataConfig(nested_budgets=[100, 10], budget_tokens=10)
    with pytest.raises(ValueError, match=r"data.budget_tokens=50 is not one of data.nested_budgets=\[10, 100\]"):
        DataConfig(nested_budgets=[10, 100], budget_tokens=50)
    assert DataConfig(nested_budgets=[10, 100], budget_tokens=100).nested_budgets == [10, 100]


def test_every_view_token_once_per_epoch_and_seeds_permute(store):
    s = _stream(store, budget_tokens=2 * 80, epochs=2, seed=0)
    assert (s.view_tokens, s.sequences_per_epoch, s.num_sequences) == (81, 20, 40)
    windows = sorted(s.window(j).tolist() for j in range(20))
    epochs = [[s.sequence(k).tolist() for k in range(e * 20, e * 20 + 20)] for e in range(2)]
    for seqs in epochs:
        assert sorted(seqs) == windows  # each window once: each view token predicted once
    assert epochs[0] != epochs[1]  # a fresh order each epoch
    t = _stream(store, budget_tokens=2 * 80, epochs=2, seed=1)
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


@pytest.mark.parametrize("budget,epochs", [(40, 1), (41, 1), (80, 2), (36, 1)])
def test_the_start_up_count_of_steps_is_the_streams_own(store, budget, epochs):
    """The start-up warnings (train.summary) counted one sequence per epoch fewer than the stream when the
    budget was a multiple of data.seq_len: 40 tokens of 4 gave 9 sequences and 0 steps of 10, the run 1."""
    from types import SimpleNamespace as NS

    from train.summary import planned_steps_of

    cfg = NS(data=NS(budget_tokens=budget, epochs=epochs, seq_len=4), model=NS(max_position_embeddings=64),
             optim=NS(global_batch=10))
    assert planned_steps_of(cfg) == _stream(store, budget_tokens=budget, epochs=epochs).steps(10)
