"""n-gram baselines trained on the tokens each checkpoint trained on (issue 43 item 2): every pair scored by n-gram
models, n = 2..5, under stupid backoff (Brants et al. 2007, alpha 0.4) from the counts the exposure pass takes of
every window of up to 5 ids of each sentence with its start id. Kneser-Ney would need every n-gram's number of
distinct left contexts, which counts of fixed queries cannot give. Scores are unnormalised (not probabilities);
the unigram level is add-one smoothed over the vocabulary, so an unseen token (and step 0) scores finitely."""
from __future__ import annotations

import numpy as np
import pandas as pd

ORDERS = (2, 3, 4, 5)
ALPHA = 0.4
SMOOTHING = {"name": "stupid_backoff", "alpha": ALPHA, "unigram": "add_one", "unnormalised": True}
COLUMNS = ["pair_id", "paradigm", "phenomenon", "step", "n", "lp_good", "lp_bad", "ntok_good", "ntok_bad"]
_K = np.arange(1, ORDERS[-1] + 1)


def windows(seq) -> list[tuple[int, ...]]:
    """Every window of up to max(ORDERS) ids of `seq` (a sentence with its start id): the queries it is scored by."""
    return [tuple(seq[i:j]) for i in range(len(seq)) for j in range(i + 1, min(len(seq), i + _K[-1]) + 1)]


def ngram_frame(pairs: pd.DataFrame, ids: dict, index, counts: dict, tokens: dict, vocab: int) -> pd.DataFrame:
    """One row per step x n x pair (COLUMNS). `ids`: each sentence's ids, start id first (the scorer's); `index(seq)`:
    a window's index in each step's `counts`; `tokens[step]`: tokens trained by then; `vocab`: vocabulary size.
    Token j of a sentence is scored from the k-gram ending at it, k the largest of 1..min(n, j + 1) that occurred
    (the context never reaches before the start id): log(c(k-gram) / c(its context)) + (min(n, j + 1) - k) log
    ALPHA, and at k = 1 log((c(token) + 1) / (tokens + vocab)). lp sums these over the tokens after the start id."""
    texts = list(ids)
    pos = [(t, j) for t, text in enumerate(texts) for j in range(1, len(ids[text]))]
    owner = np.array([t for t, _ in pos], dtype=np.int64)

    def at(t, a, b):  # the window ids[a:b] of sentence t, -1 where it would start before the start id
        return index(ids[texts[t]][a:b]) if a >= 0 else -1
    gram, ctx = (np.fromiter((at(t, j - k + 1, j + e) if k > 1 - e else -1 for t, j in pos for k in _K), np.int64,
                             len(pos) * len(_K)).reshape(-1, len(_K)) for e in (1, 0))  # k-grams, their contexts
    avail, rows = np.array([j + 1 for _, j in pos], dtype=np.int64), np.arange(len(pos))
    where = {t: i for i, t in enumerate(texts)}
    side = {s: pairs[s].map(where).to_numpy() for s in ("good", "bad")}
    ntok = np.array([len(ids[t]) - 1 for t in texts], dtype=np.int64)
    frames, keys = [], pairs[["pair_id", "paradigm", "phenomenon"]].astype(str)
    for step, c in counts.items():
        g, h = (np.append(c, 0)[x] for x in (gram, ctx))  # index -1: no such window, count 0
        for n in ORDERS:
            k = np.where((g > 0) & (_K <= n), _K, 1).max(axis=1)  # an occurring k-gram's shorter ones occur too
            gk, hk = g[rows, k - 1], h[rows, k - 1]
            lp = (np.minimum(n, avail) - k) * np.log(ALPHA) + np.where(
                k == 1, np.log((gk + 1) / (tokens[step] + vocab)), np.log(np.maximum(gk, 1) / np.maximum(hk, 1)))
            lps = np.bincount(owner, weights=lp, minlength=len(texts))
            f = keys.assign(step=step, n=n)
            for s in ("good", "bad"):
                f["lp_" + s], f["ntok_" + s] = lps[side[s]], ntok[side[s]]
            frames.append(f[COLUMNS])
    return pd.concat(frames, ignore_index=True)
