"""Budget view and packed training sequences; the position in the stream is a pure function of the step.

The stream: every document in one order fixed by `order_seed`, each framed by the start token (and EOS when
distinct). A budget of B tokens over E epochs trains on its first ceil(B/E) tokens plus the last label (the
*view*: a 10M view is a prefix of the 100M one), cut into windows of seq_len+1 overlapping by one; epoch e
visits them in a permutation drawn from (seed, e), per nested-budget block (docs/training.md, recipe.md).
Nothing is materialised: a sequence is gathered from the memmap.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # the plan sizes a corpus with split_order below and needs neither
    import torch

    from train.token_store import TokenStore


class SequenceStream:
    def __init__(self, store: TokenStore, *, seq_len: int, budget_tokens: Optional[int], epochs: int,
                 order_seed: int, seed: int, start_id: int, end_id: Optional[int] = None,
                 nested_budgets: Sequence[int] = (), heldout_tokens: int = 0):
        if seq_len < 1:  # data.epochs and data.budget_tokens are checked by DataConfig
            raise ValueError(f"data.seq_len must be >= 1, got {seq_len}")
        self.store, self.seq_len, self.epochs, self.seed = store, seq_len, epochs, seed
        self.start_id, self.end_id = start_id, end_id
        self._frame = 1 + (end_id is not None)  # tokens the stream adds to each document
        # The document order: fixed by order_seed alone, so every budget and every run seed shares it.
        self._order, self.heldout = split_order(np.diff(store.doc_offsets) + self._frame, order_seed, heldout_tokens)
        lengths = np.diff(store.doc_offsets)[self._order] + self._frame
        self._cum = np.zeros(len(lengths) + 1, dtype=np.int64)  # stream position where each doc starts
        np.cumsum(lengths, out=self._cum[1:])
        self.stream_tokens = int(self._cum[-1])

        if budget_tokens is None:
            self.view_tokens = self.stream_tokens
        else:
            # A budget counts tokens trained on (Pythia's 143,000 x 1024 x 2048): B inputs need B + 1 stream
            # tokens (the last label), so a budget of whole batches gives whole steps; where the corpus ends
            # exactly at the budget, the last window is dropped.
            per_epoch = math.ceil(budget_tokens / epochs)
            if per_epoch > self.stream_tokens:
                raise ValueError(
                    f"data.budget_tokens={budget_tokens} over data.epochs={epochs} needs a view of "
                    f"{per_epoch} tokens, but the corpus has only {self.stream_tokens} tokens "
                    f"(start/end tokens included" + (f"; {len(self.heldout)} documents held out, data."
                                                     f"heldout_tokens={heldout_tokens}" if len(self.heldout) else "")
                    + "); lower data.budget_tokens or raise data.epochs")
            self.view_tokens = min(per_epoch + 1, self.stream_tokens)
        self.sequences_per_epoch = (self.view_tokens - 1) // seq_len
        if self.sequences_per_epoch < 1:
            raise ValueError(f"the view of {self.view_tokens} tokens is shorter than one sequence of "
                             f"data.seq_len+1={seq_len + 1} tokens")
        self.num_sequences = self.sequences_per_epoch * epochs
        # block edges in windows: a budget B ends after ceil(B/E) // seq_len windows, as its own run's view does
        inner = {math.ceil(b / epochs) // seq_len for b in nested_budgets}
        self.nested = bool(nested_budgets)
        self._edges = [0, *sorted(e for e in inner if 0 < e < self.sequences_per_epoch), self.sequences_per_epoch]
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def heldout_ids(self) -> np.ndarray:
        """The held-out documents as the stream frames them (start id, tokens, [end id]), in order, int64."""
        parts = [[self.start_id], None, [self.end_id] if self.end_id is not None else []]
        out = []
        for d in self.heldout:
            parts[1] = self.store.doc(int(d))
            out += [np.asarray(p, dtype=np.int64) for p in parts]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def steps(self, global_batch: int) -> int:
        """Optimizer steps available; the last partial batch is dropped."""
        if global_batch < 1:
            raise ValueError(f"global batch must be >= 1, got {global_batch}")
        return self.num_sequences // global_batch

    def sequence(self, k: int) -> np.ndarray:
        """The k-th sequence in training order: seq_len+1 ids (int64)."""
        if not 0 <= k < self.num_sequences:
            raise IndexError(f"sequence {k} out of range: the stream has {self.num_sequences} sequences "
                             f"({self.sequences_per_epoch} per epoch x {self.epochs} epochs)")
        epoch, i = divmod(k, self.sequences_per_epoch)
        return self.window(int(self._epoch_perm(epoch)[i]))

    def window(self, j: int) -> np.ndarray:
        """The j-th sequence of the view in stream order (before shuffling): tokens [j*seq_len, j*seq_len+seq_len+1)."""
        if not 0 <= j < self.sequences_per_epoch:
            raise IndexError(f"window {j} out of range: the view holds {self.sequences_per_epoch} sequences")
        return self._gather(j * self.seq_len)

    def batch(self, step: int, global_batch: int, rank: int = 0, world: int = 1) -> torch.LongTensor:
        """This rank's rows [rank::world] of the step's global batch; shape (global_batch//world, seq_len+1)."""
        import torch
        return torch.from_numpy(self.batches(step, step + 1, global_batch, rank, world)[0])

    def batches(self, first: int, stop: int, global_batch: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """The batches of steps [first, stop) as numpy (steps, global_batch//world, seq_len+1): no torch."""
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world} processes")
        if global_batch % world:
            raise ValueError(f"global batch {global_batch} is not divisible by the world size {world}")
        for step in (first, stop - 1):
            if not 0 <= step < self.steps(global_batch):
                raise IndexError(f"step {step} out of range: {self.steps(global_batch)} steps of {global_batch} sequences")
        ks = np.arange(first, stop)[:, None] * global_batch + np.arange(rank, global_batch, world)
        return np.stack([self.sequence(int(k)) for k in ks.ravel()]).reshape(*ks.shape, self.seq_len + 1)

    def _epoch_perm(self, epoch: int) -> np.ndarray:
        # One epoch's permutation is cached: consecutive steps almost always stay in the same epoch.
        if epoch != self._perm_epoch:
            if not self.nested:
                self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.sequences_per_epoch)
            else:  # nested: each block shuffled on its own, blocks in order (module docstring)
                self._perm = np.concatenate([lo + np.random.default_rng([self.seed, epoch, k]).permutation(hi - lo)
                                             for k, (lo, hi) in enumerate(zip(self._edges, self._edges[1:]))])
            self._perm_epoch = epoch
        return self._perm

    def _gather(self, start: int) -> np.ndarray:
        """Stream tokens [start, start+seq_len+1): the ordered documents, each framed by start (and end) ids."""
        end = start + self.seq_len + 1
        out = np.empty(self.seq_len + 1, dtype=np.int64)
        d = int(np.searchsorted(self._cum, start, side="right")) - 1  # document holding `start`
        pos = start
        offsets, tokens = self.store.doc_offsets, self.store.tokens
        while pos < end:
            # document d occupies stream [doc_start, doc_end): start id, its n tokens, [end id]
            doc_start, doc_end = int(self._cum[d]), int(self._cum[d + 1])
            src = int(offsets[self._order[d]])
            n = int(offsets[self._order[d] + 1]) - src
            if pos == doc_start:
                out[pos - start] = self.start_id
                pos += 1
            a = pos - doc_start - 1  # offset inside this document's tokens
            b = min(end - doc_start - 1, n)  # stop after its last token or at the sequence end
            if b > a:
                out[pos - start:pos - start + b - a] = tokens[src + a:src + b]
                pos += b - a
            if pos < end and self.end_id is not None and pos == doc_end - 1:
                out[pos - start] = self.end_id
                pos += 1
            d += 1
        return out


HELDOUT_MAX_FRACTION = 0.05  # a small corpus keeps 95 % of its tokens for training


def split_order(lengths: np.ndarray, order_seed: int, heldout_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(training order, held-out documents) of documents with framed `lengths` (train.plan splits alike)."""
    order = np.random.default_rng(order_seed).permutation(len(lengths))
    if heldout_tokens <= 0 or len(lengths) < 2:
        return order, order[:0]
    # documents from the end of the order holding heldout_tokens, never all, and never more than
    # HELDOUT_MAX_FRACTION: the one that reaches heldout_tokens stays in training where it would break that cap
    # (a large last document was held out whole: 9,477 of 9,501 tokens); none fits: none held out
    cap = HELDOUT_MAX_FRACTION * lengths.sum()
    tail = np.cumsum(lengths[order][::-1])
    held = int(min(np.searchsorted(tail, min(heldout_tokens, cap)) + 1, len(lengths) - 1))
    held -= bool(held) and tail[held - 1] > cap
    return order[:len(order) - held], order[len(order) - held:]
