"""Command-line overrides checked against the schema before Hydra composes the config.

Hydra advises `+model.hiden_size=64` for a typo (adding it as a new key) and reports a wrong type in many
lines; here each `key=value` is walked through TrainConfig's dataclasses and each group choice looked up in
configs/<group>/, so a typo gets one line `error: …` with "did you mean" and exit status 2. A single path
where a list is expected (`data.paths=DIR`) becomes a one-element list; anything else passes to Hydra.
"""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from train.errors import ConfigError, did_you_mean

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
_SCALARS = {int: "an integer", float: "a number", bool: "true or false"}


def config_groups() -> dict[str, list[str]]:
    """Each config group under configs/ and its options (the YAML files' stems), sorted."""
    return {d.name: sorted(f.stem for f in d.glob("*.yaml"))
            for d in sorted(CONFIGS.iterdir()) if d.is_dir() and d.name != "hydra"}


def check_overrides(args: list[str]) -> list[str]:
    """`args` with every understood override checked (ConfigError on a bad one) and single values for list
    keys wrapped in a list; flags and what Hydra's parser rejects pass through."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from train.config import TrainConfig

    parser, groups, out = OverridesParser.create(), config_groups(), []
    for arg in args:
        if arg.startswith("-") or "=" not in arg and not arg.startswith("~"):
            out.append(arg)
            continue
        try:
            override = parser.parse_override(arg)
        except HydraException:
            out.append(arg)  # Hydra says what is wrong with the syntax
            continue
        key = override.key_or_group
        if key.split(".")[0].split("/")[0] == "hydra" or "/" in key or override.package is not None:
            out.append(arg)
            continue
        if "." not in key and key in groups and not override.is_delete():
            choices = override.value()
            for name in choices.list if hasattr(choices, "list") else [choices]:
                if isinstance(name, str) and name not in groups[key] and name != "null":
                    raise ConfigError(f"{key}={name}: no such option in configs/{key}/"
                                      f"{did_you_mean(name, groups[key])}; options: {', '.join(groups[key])}")
            out.append(arg)
            continue
        kind = _field_type(TrainConfig, key, groups)
        if override.is_sweep_override() or override.is_delete() or not override.value_type:
            out.append(arg)
            continue
        value = override.value()
        if typing.get_origin(kind) is list and isinstance(value, str) and "${" not in value:
            out.append(f"{arg.split('=', 1)[0]}=[{arg.split('=', 1)[1]}]")  # one path, as a list
            continue
        _check_scalar(key, kind, value)
        out.append(arg)
    return out


def _field_type(schema: type, dotted: str, groups: dict) -> object:
    """The annotated type of a dotted key (None below a non-dataclass field), or ConfigError naming it."""
    kind: object = schema
    walked = []
    for part in dotted.split("."):
        kind = _unwrap(kind)
        if not dataclasses.is_dataclass(kind):
            return None
        hints = typing.get_type_hints(kind)
        if part not in hints:
            where = ".".join(walked)
            options = list(hints) + ([] if walked else [g for g in groups if g not in hints])
            raise ConfigError(f"unknown config key {dotted!r}: {kind.__name__} has no field {part!r}"
                              f"{did_you_mean(part, options)}; the keys of {where or 'the run config'}: "
                              f"{', '.join(hints)} (python -m train --cfg job prints the whole config)")
        walked.append(part)
        kind = hints[part]
    return kind


def _unwrap(kind: object) -> object:
    """Optional[X] -> X."""
    if typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return kind


def _check_scalar(key: str, kind: object, value: object) -> None:
    optional = typing.get_origin(kind) is typing.Union and type(None) in typing.get_args(kind)
    kind = _unwrap(kind)
    if kind not in _SCALARS or (value is None and optional) or (isinstance(value, str) and "${" in value):
        return
    ok = isinstance(value, bool) if kind is bool else not isinstance(value, bool) and _converts(kind, value)
    if not ok:
        raise ConfigError(f"{key}={value!r}: expected {_SCALARS[kind]}"
                          + (" or null" if optional else ""))


def _converts(kind: type, value: object) -> bool:
    if isinstance(value, (int, float)):
        return kind is float or float(value).is_integer()
    if isinstance(value, str):
        try:
            kind(value)
        except ValueError:
            return False
        return True
    return False
