"""A grid of runs from one set of overrides, expanded exactly as `python -m train -m ...` would: Hydra's basic
sweeper code takes the composed config's `hydra.sweeper.params`, appends the command line (a value for a key
replaces that axis) and takes the product, so the plan and the sbatch grid list the launcher's runs in order.
"""
from __future__ import annotations

import copy
import json
import typing
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import DictConfig, OmegaConf, open_dict

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
    from train.config import budget_tag, seed_tag
    return f"{cfg.model.name}-b{budget_tag(cfg.data.budget_tokens)}-s{seed_tag(cfg.seed, cfg.data.seed)}"


_GRID: Optional["_Grid"] = None
_GONE = object()


class _Grid:
    """A grid's runs without Hydra composing each (0.16 CPU-s a run): the first run is composed whole, and once
    each override that replaces one of its overrides (`model=pythia-70m`: the keys it changes); a run is the
    first run's keys with its overrides' changes, resolved on one live config. Runs with other override keys, or
    two of whose overrides change one key, are composed whole (tests/test_grid.py compares)."""

    def __init__(self):
        self.first, self.deltas, self.sections = None, {}, {}

    def compose(self, overrides: Sequence[str]) -> Optional[tuple[TrainConfig, dict]]:
        keys = [o.partition("=")[0] for o in overrides]
        try:
            if self.first is None:
                tree = _plain(_compose(overrides, with_hydra=True))
                self.first, self.flat, self.live, self.last = list(overrides), _flat(tree), OmegaConf.create(tree), set()
            if any(k.startswith(("+", "~")) for k in keys) or keys != [o.partition("=")[0] for o in self.first]:
                return None
            changed: dict = {}
            for i, line in enumerate(overrides):
                change = {} if line == self.first[i] else self.deltas.get(line) or self._delta(i, line)
                if changed.keys() & change.keys() or _GONE in change.values():
                    return None
                changed.update(change)
        except Exception:  # noqa: BLE001 - composed whole, Hydra's error named as compose_run names it
            return None
        for key in self.last | changed.keys():  # this run's values; the last run's changes undone
            OmegaConf.update(self.live, key, changed.get(key, self.flat[key]), merge=False)
        self.last = changed.keys()
        HydraConfig.instance().cfg = self.live  # ${hydra:runtime.cwd} and the like read its hydra node
        try:
            resolved = OmegaConf.to_container(self.live, resolve=True)
        finally:
            HydraConfig.instance().cfg = None
        choices = resolved.pop("hydra")["runtime"]["choices"]
        hints = typing.get_type_hints(TrainConfig)
        for name, value in resolved.items():  # each distinct section typed once, as to_typed types it
            if isinstance(value, dict):
                key = (name, json.dumps(value, sort_keys=True))
                if key not in self.sections:
                    self.sections[key] = typed_section(OmegaConf.create(value), name) if name == "probes" else \
                        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(hints[name]), value))
                resolved[name] = copy.deepcopy(self.sections[key])
        return TrainConfig(**resolved), choices

    def _delta(self, i: int, line: str) -> dict:
        """The keys (and Hydra choices) that `line` in place of the first run's i-th override changes."""
        key = line.partition("=")[0]
        if not (CONFIGS / key).is_dir() and key in self.flat and not key.startswith("hydra"):  # a plain value
            self.deltas[line] = {key: OverridesParser.create().parse_overrides([line])[0].value()}
        else:
            other = _flat(_plain(_compose([*self.first[:i], line, *self.first[i + 1:]], with_hydra=True)))
            self.deltas[line] = {k: other.get(k, _GONE) for k in other.keys() | self.flat.keys()
                                 if other.get(k, _GONE) != self.flat.get(k, _GONE)}
        return self.deltas[line]


def _plain(cfg: DictConfig) -> dict:
    """A composed run config unresolved, as dicts and lists, with hydra.runtime (cwd, choices) its only Hydra keys."""
    tree = OmegaConf.to_container(cfg, resolve=False)
    return {**tree, "hydra": {"runtime": tree["hydra"]["runtime"]}}


def _flat(tree: dict, prefix: str = "") -> dict:
    """Dotted key -> value (a list whole)."""
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {prefix + k: v})
    return out
