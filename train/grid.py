"""A grid of runs from one set of overrides, expanded exactly as `python -m train -m ...` would: Hydra's basic
sweeper code takes the composed config's `hydra.sweeper.params`, appends the command line (a value for a key
replaces that axis) and takes the product, so the plan and the sbatch grid list the launcher's runs in order.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import DictConfig, OmegaConf, open_dict

from train.config import TrainConfig, register, to_typed
from train.overrides import CONFIGS


class GridError(ValueError):
    pass


@contextmanager
def hydra_context() -> Iterator[None]:
    """Hydra initialised on configs/ for the block, or the enclosing one (plan() composes 60 runs in one)."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    register()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        yield


def _compose(overrides: Sequence[str], *, with_hydra: bool) -> DictConfig:
    with hydra_context():
        return compose("config", overrides=list(overrides), return_hydra_config=with_hydra)


def _check_groups(parsed) -> None:
    """A grid axis over a config group may only name files that exist (listed before anything launches)."""
    for o in parsed:
        values = ([str(v) for v in o.sweep_iterator()] if o.is_sweep_override()
                  else [o.value()] if isinstance(o.value(), str) else [])
        key = o.key_or_group.lstrip("+~")
        if key.startswith("hydra/") or not (CONFIGS / key).is_dir():  # hydra/* also has options registered in code
            continue
        known = sorted(p.stem for p in (CONFIGS / key).glob("*.yaml"))
        unknown = [v for v in values if v not in known]
        if unknown:
            raise GridError(f"unknown {key} {', '.join(map(repr, unknown))} in the grid: "
                            f"configs/{key}/ has {', '.join(known)}")


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """The override list of every run of the multirun `overrides` describe (sweep params included)."""
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(list(overrides))
    _check_groups(parsed)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    try:
        base = _compose(fixed, with_hydra=True)
    except Exception as e:  # Hydra names the group and lists its options (unknown model, budget...)
        raise GridError(f"overrides {list(overrides)}: {e}") from e
    params = base.hydra.sweeper.get("params") or {}
    lines = [f"{key}={value}" for key, value in params.items()] + list(overrides)
    # Hydra's own expansion: later values of a key replace earlier ones, then the cartesian product.
    parsed_all = parser.parse_overrides(lines)
    _check_groups(parsed_all)
    batches = BasicSweeper.split_arguments(parsed_all, max_batch_size=None)
    return [list(run) for run in batches[0]]


def compose_run(overrides: Sequence[str]) -> tuple[TrainConfig, dict]:
    """One run's typed config and Hydra choices (HydraConfig set, so `${hydra:runtime.choices.optim}` resolves)."""
    try:
        cfg = _compose(overrides, with_hydra=True)
    except Exception as e:
        raise GridError(f"run {' '.join(overrides)}: {e}") from e
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    run = copy.deepcopy(cfg)
    OmegaConf.set_readonly(run, False)
    with open_dict(run):
        del run["hydra"]
    HydraConfig.instance().set_config(cfg)
    try:
        return to_typed(run), choices
    finally:
        HydraConfig.instance().cfg = None  # the next caller starts clean, as after a Hydra app


def run_subdir(cfg: TrainConfig) -> str:
    """The run's directory under the sweep dir (configs/config.yaml, hydra.sweep.subdir)."""
    from train.config import budget_tag
    return f"{cfg.model.name}-b{budget_tag(cfg.data.budget_tokens)}-s{cfg.seed}"
