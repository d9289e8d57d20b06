"""Benchmark registry and loading: any minimal-pair source -> one list of `Pair`s (`load_benchmark`, `describe`,
`python -m probes benchmarks NAME_OR_PATH`). Files live under `<repo>/../shared/benchmarks/<relpath>`
(registry.json), $SYNTAX_DYNAMICS_BENCHMARKS, or `BenchmarkConfig.path`; `formats` reads them.

ONE rule for every source, after reading and before subsampling (DEDUP_RULE): a pair whose good and bad are the
same string cannot discriminate (under the strict comparison it would count as the model's error), and a repeated
(paradigm, good, bad) would weigh twice in its paradigm's accuracy. Pair ids stay the source's; the drops are
counted per paradigm, logged and shown (counts on the real files: docs/probing.md, "Supported suites")."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from probes.benchmarks import grammar
from probes.evals.config import BenchmarkConfig
from probes.benchmarks.formats import (READERS, BenchmarkFormatError, FieldMap, add_field_options, data_files,
                                       field_options, paradigm_by_path, sniff_format)
from probes.benchmarks.pairs import Pair

if TYPE_CHECKING:  # `train plan` reads the registry without pandas
    import pandas as pd

log = logging.getLogger(__name__)

ENV_VAR = "SYNTAX_DYNAMICS_BENCHMARKS"
FORMATS = ("auto", *READERS, "grammar", "elagent")
DEDUP_RULE = "pairs with good == bad are dropped; of pairs with the same (paradigm, good, bad) the first is kept"


@dataclass(frozen=True)
class RegistryEntry:
    format: str
    relpath: Optional[str]  # below the benchmarks root; None for the built-in grammar
    about: str
    fields: FieldMap = FieldMap()  # generic jsonl/csv: the authors' column names (options override them)
    # the decision rule the benchmark's authors score with, a reduction of probes.scoring.primitive
    # (CONVENTIONS): recorded in every eval file of the benchmark and shown beside ours
    authors_convention: Optional[str] = None


# name -> its entry: package data (registry.json, which also says where each authors' rule comes from)
REGISTRY: dict[str, RegistryEntry] = {
    name: RegistryEntry(**{**e, "fields": FieldMap(**e.get("fields", {}))}) for name, e in json.loads(
        resources.files("probes.benchmarks").joinpath("registry.json").read_text(encoding="utf-8")).items()
    if not name.startswith("_")}


@dataclass(frozen=True)
class LoadReport:
    """What loading did: where from, how many read, what the dedup rule dropped (per paradigm)."""

    benchmark: str
    source: str
    formats: dict[str, int]  # format -> number of files read with it
    n_read: int
    identical: dict[tuple[str, str], int]  # (phenomenon, paradigm) -> pairs dropped, good == bad
    duplicates: dict[tuple[str, str], int]  # (phenomenon, paradigm) -> repeated pairs dropped
    # paradigm -> (pairs with template slots, pairs); empty where the source has no templates
    slots: dict[str, tuple[int, int]] = field(default_factory=dict)
    authors_convention: Optional[str] = None  # RegistryEntry.authors_convention of a registry benchmark

    @property
    def n_identical(self) -> int:
        return sum(self.identical.values())

    @property
    def n_duplicates(self) -> int:
        return sum(self.duplicates.values())


class BenchmarkPairs(list):
    """A plain `list[Pair]` that also carries its `LoadReport` (so `describe` can show the drops)."""

    def __init__(self, pairs: Iterable[Pair] = (), report: Optional[LoadReport] = None):
        super().__init__(pairs)
        self.report = report


# ---------------------------------------------------------------- locations
def benchmarks_root() -> Path:
    """$SYNTAX_DYNAMICS_BENCHMARKS, else <repo>/../shared/benchmarks (resolved from this file)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "shared" / "benchmarks"


def default_path(name: str) -> Path:
    if name not in REGISTRY:
        raise ValueError(f"unknown benchmark name {name!r} (BenchmarkConfig.name); known: {sorted(REGISTRY)}; "
                         "or give BenchmarkConfig.path to load any file or directory under that label")
    if REGISTRY[name].relpath is None:
        raise ValueError(f"benchmark {name!r} is generated ({REGISTRY[name].format}); it has no files")
    return benchmarks_root() / REGISTRY[name].relpath


