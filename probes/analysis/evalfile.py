"""One run's eval files: read each, align them across checkpoints to the pair order of the run's first one
(`Reference`, so pairs can be followed and resampled), reduce them to one byte per pair (MLP and sum-LP
correctness) plus per-paradigm accuracies and mean region deltas.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from probes.evals.files import MINIMAL_PAIRS, REGIONS, EvalInputError, eval_file_meta

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
    # they differ (converting 100M strings of a whole grid would dominate the read time). None where
    # the reader knew the file's rows already (Seen.row_key) and did not decode them.
    paradigm: Optional[pa.ChunkedArray]
    phenomenon: Optional[pa.ChunkedArray]
    pair_id: Optional[pa.ChunkedArray]
    bits: np.ndarray  # uint8 per row
    # "total" and each region the file has: (lp good, lp bad) per row, NaN where absent; the deltas are
    # taken where they are summed (_file_rows), not as arrays of their own
    lps: dict[str, tuple[np.ndarray, np.ndarray]]
    row_key: Optional[str] = None  # _chunk_key of its paradigm and pair_id columns
    counts_key: Optional[str] = None  # ... and of its token counts
    counts: Optional[tuple[np.ndarray, np.ndarray]] = None  # ntok good, bad as floats


# what aligns a file's rows with another file's: its pairs' paradigm and id, in row order
_KEY = ("paradigm", "pair_id")
_COUNTS = ("ntok_good", "ntok_bad")
_STRINGS = ("paradigm", "phenomenon", "pair_id")


@dataclass
class Seen:
    """What a reader of a run's files holds already, not decoded again: the reference's row key and the token counts
    of the file before with their key (a run's counts are the same at every checkpoint)."""
    row_key: Optional[str] = None
    counts_key: Optional[str] = None
    counts: Optional[tuple[np.ndarray, np.ndarray]] = None  # ntok good, bad as floats, all checked positive


def read_eval_file(path: Path, step: int, run_dir: Path, seen: Optional[Seen] = None) -> FileResult:
    """One eval file's correctness bits and region lps per row; the string columns (None) and counts that `seen`
    holds under the same key (_chunk_key) are not decoded."""
    path, seen = Path(path), seen or Seen()
    try:
        # the bytes once: parquet parses them in memory, and the .sha256 is checked against the same
        # bytes (a second read of the file cost more than the parse); pre_buffer's coalesced reads
        # cost ~0.2 ms a column, and there is nothing to coalesce in memory
        data = path.read_bytes()
        # String columns decoded as dictionaries: a paradigm name repeats 300 times per file, and
        # materialising every string would triple the read time of a whole grid.
        pf = pq.ParquetFile(pa.BufferReader(data), read_dictionary=list(_STRINGS), pre_buffer=False)
    except Exception as exc:
        raise EvalInputError(f"{path}: not a readable parquet file ({exc})") from exc
    schema = pf.schema_arrow
    missing = [c for c in _REQUIRED if c not in schema.names]
    if missing:
        raise EvalInputError(f"{path}: missing column(s) {missing}")
    meta = eval_file_meta(path, schema.metadata or {}, data)  # the one rule (its .sha256 too), also without metadata
    if meta["kind"] != MINIMAL_PAIRS:  # its benchmark's newest file is (evalset._eval_paths)
        raise EvalInputError(f"{path}: kind {meta['kind']!r}, while the newest file of its benchmark says "
                             f"{MINIMAL_PAIRS!r}: a benchmark's files are of one kind; delete it or score it again")
    tokens = meta["tokens"]
    row_key, counts_key = _chunk_key(data, pf, _KEY), _chunk_key(data, pf, _COUNTS)
    decode = row_key is None or row_key != seen.row_key
    same_counts = counts_key is not None and counts_key == seen.counts_key
    region_cols = [f"{k}_{s}_{r}" for r in REGIONS for k in ("lp",) for s in ("good", "bad")]
    cols = [c for c in _REQUIRED if (decode or c not in _STRINGS) and not (same_counts and c in _COUNTS)]
    cols += [c for c in region_cols if c in schema.names]
    try:
        t = pf.read(columns=cols, use_threads=False)  # parallel across runs instead
    except Exception as exc:  # a damaged page: pyarrow's errors are of several types
        raise EvalInputError(f"{path}: the rows do not read ({type(exc).__name__}: {exc})") from None
    lpg, lpb = _floats(t["lp_good"]), _floats(t["lp_bad"])
    if same_counts:
        ng, nb = seen.counts
    else:  # (a NaN count, a missing one, passes here: it makes no MLP comparison true)
        ng, nb = _floats(t["ntok_good"]), _floats(t["ntok_bad"])
        if len(ng) and (np.nanmin(ng) <= 0 or np.nanmin(nb) <= 0):
            bad_row = int(np.flatnonzero((ng <= 0) | (nb <= 0))[0])
            raise EvalInputError(f"{path}: row {bad_row}: ntok must be positive")
    # Strict comparisons: a tie counts as wrong (ZhoBLiMP convention, docs/scoring.md). Built as bytes: MLP = 1, SUM = 2.
    bits = (lpg / ng > lpb / nb).view(np.uint8) | ((lpg > lpb).view(np.uint8) << 1)
    lps = {"total": (lpg, lpb)}
    for r in REGIONS:
        g, b = f"lp_good_{r}", f"lp_bad_{r}"
        if g in t.column_names and b in t.column_names:
            lps[r] = (_floats(t[g]), _floats(t[b]))
    strs = {c: t[c] for c in _STRINGS} if decode else dict.fromkeys(_STRINGS)
    ptype = strs["pair_id"].type if decode else pa.string()  # sources mix int and str ids; ours are always str
    ptype = ptype.value_type if pa.types.is_dictionary(ptype) else ptype
    if not (pa.types.is_string(ptype) or pa.types.is_large_string(ptype)):
        strs["pair_id"] = pc.cast(strs["pair_id"], pa.string())
    return FileResult(step=step, tokens=int(tokens), convention=str(meta.get("convention", "unknown")),
                      bits=bits, lps=lps, row_key=row_key, counts_key=counts_key, counts=(ng, nb), **strs)


def _chunk_key(data: bytes, pf: pq.ParquetFile, columns: tuple[str, ...]) -> Optional[str]:
    """A sha256 of the stored bytes of `columns`' chunks and what decodes them (type, codec, encodings, row count):
    two files with one key hold the same values there, in order (docs/speed.md, "Reading"). None where the chunks
    cannot be located exactly."""
    md, schema = pf.metadata, pf.schema_arrow
    leaf = {c: schema.get_field_index(c) for c in columns}  # the leaf's index too in a flat schema: checked
    if any(i < 0 or i >= md.num_columns or md.schema.column(i).path != c for c, i in leaf.items()):
        leaf = {md.schema.column(i).path: i for i in range(md.num_columns)}
        if any(c not in leaf or c not in schema.names for c in columns):
            return None
    h = hashlib.sha256(f"{md.num_rows} {[str(schema.field(c).type) for c in columns]}".encode())
    for g in (md.row_group(i) for i in range(md.num_row_groups)):
        for c in columns:
            col = g.column(leaf[c])
            start = col.data_page_offset
            if col.has_dictionary_page:  # the chunk starts at its dictionary, before the data pages
                d = col.dictionary_page_offset
                if not d or d >= start:  # an offset some writers get wrong: not located exactly
                    return None
                start = d
            end = start + col.total_compressed_size
            if start < 4 or end > len(data):
                return None
            h.update(f"|{c} {col.physical_type} {col.compression} {col.encodings} {col.num_values} "
                     f"{end - start}|".encode())
            h.update(memoryview(data)[start:end])
    return h.hexdigest()


def _floats(col: pa.ChunkedArray) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def strings(col: pa.ChunkedArray) -> np.ndarray:
    """Object array of Python str from a (possibly dictionary-encoded) arrow column; None where null."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        values = np.asarray(arr.dictionary.to_pylist() + [None], dtype=object)  # the last: a null row's
        return values[arr.indices.cast(pa.int64()).fill_null(len(values) - 1).to_numpy()]
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
    row_key: Optional[str] = None  # the first file's: a file with the same one has its rows
    _key: Optional[pd.MultiIndex] = None
    blocks: int = 0  # _blocks(codes, len(paradigms))
    names: Optional[np.ndarray] = None  # `paradigms` as an object array, each checkpoint's rows' column

    def __post_init__(self) -> None:
        self.blocks = _blocks(self.codes, len(self.paradigms))
        self.names = np.asarray(self.paradigms, dtype=object)

    def same_rows(self, f: FileResult) -> bool:
        if len(f.bits) != len(self.codes):
            return False
        if f.row_key is not None and f.row_key == self.row_key:
            return True
        if f.paradigm is None:  # not decoded: read as having the rows of a file with another key
            raise AssertionError("a file read as having the reference's rows has another row key")
        if self.arrow is not None:
            return f.paradigm.equals(self.arrow[0]) and f.pair_id.equals(self.arrow[1])
        return bool(np.array_equal(strings(f.paradigm), self.paradigm)
                    and np.array_equal(strings(f.pair_id), self.pair_ids))

    def index_of(self, f: FileResult) -> np.ndarray:
        """Row of `self` for each row of f (-1 where the pair is not in the reference)."""
        if self._key is None:
            self._key = pd.MultiIndex.from_arrays([self.paradigm, self.pair_ids])
        return self._key.get_indexer(pd.MultiIndex.from_arrays([strings(f.paradigm), strings(f.pair_id)]))


def _blocks(codes: np.ndarray, k: int) -> int:
    """g where the rows are k blocks of g rows, paradigm after paradigm in code order (how files are
    written: every pair of one paradigm, then the next), else 0."""
    g = len(codes) // k if k else 0
    return g if g and len(codes) == g * k and np.array_equal(codes, np.repeat(np.arange(k), g)) else 0


def paradigm_delta_sums(codes: np.ndarray, k: int, lps: list[tuple[np.ndarray, np.ndarray]], g: int = 0) -> np.ndarray:
    """(len(lps), k): per (good, bad) column pair, the sum of good - bad over each paradigm code's rows, in
    np.bincount's order (the same bits); with g = _blocks(codes, k) summed over the outer axis of a (g, len(lps), k)
    array, row by row at ~4x its speed (docs/speed.md; tests/test_curves.py holds both paths to the same bits)."""
    if g:
        stacked = np.empty((g, len(lps), k))
        diff = np.empty(k * g)
        for i, (good, bad) in enumerate(lps):
            stacked[:, i, :] = np.subtract(good, bad, out=diff).reshape(k, g).T
        return np.add.reduce(stacked, axis=0, initial=0.0)
    return np.stack([np.bincount(codes, weights=good - bad, minlength=k) for good, bad in lps])


def _file_rows(ref: Reference, f: FileResult, path: str, benchmark: str, problems: list[str]):
    """One checkpoint against the reference: its outcome row (MISSING where a pair is absent) and
    its per-paradigm rows (accuracies, mean deltas) as a dict of columns."""
    n_rows, k = len(ref.codes), len(ref.paradigms)
    if ref.same_rows(f):
        correct = f.bits
        fc, bits, sel, g = ref.codes, f.bits, slice(None), ref.blocks
    else:
        correct = np.full(n_rows, MISSING, dtype=np.uint8)
        idx = ref.index_of(f)
        if (idx < 0).any() or len(np.unique(idx)) != len(idx) or len(idx) != n_rows:
            problems.append(
                f"{path}: evals/step{f.step}/{benchmark}.parquet has a different pair set than "
                f"step{ref.step} ({int((idx < 0).sum())} new, {n_rows - len(set(idx[idx >= 0]))} "
                "absent); only pairs present at the first checkpoint are analysed"
            )
        sel = idx >= 0
        correct[idx[sel]] = f.bits[sel]
        fc, bits, g = ref.codes[idx[sel]], f.bits[sel], 0
    if g:  # k blocks of g rows: counted block by block
        blocks = bits.reshape(k, g)
        n = np.full(k, g, dtype=np.int64)
        n_mlp, n_sum = np.count_nonzero(blocks & MLP, axis=1), np.count_nonzero(blocks & SUM, axis=1)
    else:  # pairs per paradigm and bit pattern in one integer count (MISSING is never set in `bits`)
        by_bits = np.bincount(fc * 4 + bits, minlength=4 * k).reshape(k, 4)
        n = by_bits.sum(axis=1)
        n_mlp, n_sum = by_bits[:, MLP] + by_bits[:, MLP | SUM], by_bits[:, SUM] + by_bits[:, MLP | SUM]
    regions = [name for name in ("total", *REGIONS) if name in f.lps]
    tot = paradigm_delta_sums(fc, k, [(good[sel], bad[sel]) for good, bad in map(f.lps.get, regions)], g)
    with np.errstate(invalid="ignore", divide="ignore"):
        row = {
            "step": np.full(k, f.step, dtype=np.int64),
            "tokens": np.full(k, f.tokens, dtype=np.int64),
            "paradigm": ref.names,
            "n_pairs": n,
            "acc_mlp": n_mlp / n,
            "acc_sum": n_sum / n,
        }
        for name in ("total", *REGIONS):
            if name not in f.lps:
                row[f"delta_{name}"] = np.full(k, np.nan)
                continue
            t = tot[regions.index(name)]
            if np.isfinite(t).all():  # then so is every delta: a NaN or inf would be in its paradigm's sum
                row[f"delta_{name}"] = t / n
                continue
            dv = np.subtract(*f.lps[name])[sel]
            finite = np.isfinite(dv)  # the mean over the finite ones
            cnt = np.bincount(fc[finite], minlength=k)
            t = np.bincount(fc[finite], weights=dv[finite], minlength=k)
            row[f"delta_{name}"] = np.where(cnt > 0, t / np.maximum(cnt, 1), np.nan)
    return correct, row


def assemble(run: str, run_path: str, benchmark: str, files: Iterable[FileResult], problems: list[str],
              ref: Optional[Reference] = None, cached: Optional[tuple[PairOutcomes, pd.DataFrame]] = None):
    """PairOutcomes and per-paradigm rows of `files` (in step order, one at a time: each file's columns land in the
    memory the last one's left, still in cache), aligned to the first file's pair order or `ref`; `cached`:
    the outcomes and rows of earlier checkpoints (`ref` their pair order) that `files` are added to."""
    rows, steps, tokens = [], [], []
    for f in files:
        if steps and f.step <= steps[-1]:
            raise ValueError(f"assemble: files out of step order (step {f.step} after step {steps[-1]})")
        if ref is None:  # the first file's pair order
            par = strings(f.paradigm)
            codes, paradigms = pd.factorize(par, sort=True)
            starts = np.unique(codes, return_index=True)[1]
            ref = Reference(par, strings(f.pair_id), codes, [str(p) for p in paradigms],
                            dict(zip(par[starts], strings(f.phenomenon)[starts])), f.step,
                            arrow=(f.paradigm, f.pair_id), row_key=f.row_key)
        rows.append(_file_rows(ref, f, run_path, benchmark, problems))
        steps.append(f.step)
        tokens.append(f.tokens)
    correct = np.stack([c for c, _ in rows]) if rows else np.zeros((0, len(ref.codes)), np.uint8)
    steps, tokens = np.array(steps, dtype=np.int64), np.array(tokens, dtype=np.int64)
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
