"""The ELAGENT multiple-choice probe as a checkpoint hook: items are generated once per run, scored at every
checkpoint into ``<run>/evals/step<N>/elagent.parquet``; summaries go to the logger (as the syntax-questions
hook does). The Language A minimal pairs are a registry benchmark (``elagent_word_order``) that the
minimal-pair hook scores."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from probes.elagent.score import (BENCHMARK, ElagentConfig, build_items, check_lengths, evaluate_items, item_key,
                                  summarize)
from probes.evals.files import eval_done, eval_path, pair_set
from train.files import checkpoint_dir, manifest_hash


def trained_seq_len(run_dir: Path) -> Optional[int]:
    """The training window of the run (its config.yaml: data.seq_len, else model.max_position_embeddings);
    None where the run has no config.yaml."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    return OmegaConf.select(cfg, "data.seq_len") or OmegaConf.select(cfg, "model.max_position_embeddings")


def build(cfg: ElagentConfig, ctx) -> "ElagentHook":  # max_positions: the context long k-shot prompts must fit
    return ElagentHook(cfg, ctx.tokenizer, ctx.run_dir, ctx.max_positions)


class ElagentHook:
    def __init__(self, cfg: ElagentConfig, tokenizer, run_dir: Path, max_positions: Optional[int] = None):
        self.cfg, self.tokenizer, self.run_dir = cfg, tokenizer, Path(run_dir)
        self.items = build_items(cfg)
        # a too-long prompt fails now, not at step 0; one longer than the training windows is named
        check_lengths(tokenizer, self.items, max_positions, trained_seq_len(self.run_dir))
        self.pair_set = pair_set(self.items, item_key)

    def describe(self) -> str:
        """What each checkpoint is probed on, for the trainer's start-up summary."""
        return f"ELAGENT tasks ({len(self.items):,} items)"

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int, model) -> dict[str, float]:
        import torch.distributed as torch_dist

        if torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_rank() != 0:
            return {}  # rank 0 scores: a few hundred items, next to thousands of minimal pairs
        if eval_done(eval_path(self.run_dir, step, BENCHMARK), self.pair_set, manifest_hash(ckpt_dir)):
            return {}  # a resumed run does not redo a finished checkpoint
        was_training = model.training
        model.eval()
        try:
            ev = evaluate_items(model, self.tokenizer, self.items, self.cfg, step=step, tokens=tokens,
                                ckpt_dir=ckpt_dir, run_dir=self.run_dir)
        finally:
            model.train(was_training)
        return {f"probe/{BENCHMARK}/{k}": v for k, v in summarize(ev.df).items()
                if not math.isnan(v) and not k.endswith("n_items")}

    def missing(self, step: int) -> bool:
        return not eval_done(eval_path(self.run_dir, step, BENCHMARK), self.pair_set,
                             manifest_hash(checkpoint_dir(self.run_dir, step)))

    def close(self) -> None:
        pass
