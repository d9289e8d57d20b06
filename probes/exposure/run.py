"""`python -m probes exposure RUN_DIR [RUN_DIR ...]`: how often each probed pair's sentences and critical n-grams
occurred in the tokens trained by every saved checkpoint, written as RUN_DIR/exposure/<benchmark>.parquet, and
n-gram baselines estimated from those tokens (probes/exposure/ngram.py) as <benchmark>.ngram.parquet.

The stream, and the count cache that lets runs on one stream count once: docs/probing.md; the file: checkpoints.md."""
from __future__ import annotations

import argparse
import hashlib
import io
import json
from itertools import chain
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from probes.analysis.evalset import _eval_paths
from probes.evals.files import META_KEY, eval_file_meta, pair_set
from probes.exposure import KIND
from probes.exposure.count import Queries
from probes.exposure.ngram import ORDERS, SMOOTHING, ngram_frame, windows
from probes.scoring.primitive import sentence_ids
from train.batch import batch_ids, load_run_config, stream_of
from train.cli import exit_on_user_error
from train.errors import InputFileError
from train.evalsums import CHECKSUM, CHECKSUM_KEY, sum_problem, write_summed
from train.files import list_checkpoints, read_trainer_state
from train.token_store import DATA_KEY, TokenStore
from train.tokenizer import load_tokenizer, pipeline_fingerprint

NS = (1, 2, 3, 4)
COLUMNS = ["pair_id", "paradigm", "phenomenon", "step", "n", "good", "bad", "verbatim_good", "verbatim_bad"]


def critical_span(side: Sequence[int], other: Sequence[int]) -> tuple[int, int]:
    """[start, end) of `side` left after the longest common prefix and then the longest common suffix of the
    two sides, the suffix never reaching into the prefix (sides differing only in order keep both spans)."""
    p = 0
    while p < min(len(side), len(other)) and side[p] == other[p]:
        p += 1
    q = 0
    while q < min(len(side), len(other)) - p and side[-1 - q] == other[-1 - q]:
        q += 1
    return p, len(side) - q


