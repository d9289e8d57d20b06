"""Which optimizer steps get a checkpoint: Pythia's, log-spaced, or a custom list; in steps or tokens."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from train.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class ScheduleConfig:
    kind: str = "pythia"  # pythia | log | custom
    unit: str = "steps"  # steps | tokens: how `every`, `points` and `log_until` are counted
    every: int = 1000  # pythia: linear interval after the powers of two (steps or tokens)
    n_log: int = 47  # log: this many log-spaced points between the first step and log_until
    log_until: float = 1.0  # log: a fraction (<= 1) of the run, or an absolute position (> 1)
    points: list[int] = field(default_factory=list)  # custom: positions (steps or tokens)
    keep_resume: int = 2  # resume state (optimizer, RNG) is kept on the last K checkpoints only
    weights_dtype: str = "fp32"  # fp32 | bf16: weights of checkpoints whose resume state was pruned

    def __post_init__(self):
        if self.kind not in ("pythia", "log", "custom"):
            raise ConfigError(f"schedule.kind={self.kind!r}: expected pythia, log or custom")
        if self.unit not in ("steps", "tokens"):
            raise ConfigError(f"schedule.unit={self.unit!r}: expected steps or tokens")
        if self.weights_dtype not in ("fp32", "bf16"):
            raise ConfigError(f"schedule.weights_dtype={self.weights_dtype!r}: expected fp32 or bf16")
        if self.keep_resume < 1:
            raise ConfigError(f"schedule.keep_resume={self.keep_resume}: keep at least one resume state")
        # Values that would silently give fewer checkpoints than asked for are refused.
        if self.every < 1:
            raise ConfigError(f"schedule.every={self.every}: must be at least 1 ({self.unit})")
        if self.n_log < 1:
            raise ConfigError(f"schedule.n_log={self.n_log}: must be at least 1 (log-spaced checkpoints)")
        if not self.log_until > 0:
            raise ConfigError(f"schedule.log_until={self.log_until}: must be > 0 (a fraction <= 1 of the "
                              f"run, or an absolute position)")
        negative = [p for p in self.points if p < 0]
        if negative:
            raise ConfigError(f"schedule.points: negative positions {negative}; positions are {self.unit} "
                              f"from the start (0 = initialisation)")


def checkpoint_steps(cfg: ScheduleConfig, total_steps: int, tokens_per_step: int) -> list[int]:
    """Sorted steps (0 = initialisation, the last always) with a checkpoint; token positions rounded up."""
    def to_step(x: float) -> int:
        return int(math.ceil(x / tokens_per_step)) if cfg.unit == "tokens" else int(round(x))

    steps = {0, total_steps}
    if cfg.kind == "pythia":
        # 0, 1, 2, 4 ... 512 then every 1000 steps: 154 checkpoints for Pythia's 143,000 steps.
        steps.update(2 ** i for i in range(10))
        interval = max(1, to_step(cfg.every))
        steps.update(range(interval, total_steps + 1, interval))
    elif cfg.kind == "log":
        until = cfg.log_until * total_steps if cfg.log_until <= 1 else to_step(cfg.log_until)
        until = max(1.0, min(float(total_steps), until))
        if cfg.n_log > 1:
            steps.update(int(round(math.exp(math.log(until) * i / (cfg.n_log - 1)))) for i in range(cfg.n_log))
        if until < total_steps:
            interval = max(1, to_step(cfg.every))
            steps.update(range(int(until), total_steps + 1, interval))
    else:
        steps.update(to_step(p) for p in cfg.points)
    return sorted(s for s in steps if 0 <= s <= total_steps)


def points_beyond_end(cfg: ScheduleConfig, total_steps: int, tokens_per_step: int) -> list[int]:
    if cfg.kind != "custom":
        return []
    last = total_steps * tokens_per_step if cfg.unit == "tokens" else total_steps
    return sorted(p for p in cfg.points if p > last)


def warn_points_beyond_end(cfg: ScheduleConfig, total_steps: int, tokens_per_step: int) -> None:
    """Points beyond the end are allowed (one preset for every budget of a grid) but named in a warning."""
    beyond = points_beyond_end(cfg, total_steps, tokens_per_step)
    if beyond:
        last = total_steps * tokens_per_step if cfg.unit == "tokens" else total_steps
        shown = beyond if len(beyond) <= 4 else [*beyond[:2], "...", *beyond[-2:]]
        log.warning("schedule.points: %d of %d points lie beyond the run's end (%s %d) and get no "
                    "checkpoint: %s", len(beyond), len(cfg.points), cfg.unit, last,
                    ", ".join(map(str, shown)))
