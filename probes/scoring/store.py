"""Per-pair eval files: one parquet per (run, step, benchmark) that describes itself, its metadata as JSON under
the schema-metadata key ``syntax_dynamics`` (step, tokens, benchmark, convention at least)."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Iterator, Optional, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from probes.evals.files import CONVENTION, META_KEY, EvalInputError, check_meta, eval_file_meta, eval_path
from train.evalsums import CHECKSUM, CHECKSUM_KEY, write_summed
from train.files import versions
from train.faults import fault_point


def write_pairs(df: pd.DataFrame, path: Path, meta: dict) -> None:
    """Write ``df`` to ``path`` atomically with ``meta`` (convention and versions defaulted) in the schema."""
    path = Path(path)
    meta = dict(meta)
    meta.setdefault("convention", CONVENTION)
    meta.setdefault("versions", versions())
    meta[CHECKSUM_KEY] = CHECKSUM  # written with a .sha256 (train/evalsums.py): a missing one is damage
    check_meta(meta, str(path))
    try:
        blob = json.dumps(meta, default=lambda o: str(o) if isinstance(o, os.PathLike) else _bad(o))
    except TypeError as e:
        raise TypeError(f"{path}: metadata is not JSON-serialisable: {e}") from None

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: blob.encode()})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    # the crash tests' kill points; nothing otherwise
    write_summed(path, buf.getvalue(), fault=lambda: fault_point("eval_write", meta["step"]))
    fault_point("eval_written", meta["step"])


def _bad(o):
    raise TypeError(f"object of type {type(o).__name__} ({o!r})")


def read_pairs(path: Path, columns: Optional[Sequence[str]] = None) -> tuple[pd.DataFrame, dict]:
    """The per-pair rows and metadata (eval_file_meta) of an eval file; EvalInputError names a file it refuses.
    `columns`: read only those of them the file has (the sentences are most of a file's bytes)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such eval file")
    meta = eval_file_meta(path)
    try:
        if columns is not None:
            names = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in names]
        return pq.read_table(path, columns=columns).to_pandas(), meta
    except Exception as e:  # pyarrow's errors for a torn file are of several types
        raise EvalInputError(f"{path}: the rows do not read ({type(e).__name__}: {e})") from None


def kind_files(run_dirs: Sequence[Path], names: Optional[Sequence[str]], patterns: Sequence[str], kind: str,
               skip_torn: bool = True) -> Iterator[tuple[str, Path, dict]]:
    """(run name, file, eval_file_meta) of every eval file of `kind` in <run>/evals/step*/ matching `patterns`
    (pattern by pattern, sorted); `names` labels the runs (default: each directory's name). `skip_torn`: a file
    EvalInputError refuses is left out (its hook or score-run rescores it; nothing to draw), else it raises."""
    run_dirs = [Path(r) for r in run_dirs]
    names = [r.name for r in run_dirs] if names is None else list(names)
    if len(names) != len(run_dirs):
        raise ValueError(f"{len(names)} names for {len(run_dirs)} run directories")
    for run, name in zip(run_dirs, names):
        for path in [p for pattern in patterns for p in sorted((run / "evals").glob(f"step*/{pattern}"))]:
            if path.name.startswith(".") or path.name.endswith(".tokens.parquet"):
                continue
            try:
                meta = eval_file_meta(path)
            except EvalInputError:
                if not skip_torn:
                    raise
                continue
            if meta.get("kind") == kind:
                yield name, path, meta
