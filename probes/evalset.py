"""Read the per-pair eval files of one or many run directories into one analysable object.

Layout read (DESIGN.md, checkpoints.md):
    <run>/config.yaml                               experiment, seed, model.name, data.budget_tokens
    <run>/checkpoints/step<N>/trainer_state.json    {"step": N, "tokens": T, ...}
    <run>/evals/step<N>/<benchmark>.parquet         one row per minimal pair
Temporary names (starting with "." or containing ".tmp") are ignored: they are files being written.

Per-pair rows are reduced at read time to one byte per pair and checkpoint (MLP and sum-LP
correctness) plus per-paradigm accuracies and mean region deltas, so a whole scaling grid
(60 runs x 47 checkpoints x 35k pairs) stays in a few hundred MB and bootstrap intervals can still be
drawn from the pairs later without rerunning a model.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

META_KEY = b"syntax_dynamics"
REGIONS = ("prefix", "critical", "suffix")
# Bits of PairOutcomes.correct; MISSING marks a pair absent at one checkpoint.
MLP, SUM, MISSING = 1, 2, 4
_STEP_RE = re.compile(r"^step(\d+)$")
_REQUIRED = ("paradigm", "phenomenon", "pair_id", "lp_good", "lp_bad", "ntok_good", "ntok_bad")


class EvalInputError(ValueError):
    """Bad analysis input; the message names the run directory or file at fault."""


@dataclass
class RunInfo:
    name: str  # unique label used in every table
    path: str
    model: str = "?"
    budget: Optional[int] = None  # tokens of the corpus budget; None = whole corpus
    seed: Optional[int] = None
    experiment: str = ""
    model_params: Optional[float] = None  # parsed from the model name ("pythia-160m" -> 1.6e8)


@dataclass
class PairOutcomes:
    """Per-pair correctness of one run on one benchmark, aligned across checkpoints."""

    run: str
    benchmark: str
    steps: np.ndarray  # (n_steps,) int64, ascending
    tokens: np.ndarray  # (n_steps,) int64
    paradigms: list[str]  # paradigm names; row_paradigm indexes this list
    row_paradigm: np.ndarray  # (n_rows,) int32
    pair_ids: np.ndarray  # (n_rows,) object
    correct: np.ndarray  # (n_steps, n_rows) uint8, bits MLP | SUM | MISSING

    def matrix(self, paradigm: str | Sequence[str], metric: str = "mlp") -> np.ndarray:
        """(n_steps, n_pairs) float array: 1 correct, 0 wrong, NaN where the pair is missing."""
        names = [paradigm] if isinstance(paradigm, str) else list(paradigm)
        codes = [self.paradigms.index(p) for p in names if p in self.paradigms]
        cols = np.flatnonzero(np.isin(self.row_paradigm, codes))
        block = self.correct[:, cols]
        bit = MLP if metric == "mlp" else SUM
        out = ((block & bit) > 0).astype(np.float64)
        out[(block & MISSING) > 0] = np.nan
        return out


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


def _visible(p: Path) -> bool:
    return not p.name.startswith(".") and ".tmp" not in p.name


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
    info.model_params = parse_model_params(info.model)
    return info


def _step_dirs(parent: Path) -> dict[int, Path]:
    out = {}
    if parent.is_dir():
        for d in parent.iterdir():
            m = _STEP_RE.match(d.name)
            if m and d.is_dir() and _visible(d):
                out[int(m.group(1))] = d
    return out


def _trainer_tokens(run_dir: Path, step: int) -> Optional[int]:
    p = run_dir / "checkpoints" / f"step{step}" / "trainer_state.json"
    if not p.is_file():
        return None
    try:
        return int(json.loads(p.read_text())["tokens"])
    except (ValueError, KeyError, TypeError) as exc:
        raise EvalInputError(f"{p}: no integer 'tokens' ({exc})") from exc


@dataclass
class _FileResult:
    step: int
    tokens: int
    convention: str
    # arrow columns: compared in C against the first checkpoint's, converted to Python only when
    # they differ (converting 100M strings of a whole grid would dominate the read time)
    paradigm: pa.ChunkedArray
    phenomenon: pa.ChunkedArray
    pair_id: pa.ChunkedArray
    bits: np.ndarray  # uint8 per row
    deltas: dict[str, np.ndarray]  # "total" and each region, float per row (NaN where absent)


def _read_eval_file(path: Path, step: int, run_dir: Path) -> _FileResult:
    try:
        # String columns decoded as dictionaries: a paradigm name repeats 300 times per file, and
        # materialising every string would triple the read time of a whole grid.
        pf = pq.ParquetFile(path, read_dictionary=["paradigm", "phenomenon", "pair_id"])
    except Exception as exc:
        raise EvalInputError(f"{path}: not a readable parquet file ({exc})") from exc
    schema = pf.schema_arrow
    missing = [c for c in _REQUIRED if c not in schema.names]
    if missing:
        raise EvalInputError(f"{path}: missing column(s) {missing}")
    meta: dict = {}
    if schema.metadata and META_KEY in schema.metadata:
        try:
            meta = json.loads(schema.metadata[META_KEY])
        except ValueError as exc:
            raise EvalInputError(f"{path}: schema metadata '{META_KEY.decode()}' is not JSON") from exc
    tokens = meta.get("tokens")
    if tokens is None:
        tokens = _trainer_tokens(run_dir, step)
    if tokens is None:
        raise EvalInputError(
            f"{path}: no 'tokens' in the parquet metadata and no checkpoints/step{step}/trainer_state.json"
        )
    if "step" in meta and int(meta["step"]) != step:
        raise EvalInputError(f"{path}: metadata step {meta['step']} != directory step{step}")
    region_cols = [f"{k}_{s}_{r}" for r in REGIONS for k in ("lp",) for s in ("good", "bad")]
    cols = list(_REQUIRED) + [c for c in region_cols if c in schema.names]
    t = pf.read(columns=cols, use_threads=False)  # parallel across runs instead
    lpg, lpb, ng, nb = (_floats(t[c]) for c in ("lp_good", "lp_bad", "ntok_good", "ntok_bad"))
    if len(lpg) and (np.nanmin(ng) <= 0 or np.nanmin(nb) <= 0):
        bad_row = int(np.flatnonzero((ng <= 0) | (nb <= 0))[0])
        raise EvalInputError(f"{path}: row {bad_row}: ntok must be positive")
    # Strict comparisons: a tie counts as wrong (ZhoBLiMP convention, DESIGN.md).
    bits = ((lpg / ng > lpb / nb) * MLP + (lpg > lpb) * SUM).astype(np.uint8)
    deltas = {"total": lpg - lpb}
    for r in REGIONS:
        g, b = f"lp_good_{r}", f"lp_bad_{r}"
        if g in t.column_names and b in t.column_names:
            deltas[r] = _floats(t[g]) - _floats(t[b])
    pair_id = t["pair_id"]
    if not _is_text(pair_id.type):  # sources mix int and str ids; ours are always str
        pair_id = pc.cast(pair_id, pa.string())
    return _FileResult(
        step=step,
        tokens=int(tokens),
        convention=str(meta.get("convention", "unknown")),
        paradigm=t["paradigm"],
        phenomenon=t["phenomenon"],
        pair_id=pair_id,
        bits=bits,
        deltas=deltas,
    )


def _floats(col: pa.ChunkedArray) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _strings(col: pa.ChunkedArray) -> np.ndarray:
    """Object array of Python str from a (possibly dictionary-encoded) arrow column."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        values = np.asarray(arr.dictionary.to_pylist(), dtype=object)
        return values[arr.indices.to_numpy(zero_copy_only=False)]
    return arr.to_numpy(zero_copy_only=False)


