"""The per-pair eval files of run directories (checkpoints.md) as one EvalSet: reduced at read time to one byte per
pair and checkpoint plus per-paradigm rows (probes.analysis.evalfile, evalcache), so a 60-run grid stays in a few
hundred MB and its pairs can still be resampled."""
from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from probes.analysis.evalcache import read_benchmark
from probes.analysis.evalfile import PairOutcomes
from probes.analysis.outputs import fork_pool
from probes.evals.files import ALL_SUFFIX, MINIMAL_PAIRS, REGIONS, EvalInputError, eval_kind, file_pair_set
from probes.families import families
from train.confighash import config_hash
from train.evalsums import recorded_digest
from train.files import CorruptCheckpointError, manifest_hash, step_dirs
from train.tokenizer import tokenizer_label


@dataclass
class RunInfo:
    name: str  # unique label used in every table
    path: str
    model: str = "?"
    budget: Optional[int] = None  # tokens of the corpus budget; None = whole corpus
    seed: Optional[int] = None
    experiment: str = ""
    # the run's actual parameter count (its checkpoints' manifest.json), else parsed from the model name
    # ("pythia-160m" -> 1.6e8): a size name is not a size (8,000 pieces made "pythia-14m" 3.25M parameters)
    model_params: Optional[float] = None
    tokenizer: str = ""  # train.tokenizer.tokenizer_label of config.yaml's tokenizer section
    identity: Optional[str] = None  # config hash of what was trained (seed included): one run, however copied


@dataclass
class EvalSet:
    runs: list[RunInfo]
    table: pd.DataFrame  # one row per run x step x benchmark x paradigm (see TABLE_COLUMNS)
    outcomes: dict[tuple[str, str], PairOutcomes]  # (run, benchmark) -> per-pair correctness
    convention: str
    problems: list[str] = field(default_factory=list)  # what was missing; the data that is there is used


TABLE_COLUMNS = [
    "run", "model", "budget", "seed", "step", "tokens", "benchmark", "phenomenon", "paradigm",
    "n_pairs", "acc_mlp", "acc_sum", "delta_total",
    *[f"delta_{r}" for r in REGIONS],
]


