"""Hooks are plain objects the loop calls after a checkpoint is whole (never on a partial one).

A hook has `post_checkpoint_saved(ckpt_dir, step, tokens, model) -> dict` returning metrics to log
(may be empty), `missing(step) -> bool` (its output for that checkpoint is absent -- a crash came
between the checkpoint and the hook -- or was made from a checkpoint since replaced under that step's
name, so the resumed or finishing run must run it) and `close()`. The probe hook
(probes.scoring.hook.ProbeHook) is the main one.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch


class Hook(Protocol):
    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int,
                              model: torch.nn.Module) -> dict[str, float]: ...

    def missing(self, step: int) -> bool: ...

    def close(self) -> None: ...


def hooks_missing(hooks: list[Hook], step: int) -> bool:
    # a hook without missing() writes nothing a crash could lose
    return any(getattr(hook, "missing", lambda _step: False)(step) for hook in hooks)


def run_hooks(hooks: list[Hook], ckpt_dir: Path, step: int, tokens: int, model: torch.nn.Module) -> dict:
    metrics: dict[str, float] = {}
    for hook in hooks:
        metrics.update(hook.post_checkpoint_saved(ckpt_dir, step, tokens, model) or {})
    return metrics
