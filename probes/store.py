"""Per-pair eval files: one parquet per (run, step, benchmark) that describes itself.

The metadata dict travels as JSON under the parquet schema-metadata key ``syntax_dynamics``, so
analysis never needs the process that wrote a file. It always holds ``step`` (int), ``tokens``
(int, tokens seen), ``benchmark`` (str) and ``convention`` (the scoring convention name).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from probes.scoring import CONVENTION
from train.faults import fault_point

META_KEY = b"syntax_dynamics"
_REQUIRED = {"step": int, "tokens": int, "benchmark": str, "convention": str}
# benchmark names become file names: keep them to one safe path component
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("syntax-dynamics", "torch", "transformers", "tokenizers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _check_meta(meta: dict, where: str) -> None:
    for key, typ in _REQUIRED.items():
        if key not in meta:
            raise ValueError(f"{where}: metadata lacks required key {key!r}")
        value = meta[key]
        # bool is an int subclass; a True step is a bug, not a step
        if not isinstance(value, typ) or isinstance(value, bool):
            raise ValueError(
                f"{where}: metadata key {key!r} must be {typ.__name__}, got {value!r}"
            )


def write_pairs(df: pd.DataFrame, path: Path, meta: dict) -> None:
    """Write ``df`` to ``path`` atomically with ``meta`` in the schema metadata.

    ``convention`` defaults to the current scoring convention and ``versions`` to the installed
    package versions. The file appears under its final name only when complete: it is written to a
    hidden ``.<name>.*.tmp`` in the same directory, fsynced and renamed.
    """
    path = Path(path)
    meta = dict(meta)
    meta.setdefault("convention", CONVENTION)
    meta.setdefault("versions", _versions())
    _check_meta(meta, str(path))
    try:
        blob = json.dumps(meta, default=lambda o: str(o) if isinstance(o, os.PathLike) else _bad(o))
    except TypeError as e:
        raise TypeError(f"{path}: metadata is not JSON-serialisable: {e}") from None

    table = pa.Table.from_pandas(df, preserve_index=False)
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[META_KEY] = blob.encode()
    table = table.replace_schema_metadata(schema_meta)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        fault_point("eval_write", meta["step"])  # the crash tests' kill point; nothing otherwise
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # make the rename itself durable
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _bad(o):
    raise TypeError(f"object of type {type(o).__name__} ({o!r})")


def read_pairs(path: Path) -> tuple[pd.DataFrame, dict]:
    """The per-pair rows and the metadata dict of an eval file written by ``write_pairs``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such eval file")
    table = pq.read_table(path)
    blob = (table.schema.metadata or {}).get(META_KEY)
    if blob is None:
        raise ValueError(f"{path}: parquet has no {META_KEY.decode()!r} schema metadata; "
                         f"not written by probes.store.write_pairs")
    try:
        meta = json.loads(blob)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: {META_KEY.decode()!r} metadata is not valid JSON: {e}") from None
    _check_meta(meta, str(path))
    return table.to_pandas(), meta


def eval_path(run_dir: Path, step: int, benchmark: str) -> Path:
    """``<run>/evals/step<N>/<benchmark>.parquet``."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if not _NAME.match(benchmark):
        raise ValueError(
            f"benchmark name {benchmark!r} cannot be a file name: use letters, digits, '_', '-', '.'"
        )
    return Path(run_dir) / "evals" / f"step{step}" / f"{benchmark}.parquet"
