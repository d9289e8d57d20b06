"""Metrics go to a JSONL file in the run directory and, when configured, to Weights & Biases.

The interface is two methods, log(metrics, step) and close(); only rank 0 constructs a real logger.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from train.checkpoint import write_text_atomic


@dataclass
class LoggerConfig:
    wandb: bool = True
    mode: str = "offline"  # offline | online | disabled; `wandb sync <run>/wandb/offline-run-*` uploads later
    project: Optional[str] = None  # default: $WANDB_PROJECT, else "syntax-dynamics"
    entity: Optional[str] = None  # default: $WANDB_ENTITY
    group: Optional[str] = None  # default: the experiment name
    tags: list[str] = field(default_factory=list)
    log_every: int = 10  # optimizer steps between train/* records

    def __post_init__(self):
        if self.mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.mode={self.mode!r}: expected offline, online or disabled")


class Logger:
    def __init__(self, cfg: LoggerConfig, run_dir: Path, *, config: dict, name: str, run_id: Optional[str]):
        self.cfg = cfg
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._jsonl = open(run_dir / "logs" / "train.jsonl", "a")
        self.wandb_run = None
        if cfg.wandb and cfg.mode != "disabled":
            import wandb

            # The id outlives the process in <run>/wandb_run_id (and trainer_state.json), so a requeued
            # job continues the same W&B run even when it was preempted before its first checkpoint.
            id_file = run_dir / "wandb_run_id"
            if run_id is None and id_file.is_file():
                run_id = id_file.read_text().strip() or None
            self.wandb_run = wandb.init(
                dir=str(run_dir), id=run_id, resume="allow", mode=cfg.mode, name=name, config=config,
                project=cfg.project or os.environ.get("WANDB_PROJECT", "syntax-dynamics"),
                entity=cfg.entity or os.environ.get("WANDB_ENTITY"),
                group=cfg.group or config.get("experiment"), tags=run_tags(config, cfg.tags))
            if not id_file.is_file():
                write_text_atomic(id_file, self.wandb_run.id + "\n")
            # Curves of different budgets and batch sizes share an x-axis only in tokens seen.
            self.wandb_run.define_metric("tokens")
            for prefix in ("train/*", "probe/*"):
                self.wandb_run.define_metric(prefix, step_metric="tokens")

    @property
    def run_id(self) -> Optional[str]:
        return self.wandb_run.id if self.wandb_run is not None else None

    def log(self, metrics: dict, step: int) -> None:
        record = {"step": step, **metrics}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)

    def close(self) -> None:
        self._jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def run_tags(config: dict, extra: list[str]) -> list[str]:
    """model=, budget=, seed= from the resolved config, then the configured tags (e.g. preset=...);
    W&B filters a grid's runs by them."""
    data = config.get("data") or {}
    tags = [f"model={(config.get('model') or {}).get('name')}", f"budget={data.get('budget_tokens')}",
            f"seed={config.get('seed')}"]
    return tags + [t for t in extra if t not in tags]


class NullLogger:
    """What ranks other than 0 get: they compute the same numbers but do not write them."""

    run_id = None

    def log(self, metrics: dict, step: int) -> None:
        pass

    def close(self) -> None:
        pass
