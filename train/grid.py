"""A grid of runs from one set of overrides, expanded exactly as `python -m train -m ...` would: Hydra's basic
sweeper code takes the composed config's `hydra.sweeper.params`, appends the command line (a value for a key
replaces that axis) and takes the product, so the plan and the sbatch grid list the launcher's runs in order.
"""
from __future__ import annotations

import copy
import json
import typing
from contextlib import contextmanager
from dataclasses import fields
from typing import Iterator, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from train.config import TrainConfig, register, to_typed, typed_section
from train.overrides import CONFIGS


class GridError(ValueError):
    pass


@contextmanager
def hydra_context() -> Iterator[None]:
    """Hydra initialised on configs/ for the block, or the enclosing one (plan() composes 60 runs in one)."""
    global _GRID
    if GlobalHydra.instance().is_initialized():
        yield
        return
    register()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        _GRID = _Grid()
        try:
            yield
        finally:
            _GRID = None


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
    """One run's typed config and Hydra choices (HydraConfig set, so `${hydra:runtime.choices.optim}` resolves);
    inside hydra_context, from the grid's first run and the changes its overrides make (_Grid)."""
    fast = _GRID.compose(overrides) if _GRID is not None else None
    return fast if fast is not None else _compose_run(overrides)


def _compose_run(overrides: Sequence[str]) -> tuple[TrainConfig, dict]:
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


_GRID: Optional["_Grid"] = None
_CHOICES = "hydra.runtime.choices."


class _Grid:
    """A grid's runs composed without Hydra composing each (0.16 CPU-s a run): the first run is composed whole,
    and once each override that replaces one of its overrides (`model=pythia-70m`), giving the keys it changes;
    a run is the first run's keys with its overrides' changes. Runs whose overrides are not the first run's
    keys, or two of whose overrides change one key, are composed whole (tests/test_grid.py compares all)."""

    def __init__(self):
        self.first: Optional[list[str]] = None
        self.deltas: dict[str, dict] = {}
        self.sections: dict[tuple, object] = {}  # each distinct resolved section typed once

    def compose(self, overrides: Sequence[str]) -> Optional[tuple[TrainConfig, dict]]:
        keys = [o.partition("=")[0] for o in overrides]
        if any(k.startswith(("+", "~")) for k in keys):
            return None
        try:
            if self.first is None:
                self._start(overrides)
            if keys != [o.partition("=")[0] for o in self.first]:
                return None
            changed: dict = {}
            for i, line in enumerate(overrides):
                if line != self.first[i]:
                    change = self.deltas.get(line) or self._delta(i, line)
                    if changed.keys() & change.keys() or _GONE in change.values():
                        return None
                    changed.update(change)
        except Exception:  # noqa: BLE001 - composed whole, Hydra's error named as compose_run names it
            return None
        # the run's keys on the one live config (those the last run changed back first); only the
        # interpolations are resolved, every other value is the composed one
        for key in self.last | changed.keys():
            value = changed.get(key, self.flat[key])
            if key.startswith(_CHOICES):
                self.hydra.runtime.choices[key[len(_CHOICES):]] = value
            else:
                OmegaConf.update(self.live, key, value, merge=False)
        self.last = changed.keys()
        interpolated = self.interpolated | {k for k, v in changed.items() if "${" in json.dumps(v)}
        HydraConfig.instance().cfg = self.hydra_cfg  # ${hydra:runtime.choices.optim} resolves from it
        tree: dict = {}
        for key, value in {**self.flat, **changed}.items():
            *path, leaf = key.split(".")
            node = tree
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = value
            if key in interpolated:
                node[leaf] = OmegaConf.select(self.live, key)
                if OmegaConf.is_config(node[leaf]):
                    node[leaf] = OmegaConf.to_container(node[leaf], resolve=True)
        HydraConfig.instance().cfg = None  # as compose_run leaves it
        choices = tree.pop("hydra")["runtime"]["choices"]
        return self._typed(tree), choices

    def _start(self, overrides: Sequence[str]) -> None:
        base = _compose(overrides, with_hydra=True)
        self.first, self.flat, self.last = list(overrides), _flat(base), set()
        self.interpolated = {k for k, v in self.flat.items() if "${" in json.dumps(v)}
        tree = OmegaConf.to_container(base, resolve=False)
        tree.pop("hydra")
        self.live = OmegaConf.create(tree)
        HydraConfig.instance().set_config(base)
        self.hydra_cfg, HydraConfig.instance().cfg = HydraConfig.instance().cfg, None
        self.hydra = self.hydra_cfg.hydra
        OmegaConf.set_readonly(self.hydra, False)

    def _delta(self, i: int, line: str) -> dict:
        """The keys (and Hydra choices) that `line` in place of the first run's i-th override changes."""
        key, _, value = line.partition("=")
        if not (CONFIGS / key).is_dir() and key in self.flat and not key.startswith("hydra"):
            delta = {key: OverridesParser.create().parse_overrides([line])[0].value()}  # a plain value
        else:
            other = _flat(_compose([*self.first[:i], line, *self.first[i + 1:]], with_hydra=True))
            delta = {k: other.get(k, _GONE) for k in other.keys() | self.flat.keys()
                     if other.get(k, _GONE) != self.flat.get(k, _GONE)}
        self.deltas[line] = delta
        return delta

    def _typed(self, resolved: dict) -> TrainConfig:
        """The TrainConfig to_typed gives for a resolved run config, each distinct section typed once."""
        hints, parts = typing.get_type_hints(TrainConfig), dict(resolved)
        for name, value in resolved.items():
            if isinstance(value, dict):
                key = (name, json.dumps(value, sort_keys=True))
                if key not in self.sections:
                    self.sections[key] = typed_section(OmegaConf.create(value), name) if name == "probes" else \
                        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(hints[name]), value))
                parts[name] = copy.deepcopy(self.sections[key])
        return TrainConfig(**parts)


_GONE = object()


def _flat(cfg: DictConfig) -> dict:
    """Dotted key -> unresolved value (a list whole) of a composed run config and its Hydra choices."""
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree["hydra"] = {"runtime": {"choices": tree["hydra"]["runtime"]["choices"]}}
    out = {}

    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                out[prefix + k] = v
    walk(tree, "")
    return out