@dataclass
class _Reference:
    """The pair order every checkpoint of a run is aligned to: that of its first checkpoint."""
    paradigm: np.ndarray  # object: paradigm of each row
    pair_ids: np.ndarray  # object: pair_id of each row
    codes: np.ndarray  # index into `paradigms` of each row
    paradigms: list[str]  # sorted
    phen: dict[str, str]  # paradigm -> phenomenon
    step: int
    # the first file's arrow columns: equal columns (the usual case) are recognised in C
    arrow: Optional[tuple[pa.ChunkedArray, pa.ChunkedArray]] = None
    _key: Optional[pd.MultiIndex] = None

    def same_rows(self, f: _FileResult) -> bool:
        if len(f.bits) != len(self.codes):
            return False
        if self.arrow is not None:
            return f.paradigm.equals(self.arrow[0]) and f.pair_id.equals(self.arrow[1])
        return bool(np.array_equal(_strings(f.paradigm), self.paradigm)
                    and np.array_equal(_strings(f.pair_id), self.pair_ids))

    def index_of(self, f: _FileResult) -> np.ndarray:
        """Row of `self` for each row of f (-1 where the pair is not in the reference)."""
        if self._key is None:
            self._key = pd.MultiIndex.from_arrays([self.paradigm, self.pair_ids])
        return self._key.get_indexer(pd.MultiIndex.from_arrays([_strings(f.paradigm), _strings(f.pair_id)]))


