"""Trie-packed scoring: the body and the head run once per distinct prefix (docs/speed.md, "What changed").

Sorted sequences give a trie whose node ids are a preorder (a subtree is a contiguous run). Each sequence's
fresh nodes (``Trie.fresh``) are packed into rows of ``ROW_CAP`` nodes; a row that starts with a sequence
gets its whole path, so every node in a row has its ancestors in it, and ``tree_mask`` lets a node see
exactly those, which gives the unpacked hidden state up to float32 reassociation.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from tqdm.auto import tqdm

from probes.scoring.head import _HeadLSE

# Nodes per packed row (a longer sequence gets a row of its own length): longer rows recompute fewer paths but
# attend over more keys. On 20,100 BLiMP sentences, pythia-14m: 4.15, 4.19, 4.32 CPU-s at 64, 96, 128.
ROW_CAP = 96
ATTENTION = ("sdpa", "eager")  # implementations that take a 4D mask as given (transformers 5)


@dataclass
class Trie:
    """Prefix trie of sequences in lexicographic order (``order``), flat (``offsets``): ``tokens``, ``nodes`` (the
    id of each prefix seq[:j+1]), ``parent`` of each node; sorted sequence k computes its positions ``fresh[k] ..
    len-2`` (the prefixes no earlier sequence computed)."""
    order: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    nodes: np.ndarray
    fresh: np.ndarray
    parent: np.ndarray


def build_trie(seqs: list[list[int]]) -> Trie:
    order = sorted(range(len(seqs)), key=seqs.__getitem__)  # shorter first among equal prefixes
    nodes: list[int] = []
    fresh = np.zeros(len(order), dtype=np.int64)
    prev, prev_path, nid = [], [], 0
    for k, i in enumerate(order):
        s = seqs[i]
        lcp = len(os.path.commonprefix([s, prev]))
        path = prev_path[:lcp] + list(range(nid, nid + len(s) - lcp))
        nid += len(s) - lcp
        # the prefixes shared with the previous sequence had their body computed by it (or earlier),
        # except its last token, which it never fed (a last token is predicted, never a context)
        fresh[k] = min(lcp, len(prev) - 1) if prev else 0
        nodes += path
        prev, prev_path = s, path
    lengths = np.fromiter((len(seqs[i]) for i in order), dtype=np.int64, count=len(order))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.fromiter((t for i in order for t in seqs[i]), dtype=np.int64, count=int(offsets[-1]))
    flat = np.asarray(nodes, dtype=np.int64)
    parent = np.full(nid, -1, dtype=np.int64)
    depth_pos = np.arange(len(flat)) - np.repeat(offsets[:-1], lengths)
    inner = depth_pos > 0
    parent[flat[inner]] = flat[np.flatnonzero(inner) - 1]
    return Trie(np.asarray(order, dtype=np.int64), offsets, tokens, flat, fresh, parent)


def pack_rows(trie: Trie, cap: int) -> list[list[tuple[int, int, int]]]:
    """Rows of segments (k, a, z): positions a..z-1 of sorted sequence k. A row opens with a sequence's whole path
    (its ancestors are in the row) and holds up to ``cap`` positions; later segments hold only fresh ones."""
    rows: list[list[tuple[int, int, int]]] = []
    cur: list[tuple[int, int, int]] = []
    used = room = 0
    for k, (n, a) in enumerate(zip(np.diff(trie.offsets).tolist(), trie.fresh.tolist())):
        end = n - 1  # the body is not fed the last token
        if a >= end:
            continue  # a repeat or an extension's leaf: nothing new to compute
        if cur and used + end - a <= room:
            cur.append((k, a, end))
            used += end - a
        else:
            rows.append(cur)
            cur, used, room = [(k, 0, end)], end, max(cap, end)
    return [r for r in rows + [cur] if r]


def _row_len(row: list[tuple[int, int, int]]) -> int:
    return sum(z - a for _, a, z in row)


def forwards(rows: list[list[tuple[int, int, int]]], budget: int) -> list[list[list[tuple[int, int, int]]]]:
    """Rows grouped into forwards of at most max(widest row, ``budget``) positions, padding included, widest
    first (an out-of-memory shows up in the first forward; rows are independent, so any order is right)."""
    rows = sorted(rows, key=_row_len, reverse=True)
    out, i = [], 0
    while i < len(rows):
        n = max(1, budget // _row_len(rows[i]))
        out.append(rows[i:i + n])
        i += n
    return out


def tree_mask(depth: np.ndarray) -> np.ndarray:
    """[B, R, R] bool: position p attends to q when q is an ancestor of p or p itself. ``depth`` [B, R]: -1 for
    padding. A row is a preorder walk, so q's subtree runs up to the next position no deeper than q."""
    n = depth.shape[1]
    later = np.arange(n)[None, :] > np.arange(n)[:, None]  # [q, p]: p after q
    ends = later[None] & (depth[:, None, :] <= depth[:, :, None])  # [B, q, p]
    end = np.where(ends.any(-1), ends.argmax(-1), n)  # [B, q]: first p ending q's subtree
    p = np.arange(n)[None, :, None]
    q = np.arange(n)[None, None, :]
    return (q <= p) & (p < end[:, None, :])


