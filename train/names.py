"""Import paths in a run config (`probes._target_`, `data.generator`) reach this project's own code only: a run
folder from a colleague is data, and its config.yaml must never import or call anything else (issue 44). A name is
checked before anything is imported; what it names must be defined here too (not imported into our modules)."""
from __future__ import annotations

import importlib
import re

from train.errors import ConfigError

OWN_PACKAGES = ("train", "probes")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def check_name(key: str, dotted) -> str:
    """`dotted` when it is a dotted name inside this project's packages, else one ConfigError naming `key`."""
    if not (isinstance(dotted, str) and _DOTTED.fullmatch(dotted) and dotted.split(".")[0] in OWN_PACKAGES):
        raise ConfigError(f"{key}={dotted!r}: not a name in this project's packages ({', '.join(OWN_PACKAGES)}); "
                          f"a run config may name only their code, nothing else is imported")
    return dotted


def resolve(key: str, dotted) -> object:
    """The object `dotted` names, after check_name; it must be defined in this project's packages."""
    module, _, name = check_name(key, dotted).rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"{key}={dotted!r} cannot be imported: {e}") from None
    if str(getattr(obj, "__module__", "")).split(".")[0] not in OWN_PACKAGES:
        raise ConfigError(f"{key}={dotted!r} is not defined in this project's packages ({', '.join(OWN_PACKAGES)})")
    return obj
