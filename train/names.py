"""Import paths in a run config (`probes._target_`, `data.generator`) reach this project's own code only: a run
folder from a colleague is data, and its config.yaml must never import or call anything else (issue 44)."""
from __future__ import annotations

import importlib
import re

from train.errors import ConfigError

OWN_PACKAGES = ("train", "probes")


def check_name(key: str, dotted) -> str:
    """`dotted` when it is a dotted name inside this project's packages (checked before any import), else one
    ConfigError naming `key`."""
    if not (isinstance(dotted, str) and re.fullmatch(r"(train|probes)(\.[A-Za-z_]\w*)+", dotted)):
        raise ConfigError(f"{key}={dotted!r}: not a name in this project's packages ({', '.join(OWN_PACKAGES)}); "
                          f"a run config may name only their code, nothing else is imported")
    return dotted


def resolve(key: str, dotted) -> object:
    """The object `dotted` names (check_name), which must be defined in this project's packages too."""
    module, _, name = check_name(key, dotted).rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"{key}={dotted!r} cannot be imported: {e}") from None
    if str(getattr(obj, "__module__", "")).split(".")[0] not in OWN_PACKAGES:
        raise ConfigError(f"{key}={dotted!r} is not defined in this project's packages ({', '.join(OWN_PACKAGES)})")
    return obj