def benchmark_configs(names: list[str], max_pairs_per_paradigm: Optional[int] = None, subsample_seed: int = 0,
                      paths: Optional[dict[str, str]] = None) -> list[BenchmarkConfig]:
    """One BenchmarkConfig per name, for a config that lists names (`probes.benchmarks=[zhoblimp,blimp]`):
    registry names use their default location unless `paths` names another; any other name needs a path."""
    paths = dict(paths or {})
    unknown = [n for n in names if n not in REGISTRY and n not in paths]
    if unknown:
        raise ValueError(f"unknown benchmark name(s) {unknown} in the benchmark list; known: {sorted(REGISTRY)}; "
                         "a benchmark of your own needs a path under its name")
    stray = sorted(set(paths) - set(names))
    if stray:
        raise ValueError(f"benchmark path(s) given for {stray}, which are not in the benchmark list {names}")
    return [BenchmarkConfig(name=n, path=paths.get(n), max_pairs_per_paradigm=max_pairs_per_paradigm,
                            subsample_seed=subsample_seed) for n in names]


# ---------------------------------------------------------------- loading
def load_benchmark(cfg: BenchmarkConfig) -> BenchmarkPairs:
    """All pairs of one benchmark, the dedup rule applied, subsampled if asked; stable order."""
    if cfg.format not in FORMATS:
        raise ValueError(f"unknown benchmark format {cfg.format!r} (BenchmarkConfig.format); known: {list(FORMATS)}")
    if cfg.max_pairs_per_paradigm is not None and cfg.max_pairs_per_paradigm < 1:
        raise ValueError(f"max_pairs_per_paradigm must be >= 1 or None, got {cfg.max_pairs_per_paradigm}")
    fmt = cfg.format
    # a registry name gives its format, except a generated one's (grammar) to a path: a file named
    # grammar.jsonl is that file, not the built-in generator
    if fmt == "auto" and cfg.name in REGISTRY and not (cfg.path and REGISTRY[cfg.name].relpath is None):
        fmt = REGISTRY[cfg.name].format

    if fmt == "grammar":
        gcfg = dataclasses.replace(cfg.grammar, variant="zh") if cfg.name == "grammar_zh" else cfg.grammar
        # one label per BenchmarkConfig, whatever the generator calls itself (grammar vs grammar_zh)
        raw = [dataclasses.replace(p, benchmark=cfg.name) for p in grammar.benchmark_pairs(gcfg)]
        source, formats = f"probes.benchmarks.grammar({gcfg})", {"grammar": 1}
    elif fmt == "elagent":
        from probes.benchmarks.language_a import benchmark_pairs

        raw, source, formats = benchmark_pairs(cfg.language_a, cfg.name), f"probes.elagent({cfg.language_a})", {"elagent": 1}
    else:
        raw, source, formats = _load_files(cfg, fmt)

    if not raw:
        raise ValueError(f"benchmark {cfg.name!r}: no pairs in {source}")
    pairs, report = _apply_rule(raw, cfg.name, source, formats)
    if cfg.name in REGISTRY and cfg.format == "auto":
        report = dataclasses.replace(report, authors_convention=REGISTRY[cfg.name].authors_convention)
    if report.n_identical or report.n_duplicates:
        log.warning("%s: dropped %d identical (good == bad) and %d duplicate pairs of %d read (%s)",
                    cfg.name, report.n_identical, report.n_duplicates, report.n_read, DEDUP_RULE)
    if cfg.max_pairs_per_paradigm is not None:
        pairs = subsample(pairs, cfg.max_pairs_per_paradigm, cfg.subsample_seed)
    if "zhoblimp" in formats and cfg.templates != "":
        pairs, report = _attach_zhoblimp_slots(cfg, pairs, report)
    return BenchmarkPairs(pairs, report)


def zhoblimp_templates_root(cfg: BenchmarkConfig, source: Path) -> Optional[Path]:
    """Where the ZhoBLiMP generation sources are: cfg.templates, else the nearest ancestor of the
    data holding projects/ZhoBLiMP and assets/ (the layout of the authors' repository)."""
    if cfg.templates:
        root = Path(cfg.templates).expanduser()
        if not (root / "projects" / "ZhoBLiMP").is_dir() or not (root / "assets").is_dir():
            raise FileNotFoundError(f"benchmark {cfg.name!r}: templates {root} (BenchmarkConfig.templates) "
                                    "has no projects/ZhoBLiMP and assets/")
        return root
    for d in (source, *source.parents):
        if (d / "projects" / "ZhoBLiMP").is_dir() and (d / "assets").is_dir():
            return d
    return None


