"""Hooks are plain objects (the Hook protocol, plus an optional `post_train(run_dir)` on rank 0 at the end) the
loop calls after a checkpoint is whole; `missing(step)`: its output is absent or stale, so a resumed or
finishing run runs it. The `probes` section names the dataclass whose `build(HookContext)` returns them
(configs/config.yaml), as OLMo-core names callbacks: train/ imports nothing of probes.
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
