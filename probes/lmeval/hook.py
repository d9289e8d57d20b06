"""lm-eval tasks as checkpoint probes through the eval contract: one row per sample, lm-eval's aggregate in the
metadata. A file's pair set is the task's name, ``limit`` and a hash of the task files under include_path, so an
edited local task is scored again."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from probes.evals.files import eval_done, eval_path, pair_set
from probes.lmeval.config import KIND, LmEvalConfig
from train.files import checkpoint_dir, manifest_hash

PREFIX = "lmeval_"  # eval-file names: lmeval_<task> (probes.analysis.evalset leaves them to report.py)


def include_digest(include_path: Optional[str]) -> str:
    """sha256 of every file under include_path (YAMLs and their local data), by relative name."""
    if not include_path:
        return ""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(include_path).rglob("*") if p.is_file()):
        h.update(f.relative_to(include_path).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def file_name(task: str) -> str:
    return PREFIX + "".join(c if c.isalnum() or c in "_-." else "_" for c in task)


class LmEvalProbe:
    """Scores cfg.tasks on a model; knows which eval files of a run are done."""

    def __init__(self, cfg: LmEvalConfig, run_dir: Path):
        from probes.lmeval.run import check_tasks

        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.manager = check_tasks(cfg.tasks, cfg.include_path)  # an unknown task fails at start
        digest = include_digest(cfg.include_path)
        self.keys = {t: (t, str(cfg.limit), digest) for t in cfg.tasks}
        self.sets = {t: pair_set([k], key=lambda x: x) for t, k in self.keys.items()}
        for t in cfg.tasks:
            eval_path(self.run_dir, 0, file_name(t))

    file_name = staticmethod(file_name)

    def todo(self, step: int, manifest: Optional[str]) -> list[str]:
        return [t for t in self.cfg.tasks
                if not eval_done(eval_path(self.run_dir, step, file_name(t)), self.sets[t], manifest)]

    def evaluate(self, model, tokenizer, ckpt_dir: Path, step: int, tokens: int,
                 tasks: Optional[list[str]] = None, fingerprint: Optional[str] = None) -> dict[str, float]:
        """Run the tasks not yet done (or `tasks`), write their files; the metrics for the logger."""
        from probes.lmeval.run import run_tasks
        from probes.scoring.evaluate import evaluate_checkpoint
        from train.start_token import scoring_start_id

        tasks = self.todo(step, manifest_hash(ckpt_dir)) if tasks is None else tasks
        if not tasks:
            return {}
        max_len = getattr(model.config, "max_position_embeddings", None)
        summary: dict = {}

        def score(model, tokenizer, items, opts):  # all tasks in one simple_evaluate call, split below
            if not summary:
                df, summ = run_tasks(model, tokenizer, tasks, manager=self.manager, batch_size=self.cfg.batch_size,
                                     limit=self.cfg.limit, start_id=scoring_start_id(tokenizer, ckpt_dir),
                                     max_length=max_len)
                summary.update({"df": df, **summ})
            df = summary["df"]
            return df[df.task == items[0][0]].reset_index(drop=True)

        metrics = {}
        for t in tasks:
            ev = evaluate_checkpoint(model, tokenizer, [self.keys[t]], name=file_name(t), step=step, tokens=tokens,
                                     ckpt_dir=ckpt_dir, run_dir=self.run_dir, fingerprint=fingerprint, score=score,
                                     key=lambda x: x, kind=KIND, task=t,
                                     describe=lambda df, t=t: {"summary": summary.get(t, {})},
                                     lm_eval=dict(limit=self.cfg.limit, include_path=self.cfg.include_path))
            metrics.update({f"probe/lm_eval/{t}/{k}": v for k, v in ev.meta["summary"].items()})
        return metrics


class LmEvalHook:
    """The checkpoint hook (train/hooks.py): rank 0 runs lm-eval (its HFLM takes an in-memory model as one
    process); a resumed run does not redo a done file."""

    def __init__(self, cfg: LmEvalConfig, ctx):  # built by the family registry from a train.hooks.HookContext
        self.probe, self.tokenizer = LmEvalProbe(cfg, ctx.run_dir), ctx.tokenizer

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int, model) -> dict[str, float]:
        import torch.distributed as torch_dist

        if torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_rank() != 0:
            return {}
        return self.probe.evaluate(model, self.tokenizer, ckpt_dir, step, tokens)

    def missing(self, step: int) -> bool:
        return bool(self.probe.todo(step, manifest_hash(checkpoint_dir(self.probe.run_dir, step))))

    def close(self) -> None:
        pass