def _attach_zhoblimp_slots(cfg: BenchmarkConfig, pairs: list[Pair], report: LoadReport):
    from probes.benchmarks.zhoblimp_templates import attach_slots  # reads the vocabulary: only for ZhoBLiMP

    root = zhoblimp_templates_root(cfg, Path(report.source))
    if root is None:
        log.warning("%s: no ZhoBLiMP templates (projects/ZhoBLiMP, assets/) beside %s: pairs carry no "
                    "template slots, so region analyses fall back to the generic prefix/critical/suffix "
                    "split (set BenchmarkConfig.templates)", cfg.name, report.source)
        return pairs, report
    pairs, counts = attach_slots(pairs, root)
    ok, n = sum(a for a, _ in counts.values()), sum(b for _, b in counts.values())
    partial = sorted(k for k, (a, b) in counts.items() if a < b)
    log.info("%s: template slots recovered for %d of %d pairs (%s)%s", cfg.name, ok, n, root,
             f"; not for every pair of {partial}" if partial else "")
    return pairs, dataclasses.replace(report, slots=counts)


def _load_files(cfg: BenchmarkConfig, fmt: str) -> tuple[list[Pair], str, dict[str, int]]:
    if cfg.path is not None:
        root = Path(cfg.path).expanduser()
        if not root.exists():
            raise FileNotFoundError(f"benchmark {cfg.name!r}: path {root} (BenchmarkConfig.path) does not exist")
    else:
        root = default_path(cfg.name)
        if not root.exists():
            raise FileNotFoundError(f"benchmark {cfg.name!r}: default location {root} does not exist. Set {ENV_VAR} to "
                                    f"a directory laid out like shared/benchmarks (containing "
                                    f"{REGISTRY[cfg.name].relpath}), or give the path (BenchmarkConfig.path / "
                                    f"probes.benchmarks.<i>.path)")
    files = data_files(root)
    if not files:
        raise FileNotFoundError(f"benchmark {cfg.name!r}: no .jsonl/.csv/.txt data files under {root}")
    given = FieldMap(cfg.good_field, cfg.bad_field, cfg.paradigm_field, cfg.phenomenon_field, cfg.id_field,
                     cfg.delimiter)
    known = REGISTRY[cfg.name].fields if cfg.name in REGISTRY else FieldMap()
    fields = FieldMap(*(g if g is not None else k for g, k in zip(dataclasses.astuple(given), dataclasses.astuple(known))))
    formats: Counter[str] = Counter()
    origin: dict[str, set[Path]] = defaultdict(set)  # paradigm -> files it came from
    per_file: list[tuple[Path, list[Pair]]] = []
    for file in files:
        f = sniff_format(file) if fmt == "auto" else fmt
        per_file.append((file, READERS[f](file, root, cfg.name, fields)))
        formats[f] += 1
        for p in per_file[-1][1]:
            origin[p.paradigm].add(file)
    pairs: list[Pair] = []
    for file, got in per_file:
        for p in got:
            # paradigm names must be unique within a benchmark: one that several files use gets the file's path
            # below the root (the SLING reader does this always; here it catches any other case)
            if len(origin[p.paradigm]) > 1:
                rel = paradigm_by_path(file, root)
                name = rel if rel.rsplit("/", 1)[-1] == p.paradigm else f"{rel}/{p.paradigm}"
                p = dataclasses.replace(p, paradigm=name)
            pairs.append(p)
    return pairs, str(root), dict(formats)


def _apply_rule(raw: list[Pair], label: str, source: str, formats: dict[str, int]) -> tuple[list[Pair], LoadReport]:
    identical: Counter[tuple[str, str]] = Counter()
    duplicates: Counter[tuple[str, str]] = Counter()
    seen: set[tuple[str, str, str]] = set()
    ids: dict[tuple[str, str], tuple[str, str]] = {}
    kept = []
    for p in raw:
        key = (p.phenomenon, p.paradigm)
        if p.good == p.bad:
            identical[key] += 1
            continue
        if (p.paradigm, p.good, p.bad) in seen:
            duplicates[key] += 1
            continue
        seen.add((p.paradigm, p.good, p.bad))
        # the per-pair store keys rows by (paradigm, pair_id): two different pairs under one id
        # would overwrite each other's scores
        other = ids.setdefault((p.paradigm, p.pair_id), (p.good, p.bad))
        if other != (p.good, p.bad):
            raise BenchmarkFormatError(f"{source}: pair id {p.pair_id!r} names two different pairs in paradigm "
                                       f"{p.paradigm!r} ({other[0]!r} and {p.good!r}); map id_field to a unique "
                                       "column, or leave it unset to number records")
        kept.append(p)
    return kept, LoadReport(label, source, formats, len(raw), dict(identical), dict(duplicates))


