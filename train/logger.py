"""Metrics to a JSONL file in the run directory and, when configured, to Weights & Biases; two methods,
log(metrics, step, event=...) and close(), and only rank 0 builds a real logger. train.jsonl holds one record
per (step, event): "train", "checkpoint" (probe/* and val/*) or "skipped"; a resume cuts it back to its
checkpoint's step first, so a step is never counted twice."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from train.errors import InputFileError
from train.files import write_text_atomic


@dataclass
class LoggerConfig:
    wandb: bool = True
    mode: str = "offline"  # offline | online | disabled; `wandb sync <run>/wandb/offline-run-*` uploads later
    project: Optional[str] = None  # default: $WANDB_PROJECT, else "syntax-dynamics"
    entity: Optional[str] = None  # default: $WANDB_ENTITY
    group: Optional[str] = None  # default: the grid cell, <experiment>/<model>/<budget>/<data_key> (seeds: members)
    tags: list[str] = field(default_factory=list)
    log_every: int = 10  # optimizer steps between train/* records

    def __post_init__(self):
        if self.mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logger.mode={self.mode!r}: expected offline, online or disabled")
        if self.log_every < 1:  # the loop takes the step modulo it
            raise ValueError(f"logger.log_every={self.log_every}: must be at least 1 (steps)")


class Logger:
    def __init__(self, cfg: LoggerConfig, run_dir: Path, *, config: dict, name: str, run_id: Optional[str],
                 resume_step: Optional[int] = None):
        """resume_step: the step the run resumed from (None: a new run, which starts an empty log)."""
        self.cfg = cfg
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "logs" / "train.jsonl"
        if resume_step and not self.path.exists():  # said once: the history before the resume is gone
            print(f"warning: {self.path} is missing: the records of steps 1..{resume_step} are lost (a resume "
                  f"logs only the steps it trains; W&B may still hold them)", file=sys.stderr, flush=True)
        if self.path.exists():  # only the records of steps <= resume_step (a new run: none), atomically
            kept = [r for r in read_log(self.path) if resume_step is not None and r.get("step", 0) <= resume_step]
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._jsonl = open(self.path, "a")
        self.wandb_run = None
        if cfg.wandb and cfg.mode != "disabled":
            import wandb
            # the id outlives the process in <run>/wandb_run_id: a job requeued before its first checkpoint
            # continues the same W&B run
            id_file = run_dir / "wandb_run_id"
            if run_id is None and id_file.is_file():
                run_id = id_file.read_text().strip() or None
            self.wandb_run = wandb.init(
                dir=str(run_dir), id=run_id, resume="allow", mode=cfg.mode, name=name,
                config={**config, **grid_axes(config)}, job_type="train",
                project=cfg.project or os.environ.get("WANDB_PROJECT", "syntax-dynamics"),
                entity=cfg.entity or os.environ.get("WANDB_ENTITY"),
                group=cfg.group or grid_cell(config), tags=run_tags(config, cfg.tags))
            if not id_file.is_file():
                write_text_atomic(id_file, self.wandb_run.id + "\n")
            # curves of different budgets and batches share an x-axis only in tokens (docs/training.md)
            self.wandb_run.define_metric("tokens")
            for prefix in ("train/*", "probe/*", "val/*"):
                self.wandb_run.define_metric(prefix, step_metric="tokens")

    @property
    def run_id(self) -> Optional[str]:
        return self.wandb_run.id if self.wandb_run is not None else None

    def log(self, metrics: dict, step: int, event: str = "train") -> None:
        record = {"step": step, "event": event, **metrics}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self.wandb_run is not None:  # W&B charts numbers; a hash (batch_sha256) stays in train.jsonl
            self.wandb_run.log({k: v for k, v in metrics.items() if not isinstance(v, str)}, step=step)

    def close(self) -> None:
        self._jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def read_log(path: Path) -> list[dict]:
    """The records of a train.jsonl; a torn last line (the process was killed mid-write) is dropped."""
    if not Path(path).is_file():
        return []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputFileError(f"{path}: not UTF-8 at byte {e.start} (a damaged log); move it away to start a "
                             f"new one (its records are lost)") from None
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not a JSON record") from None
    return records


def logged_steps(path: Path, event: str) -> set[int]:
    """Steps that have a record of `event` (an older record without one is "train" if it has train/loss)."""
    def kind(r: dict) -> str:
        return r.get("event") or ("train" if "train/loss" in r else "checkpoint")

    return {r["step"] for r in read_log(path) if kind(r) == event}


def grid_axes(config: dict) -> dict:
    """The grid's axes as top-level config keys (W&B groups and filters by those; `model` is a section)."""
    budget = (config.get("data") or {}).get("budget_tokens")
    return {"model_name": (config.get("model") or {}).get("name"), "budget": "full" if budget is None else budget,
            "seed": config.get("seed")}


def grid_cell(config: dict) -> str:
    """The W&B group of a run: its grid cell (experiment/model/budget), whose seeds W&B's charts average, and
    the data it trained on (data_key: the token store's content hash, corpus and tokenizer): experiment defaults
    to "default", and runs of two corpora were averaged as seeds of one group."""
    axes = grid_axes(config)
    data = f"/{config['data_key']}" if config.get("data_key") else ""
    return f"{config.get('experiment')}/{axes['model_name']}/{axes['budget']}{data}"


def run_tags(config: dict, extra: list[str]) -> list[str]:
    """model=, params=, tokenizer_label=, budget=, seed= from the resolved config, then the configured tags."""
    tags = [f"model={(config.get('model') or {}).get('name')}"]
    tags += [f"{k}={config[k]}" for k in ("params", "tokenizer_label") if config.get(k) is not None]
    tags += [f"budget={grid_axes(config)['budget']}", f"seed={config.get('seed')}"]
    return tags + [t for t in extra if t not in tags]


class NullLogger:
    """What ranks other than 0 get: they compute the same numbers but do not write them."""

    run_id = None

    def log(self, metrics: dict, step: int, event: str = "train") -> None:
        pass

    def close(self) -> None:
        pass