def _reference_of(first: _FileResult) -> _Reference:
    par, ids = _strings(first.paradigm), _strings(first.pair_id)
    codes, paradigms = pd.factorize(par, sort=True)
    starts = np.unique(codes, return_index=True)[1]
    phen = dict(zip(par[starts], _strings(first.phenomenon)[starts]))
    return _Reference(par, ids, codes, [str(p) for p in paradigms], phen, first.step,
                      arrow=(first.paradigm, first.pair_id))


def _reference_from(out: PairOutcomes, phen: dict[str, str]) -> _Reference:
    names = np.asarray(out.paradigms, dtype=object)
    return _Reference(names[out.row_paradigm], np.asarray(out.pair_ids, dtype=object),
                      out.row_paradigm.astype(np.int64), list(out.paradigms), phen, int(out.steps[0]))


def _file_rows(ref: _Reference, f: _FileResult, path: str, benchmark: str, problems: list[str]):
    """One checkpoint against the reference: its outcome row (MISSING where a pair is absent) and
    its per-paradigm rows (accuracies, mean deltas) as a dict of columns."""
    n_rows, k = len(ref.codes), len(ref.paradigms)
    correct = np.full(n_rows, MISSING, dtype=np.uint8)
    if ref.same_rows(f):
        correct[:] = f.bits
        fc, bits, sel = ref.codes, f.bits, slice(None)
    else:
        idx = ref.index_of(f)
        if (idx < 0).any() or len(np.unique(idx)) != len(idx) or len(idx) != n_rows:
            problems.append(
                f"{path}: evals/step{f.step}/{benchmark}.parquet has a different pair set than "
                f"step{ref.step} ({int((idx < 0).sum())} new, {n_rows - len(set(idx[idx >= 0]))} "
                "absent); only pairs present at the first checkpoint are analysed"
            )
        sel = idx >= 0
        correct[idx[sel]] = f.bits[sel]
        fc, bits = ref.codes[idx[sel]], f.bits[sel]
    n = np.bincount(fc, minlength=k).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        row = {
            "step": np.full(k, f.step, dtype=np.int64),
            "tokens": np.full(k, f.tokens, dtype=np.int64),
            "paradigm": np.asarray(ref.paradigms, dtype=object),
            "n_pairs": n,
            "acc_mlp": np.bincount(fc, weights=bits & MLP, minlength=k) / MLP / n,
            "acc_sum": np.bincount(fc, weights=bits & SUM, minlength=k) / SUM / n,
        }
        for name in ("total", *REGIONS):
            d = f.deltas.get(name)
            if d is None:
                row[f"delta_{name}"] = np.full(k, np.nan)
                continue
            dv = d[sel]
            finite = np.isfinite(dv)
            if finite.all():
                row[f"delta_{name}"] = np.bincount(fc, weights=dv, minlength=k) / n
                continue
            cnt = np.bincount(fc[finite], minlength=k)
            tot = np.bincount(fc[finite], weights=dv[finite], minlength=k)
            row[f"delta_{name}"] = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
    return correct, row


