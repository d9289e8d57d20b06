"""The top-level run config: each part is the typed config of the module that uses it.

Registered with Hydra's ConfigStore as the schema every YAML in configs/ is merged onto, so an unknown
key or a wrong type fails at start with the key's full name.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from probes.hook import ProbesConfig
from train.corpus import DataConfig
from train.engine import EngineConfig
from train.logger import LoggerConfig
from train.model import ModelConfig
from train.optim import OptimConfig
from train.schedule import ScheduleConfig
from train.tokenizer import TokenizerConfig


@dataclass
class TrainConfig:
    experiment: str = "default"
    seed: int = 0  # model initialisation; data.seed defaults to it
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    probes: ProbesConfig = field(default_factory=ProbesConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    resume: bool = True  # a rerun in the same run directory continues from its latest resume state
    curves_at_end: bool = True  # write learning curves into <run>/curves when training ends


# Sections that define the training trajectory: a resumed run must agree on them exactly.
TRAJECTORY_KEYS = ("seed", "model", "data", "tokenizer", "optim")
# ...except these, which change where or how fast, not what is trained.
RESUME_MAY_CHANGE = ("data.cache_dir", "data.num_proc", "optim.micro_batch", "optim.impl",
                     "model.gradient_checkpointing", "model.attn_implementation")


def register() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


def to_typed(cfg) -> TrainConfig:
    """The Hydra DictConfig as the dataclass objects (runs every __post_init__ check)."""
    return OmegaConf.to_object(cfg)


def trajectory_diff(saved: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs (restricted to TRAJECTORY_KEYS)."""
    diffs = []
    keys = TRAJECTORY_KEYS if not prefix else sorted(set(saved) | set(current))
    for key in keys:
        a, b = saved.get(key), current.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += trajectory_diff(a, b, name + ".")
        elif a != b and name not in RESUME_MAY_CHANGE:
            diffs.append(f"{name}: {a!r} -> {b!r}")
    return diffs