def subsample(pairs: list[Pair], max_per_paradigm: int, seed: int = 0) -> list[Pair]:
    """At most `max_per_paradigm` pairs of each paradigm, in their original order. A paradigm draws from its own
    generator seeded by (seed, paradigm), so its sample does not depend on the other paradigms loaded, and a
    k-sample is a prefix of one fixed permutation (a smaller sample is contained in a larger one)."""
    by_paradigm: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pairs):
        by_paradigm[p.paradigm].append(i)
    keep: set[int] = set()
    for paradigm, idx in by_paradigm.items():
        order = list(range(len(idx)))
        if len(idx) > max_per_paradigm:  # str seeds hash with SHA-512: stable across runs
            random.Random(f"{seed}/{paradigm}").shuffle(order)
        keep.update(idx[j] for j in order[:max_per_paradigm])
    out = [p for i, p in enumerate(pairs) if i in keep]
    return BenchmarkPairs(out, getattr(pairs, "report", None))


# ---------------------------------------------------------------- describing
def describe(pairs: list[Pair]) -> pd.DataFrame:
    import pandas as pd
    """One row per (phenomenon, paradigm): n_pairs kept, and the pairs the dedup rule dropped
    (known when `pairs` came from `load_benchmark`); a last row, phenomenon "TOTAL", sums them."""
    n: Counter[tuple[str, str]] = Counter((p.phenomenon, p.paradigm) for p in pairs)
    report = getattr(pairs, "report", None)
    identical, duplicates = (report.identical, report.duplicates) if report else ({}, {})
    keys = sorted(set(n) | set(identical) | set(duplicates))
    df = pd.DataFrame([(*k, n.get(k, 0), identical.get(k, 0), duplicates.get(k, 0)) for k in keys],
                      columns=["phenomenon", "paradigm", "n_pairs", "n_identical_dropped", "n_duplicates_dropped"])
    total = ["TOTAL", f"{len(keys)} paradigms in {df.phenomenon.nunique()} phenomena", *df.iloc[:, 2:].sum()]
    return pd.concat([df, pd.DataFrame([total], columns=df.columns)], ignore_index=True)


def main(argv: list[str]) -> int:
    """`python -m probes benchmarks PATH_OR_NAME [--format F]` (argv: the words after `benchmarks`)."""
    ap = argparse.ArgumentParser(prog="python -m probes benchmarks", description="List a benchmark's phenomena, "
                                 "paradigms and pair counts (and what the dedup rule dropped).")
    ap.add_argument("target", metavar="PATH_OR_NAME", help=f"a registry name {sorted(REGISTRY)} or a file/directory")
    ap.add_argument("--format", default="auto", choices=FORMATS)
    ap.add_argument("--name", help="label for a path (default: the file's stem or the directory's name)")
    ap.add_argument("--max-pairs-per-paradigm", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0, help="subsample seed")
    add_field_options(ap)
    args = ap.parse_args(argv)

    if args.target in REGISTRY and not Path(args.target).exists():
        name, path = args.target, None
    elif not Path(args.target).exists():
        print(f"error: {args.target!r} is neither a benchmark name {sorted(REGISTRY)} nor a file or directory",
              file=sys.stderr)
        return 2
    else:
        target = Path(args.target).resolve()
        name, path = args.name or (target.stem if target.is_file() else target.name), args.target
    cfg = BenchmarkConfig(name=name, path=path, format=args.format, max_pairs_per_paradigm=args.max_pairs_per_paradigm,
                          subsample_seed=args.seed, **field_options(args))
    try:
        pairs = load_benchmark(cfg)
    except (OSError, ValueError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = describe(pairs)
    body = table.iloc[:-1]
    by_phen = body.groupby("phenomenon").agg(n_paradigms=("paradigm", "size"), n_pairs=("n_pairs", "sum")).reset_index()
    rep = pairs.report
    formats = ", ".join(f"{k} x{v}" for k, v in rep.formats.items())
    print(f"benchmark {name}: {rep.source} (format: {formats})\n")
    import pandas as pd
    with pd.option_context("display.max_rows", None, "display.max_colwidth", 80, "display.width", 200):
        print(f"{table.to_string(index=False)}\n\n{by_phen.to_string(index=False)}")
    print(f"\ntotal: {len(pairs):,} pairs in {len(body)} paradigms and {len(by_phen)} phenomena"
          f"{' (subsampled)' if cfg.max_pairs_per_paradigm else ''}; read {rep.n_read:,}, "
          f"dropped {rep.n_identical} identical and {rep.n_duplicates} duplicate pairs ({DEDUP_RULE})")
    if rep.slots:
        ok = sum(a for a, _ in rep.slots.values())
        partial = {k: v for k, v in sorted(rep.slots.items()) if v[0] < v[1]}
        print(f"template slots (phrase regions) recovered for {ok:,} of {len(pairs):,} pairs"
              + "".join(f"\n  {k}: {a} of {b}" for k, (a, b) in partial.items()))
    return 0