def token_budget(trie: Trie, batch_size: int) -> int:
    """Positions per forward: ``batch_size`` sequences of the mean body length (never more memory than unpacked)."""
    return max(1, int(np.ceil(batch_size * (np.diff(trie.offsets) - 1).mean())))


def packed_logprobs(body, head: torch.nn.Linear, seqs: list[list[int]], *, batch_size: int,
                    device: torch.device, bf16: bool = False, progress: bool = False,
                    row_cap: Optional[int] = None) -> list[np.ndarray]:
    """out[i][j] = log p(seqs[i][j+1] | seqs[i][:j+1]) (float64) for sequences of >= 2 ids (module docstring)."""
    trie = build_trie(seqs)
    groups = forwards(pack_rows(trie, row_cap or ROW_CAP), token_budget(trie, batch_size))
    n_nodes = len(trie.parent)
    # children of every node, grouped by parent (CSR): the edges whose logits a prefix's state gives
    kids = np.flatnonzero(trie.parent >= 0)
    kids = kids[np.argsort(trie.parent[kids], kind="stable")]
    first_kid = np.searchsorted(trie.parent[kids], np.arange(n_nodes + 1))
    node_token = np.zeros(n_nodes, dtype=np.int64)
    node_token[trie.nodes] = trie.tokens
    edge_logit = torch.zeros(n_nodes, dtype=torch.float32, device=device)
    lse = torch.zeros(n_nodes, dtype=torch.float32, device=device)
    head_lse = _HeadLSE(head, device, bf16)
    threads = torch.get_num_threads()
    pool, workers = None, 0
    if head_lse.wt is not None:  # the CPU head: its chunks in worker threads (see _head_workers)
        body_threads, workers = _head_workers(threads)
        pool = ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))
        torch.set_num_threads(body_threads)
    pending = _Pending(head_lse, lse, pool, workers)
    try:
        _run(body, head, trie, groups, pending, edge_logit, first_kid, kids, node_token, device, progress)
        pending.finish()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            torch.set_num_threads(threads)
    return _unpack(trie, edge_logit.cpu(), lse.cpu())


def _head_workers(threads: int) -> tuple[int, int]:
    """(intra-op threads of the body, worker threads of the CPU head), never more than one thread too many. Each
    head chunk runs with one intra-op thread: no OpenMP barrier per op, which a busy machine turns into a
    scheduler time slice (16.7 ns a logit on 2 OpenMP threads, 1.4 in two workers; docs/speed.md)."""
    if threads <= 2:
        return 1, threads
    return threads // 2, threads - threads // 2


def _run(body, head, trie, groups, pending, edge_logit, first_kid, kids, node_token, device, progress) -> None:
    """The forwards: each row group's fresh hidden states, their edges' logits, their head rows."""
    mask_dtype = None if body.config._attn_implementation == "sdpa" else body.dtype
    weight = head.weight
    for group in tqdm(groups, desc="scoring", unit="batch", disable=not progress):
        ids, pos, node, fresh = _layout(trie, group)
        mask = torch.from_numpy(tree_mask(np.where(node >= 0, pos, -1))[:, None]).to(device)
        if mask_dtype is not None:  # eager attention adds the mask to the scores
            mask = torch.zeros(mask.shape, dtype=mask_dtype, device=device).masked_fill_(
                ~mask, torch.finfo(mask_dtype).min)
        hidden = body(input_ids=torch.from_numpy(ids).to(device), position_ids=torch.from_numpy(pos).to(device),
                      attention_mask=mask, use_cache=False)[0]
        where = np.flatnonzero(fresh)
        parents = node.reshape(-1)[where]  # each computed here for the first and only time
        h = hidden.reshape(-1, hidden.shape[-1])[torch.from_numpy(where).to(device)]
        count = first_kid[parents + 1] - first_kid[parents]  # >= 1: a fed prefix has a next token
        starts = np.repeat(first_kid[parents] - np.cumsum(count) + count, count)
        edges = kids[starts + np.arange(int(count.sum()))]
        local = torch.from_numpy(np.repeat(np.arange(len(parents)), count)).to(device)
        target = torch.from_numpy(node_token[edges]).to(device)
        logit = (h[local].float() * weight[target].float()).sum(-1)
        if head.bias is not None:
            logit = logit + head.bias[target].float()
        edge_logit[torch.from_numpy(edges).to(device)] = logit
        # one logit of each prefix (its first edge's) shifts its logsumexp (see _HeadLSE)
        shift = logit[torch.from_numpy(np.cumsum(count) - count).to(device)]
        pending.add(h, shift, torch.from_numpy(parents).to(device))


