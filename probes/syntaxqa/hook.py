"""The syntax-questions probe as a checkpoint hook: items are built once per run, scored at every checkpoint into
``<run>/evals/step<N>/syntax_qa.parquet`` (``mode=paper``: ``syntax_qa_paper.parquet``); summaries go to the logger."""
from __future__ import annotations

from pathlib import Path

from probes.evals.files import pair_set
from probes.scoring.evaluate import ItemsHook
from probes.syntaxqa.records import benchmark_name
from probes.syntaxqa.score import SyntaxQAConfig, build_items_and_reports, evaluate_items, item_key, summarize


def build(cfg: SyntaxQAConfig, ctx) -> "SyntaxQAHook":
    return SyntaxQAHook(cfg, ctx.tokenizer, ctx.run_dir)


class SyntaxQAHook(ItemsHook):
    def __init__(self, cfg: SyntaxQAConfig, tokenizer, run_dir: Path):
        self.cfg, self.tokenizer, self.run_dir = cfg, tokenizer, Path(run_dir)
        self.benchmark = benchmark_name(cfg.mode)
        self.items, self.reports = build_items_and_reports(cfg)
        if not self.items:
            raise ValueError(f"probes.syntax_qa: no items from sources {cfg.sources}")
        self.pair_set = pair_set(self.items, item_key)

    def describe(self) -> str:
        """What each checkpoint is probed on, for the trainer's start-up summary."""
        return f"syntax questions, {self.benchmark} ({len(self.items):,} items)"

    def evaluate(self, model, step: int, tokens: int, ckpt_dir: Path):
        return evaluate_items(model, self.tokenizer, self.items, self.cfg, self.reports, step=step, tokens=tokens,
                              ckpt_dir=ckpt_dir, run_dir=self.run_dir)

    summarize = staticmethod(summarize)