def parse_model_params(name: str) -> Optional[float]:
    """'pythia-160m' -> 1.6e8, 'pythia-1.4b' -> 1.4e9; None when the name carries no size."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*([kmb])(?![a-z])", name.lower())
    if not m:
        return None
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9}[m.group(2)]


def _read_run_info(run_dir: Path) -> RunInfo:
    info = RunInfo(name=run_dir.name, path=str(run_dir))
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        return info
    from omegaconf import OmegaConf  # local: only needed here, keeps import light

    try:
        cfg = OmegaConf.to_container(OmegaConf.load(cfg_path), resolve=False)
    except Exception as exc:  # yaml errors carry the line; keep them
        raise EvalInputError(f"{cfg_path}: cannot parse config: {exc}") from exc
    cfg = cfg if isinstance(cfg, dict) else {}
    model = cfg.get("model") or {}
    data = cfg.get("data") or {}
    info.model = str(model.get("name", "?")) if isinstance(model, dict) else str(model)
    budget = data.get("budget_tokens") if isinstance(data, dict) else None
    info.budget = int(budget) if isinstance(budget, (int, float)) else None
    seed = cfg.get("seed")
    info.seed = int(seed) if isinstance(seed, int) else None
    info.experiment = str(cfg.get("experiment", "") or "")
    # param_count of the newest checkpoint's manifest.json (checkpoints.md), else the size the name says
    manifests = sorted((run_dir / "checkpoints").glob("step*/manifest.json"),
                       key=lambda p: int(p.parent.name[4:]) if p.parent.name[4:].isdigit() else -1)
    for path in reversed(manifests):
        try:
            n = json.loads(path.read_text()).get("param_count")
        except (OSError, ValueError):
            continue
        if isinstance(n, int) and n > 0:
            info.model_params = n
            break
    else:
        info.model_params = parse_model_params(info.model)
    tok = cfg.get("tokenizer")
    if isinstance(tok, dict):
        info.tokenizer = tokenizer_label(str(tok.get("kind", "")), tok.get("vocab_size"), tok.get("path"),
                                         str(tok.get("model_type", "unigram")))
    if "seed" in cfg and isinstance(model, dict):  # a config that says what was trained
        info.identity = config_hash(cfg)  # its trajectory keys (model, data, optim, seed, ...)
    return info


def _content(run_dir: Path) -> dict[str, str]:
    """{digest: file} of what only a copy of a run shares with it, whatever its config.yaml says: the sha256 of each
    eval file (its .sha256, else its bytes; the metadata names the checkpoint scored) and the manifest_hash of each
    checkpoint (its config hash, step and weights' hashes, as trained), at the first and last step: a copy, whole or
    taken part-way, shares the first (reading every step's cost a 60-run grid's report 0.7 CPU-s)."""
    out: dict[str, str] = {}
    evals, ckpts = (step_dirs(run_dir / sub) for sub in ("evals", "checkpoints"))
    for sd in {evals[k] for k in (min(evals), max(evals))} if evals else ():
        for f in sd.glob("*.parquet"):
            if not f.name.startswith(".") and ".tmp" not in f.name:
                with contextlib.suppress(OSError):
                    out.setdefault(recorded_digest(f), str(f))
    for ck in {ckpts[k] for k in (min(ckpts), max(ckpts))} if ckpts else ():
        with contextlib.suppress(OSError, CorruptCheckpointError):
            if h := manifest_hash(ck):
                out.setdefault(h, str(ck / "manifest.json"))
    return out


def _refuse_copies(runs: list[RunInfo]) -> None:
    """Two directories holding one run would count as two seeds: a zero-width band and a doubled n_seeds (a copy
    with only `seed:` edited made compare's p 0.00048 where the genuine seeds gave 0.548). Refused, naming both:
    the same config hash (seed included), or the same eval file or checkpoint manifest (whatever config.yaml says)."""
    first: dict[str, tuple[RunInfo, str]] = {}
    for info in runs:
        keys = {} if info.identity is None else {info.identity: "config.yaml"}
        for key, where in {**keys, **_content(Path(info.path))}.items():
            other, there = first.setdefault(key, (info, where))
            if other is not info:
                raise EvalInputError(f"run directories {other.path} and {info.path} hold the same run (" + (
                    f"config hash {key[:12]}…, seed {info.seed}" if where == "config.yaml" else
                    f"identical {there} and {where}") + "): a copy would count as a second seed; give each run once")


def _refuse_other_pairs(files: list[tuple[str, str]], what: str) -> None:
    """[(eval file, its pair_set)] of one benchmark that are to be read as the same pairs (`what`): refused, naming two
    files, where the fingerprints differ (other pairs, or the same ids over other sentences). compare and the
    report's cells (the seeds of one model x budget) use this one rule."""
    for f, fp in files[1:]:
        if fp != files[0][1]:
            raise EvalInputError(f"{files[0][0]} (pair_set {files[0][1]}) and {f} (pair_set {fp}) hold different "
                                 f"pairs: not comparable {what}; score both on one pair set")


def _eval_paths(d: Path) -> tuple[dict[int, Path], dict[str, list[tuple[int, Path]]], dict[str, str]]:
    """A run's step directories, per benchmark its minimal-pair eval files [(step, file)], and the kind of
    each other benchmark (other probe families': their own readers, probes/families.py)."""
    evals = step_dirs(d / "evals")
    paths_by_bench: dict[str, list[tuple[int, Path]]] = {}
    for step, sd in sorted(evals.items()):
        for f in sorted(sd.iterdir()):
            # <name>.tokens.parquet is the per-token sidecar of <name>.parquet (probes/scoring/tokens.py)
            # a leading "." or ".tmp": a file being written
            if f.suffix == ".parquet" and not f.name.startswith(".") and ".tmp" not in f.name and f.is_file() \
                    and not f.name.endswith(".tokens.parquet"):
                paths_by_bench.setdefault(f.stem, []).append((step, f))
    # the newest file's kind per benchmark, even where a reduced cache exists: a file rewritten by another
    # family after the cache was made is not minimal pairs (0.24 ms a schema); every minimal-pair file read
    # is checked for its kind (evalfile.read_eval_file), every other family's file here (few: one a step)
    kinds = {b: eval_kind(ps[-1][1]) for b, ps in paths_by_bench.items()}
    pairs = {b: ps for b, ps in paths_by_bench.items() if kinds[b] == MINIMAL_PAIRS}
    for b, k in kinds.items():
        odd = [f for _, f in paths_by_bench[b] if k != MINIMAL_PAIRS and eval_kind(f) != k]
        if odd:
            raise EvalInputError(f"{odd[0]}: kind {eval_kind(odd[0])!r}, while the newest file of benchmark {b} "
                                 f"({paths_by_bench[b][-1][1]}) says {k!r} ({len(odd)} such file(s)): a "
                                 f"benchmark's files are of one kind; delete the odd ones or score them again")
    return evals, pairs, {b: k for b, k in kinds.items() if k != MINIMAL_PAIRS}


def _load_run(d: Path, info: RunInfo, cache: bool = True, cached_only: bool = False):
    """(run info, outcomes, per-paradigm frames in (paradigm, step) order, conventions, problems) of one run;
    cached_only: None unless every benchmark reads from its current reduced cache."""
    if cached_only and not any((d / "evals").glob(".reduced-*.npz")):
        return None  # nothing cached: not worth listing the eval files here
    problems: list[str] = []
    conventions: dict[str, str] = {}
    evals, paths_by_bench, others = _eval_paths(d)
    names = {f.kind: f.names for f in families() if f.kind != MINIMAL_PAIRS}
    unread = {b: ("which no registered probe family reads (probes/families.py)" if k not in names else
                  f"but that family reads only files named {', '.join(names[k])}")
              for b, k in others.items() if not any(fnmatch.fnmatch(b, n) for n in names.get(k, ()))}
    if not paths_by_bench:
        raise EvalInputError(
            f"run directory {d} has no minimal-pair eval files (evals/step<N>/<benchmark>.parquet of kind "
            f"{MINIMAL_PAIRS}), which this analysis needs" + "".join(
                f"; benchmark {b}'s files are of kind {k!r}, " + (unread.get(b) or "which `probes curves` draws "
                                                                   "alone") for b, k in sorted(others.items())))
    problems += [f"{d}: benchmark {b}'s eval files say kind {others[b]!r}, {why}; not analysed"
                 for b, why in sorted(unread.items())]
    # a public suite's checkpoints that are not what their names say: the warnings `score-run --hub`
    # (probes/scoring/hub.py) recorded; read here, not imported: scoring sits below analysis
    if (d / "hub.json").is_file():
        try:
            problems += [str(w) for w in json.loads((d / "hub.json").read_text()).get("warnings", [])]
        except (OSError, ValueError, AttributeError) as e:
            problems.append(f"{d / 'hub.json'}: unreadable ({e})")
    ckpts = set(step_dirs(d / "checkpoints"))
    outs, frames = {}, []
    for bench, paths in sorted(paths_by_bench.items()):
        have = {step for step, _ in paths}
        lacking = sorted((ckpts | set(evals)) - have)
        if lacking and not bench.endswith(ALL_SUFFIX):  # "<name>_all" is written at the last step only
            listed = ", ".join(map(str, lacking[:12])) + (f", … ({len(lacking)} in all)" if len(lacking) > 12 else "")
            problems.append(f"{d}: benchmark {bench} has no evals for step(s) {listed}")
        got = read_benchmark(info.name, d, bench, paths, cache, cached_only)
        if got is None:
            return None
        out, df, convs, assembled = got
        for c, f in convs.items():
            conventions.setdefault(c, f)
        problems += assembled
        outs[bench] = out
        df = df.sort_values(["paradigm", "step"], ignore_index=True)
        df["run"], df["model"], df["budget"], df["seed"] = info.name, info.model, info.budget, info.seed
        frames.append(df)
    # the pairs of each benchmark (its first file's, the order the others are aligned to), for the cells' rule
    sets = {b: (str(ps[0][1]), file_pair_set(ps[0][1])) for b, ps in paths_by_bench.items()}
    return info, outs, frames, conventions, problems, sets


def refresh_cache(run_dir: str | Path, benchmark: str) -> bool:
    """Bring a run's reduced cache of `benchmark` up to date (after each eval file, so a report never reads them
    again). Never raises: a problem is logged and left for the report to name."""
    d = Path(run_dir)
    paths = [(step, sd / f"{benchmark}.parquet") for step, sd in sorted(step_dirs(d / "evals").items())
             if (sd / f"{benchmark}.parquet").is_file()]
    if not paths:
        return False
    try:
        read_benchmark(d.name, d, benchmark, paths, cache=True)
    except (EvalInputError, OSError, ValueError) as exc:
        logging.getLogger(__name__).warning("reduced cache of %s not refreshed: %s", d, exc)
        return False
    return True


def load_runs(run_dirs: Sequence[str | Path], workers: Optional[int] = None, cache: bool = True) -> EvalSet:
    """Read every eval file of every run directory (`workers` runs at once, forked; default min(4, CPUs)),
    reusing and writing the reduced caches unless cache=False. Raises EvalInputError naming what is wrong."""
    workers = workers or min(4, os.cpu_count() or 1)
    if not run_dirs:
        raise EvalInputError("no run directory given")
    dirs = [Path(d) for d in run_dirs]
    for d in dirs:
        if not d.is_dir():
            raise EvalInputError(f"run directory {d} does not exist")
    if len({d.resolve() for d in dirs}) != len(dirs):
        raise EvalInputError("the same run directory is given twice")
    infos = [_read_run_info(d) for d in dirs]
    resolved = [d.resolve() for d in dirs]  # "." or "run/.." name the directory they point at
    # the leaf name; the same in several places (e.g. sweep/0/seed1, sweep/1/seed1): parents added until unique
    for depth in range(1, 10):
        names = ["/".join(d.parts[-depth:]) for d in resolved]
        if len(set(names)) == len(names):
            break
    else:
        names = [str(d) for d in resolved]
    for info, name in zip(infos, names):
        info.name = name
    _refuse_copies(infos)  # before any file is read
    # A run whose reduced cache is current loads here (~15 ms: pickling its arrays back from a worker costs more).
    # The others are read by forked processes, a run each: much of a read holds the GIL, and threads ran a
    # 60-run grid's first read no faster than one thread.
    loaded = [_load_run(d, info, cache, cached_only=True) if cache else None for d, info in zip(dirs, infos)]
    stale = [i for i, got in enumerate(loaded) if got is None]
    pool = fork_pool(min(workers, len(stale))) if len(stale) > 1 else None
    with pool or contextlib.nullcontext():
        for i, got in zip(stale, (pool.map if pool else map)(_load_run, [dirs[i] for i in stale],
                                                              [infos[i] for i in stale], [cache] * len(stale))):
            loaded[i] = got
    problems: list[str] = []
    runs: list[RunInfo] = []
    all_outcomes: dict[tuple[str, str], PairOutcomes] = {}
    frames: dict[tuple[str, str], pd.DataFrame] = {}  # (run, benchmark) -> its rows
    conventions: dict[str, str] = {}  # convention -> first file that uses it
    runs_by_convention: dict[str, list[str]] = {}
    bench_by_run: dict[str, set[str]] = {}
    cells: dict[tuple, list] = {}  # (model, budget, benchmark) -> its runs' (first file, pair set): seeds averaged
    for info, *_, sets in loaded:
        for bench, got in sets.items():
            cells.setdefault((info.model, info.budget, bench), []).append(got)
    for (model, budget, bench), files in cells.items():  # 20 pairs a paradigm and 30 were one cell's "25 pairs"
        _refuse_other_pairs(files, f"as seeds of one model x budget ({model}, budget {budget}), whose accuracies "
                                   "are averaged; report the runs apart")
    for info, outs, dfs, convs, probs, _ in loaded:
        runs.append(info)
        problems += probs
        for c, f in convs.items():
            conventions.setdefault(c, f)
            runs_by_convention.setdefault(c, []).append(info.name)
        bench_by_run[info.name] = set(outs)
        for (bench, out), df in zip(outs.items(), dfs):
            all_outcomes[(info.name, bench)] = out
            frames[(info.name, bench)] = df
    if len(conventions) > 1:
        # Numbers scored in different contexts are not comparable (probes/scoring/primitive.py: v1 conditioned
        # on an untrained BOS): name the runs on each side so the older ones can be rescored.
        listed = "; ".join(f"{c!r}: run(s) {', '.join(runs_by_convention[c])} (e.g. {p})"
                           for c, p in sorted(conventions.items()))
        raise EvalInputError(
            f"refusing to mix scoring conventions in one table: {listed}. `python -m probes score-run RUN_DIR "
            f"--benchmark NAME` rescores a run's files of an older convention; or report the runs apart")
    every = set().union(*bench_by_run.values())
    for name, have in bench_by_run.items():
        if have != every:
            problems.append(f"run {name} lacks benchmark(s) {sorted(every - have)}; analysed where present")
    # in (run, benchmark, paradigm, step) order: each frame is in (paradigm, step) order (_load_run)
    table = pd.concat([frames[k] for k in sorted(frames)], ignore_index=True)
    table = table.astype({"budget": "Int64", "seed": "Int64"})[TABLE_COLUMNS]
    return EvalSet(runs=runs, table=table, outcomes=all_outcomes, convention=next(iter(conventions)),
                   problems=problems)


def log_tokens(tokens: np.ndarray, reference: Optional[np.ndarray] = None) -> np.ndarray:
    """log10 tokens, step 0 (0 tokens, no place on a log axis) one decade before the first trained checkpoint of
    `reference` (the tokens of every curve drawn together, so they share that position)."""
    t = np.asarray(tokens, dtype=np.float64)
    ref = t if reference is None else np.asarray(reference, dtype=np.float64)
    pos = ref[ref > 0]
    floor = math.log10(pos.min()) - 1.0 if len(pos) else 0.0
    out = np.full(t.shape, floor)
    out[t > 0] = np.log10(t[t > 0])
    return out
