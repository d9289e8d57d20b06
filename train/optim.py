"""AdamW with Pythia's hyperparameters and a warmup + cosine learning-rate schedule."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from train.errors import ConfigError

if TYPE_CHECKING:  # imported where used: the config schema (train.config) and `plan` need no torch
    import torch


@dataclass
class OptimConfig:
    lr: float = 1.0e-3
    min_lr_ratio: float = 0.1  # Pythia decays to 0.1 x lr
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1.0e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    warmup_ratio: float = 0.01  # Pythia: 1 % of the steps; ZhoBLiMP: 0.1
    warmup_steps: Optional[int] = None  # overrides warmup_ratio when set
    decay: str = "cosine"  # cosine | linear | constant
    global_batch: int = 1024  # sequences per optimizer step, across all ranks
    micro_batch: int = 8  # sequences per forward pass on one rank
    impl: str = "auto"  # AdamW kernel: fused | foreach | for-loop; auto: fused on CUDA. Speed only

    def __post_init__(self):
        if self.decay not in ("cosine", "linear", "constant"):
            raise ConfigError(f"optim.decay={self.decay!r}: expected cosine, linear or constant")
        if len(self.betas) != 2:
            raise ConfigError(f"optim.betas={list(self.betas)}: expected two values")
        for key in ("global_batch", "micro_batch"):
            if getattr(self, key) < 1:
                raise ConfigError(f"optim.{key}={getattr(self, key)}: must be at least 1 (sequences)")
        # One process at config time; accumulation_steps() checks again with the real world size.
        accumulation_steps(self, 1)
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps={self.warmup_steps}: must be >= 0 (or null for warmup_ratio)")
        if self.impl not in ADAMW_IMPLS:
            raise ConfigError(f"optim.impl={self.impl!r}: expected one of {', '.join(ADAMW_IMPLS)}")
        # numbers that cannot train (AdamW accepts a negative or NaN lr and trains silently)
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"optim.lr={self.lr}: the peak learning rate must be a positive number")
        for key in ("min_lr_ratio", "warmup_ratio"):
            value = getattr(self, key)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ConfigError(f"optim.{key}={value}: expected a fraction in [0, 1]")
        if not all(math.isfinite(b) and 0 <= b < 1 for b in self.betas):
            raise ConfigError(f"optim.betas={list(self.betas)}: each must be in [0, 1)")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ConfigError(f"optim.eps={self.eps}: must be a positive number")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError(f"optim.weight_decay={self.weight_decay}: must be >= 0")
        if not self.grad_clip > 0:  # inf is allowed: no clipping
            raise ConfigError(f"optim.grad_clip={self.grad_clip}: must be > 0 (inf: no clipping)")


ADAMW_IMPLS = ("auto", "fused", "foreach", "for-loop")


def accumulation_steps(cfg: OptimConfig, world_size: int) -> int:
    """Micro-batches per rank per optimizer step, so that micro x accum x world = global batch."""
    per_rank, rest = divmod(cfg.global_batch, world_size)
    if rest or per_rank % cfg.micro_batch:
        raise ConfigError(
            f"optim.global_batch={cfg.global_batch} must be a multiple of optim.micro_batch={cfg.micro_batch}"
            f" x world size {world_size}")
    return per_rank // cfg.micro_batch


def warmup_steps(cfg: OptimConfig, total_steps: int) -> int:
    return cfg.warmup_steps if cfg.warmup_steps is not None else int(math.ceil(cfg.warmup_ratio * total_steps))


def lr_at(cfg: OptimConfig, step: int, total_steps: int) -> float:
    """Learning rate of the update from `step` to `step + 1`: a pure function (resume needs no scheduler
    state), linear warmup from 0, then decay to min_lr_ratio x lr."""
    warm = warmup_steps(cfg, total_steps)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    min_lr = cfg.lr * cfg.min_lr_ratio
    if cfg.decay == "constant" or total_steps <= warm:
        return cfg.lr
    progress = min(1.0, (step - warm) / max(1, total_steps - warm))
    if cfg.decay == "linear":
        return cfg.lr - (cfg.lr - min_lr) * progress
    return min_lr + 0.5 * (cfg.lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def adamw_impl(cfg: OptimConfig, device: torch.device) -> str:
    return cfg.impl if cfg.impl != "auto" else ("fused" if device.type == "cuda" else "foreach")


def build_optimizer(cfg: OptimConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    import torch
    impl = adamw_impl(cfg, next(model.parameters()).device)
    trained = [p for p in model.parameters() if p.requires_grad]  # biases and LayerNorms not decayed (GPT-NeoX)
    groups = [{"params": [p for p in trained if p.ndim >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in trained if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas),
                             eps=cfg.eps, fused=impl == "fused", foreach=impl == "foreach")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