def _layout(trie: Trie, group: list[list[tuple[int, int, int]]]):
    """ids, position ids, node ids (-1: padding) and first-computation flags [B, W] of rows."""
    width = max(map(_row_len, group))
    ids, pos = np.zeros((2, len(group), width), dtype=np.int64)
    node = np.full((len(group), width), -1, dtype=np.int64)
    fresh = np.zeros((len(group), width), dtype=bool)
    for b, r in enumerate(group):
        seg = np.asarray(r, dtype=np.int64)  # [S, 3]: k, a, z
        n = seg[:, 2] - seg[:, 1]
        at = np.repeat(seg[:, 1] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))  # position in its sequence
        flat = np.repeat(trie.offsets[seg[:, 0]], n) + at
        m = len(flat)
        ids[b, :m], pos[b, :m], node[b, :m] = trie.tokens[flat], at, trie.nodes[flat]
        fresh[b, :m] = at >= np.repeat(trie.fresh[seg[:, 0]], n)
    return ids, pos, node, fresh


class _Pending:
    """Prefix hidden states waiting for the logsumexp over the vocabulary, run in whole chunks,
    inline or (``pool``) in worker threads; ``finish`` runs the rest and stores every result."""

    def __init__(self, head_lse: _HeadLSE, lse: torch.Tensor, pool: Optional[ThreadPoolExecutor] = None,
                 workers: int = 0):
        self.head_lse, self.lse, self.pool = head_lse, lse, pool
        self.h, self.shift, self.node = [], [], []  # waiting: hidden states, their shifts, their prefixes
        self.rows = 0
        self.jobs: deque[tuple[torch.Tensor, Future]] = deque()
        # chunks in flight at most: the body (faster than the head) waits rather than queue every
        # hidden state of the run
        self.limit = 2 * workers

    def add(self, h: torch.Tensor, shift: torch.Tensor, node: torch.Tensor) -> None:
        self.h.append(h)
        self.shift.append(shift)
        self.node.append(node)
        self.rows += len(h)
        if self.rows >= self.head_lse.chunk:
            self.flush()

    def flush(self, everything: bool = False) -> None:
        if not self.rows:
            return
        h, shift, node = torch.cat(self.h), torch.cat(self.shift), torch.cat(self.node)
        n = self.rows if everything else self.rows - self.rows % self.head_lse.chunk
        if self.pool is None:
            self.lse[node[:n]] = self.head_lse(h[:n], shift[:n])
        else:
            self.jobs.append((node[:n], self.pool.submit(_inference, self.head_lse, h[:n], shift[:n])))
            while len(self.jobs) > self.limit:
                self._store()
        self.h, self.shift, self.node = [h[n:]], [shift[n:]], [node[n:]]
        self.rows -= n

    def finish(self) -> None:
        self.flush(everything=True)
        while self.jobs:
            self._store()

    def _store(self) -> None:
        node, job = self.jobs.popleft()
        self.lse[node] = job.result()


def _inference(fn, *args):
    with torch.inference_mode():  # thread-local: a worker starts outside it
        return fn(*args)


def _unpack(trie: Trie, edge_logit: torch.Tensor, lse: torch.Tensor) -> list[np.ndarray]:
    """Per original sequence: lp[j] = logit of edge seq[:j+2] - logsumexp at prefix seq[:j+1]."""
    position = np.arange(len(trie.nodes))
    first, last = np.isin(position, trie.offsets[:-1]), np.isin(position, trie.offsets[1:] - 1)
    idx = torch.from_numpy(trie.nodes)
    flat = (edge_logit[idx[~first]] - lse[idx[~last]]).to(torch.float64).numpy()
    parts = np.split(flat, np.cumsum(np.diff(trie.offsets) - 1)[:-1])
    return [parts[k] for k in np.argsort(trie.order)]  # back to the callers' order