def _assemble(run: RunInfo, benchmark: str, files: list[_FileResult], problems: list[str],
              ref: Optional[_Reference] = None, cached: Optional[tuple[PairOutcomes, pd.DataFrame]] = None):
    """Align pairs across checkpoints; return PairOutcomes and the per-paradigm table rows.

    With `cached` (the outcomes and rows of earlier checkpoints, `ref` their pair order), only
    `files` are new: their rows are added and everything is put back in step order."""
    files = sorted(files, key=lambda f: f.step)
    ref = ref or _reference_of(files[0])
    rows = [_file_rows(ref, f, run.path, benchmark, problems) for f in files]
    correct = np.stack([c for c, _ in rows]) if rows else np.zeros((0, len(ref.codes)), np.uint8)
    steps = np.array([f.step for f in files], dtype=np.int64)
    tokens = np.array([f.tokens for f in files], dtype=np.int64)
    # one DataFrame per run and benchmark, not per file: constructing 2,820 small frames costs
    # more than all the arithmetic above
    df = pd.DataFrame({c: np.concatenate([r[c] for _, r in rows]) for c in rows[0][1]}) if rows else None
    if df is not None:
        df["phenomenon"] = df["paradigm"].map(ref.phen).astype(str)
        df["benchmark"] = benchmark
    if cached is not None:
        old, old_df = cached
        order = np.argsort(np.concatenate([old.steps, steps]), kind="stable")
        steps, tokens = np.concatenate([old.steps, steps])[order], np.concatenate([old.tokens, tokens])[order]
        correct = np.concatenate([old.correct, correct])[order]
        df = pd.concat([old_df, df[old_df.columns]] if df is not None else [old_df], ignore_index=True)
        df = df.sort_values("step", kind="stable", ignore_index=True)
    outcomes = PairOutcomes(
        run=run.name,
        benchmark=benchmark,
        steps=steps,
        tokens=tokens,
        paradigms=list(ref.paradigms),
        row_paradigm=ref.codes.astype(np.int32),
        pair_ids=ref.pair_ids,
        correct=correct,
    )
    return outcomes, df


def _unique_names(dirs: list[Path]) -> list[str]:
    dirs = [d.resolve() for d in dirs]  # "." or "run/.." name the directory they point at
    names = [d.name for d in dirs]
    if len(set(names)) == len(names):
        return names
    # Same leaf name in several places (e.g. sweep/0/seed1, sweep/1/seed1): add parents until unique.
    depth = 2
    while depth < 10:
        names = ["/".join(d.parts[-depth:]) for d in dirs]
        if len(set(names)) == len(names):
            return names
        depth += 1
    return [str(d) for d in dirs]


