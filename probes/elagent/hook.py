"""The ELAGENT multiple-choice probe as a checkpoint hook: items are generated once per run, scored at every
checkpoint into ``<run>/evals/step<N>/elagent.parquet``; summaries go to the logger (as the syntax-questions
hook does). The Language A minimal pairs are a registry benchmark (``elagent_word_order``) that the
minimal-pair hook scores."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

from probes.elagent.score import BENCHMARK, ElagentConfig, build_items, check_lengths, score_items, write_items
from probes.store import eval_path


class ElagentHook:
    def __init__(self, cfg: ElagentConfig, tokenizer, run_dir: Path, max_positions: Optional[int] = None):
        self.cfg, self.tokenizer, self.run_dir = cfg, tokenizer, Path(run_dir)
        self.items = build_items(cfg)
        check_lengths(tokenizer, self.items, max_positions)  # a too-long prompt fails now, not at step 0

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int, model) -> dict[str, float]:
        import torch.distributed as torch_dist

        if torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_rank() != 0:
            return {}  # rank 0 scores: a few hundred items, next to thousands of minimal pairs
        path = eval_path(self.run_dir, step, BENCHMARK)
        if path.exists():  # a resumed run does not redo a finished checkpoint
            return {}
        t0 = time.perf_counter()
        df = score_items(model, self.tokenizer, self.items, batch_size=self.cfg.batch_size)
        summary = write_items(df, path, step=step, tokens=tokens, model_dir=ckpt_dir, tokenizer=self.tokenizer,
                              cfg=self.cfg, seconds=round(time.perf_counter() - t0, 3))
        return {f"probe/{BENCHMARK}/{k}": v for k, v in summary.items()
                if not math.isnan(v) and not k.endswith("n_items")}

    def missing(self, step: int) -> bool:
        return not eval_path(self.run_dir, step, BENCHMARK).exists()

    def close(self) -> None:
        pass
