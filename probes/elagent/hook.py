"""The ELAGENT probe as a checkpoint hook: items generated once per run, scored at every checkpoint into
``<run>/evals/step<N>/elagent.parquet``, summaries to the logger."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from probes.elagent.score import (BENCHMARK, ElagentConfig, build_items, check_lengths, evaluate_items, item_key,
                                  summarize)
from probes.evals.files import pair_set
from probes.scoring.evaluate import ItemsHook


def trained_seq_len(run_dir: Path) -> Optional[int]:
    """The training window of the run (its config.yaml: data.seq_len, else model.max_position_embeddings);
    None where the run has no config.yaml."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    return OmegaConf.select(cfg, "data.seq_len") or OmegaConf.select(cfg, "model.max_position_embeddings")


class ElagentHook(ItemsHook):
    benchmark = BENCHMARK

    def __init__(self, cfg: ElagentConfig, ctx):  # built by the family registry from a train.hooks.HookContext
        self.cfg, self.tokenizer, self.run_dir = cfg, ctx.tokenizer, Path(ctx.run_dir)
        self.items = build_items(cfg)
        # a too-long prompt fails now, not at step 0 (ctx.max_positions: the context long k-shot prompts must
        # fit); one longer than the training windows is named
        check_lengths(self.tokenizer, self.items, ctx.max_positions, trained_seq_len(self.run_dir))
        self.pair_set = pair_set(self.items, item_key)

    def describe(self) -> str:
        """What each checkpoint is probed on, for the trainer's start-up summary."""
        return f"ELAGENT tasks ({len(self.items):,} items)"

    def evaluate(self, model, step: int, tokens: int, ckpt_dir: Path):
        return evaluate_items(model, self.tokenizer, self.items, self.cfg, step=step, tokens=tokens,
                              ckpt_dir=ckpt_dir, run_dir=self.run_dir)

    summarize = staticmethod(summarize)