def _load_run(d: Path, name: str, cache: bool = True):
    info = _read_run_info(d)
    info.name = name
    problems: list[str] = []
    conventions: dict[str, str] = {}
    evals = _step_dirs(d / "evals")
    paths_by_bench: dict[str, list[tuple[int, Path]]] = {}
    for step, sd in sorted(evals.items()):
        for f in sorted(sd.iterdir()):
            # syntax_qa.parquet holds question items, not minimal pairs (probes.syntaxqa.curves reads it)
            if f.suffix == ".parquet" and _visible(f) and f.is_file() and f.stem != "syntax_qa":
                paths_by_bench.setdefault(f.stem, []).append((step, f))
    if not paths_by_bench:
        qa_only = any((sd / "syntax_qa.parquet").is_file() for sd in evals.values())
        raise EvalInputError(
            f"run directory {d} has no minimal-pair eval files (expected evals/step<N>/<benchmark>.parquet)"
            + ("; it has syntax-question evals only, which the analysis reads beside minimal pairs" if qa_only else ""))
    ckpts = set(_step_dirs(d / "checkpoints"))
    outs, frames = {}, []
    for bench, paths in sorted(paths_by_bench.items()):
        have = {step for step, _ in paths}
        lacking = sorted((ckpts | set(evals)) - have)
        if lacking:
            problems.append(f"{d}: benchmark {bench} has no evals for step(s) {_compact(lacking)}")
        out, df, convs, assembled = _read_benchmark(info, d, bench, paths, cache)
        for c, f in convs.items():
            conventions.setdefault(c, f)
        problems += assembled
        outs[bench] = out
        df["run"], df["model"], df["budget"], df["seed"] = name, info.model, info.budget, info.seed
        frames.append(df)
    return info, outs, frames, conventions, problems


def _read_benchmark(info: RunInfo, d: Path, bench: str, paths: list[tuple[int, Path]], cache: bool):
    """Outcomes and per-paradigm rows of one benchmark of a run, from its cache where that is
    still valid, reading only the eval files added since (see the cache notes below)."""
    entries = _entries(paths)
    hit = _read_cache(d, bench) if cache else None
    if hit is not None and hit.entries == entries:
        hit.out.run = info.name
        return hit.out, hit.df, hit.conventions, hit.problems
    new = _new_since(hit, entries) if hit is not None else None
    todo = [paths[i] for i in new] if new is not None else paths
    files = [_read_eval_file(f, step, d) for step, f in todo]
    convs = dict(hit.conventions) if new is not None else {}
    for res, (_, f) in zip(files, todo):
        convs.setdefault(res.convention, str(f))
    if new is not None:
        problems = list(hit.problems)
        hit.out.run = info.name
        out, df = _assemble(info, bench, files, problems, _reference_from(hit.out, hit.phen), (hit.out, hit.df))
    else:
        problems = []
        out, df = _assemble(info, bench, files, problems)
    if cache:
        _write_cache(d, bench, entries, out, df, convs, problems)
    return out, df, convs, problems


def refresh_cache(run_dir: str | Path, benchmark: str) -> bool:
    """Bring a run's reduced cache of `benchmark` up to date, reading only eval files it lacks.

    The probe hook and `probes score`/`watch` call it after writing each eval file, so a report
    on runs this suite probed never reads their eval files again (~10 ms a checkpoint here, where a
    first read of a whole grid's files takes most of a report's time). Never raises: a problem
    (a bad eval file, a read-only directory) is logged and left for the report to name.
    """
    d = Path(run_dir)
    paths = [(step, sd / f"{benchmark}.parquet") for step, sd in sorted(_step_dirs(d / "evals").items())
             if (sd / f"{benchmark}.parquet").is_file()]
    if not paths:
        return False
    try:
        info = _read_run_info(d)
        info.name = d.name
        _read_benchmark(info, d, benchmark, paths, cache=True)
    except (EvalInputError, OSError, ValueError) as exc:
        logging.getLogger(__name__).warning("reduced cache of %s not refreshed: %s", d, exc)
        return False
    return True


