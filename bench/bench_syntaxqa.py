"""Syntax-question probe, likelihood part (TF + MC): options sharing one forward of the prompt vs one
sequence per option, same model, same items, one run.

    python bench/bench_syntaxqa.py [--shots 0] [--k 5] [--repeats 3] [--tokenizer DIR]

Items: ../shared/treebanks (the PTB WSJ sample; --source to change), every knowledge point, k items
per (type, knowledge point, answer category), zero-shot unless --shots. Model: the pythia-14m
architecture (Pythia initialisation, fp32, CPU) as in bench_scoring.py, with its byte-level BPE unless
--tokenizer. Per repeat, alternating: ``_likelihood_scores(share_context=True)`` (one forward per
prompt; per-option sequences only where an option is several tokens) and ``share_context=False`` (the
old path: every prompt + option its own sequence). Prints the medians, the speed-up, whether every
prediction agrees and the max |option log-prob difference|. FITB generation is not timed (unchanged).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", action="append", default=None)
    ap.add_argument("--shots", type=int, default=0)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokenizer", type=Path, default=None)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from bench_scoring import SHARED, pythia_14m, train_tokenizer
    from probes.syntaxqa.score import SyntaxQAConfig, _likelihood_scores, build_items_and_reports

    sources = args.source or [str(SHARED / "treebanks" / "ptb_wsj_sample_nltk")]
    cfg = SyntaxQAConfig(sources=sources, question_types=["TF", "MC"], k_per_tuple=args.k, shots=args.shots,
                         batch_size=args.batch_size)
    items, _reports = build_items_and_reports(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        tok = (AutoTokenizer.from_pretrained(args.tokenizer) if args.tokenizer
               else train_tokenizer(Path(tmp), 32000, 8_000_000))
    model = pythia_14m()
    n_prompts = sum(len(it.prompts) for it in items)
    print(f"{len(items)} items ({n_prompts} prompts, shots={args.shots}), pythia-14m architecture, batch {args.batch_size}")
    times: dict[bool, list[float]] = {True: [], False: []}
    results = {}
    for _ in range(args.repeats):
        for share in (False, True):
            t0 = time.perf_counter()
            results[share] = _likelihood_scores(model, tok, items, cfg, "cpu", share_context=share)
            times[share].append(time.perf_counter() - t0)
    same_pred = all(results[True][k][:2] == results[False][k][:2] for k in results[True])
    diff = max(np.max(np.abs(np.array(results[True][k][2]) - np.array(results[False][k][2]))) for k in results[True])
    for share in (False, True):
        label = "shared prompt" if share else "per option"
        print(f"{label:>14}: median {statistics.median(times[share]):.2f} s  "
              f"({', '.join(f'{t:.2f}' for t in times[share])})")
    paired = statistics.median(o / n for o, n in zip(times[False], times[True]))
    print(f"speed-up {statistics.median(times[False]) / statistics.median(times[True]):.2f}x (median of per-repeat "
          f"ratios {paired:.2f}x); same predictions: {same_pred}; max |lp difference| {diff:.2e}")


if __name__ == "__main__":
    main()
