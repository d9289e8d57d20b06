"""Cost of `python -m probes exposure` per token: the stream read through train's stream code (batch_ids) and the
counting pass (probes.exposure.count.Queries) over a real corpus, with a real benchmark's query set.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_exposure.py [--benchmark blimp] [--seq-len 2048] [--batch 64] [--ngram]

Builds (once, in --cache) a 4000-piece sentencepiece tokenizer and the token store of ../shared/corpora/en, as the
demo_text experiment does, then counts every critical n-gram and sentence of every pair of the benchmark in the
whole stream (--ngram: also every window of up to 5 ids of each sentence with its start id, the n-gram
baseline's queries, and the baseline's scoring of every pair at the last step). Prints CPU seconds (process time: user + sys) per million tokens for each part and the peak RSS."""
from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir

from probes.benchmarks.registry import benchmark_configs, load_benchmark
from probes.exposure.count import Queries
from probes.exposure.ngram import ngram_frame, windows
from probes.exposure.run import NS, critical_ngrams
from probes.scoring.primitive import sentence_ids
from train.batch import batch_ids, open_stream
from train.config import register, to_typed

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--benchmark", default="blimp")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--cache", default="/tmp/bench_exposure_cache")
    p.add_argument("--corpus", default="/work/shared/corpora/en")
    p.add_argument("--ngram", action="store_true")
    a = p.parse_args()
    register()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = to_typed(compose("config", overrides=[
            "data=files", "tokenizer=sentencepiece", "tokenizer.vocab_size=4000", "probes=none",
            f"data.paths=[{a.corpus}]", "data.budget_tokens=null", "data.heldout_tokens=0", f"data.cache_dir={a.cache}",
            f"data.seq_len={a.seq_len}", f"model.max_position_embeddings={a.seq_len}", f"optim.global_batch={a.batch}",
            f"optim.micro_batch={a.batch}", "logger.wandb=false"]))
    tokenizer, stream = open_stream(cfg)
    pairs = load_benchmark(benchmark_configs([a.benchmark])[0])
    t0 = time.process_time()
    texts = list(dict.fromkeys(t for q in pairs for t in (q.good, q.bad)))
    full = {t: tuple(s) for t, s in zip(texts, sentence_ids(tokenizer, texts))}
    ids = {t: s[1:] for t, s in full.items()}
    seqs = [*ids.values()] + [g for q in pairs for n in NS for x, y in ((q.good, q.bad), (q.bad, q.good))
                              for g in critical_ngrams(ids[x], ids[y], n)]
    seqs += [w for s in full.values() for w in windows(s)] if a.ngram else []
    queries = Queries(seqs, max(len(tokenizer) - 1, 1).bit_length())
    t_queries = time.process_time() - t0
    steps = stream.steps(cfg.optim.global_batch)
    counts = np.zeros(len(queries.seqs), dtype=np.int64)
    t_gather = t_count = 0.0
    for k in range(1, steps + 1):
        t0 = time.process_time()
        rows = batch_ids(stream, k, cfg.optim.global_batch)
        t1 = time.process_time()
        queries.count(rows, counts)
        t_gather, t_count = t_gather + t1 - t0, t_count + time.process_time() - t1
    tokens = steps * cfg.optim.global_batch * (stream.seq_len + 1)
    mtok = tokens / 1e6
    print(f"{a.benchmark}: {len(pairs):,} pairs -> {len(queries.seqs):,} distinct queries "
          f"(lengths {queries.groups[0][0]}..{queries.groups[-1][0]}, {len(queries.groups)} lengths), "
          f"built in {t_queries:.1f} CPU-s; vocab {len(tokenizer)} ({queries.bits} bits)")
    print(f"stream: {steps} steps x {cfg.optim.global_batch} rows x {stream.seq_len + 1} ids = {mtok:.2f}M tokens")
    print(f"gather (train.batch.batch_ids): {t_gather:.1f} CPU-s = {t_gather / mtok:.2f} CPU-s/M tokens "
          f"= {t_gather / mtok * 1000 / 3600:.2f} CPU-h per billion")
    print(f"count (Queries.count): {t_count:.1f} CPU-s = {t_count / mtok:.2f} CPU-s/M tokens "
          f"= {t_count / mtok * 1000 / 3600:.2f} CPU-h per billion")
    if a.ngram:
        t0 = time.process_time()
        frame = pd.DataFrame([(q.pair_id, q.paradigm, q.phenomenon, q.good, q.bad) for q in pairs],
                             columns=["pair_id", "paradigm", "phenomenon", "good", "bad"])
        df = ngram_frame(frame, full, queries.index.__getitem__, {steps: counts}, {steps: tokens}, len(tokenizer))
        t1 = time.process_time()
        ngram_frame(frame, full, queries.index.__getitem__, dict.fromkeys(range(11), counts), [tokens] * 11,
                    len(tokenizer))
        t11 = time.process_time() - t1
        print(f"n-gram baseline (ngram_frame, n = 2..5): {t1 - t0:.1f} CPU-s for one step, {(t11 - t1 + t0) / 10:.2f} "
              f"per further step; accuracy (sum) at the last step by n: "
              f"{df.assign(ok=df.lp_good > df.lp_bad).groupby('n').ok.mean().round(3).to_dict()}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"{int((counts > 0).sum()):,} queries seen, {int(counts.sum()):,} occurrences")


if __name__ == "__main__":
    main()