# ------------------------------------------------------------------ reduced-read cache
# A whole grid's eval files take ~15 s to read and reduce on 2 cores; the reduction (one byte per
# pair and checkpoint + the per-paradigm rows) is ~2 % of their size. It is kept per run and
# benchmark in <run>/evals/.reduced-<benchmark>.npz (a dot name: readers of run directories ignore
# it) together with the step, size and mtime of every eval file it came from. All unchanged: it is
# used as is. Only new checkpoints after its first one (a run still training; the probe hook
# refreshes it after every eval): those files alone are read and added. Anything else -- a
# rewritten or deleted file, an eval before its first checkpoint -- means a fresh read. Plain
# numpy arrays only (no pickle). Written atomically; a read-only run directory just goes uncached.
CACHE_VERSION = 2
_CACHE_FRAME = ("step", "tokens", "n_pairs", "acc_mlp", "acc_sum", *[f"delta_{r}" for r in ("total", *REGIONS)])


def cache_path(run_dir: Path, benchmark: str) -> Path:
    return Path(run_dir) / "evals" / f".reduced-{benchmark}.npz"


def _entries(paths: list[tuple[int, Path]]) -> list[list]:
    rows = []
    for step, f in paths:
        st = f.stat()
        rows.append([step, f.name, st.st_size, st.st_mtime_ns])
    return rows


def _new_since(hit: "_Cached", entries: list[list]) -> Optional[list[int]]:
    """Positions in `entries` of files the cache lacks, or None when it cannot simply be extended."""
    old = {tuple(e) for e in hit.entries}
    if not old <= {tuple(e) for e in entries}:
        return None  # a cached file was rewritten or deleted
    new = [i for i, e in enumerate(entries) if tuple(e) not in old]
    if any(entries[i][0] <= hit.entries[0][0] for i in new):
        return None  # a new first checkpoint: the pair order is taken from the first
    return new


@dataclass
class _Cached:
    entries: list[list]
    out: PairOutcomes
    df: pd.DataFrame
    conventions: dict[str, str]
    problems: list[str]
    phen: dict[str, str]


def _read_cache(run_dir: Path, bench: str) -> Optional[_Cached]:
    path = cache_path(run_dir, bench)
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        meta = json.loads(str(a["meta"]))
        if meta.get("version") != CACHE_VERSION:
            return None
    except Exception:  # absent, torn by a crash, written by another version: read the eval files
        return None
    paradigms = [str(p) for p in a["paradigms"]]
    out = PairOutcomes(run="", benchmark=bench, steps=a["steps"], tokens=a["tokens"], paradigms=paradigms,
                       row_paradigm=a["row_paradigm"], pair_ids=a["pair_ids"].astype(object),
                       correct=a["correct"])
    names = np.asarray(paradigms, dtype=object)
    phenomena = np.asarray(meta["phenomena"], dtype=object)
    df = pd.DataFrame({c: a[f"t_{c}"] for c in _CACHE_FRAME})
    df.insert(2, "paradigm", names[a["t_paradigm"]])
    df["phenomenon"] = phenomena[a["t_paradigm"]]
    df["benchmark"] = bench
    return _Cached(meta["files"], out, df, meta["conventions"], meta["problems"],
                   dict(zip(paradigms, (str(p) for p in phenomena))))


