"""Hooks are plain objects the loop calls after a checkpoint is whole (never on a partial one).

A hook has `post_checkpoint_saved(ckpt_dir, step, tokens, model) -> dict` returning metrics to log
(may be empty), `missing(step) -> bool` (its output for that checkpoint is absent -- a crash came
between the checkpoint and the hook -- or was made from a checkpoint since replaced under that step's
name, so the resumed or finishing run must run it), `close()`, and optionally `post_train(run_dir)`,
called once on the main rank when the run has finished (the end-of-run curves).

The trainer does not know which hooks exist. The config's `probes` section names them the way
OLMo-core and Lightning name callbacks: its `_target_` is the import path of a dataclass that types
the section (train.config.to_typed checks every key against it) and whose `build(HookContext)` returns
the hooks. configs/config.yaml points it at probes.scoring.hook.ProbesConfig; train/ imports nothing of probes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

import torch


class Hook(Protocol):
    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int,
                              model: torch.nn.Module) -> dict[str, float]: ...

    def missing(self, step: int) -> bool: ...

    def close(self) -> None: ...


@dataclass
class HookContext:
    """What the run knows that a hook may need, handed to the section's `build`."""
    tokenizer: Any
    run_dir: Path
    final_step: Optional[int] = None  # the run's last step (the probe hook's final_all_pairs)
    token_store: Optional[Path] = None  # the run's token store (unigram columns)
    max_positions: Optional[int] = None  # the model's context, which long prompts must fit


def build_hooks(section: Any, ctx: HookContext) -> list[Hook]:
    """The hooks of a typed hooks section (train.config.to_typed made it); none for an empty section."""
    build = getattr(section, "build", None)
    return list(build(ctx)) if build is not None else []


def hooks_missing(hooks: list[Hook], step: int) -> bool:
    # a hook without missing() writes nothing a crash could lose
    return any(getattr(hook, "missing", lambda _step: False)(step) for hook in hooks)


def run_hooks(hooks: list[Hook], ckpt_dir: Path, step: int, tokens: int, model: torch.nn.Module) -> dict:
    metrics: dict[str, float] = {}
    for hook in hooks:
        metrics.update(hook.post_checkpoint_saved(ckpt_dir, step, tokens, model) or {})
    return metrics


def run_post_train(hooks: list[Hook], run_dir: Path) -> None:
    for hook in hooks:
        post = getattr(hook, "post_train", None)
        if post is not None:
            post(run_dir)
