"""The top-level run config: each part is the typed config of the module that uses it, registered with
Hydra's ConfigStore as the schema every YAML in configs/ is merged onto (an unknown key fails at start)."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from train.corpus import DataConfig
from train.engine import EngineConfig
from train.errors import ConfigError, did_you_mean
from train.logger import LoggerConfig
from train.model import ModelConfig
from train.names import resolve
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
    # The hooks' section (train/hooks.py), typed by the dataclass its `_target_` names: untyped here, so the
    # schema imports nothing of probes (to_typed checks it). Not struct: a nested key the preset left out
    # (probes.syntax_qa.enabled=true) is set like any other, then checked.
    probes: Any = field(default_factory=lambda: OmegaConf.create({}, flags={"struct": False}))
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    resume: bool = True  # a rerun in the same run directory continues from its latest resume state
    curves_at_end: bool = True  # write learning curves into <run>/curves when training ends
    # A non-finite loss or grad norm stops the run; with N > 0 up to N such batches are skipped instead (no
    # update, recorded). Torch engine only: DeepSpeed has applied the update when its grad norm is known.
    max_skipped_batches: int = 0

    def __post_init__(self):
        # checks across sections (each section checks its own keys); negative seeds: torch and numpy refuse them
        seeds = {"seed": self.seed, "data.seed": self.data.seed, "data.order_seed": self.data.order_seed}
        for key, value in seeds.items():
            if value < 0:
                raise ConfigError(f"{key}={value}: seeds must be >= 0")
        if self.max_skipped_batches < 0:
            raise ValueError(f"max_skipped_batches must be >= 0, got {self.max_skipped_batches}")
        if self.max_skipped_batches and self.engine.kind != "torch":
            raise ValueError(f"max_skipped_batches={self.max_skipped_batches} needs engine.kind=torch: "
                             f"DeepSpeed applies the update before the grad norm is known")
        if self.data.seq_len is not None and self.data.seq_len > self.model.max_position_embeddings:
            raise ConfigError(f"data.seq_len={self.data.seq_len} is larger than model.max_position_embeddings="
                              f"{self.model.max_position_embeddings}: positions beyond it have no embedding")


def procs_per_node(gpus_per_node) -> int:
    """Training processes per node: one per GPU, and one on a CPU-only node (gpus_per_node 0 or unset)."""
    return max(int(gpus_per_node or 0), 1)


def budget_tag(budget) -> str:
    """The budget in a run directory's name (configs/config.yaml's ${budget_tag:...}): the token count, or
    `full` for the whole corpus (older runs are under `-bNone-`: resume with hydra.run.dir=...)."""
    return "full" if budget is None or str(budget) == "None" else str(budget)


def seed_tag(seed, data_seed) -> str:
    """The seeds in a run directory's name: `seed` (initialisation), and `-d<data.seed>` where the data order's
    seed is not it (a crossed design, `-m seed=0,1 data.seed=0,1`); runs with data.seed=${seed} keep `-s<seed>`."""
    return f"{seed}" if str(data_seed) == str(seed) else f"{seed}-d{data_seed}"


def register() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
    if not OmegaConf.has_resolver("procs_per_node"):  # configs/hydra/launcher/slurm.yaml's ${procs_per_node:...}
        OmegaConf.register_new_resolver("procs_per_node", procs_per_node)
    for name, tag in (("budget_tag", budget_tag), ("seed_tag", seed_tag)):  # configs/config.yaml's run directories
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, tag)


def to_typed(cfg) -> TrainConfig:
    """The Hydra DictConfig as the dataclass objects (every __post_init__ runs); a key added with `+`
    (Hydra's suggested fix for a typo) bypasses the schema, so every key is checked here."""
    _refuse_unknown_keys(cfg, TrainConfig)
    typed = OmegaConf.to_object(cfg)
    typed.probes = typed_section(cfg.probes, "probes")
    return typed


def typed_section(node, key: str):
    """A section as the dataclass its `_target_` names, every key checked against it; None when empty."""
    if node is None or len(node) == 0:
        return None
    node = OmegaConf.create(OmegaConf.to_container(node, resolve=True), flags={"struct": False})
    target = node.get("_target_")
    if not isinstance(target, str):
        raise ConfigError(f"{key}._target_ is missing: name the dataclass that types the {key!r} section")
    schema = resolve(f"{key}._target_", target)  # this project's names only (train/names.py)
    if not dataclasses.is_dataclass(schema):
        raise ConfigError(f"{key}._target_={target!r} is not a dataclass")
    if "_target_" not in {f.name for f in dataclasses.fields(schema)}:  # else it records itself
        node.pop("_target_")
    _refuse_unknown_keys(node, schema, key + ".")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    except OmegaConfBaseException as e:
        raise ConfigError(f"{key}.{getattr(e, 'full_key', '')}: {str(e).splitlines()[0]}") from None


def _refuse_unknown_keys(node, schema: type, prefix: str = "") -> None:
    """Every key of `node` must be a field of the dataclass `schema`, recursively (`+` keys included)."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key in node.keys():
        name = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(f"unknown config key {name!r}: not a field of {schema.__name__}"
                              f"{did_you_mean(key, fields)} ({', '.join(fields)}); check its spelling (keys added with + are checked too)")
        child, kind = node[key], fields[key].type
        kind = _HINTS.setdefault(schema, typing.get_type_hints(schema)).get(key, kind)
        if dataclasses.is_dataclass(kind) and OmegaConf.is_dict(child):
            _refuse_unknown_keys(child, kind, name + ".")


_HINTS: dict[type, dict] = {}
