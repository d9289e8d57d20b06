"""The probe hook: after a checkpoint is whole, score every configured benchmark on it.

A plain object the trainer calls (rank 0 only for now); it reads nothing from the trainer but the
in-memory model, and writes ``<run>/evals/step<N>/<benchmark>.parquet`` through ``probes.store``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from probes.benchmarks import BenchmarkConfig, load_benchmark
from probes.pairs import Pair
from probes.scoring import CONVENTION, accuracy, correct, score_pairs, tokenizer_fingerprint
from probes.store import eval_path, read_pairs, write_pairs


@dataclass
class ProbesConfig:
    enabled: bool = True
    benchmarks: list[BenchmarkConfig] = field(default_factory=list)
    batch_size: int = 64


def summary_metrics(df, benchmark: str) -> dict[str, float]:
    """MLP accuracy of a benchmark and of each of its phenomena, keyed for the logger."""
    out = {f"probe/{benchmark}/acc": accuracy(df, "mlp")}
    ok = correct(df, "mlp")
    for phenomenon, acc in ok.groupby(df["phenomenon"], sort=True).mean().items():
        out[f"probe/{benchmark}/{phenomenon}/acc"] = float(acc)
    return out


class ProbeHook:
    """Plain object called by the trainer after a checkpoint is whole (rank 0 only for now).

    ``pairs`` (benchmark name -> pairs) replaces loading ``cfg.benchmarks``; it serves callers that
    already hold pairs in memory (the built-in grammar, tests).
    """

    def __init__(self, cfg: ProbesConfig, tokenizer, run_dir: Path, *,
                 pairs: Optional[dict[str, list[Pair]]] = None):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.run_dir = Path(run_dir)
        if cfg.batch_size < 1:
            raise ValueError(f"probes.batch_size must be >= 1, got {cfg.batch_size}")
        if not cfg.enabled:
            self.benchmarks: dict[str, list[Pair]] = {}
        elif pairs is not None:
            self.benchmarks = dict(pairs)
        else:
            self.benchmarks = _load_benchmarks(cfg)
        for name, ps in self.benchmarks.items():
            eval_path(self.run_dir, 0, name)  # fail now, not at the first checkpoint, on a bad name
            if not ps:
                raise ValueError(f"benchmark {name!r} has no pairs")
        # the tokenizer is the one saved in every checkpoint of this run: hash it once
        self.fingerprint = tokenizer_fingerprint(tokenizer) if self.benchmarks else ""

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int,
                              model) -> dict[str, float]:
        """Score every benchmark with ``model`` (the weights of ``ckpt_dir``); write the eval files.

        Files that already exist are kept as they are (a resumed run does not redo them); their
        summaries are still returned so the logger sees every checkpoint.
        """
        metrics: dict[str, float] = {}
        for name, pairs in self.benchmarks.items():
            path = eval_path(self.run_dir, step, name)
            if path.exists():
                df, _ = read_pairs(path)
            else:
                t0 = time.perf_counter()
                df = score_pairs(model, self.tokenizer, pairs, batch_size=self.cfg.batch_size)
                meta = {
                    "step": int(step), "tokens": int(tokens), "benchmark": name,
                    "convention": CONVENTION, "model_dir": str(ckpt_dir),
                    "tokenizer": self.fingerprint, "n_pairs": len(df),
                    "seconds": round(time.perf_counter() - t0, 3),
                }
                report = getattr(pairs, "report", None)  # load_benchmark says where pairs came from
                if report is not None:
                    meta["source"] = report.source
                write_pairs(df, path, meta)
            metrics.update(summary_metrics(df, name))
        return metrics

    def close(self) -> None:
        self.benchmarks = {}


def _load_benchmarks(cfg: ProbesConfig) -> dict[str, list[Pair]]:
    names = [bc.name for bc in cfg.benchmarks]
    # checked before loading anything (a real benchmark takes seconds): the name is the eval
    # file's name, so two configs with one name would overwrite each other's files
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"probes.benchmarks[{i}].name: {name!r} is configured twice")
        try:
            eval_path(Path("."), 0, name)
        except ValueError as e:
            raise ValueError(f"probes.benchmarks[{i}].name: {e}") from None
    return {bc.name: load_benchmark(bc) for bc in cfg.benchmarks}
