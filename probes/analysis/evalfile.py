"""One run's eval files: read each, align them across checkpoints, reduce them.

Each <run>/evals/step<N>/<benchmark>.parquet (one row per minimal pair, probes.scoring.store) becomes one
byte per pair (MLP and sum-LP correctness) plus the per-paradigm accuracies and mean region deltas
of that checkpoint. Every checkpoint is aligned to the pair order of the run's first one
(`Reference`), so pairs can be followed across training and resampled for bootstrap intervals.
probes.analysis.evalset reads whole run directories with this; probes.analysis.evalcache keeps its output.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from probes.evals.files import REGIONS, EvalInputError, eval_file_meta

# Bits of PairOutcomes.correct; MISSING marks a pair absent at one checkpoint.
MLP, SUM, MISSING = 1, 2, 4
_REQUIRED = ("paradigm", "phenomenon", "pair_id", "lp_good", "lp_bad", "ntok_good", "ntok_bad")


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


@dataclass
class FileResult:
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


def read_eval_file(path: Path, step: int, run_dir: Path) -> FileResult:
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
    meta = eval_file_meta(path, schema.metadata or {})  # the one rule (its .sha256 too), also without metadata
    tokens = meta["tokens"]
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
    return FileResult(
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


def strings(col: pa.ChunkedArray) -> np.ndarray:
    """Object array of Python str from a (possibly dictionary-encoded) arrow column."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        values = np.asarray(arr.dictionary.to_pylist(), dtype=object)
        return values[arr.indices.to_numpy(zero_copy_only=False)]
    return arr.to_numpy(zero_copy_only=False)


@dataclass
class Reference:
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

    def same_rows(self, f: FileResult) -> bool:
        if len(f.bits) != len(self.codes):
            return False
        if self.arrow is not None:
            return f.paradigm.equals(self.arrow[0]) and f.pair_id.equals(self.arrow[1])
        return bool(np.array_equal(strings(f.paradigm), self.paradigm)
                    and np.array_equal(strings(f.pair_id), self.pair_ids))

    def index_of(self, f: FileResult) -> np.ndarray:
        """Row of `self` for each row of f (-1 where the pair is not in the reference)."""
        if self._key is None:
            self._key = pd.MultiIndex.from_arrays([self.paradigm, self.pair_ids])
        return self._key.get_indexer(pd.MultiIndex.from_arrays([strings(f.paradigm), strings(f.pair_id)]))


def reference_of(first: FileResult) -> Reference:
    par, ids = strings(first.paradigm), strings(first.pair_id)
    codes, paradigms = pd.factorize(par, sort=True)
    starts = np.unique(codes, return_index=True)[1]
    phen = dict(zip(par[starts], strings(first.phenomenon)[starts]))
    return Reference(par, ids, codes, [str(p) for p in paradigms], phen, first.step,
                      arrow=(first.paradigm, first.pair_id))


def reference_from(out: PairOutcomes, phen: dict[str, str]) -> Reference:
    names = np.asarray(out.paradigms, dtype=object)
    return Reference(names[out.row_paradigm], np.asarray(out.pair_ids, dtype=object),
                      out.row_paradigm.astype(np.int64), list(out.paradigms), phen, int(out.steps[0]))


def _file_rows(ref: Reference, f: FileResult, path: str, benchmark: str, problems: list[str]):
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


def assemble(run: str, run_path: str, benchmark: str, files: list[FileResult], problems: list[str],
              ref: Optional[Reference] = None, cached: Optional[tuple[PairOutcomes, pd.DataFrame]] = None):
    """Align pairs across checkpoints; return PairOutcomes and the per-paradigm table rows.

    With `cached` (the outcomes and rows of earlier checkpoints, `ref` their pair order), only
    `files` are new: their rows are added and everything is put back in step order."""
    files = sorted(files, key=lambda f: f.step)
    ref = ref or reference_of(files[0])
    rows = [_file_rows(ref, f, run_path, benchmark, problems) for f in files]
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
        run=run,
        benchmark=benchmark,
        steps=steps,
        tokens=tokens,
        paradigms=list(ref.paradigms),
        row_paradigm=ref.codes.astype(np.int32),
        pair_ids=ref.pair_ids,
        correct=correct,
    )
    return outcomes, df