def _write_cache(run_dir: Path, bench: str, entries: list[list], out: PairOutcomes, df: pd.DataFrame,
                 conventions: dict[str, str], problems: list[str]) -> None:
    code = {p: i for i, p in enumerate(out.paradigms)}
    phen = dict(zip(df["paradigm"], df["phenomenon"]))
    meta = {"version": CACHE_VERSION, "files": entries, "conventions": conventions, "problems": problems,
            "phenomena": [str(phen.get(p, "")) for p in out.paradigms]}
    arrays = {
        "meta": np.array(json.dumps(meta)),
        "steps": out.steps, "tokens": out.tokens, "paradigms": np.asarray(out.paradigms, dtype=str),
        "row_paradigm": out.row_paradigm, "pair_ids": np.asarray(out.pair_ids, dtype=str), "correct": out.correct,
        "t_paradigm": df["paradigm"].map(code).to_numpy(np.int32),
        **{f"t_{c}": df[c].to_numpy() for c in _CACHE_FRAME},
    }
    path = cache_path(run_dir, bench)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        # no fsync, unlike real outputs: a cache torn by a crash fails to load and is rebuilt
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def load_runs(run_dirs: Sequence[str | Path], workers: Optional[int] = None, cache: bool = True) -> EvalSet:
    """Read every eval file of every run directory. Raises EvalInputError naming what is wrong.

    workers: runs read at once by threads; default: the number of CPUs, at most 4.
    cache: reuse / write the reduced form in <run>/evals/.reduced-<benchmark>.npz (see cache_path).
    """
    from concurrent.futures import ThreadPoolExecutor

    workers = workers or min(4, os.cpu_count() or 1)
    if not run_dirs:
        raise EvalInputError("no run directory given")
    dirs = [Path(d) for d in run_dirs]
    for d in dirs:
        if not d.is_dir():
            raise EvalInputError(f"run directory {d} does not exist")
    if len({d.resolve() for d in dirs}) != len(dirs):
        raise EvalInputError("the same run directory is given twice")
    names = _unique_names(dirs)
    # One run per task: each reads its files and reduces them to compact arrays, and only the
    # reduced arrays are kept. Threads, not processes: pyarrow and numpy release the GIL for most of
    # a cold read, and forked readers were only ~10 % faster there (12.0 vs 13.4 s on the 60-run
    # bench grid) but slower on cached runs, where pickling the arrays back costs more than reading.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        loaded = list(pool.map(_load_run, dirs, names, [cache] * len(dirs)))
    problems: list[str] = []
    runs: list[RunInfo] = []
    all_outcomes: dict[tuple[str, str], PairOutcomes] = {}
    frames = []
    conventions: dict[str, str] = {}  # convention -> first file that uses it
    bench_by_run: dict[str, set[str]] = {}
    for info, outs, dfs, convs, probs in loaded:
        runs.append(info)
        problems += probs
        for c, f in convs.items():
            conventions.setdefault(c, f)
        bench_by_run[info.name] = set(outs)
        for bench, out in outs.items():
            all_outcomes[(info.name, bench)] = out
        frames += dfs
    if len(conventions) > 1:
        listed = "; ".join(f"{c!r} (e.g. {p})" for c, p in sorted(conventions.items()))
        raise EvalInputError(f"refusing to mix scoring conventions across evals: {listed}")
    every = set().union(*bench_by_run.values())
    for name, have in bench_by_run.items():
        if have != every:
            problems.append(f"run {name} lacks benchmark(s) {sorted(every - have)}; analysed where present")
    table = pd.concat(frames, ignore_index=True)
    table["budget"] = table["budget"].astype("Int64")
    table["seed"] = table["seed"].astype("Int64")
    table = table[TABLE_COLUMNS].sort_values(["run", "benchmark", "paradigm", "step"], ignore_index=True)
    return EvalSet(runs=runs, table=table, outcomes=all_outcomes, convention=next(iter(conventions)),
                   problems=problems)


def _compact(steps: list[int], limit: int = 12) -> str:
    s = ", ".join(map(str, steps[:limit]))
    return s + (f", … ({len(steps)} in all)" if len(steps) > limit else "")


def log_tokens(tokens: np.ndarray, reference: Optional[np.ndarray] = None) -> np.ndarray:
    """log10 tokens, with step 0 (0 tokens) placed one decade before the first trained checkpoint.

    The initialisation has no position on a log axis; putting it a fixed decade to the left keeps
    it visible and ordered in plots and smoothing without pretending it saw data. Pass the tokens
    of all curves drawn together as `reference` so they share that position.
    """
    t = np.asarray(tokens, dtype=np.float64)
    ref = t if reference is None else np.asarray(reference, dtype=np.float64)
    pos = ref[ref > 0]
    floor = math.log10(pos.min()) - 1.0 if len(pos) else 0.0
    out = np.full(t.shape, floor)
    out[t > 0] = np.log10(t[t > 0])
    return out
