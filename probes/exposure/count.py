"""Occurrence counts of a fixed set of id sequences (queries) in the rows of training batches, in one numpy pass,
exact (keys packing the ids where they fit 64 bits, else a polynomial hash whose hits are checked id by id; a
window never leaves its row): docs/probing.md, "Exposure", Method."""
from __future__ import annotations

import hashlib

import numpy as np

_BASE = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64: the hash's base
_INV = pow(_BASE, -1, 1 << 64)
_FILTER_BITS = 22  # a 4 MiB table of booleans per query length


def _powers(base: int, n: int) -> np.ndarray:
    p = np.full(n, base, dtype=np.uint64)
    p[:1] = 1
    return np.cumprod(p)  # uint64 products wrap: arithmetic mod 2^64


def _slots(keys: np.ndarray) -> np.ndarray:  # a window whose slot holds no query skips the binary search
    return (keys * np.uint64(_BASE)) >> np.uint64(64 - _FILTER_BITS)


class Queries:
    """Distinct id sequences `seqs` (tuples), counted by `count`; `bits`: bits of the largest id."""

    def __init__(self, seqs: list[tuple[int, ...]], bits: int):
        self.seqs = list(dict.fromkeys(s for s in seqs if s))
        self.index = {s: i for i, s in enumerate(self.seqs)}
        self.bits = bits
        self.digest = hashlib.sha256(repr((bits, sorted(self.seqs))).encode()).hexdigest()[:16]
        self.groups = []  # per length: (L, sorted keys, query index of each key, ids to verify or None)
        lengths = np.array([len(s) for s in self.seqs], dtype=np.int64)
        for L in np.unique(lengths).tolist():
            members = np.flatnonzero(lengths == L)
            ids = np.array([self.seqs[i] for i in members], dtype=np.uint64)
            keys = self._keys(ids, L, None)[:, 0]
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            if np.any(keys[1:] == keys[:-1]):  # 2^-64 per pair; never silently merged
                raise ValueError(f"two queries of length {L} share a 64-bit hash key")
            present = np.zeros(1 << _FILTER_BITS, dtype=bool)
            present[_slots(keys)] = True
            self.groups.append((L, keys, members[order], None if L * bits <= 64 else ids[order], present))

    def _keys(self, x: np.ndarray, L: int, prefix) -> np.ndarray:
        """Keys of every length-L window of each row of x (uint64): (rows, width - L + 1)."""
        m = x.shape[1] - L + 1
        if L * self.bits <= 64:
            k = x[:, :m].copy()
            for i in range(1, L):
                k <<= np.uint64(self.bits)
                k |= x[:, i:i + m]
            return k
        if prefix is None:
            prefix = self._prefix(x)
        # sum_t x[j+t] * INV^t = (P[j+L] - P[j]) * BASE^j, with P[j] = sum_{i<j} x[i] * INV^i
        return (prefix[:, L:L + m] - prefix[:, :m]) * _powers(_BASE, m)

    @staticmethod
    def _prefix(x: np.ndarray) -> np.ndarray:
        p = np.zeros((x.shape[0], x.shape[1] + 1), dtype=np.uint64)
        np.cumsum(x * _powers(_INV, x.shape[1]), axis=1, out=p[:, 1:])
        return p

    def count(self, rows: np.ndarray, counts: np.ndarray) -> None:
        """Adds to counts[q] the occurrences of query q inside each row of `rows` (rows x width ids)."""
        x = np.ascontiguousarray(rows, dtype=np.uint64)
        width, prefix = x.shape[1], None
        for L, keys, members, ids, present in self.groups:
            if L > width:
                break
            if ids is not None and prefix is None:
                prefix = self._prefix(x)
            k = self._keys(x, L, prefix).ravel()
            maybe = np.flatnonzero(present[_slots(k)])
            pos = np.minimum(np.searchsorted(keys, k[maybe]), len(keys) - 1)
            found = keys[pos] == k[maybe]
            hit, q = maybe[found], pos[found]
            if ids is not None:  # a hash hit: the window's ids must be the query's
                r, j = np.divmod(hit, width - L + 1)
                q = q[(x[r[:, None], j[:, None] + np.arange(L)] == ids[q]).all(axis=1)]
            counts[members] += np.bincount(q, minlength=len(keys))  # this length's queries only
