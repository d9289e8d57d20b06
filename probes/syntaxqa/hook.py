"""The syntax-questions probe as a checkpoint hook: items are built once per run, scored at every
checkpoint into ``<run>/evals/step<N>/syntax_qa.parquet`` (``mode=paper``: ``syntax_qa_paper.parquet``);
summaries go to the logger."""
from __future__ import annotations

import math
from pathlib import Path

from probes.evals.files import eval_done, eval_path, pair_set
from train.files import checkpoint_dir, manifest_hash
from probes.syntaxqa.records import benchmark_name
from probes.syntaxqa.score import SyntaxQAConfig, build_items_and_reports, evaluate_items, item_key, summarize


def build(cfg: SyntaxQAConfig, ctx) -> "SyntaxQAHook":
    return SyntaxQAHook(cfg, ctx.tokenizer, ctx.run_dir)


class SyntaxQAHook:
    def __init__(self, cfg: SyntaxQAConfig, tokenizer, run_dir: Path):
        self.cfg, self.tokenizer, self.run_dir = cfg, tokenizer, Path(run_dir)
        self.benchmark = benchmark_name(cfg.mode)
        if cfg.mode == "paper":
            from probes.syntaxqa.paper_score import build_paper_items_and_reports

            self.items, _, self.reports = build_paper_items_and_reports(cfg)
        else:
            self.items, self.reports = build_items_and_reports(cfg)
        if not self.items:
            raise ValueError(f"probes.syntax_qa: no items from sources {cfg.sources}")
        self.pair_set = pair_set(self.items, item_key)

    def describe(self) -> str:
        """What each checkpoint is probed on, for the trainer's start-up summary."""
        return f"syntax questions, {self.benchmark} ({len(self.items):,} items)"

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int, model) -> dict[str, float]:
        import torch.distributed as torch_dist

        if torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_rank() != 0:
            return {}  # rank 0 asks the questions; the items are few next to minimal-pair benchmarks
        if eval_done(eval_path(self.run_dir, step, self.benchmark), self.pair_set, manifest_hash(ckpt_dir)):
            return {}  # a resumed run does not redo a finished checkpoint
        was_training = model.training
        model.eval()
        try:
            ev = evaluate_items(model, self.tokenizer, self.items, self.cfg, self.reports, step=step, tokens=tokens,
                                ckpt_dir=ckpt_dir, run_dir=self.run_dir)
        finally:
            model.train(was_training)
        return {f"probe/{self.benchmark}/{k}": v for k, v in summarize(ev.df).items()
                if not math.isnan(v) and not k.endswith("n_items")}

    def missing(self, step: int) -> bool:
        return not eval_done(eval_path(self.run_dir, step, self.benchmark), self.pair_set,
                             manifest_hash(checkpoint_dir(self.run_dir, step)))

    def close(self) -> None:
        pass