def critical_ngrams(side: Sequence[int], other: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """The n-grams of `side` holding at least one id of its critical span, one per position."""
    a, b = critical_span(side, other)
    if a == b:
        return []
    return [tuple(side[i:i + n]) for i in range(max(0, a - n + 1), min(len(side) - n, b - 1) + 1)]


def open_run(run_dir: Path, cache_dir: Optional[Path] = None):
    """(config, checkpoint steps, the checkpoints' tokenizer, token store, SequenceStream) of a trained run;
    InputFileError for a run whose token store is gone or is not the one it trained on."""
    cfg = load_run_config(run_dir, cache_dir)
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise InputFileError(f"{run_dir}: no checkpoints/step<N> directories: nothing was trained")
    last = ckpts[-1][1]
    record = read_trainer_state(last).get(DATA_KEY) or {}
    store_dir = Path(record.get("store", ""))
    if cache_dir is not None:  # the store moved with its cache
        store_dir = Path(cache_dir).expanduser() / "stores" / store_dir.name
    if not (store_dir / "meta.json").is_file():
        raise InputFileError(f"{run_dir}: its token store {store_dir} (recorded in {last}/trainer_state.json) is "
                             f"not there; `python -m train batch {run_dir} --step 1` rebuilds it (or pass "
                             f"--cache-dir where it is)")
    store = TokenStore(store_dir)
    tokenizer = load_tokenizer(last)
    if store.meta.get("tokenizer_fingerprint") != pipeline_fingerprint(last):
        raise InputFileError(f"{store_dir}: built with another tokenizer than {last}'s (fingerprint "
                             f"{store.meta.get('tokenizer_fingerprint')}): not the tokens {run_dir} trained on")
    if record.get("store_sha256") not in (None, store.content_hash):
        raise InputFileError(f"{store_dir}: not the token store {last} was trained on (its sha256 differs): "
                             f"rebuilt from a changed corpus or tokenizer")
    return cfg, [s for s, _ in ckpts], tokenizer, store, stream_of(cfg, store, tokenizer)


def stream_identity(cfg, store, stream) -> dict:
    """What fixes the batches (train/sequences.py): the exposure file's metadata and its cache key."""
    d = cfg.data
    return {"store": store.meta["fingerprint"], "store_sha256": store.content_hash, "order_seed": d.order_seed,
            "seed": d.seed, "seq_len": stream.seq_len, "global_batch": cfg.optim.global_batch, "epochs": d.epochs,
            "budget_tokens": d.budget_tokens, "nested_budgets": sorted(d.nested_budgets),
            "heldout_tokens": d.heldout_tokens, "start_id": stream.start_id, "end_id": stream.end_id}


def _cache_key(ident: dict, queries: Queries) -> str:
    # nested budgets, one epoch, a budget that is one of them: its batches are the first ones of every larger
    # budget of the list (each block shuffled on its own, train/sequences.py), so the budget is no part of the key
    shared = ident["epochs"] == 1 and ident["budget_tokens"] in ident["nested_budgets"]
    key = {k: v for k, v in ident.items() if not (shared and k == "budget_tokens")}
    return hashlib.sha256(json.dumps([key, queries.digest], sort_keys=True).encode()).hexdigest()[:24]


def cumulative_counts(queries: Queries, stream, global_batch: int, steps: list[int], cache: Path) -> dict:
    """{step: counts of every query in the rows of batches 1..step}, from the cache where it has the step, else
    counted on from the largest step below it that it has; the cache keeps every step counted."""
    have = {0: np.zeros(len(queries.seqs), dtype=np.int64)}
    if cache.is_file():
        if problem := sum_problem(cache):  # damaged: refused, not counted over
            raise InputFileError(f"{problem} (an exposure count cache: deleting both files counts again)")
        with np.load(cache) as z:
            have.update(zip(z["steps"].tolist(), z["counts"]))
    done, counts, new = 0, have[0].copy(), False
    for s in sorted(set(steps)):
        if s in have:
            continue
        start = max(k for k in have if k <= s)
        if start > done:
            done, counts = start, have[start].copy()
        for k in range(done + 1, s + 1):
            queries.count(batch_ids(stream, k, global_batch), counts)
        done, have[s], new = s, counts.copy(), True
    if new:
        cache.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez_compressed(buf, steps=np.array(sorted(have)), counts=np.stack([have[k] for k in sorted(have)]))
        write_summed(cache, buf.getvalue())
    return {s: have[s] for s in steps}


def _pairs(run_dir: Path, names: list[str]) -> dict[str, pd.DataFrame]:
    """The pairs of each minimal-pair benchmark the run was probed on (its newest eval file), by name."""
    _, paths, _ = _eval_paths(run_dir)
    unknown = [n for n in names if n not in paths]
    if unknown:
        raise InputFileError(f"{run_dir}: was not probed on {', '.join(unknown)} (no evals/step<N>/{unknown[0]}"
                             f".parquet); it was on {', '.join(sorted(paths)) or 'nothing'}")
    out = {}
    for name in names or sorted(paths):
        f = paths[name][-1][1]
        eval_file_meta(f)  # checked as every reader checks it
        out[name] = pd.read_parquet(f, columns=["pair_id", "paradigm", "phenomenon", "good", "bad"])
    return out


def exposure_frame(pairs: pd.DataFrame, ids: dict, queries_of, counts: dict) -> pd.DataFrame:
    """One row per step x n x pair (COLUMNS); `ids`: each sentence's ids, `queries_of(seq)`: a query's index."""
    frames = []
    for n in NS:
        cols = {}
        for side, other in (("good", "bad"), ("bad", "good")):
            grams = [critical_ngrams(ids[a], ids[b], n) for a, b in zip(pairs[side], pairs[other])]
            cols[side] = (np.repeat(np.arange(len(grams)), [len(g) for g in grams]),
                          np.array([queries_of(g) for g in chain.from_iterable(grams)], dtype=np.int64))
            cols["verbatim_" + side] = np.array([queries_of(ids[t]) for t in pairs[side]], dtype=np.int64)
        for step, c in counts.items():
            f = pairs[["pair_id", "paradigm", "phenomenon"]].astype(str).assign(step=step, n=n)
            for side in ("good", "bad"):  # one term per position: a pair's rows repeat
                np.add.at(v := np.zeros(len(pairs), dtype=np.int64), cols[side][0], c[cols[side][1]])
                f[side] = v
            f["verbatim_good"], f["verbatim_bad"] = c[cols["verbatim_good"]], c[cols["verbatim_bad"]]
            frames.append(f[COLUMNS])
    return pd.concat(frames, ignore_index=True).sort_values(["step", "n"], kind="stable", ignore_index=True)


def exposure_path(run_dir: Path, benchmark: str) -> Path:
    return Path(run_dir) / "exposure" / f"{benchmark}.parquet"


def read_exposure(path: Path, stream: Optional[dict] = None, kind: str = KIND) -> tuple[pd.DataFrame, dict]:
    """(rows, metadata) of an exposure file (`kind` "ngram": its n-gram baseline file); InputFileError for a
    damaged one, one of another kind, or one counted over another stream than `stream` (stream_identity of the
    run it is read for)."""
    path = Path(path)
    meta = json.loads((pq.read_schema(path).metadata or {}).get(META_KEY, b"{}"))
    if problem := sum_problem(path, meta):
        raise InputFileError(problem)
    if meta.get("kind") != kind:
        raise InputFileError(f"{path}: kind {meta.get('kind')!r}, not an {kind} file")
    if stream is not None and meta.get("stream") != stream:
        diff = sorted(k for k in stream if meta.get("stream", {}).get(k) != stream[k])
        raise InputFileError(f"{path}: counted over another stream than its run's (differs in {', '.join(diff)}); "
                             f"count again: python -m probes exposure {path.parent.parent}")
    return pd.read_parquet(path), meta


def exposure_run(run_dir: Path, names: list[str], cache_dir: Optional[Path] = None) -> Iterator[Path]:
    cfg, steps, tokenizer, store, stream = open_run(run_dir, cache_dir)
    ident = stream_identity(cfg, store, stream)
    vocab = int(store.meta.get("vocab_size", len(tokenizer)))
    bits = max(vocab - 1, 1).bit_length()
    for name, pairs in _pairs(run_dir, names).items():
        texts = list(dict.fromkeys([*pairs["good"], *pairs["bad"]]))
        full = {t: tuple(s) for t, s in zip(texts, sentence_ids(tokenizer, texts))}
        ids = {t: s[1:] for t, s in full.items()}  # without the start id
        seqs = [*ids.values()] + [g for a, b in zip(pairs["good"], pairs["bad"]) for n in NS
                                  for x, y in ((a, b), (b, a)) for g in critical_ngrams(ids[x], ids[y], n)]
        seqs += [w for s in full.values() for w in windows(s)]  # the n-gram baseline's, counted in the same pass
        queries = Queries(seqs, bits)
        cache = Path(cfg.data.cache_dir if cache_dir is None else cache_dir).expanduser() / "exposure" / \
            f"{_cache_key(ident, queries)}.npz"
        counts = cumulative_counts(queries, stream, cfg.optim.global_batch, steps, cache)
        df = exposure_frame(pairs, ids, queries.index.__getitem__, counts)
        meta = {"kind": KIND, "benchmark": name, "stream": ident, "steps": steps, "pair_set": pair_set(
                    pairs.itertuples(), lambda p: (p.paradigm, str(p.pair_id), p.good, p.bad)),
                "ngram_n": list(NS), CHECKSUM_KEY: CHECKSUM}
        yield _write(exposure_path(run_dir, name), df, meta)
        tokens = {s: s * cfg.optim.global_batch * (stream.seq_len + 1) for s in steps}
        df = ngram_frame(pairs, full, queries.index.__getitem__, counts, tokens, vocab)
        yield _write(exposure_path(run_dir, name).with_suffix(".ngram.parquet"), df,
                     {**meta, "kind": "ngram", "ngram_n": list(ORDERS), "smoothing": SMOOTHING, "vocab": vocab})


def _write(path: Path, df: pd.DataFrame, meta: dict) -> Path:
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True)})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    data = buf.getvalue().to_pybytes()
    if path.is_file() and path.read_bytes() == data and not sum_problem(path, meta):
        return path  # a rerun: the same bytes, left as they are
    path.parent.mkdir(parents=True, exist_ok=True)
    write_summed(path, data)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m probes exposure",
                                description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--benchmark", action="append", default=[], metavar="NAME",
                   help="a benchmark the run was probed on (default: every minimal-pair benchmark it was)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="the token store's cache, where it is not the run's data.cache_dir")
    args = p.parse_args(argv)
    for d in args.run_dirs:
        for f in exit_on_user_error(lambda: list(exposure_run(d, args.benchmark, args.cache_dir))):
            print(f)
    return 0
