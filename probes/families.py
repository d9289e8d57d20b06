"""The probe families (minimal pairs, syntax questions, ELAGENT, lm-eval, ...), one package and one `Family` each:
the hook builder, readers, `compare`, `report` and the command table loop over `families()` and name none, so a new
family is a package exporting a `Family` and one line in FAMILIES (import paths: loaded only when used)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Optional

from probes.evals.files import MINIMAL_PAIRS


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    """One probe family. The callables are "module:name" import paths, loaded by `load` when used."""
    kind: str  # written into the metadata of every eval file it writes
    key: Optional[str] = None  # its section of the run config (probes.<key>); None: the probes section's own keys
    config: Optional[type] = None  # the dataclass that types that section; its `enabled` says whether to probe
    hook: Optional[str] = None  # (section, train.hooks.HookContext) -> its checkpoint hook
    table: Optional[str] = None  # (run dirs, names) -> tidy DataFrame of its files, one row per run x step x ...
    curves: Optional[str] = None  # (table, out) -> files written by `probes curves`
    names: tuple[str, ...] = ()  # fnmatch patterns of the benchmark names `table` reads (a file of its kind that
    # matches none is named as not analysed, probes/analysis/evalset.py)
    section: Optional[str] = None  # (runs as (name, dir, model, budget), out) -> (markdown lines, figures): `report`
    tasks: Optional[str] = None  # (table) -> rows run, step, tokens, probe, acc, chance for probes.analysis.formuse
    tables: tuple[str, ...] = ()  # report tables/<name>.csv logged to W&B with the report (`report --wandb`)
    # (eval file, metric) -> per-item decisions (paradigm, phenomenon, pair_id, ok) that `compare` pairs across
    # two sides; None: compare lists the files as skipped
    decisions: Optional[str] = None
    commands: tuple = ()  # its `python -m probes` commands: (name, "module:main", one line of help)
    # its `score-run` / `watch` flags: (flag, field of `config`, argparse keywords); a flag given makes the section
    # (a `batch_size` field takes --batch-size), and `probe` (section, run dir) -> the object
    # probes.scoring.watch.score_run scores the run's checkpoints with (todo, evaluate, file_name)
    options: tuple = field(default=(), hash=False)  # argparse keywords are dicts
    probe: Optional[str] = None

    def load(self, what: str) -> Any:
        return _load(getattr(self, what))


MINIMAL_PAIRS_FAMILY = Family(
    kind=MINIMAL_PAIRS, hook="probes.scoring.hook:pair_hooks", decisions="probes.analysis.compare:pair_decisions")

# the registry: one line per family
FAMILIES = [
    "probes.families:MINIMAL_PAIRS_FAMILY",
    "probes.syntaxqa:FAMILY",
    "probes.elagent:FAMILY",
    "probes.lmeval:FAMILY",
    "probes.exposure:FAMILY",
]


def families() -> list[Family]:
    """The registered families, in the order of FAMILIES (the order of the report's sections)."""
    return [_load(path) for path in FAMILIES]
