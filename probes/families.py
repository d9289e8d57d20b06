"""The probe families: minimal pairs, syntax questions, ELAGENT, lm-eval, ... one package each, one `Family` each.

A family is what a checkpoint is probed with and everything that reads its files. `FAMILIES` lists them by import
path, the way Hydra's `_target_` names a class and OLMo-core its callbacks; the hook builder
(probes.scoring.hook.ProbesConfig), the readers (probes.analysis.evalset, curves, formuse, report), `compare` and
the command table loop over `families()` and name no family. Adding a family is one package exporting a `Family`
and one line here. The entries are resolved when first looped over, so a family's code (and whatever it
imports) is loaded only by a command that uses it, and no module below the families imports one.

Every eval file says in its metadata which family wrote it (`kind`, written by
probes.scoring.evaluate.evaluate_checkpoint; files from before that: probes.evals.files.old_kind).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional

from probes.evals.files import MINIMAL_PAIRS


@dataclass(frozen=True)
class Family:
    """One probe family. The callables are "module:name" import paths, loaded by `load` when used."""
    kind: str  # written into the metadata of every eval file it writes
    key: Optional[str] = None  # its section of the run config (probes.<key>); None: the probes section's own keys
    config: Optional[type] = None  # the dataclass that types that section; its `enabled` says whether to probe
    hook: Optional[str] = None  # (section, train.hooks.HookContext) -> its checkpoint hook
    table: Optional[str] = None  # (run dirs, names) -> tidy DataFrame of its files, one row per run x step x ...
    curves: Optional[str] = None  # (table, out) -> files written by `probes curves`
    section: Optional[str] = None  # (runs as (name, dir, model, budget), out) -> (markdown lines, figures): `report`
    tasks: Optional[str] = None  # (table) -> rows run, step, tokens, probe, acc, chance for probes.analysis.formuse
    tables: tuple[str, ...] = ()  # report tables/<name>.csv logged to W&B with the report (`report --wandb`)
    # (eval file, metric) -> per-item decisions (paradigm, phenomenon, pair_id, ok) that `compare` pairs across
    # two sides; None: compare lists the files as skipped
    decisions: Optional[str] = None
    commands: tuple = ()  # its `python -m probes` commands: (name, "module:main", one line of help)

    def load(self, what: str) -> Any:
        module, _, name = getattr(self, what).partition(":")
        return getattr(importlib.import_module(module), name)


MINIMAL_PAIRS_FAMILY = Family(
    kind=MINIMAL_PAIRS, hook="probes.scoring.hook:pair_hooks", decisions="probes.analysis.compare:pair_decisions")

# the registry: one line per family
FAMILIES = [
    "probes.families:MINIMAL_PAIRS_FAMILY",
    "probes.syntaxqa:FAMILY",
    "probes.elagent:FAMILY",
    "probes.lmeval:FAMILY",
]


def families() -> list[Family]:
    """The registered families, in the order of FAMILIES (the order of the report's sections)."""
    out = []
    for path in FAMILIES:
        module, _, name = path.partition(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


def family(kind: str) -> Optional[Family]:
    """The family that writes `kind`; None for a kind no registered family writes."""
    return next((f for f in families() if f.kind == kind), None)
