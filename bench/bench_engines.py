"""Training throughput of the two engines on the same tiny run (CPU here; a GPU when there is one).

    python bench/bench_engines.py [--steps-docs 400] [extra Hydra overrides...]

Runs the real entry point (train.loop.train) three times on one config, engine=torch, then
engine=deepspeed with ZeRO stage 0 and stage 1, and prints tokens/s of each (median of the logged
windows after warm-up) and the ratio to torch. Probing and W&B are off so only training is timed.
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from trainutil import tiny_cfg  # noqa: E402

from train.loop import train  # noqa: E402


def tokens_per_s(run_dir: Path) -> float:
    rates = [json.loads(line).get("train/tokens_per_s") for line in
             (run_dir / "logs" / "train.jsonl").read_text().splitlines()]
    rates = [r for r in rates if r is not None]
    return statistics.median(rates[len(rates) // 4:])  # skip warm-up windows


def main(argv: list[str]) -> None:
    extra = ["probes=none", "schedule=custom", "logger.log_every=10", "data.grammar.n_documents=400",
             "model.hidden_size=64", "model.intermediate_size=256", "data.seq_len=64",
             "optim.global_batch=16", "optim.micro_batch=16", *argv]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results = {}
        for name, engine, stage in (("torch", "torch", 0), ("deepspeed-zero0", "deepspeed", 0),
                                    ("deepspeed-zero1", "deepspeed", 1)):
            run_dir = tmp / name
            train(tiny_cfg(tmp / "cache", f"engine={engine}", f"engine.zero_stage={stage}", *extra), run_dir)
            results[name] = tokens_per_s(run_dir)
        for name, rate in results.items():
            print(f"{name:>16}: {rate:>9,.0f} tokens/s   {rate / results['torch']:.2f} x torch")


if __name__ == "__main__":
    main(sys.argv[1:])
