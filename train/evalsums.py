"""A sha256 beside every eval file and per-token sidecar (``<file>.sha256``, sha256sum's format): one flipped
bit turned an lp_good of -10.13 into -162.13 and read back silently (parquet checks little). Written before the
file, from its bytes, and while a file is replaced it names the old file's digest too (where the old file matched
it): a kill at any point leaves the old file or the new one, each matching its .sha256, or a .sha256 whose file is
not there yet (the next write replaces it); never a good file refused, nor one refused for a missing .sha256. The file's
metadata records that it has one (CHECKSUM_KEY), so deleting the .sha256 does not make a damaged file an
unchecked one. Here in train/ because `train verify` checks eval files too (train imports nothing of probes).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Optional

from train.files import CorruptCheckpointError, atomic_open, manifest_hash, sha256_file, write_text_atomic

SUFFIX = ".sha256"
CHECKSUM_KEY, CHECKSUM = "checksum", "sha256 sidecar"  # in an eval file's metadata: written with one


def sum_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + SUFFIX)


def _sha256(path: Path, data: Optional[bytes] = None) -> str:
    # data: the file's bytes, already read by the caller
    return sha256_file(path) if data is None else hashlib.sha256(data).hexdigest()


def write_sum(path: Path, data: Optional[bytes] = None) -> None:
    """``<path>.sha256``, atomically, for `data` (the bytes about to be written to `path`) or `path` as it is."""
    path = Path(path)
    write_text_atomic(sum_path(path), f"{_sha256(path, data)}  {path.name}\n")


def _recorded(side: Path) -> list[str]:
    """The digests a .sha256 records: one, or the new and the old one while write_summed replaces the file."""
    return [line.split()[0] for line in side.read_text(errors="replace").splitlines() if line.split()]


def recorded_digest(path: Path) -> str:
    """The digest `path`'s .sha256 records (the new file's, mid-rewrite), else the sha256 of its bytes."""
    side = sum_path(path)
    recorded = _recorded(side) if side.is_file() else []
    return recorded[0] if recorded else _sha256(path)


def write_summed(path: Path, data: bytes, fault: Optional[Callable[[], None]] = None) -> None:
    """`data` to `path` atomically, its .sha256 first, naming the old file's digest too until the new file is in
    place (module docstring); `fault`: the crash tests' kill point, with the file written but not yet renamed."""
    path, side = Path(path), sum_path(path)
    old = side.read_text() if side.is_file() else None
    now = _sha256(path) if old is not None and path.is_file() else None  # the old file's digest, if recorded
    kept = [f"{now}  {path.name}\n"] if now is not None and now in _recorded(side) else []
    write_text_atomic(side, "".join([f"{_sha256(path, data)}  {path.name}\n", *kept]))
    try:
        with atomic_open(path, "wb") as f:
            f.write(data)
            if fault is not None:
                fault()
    except BaseException:  # the old file stays: so does the .sha256 that matches it
        if old is None:
            side.unlink(missing_ok=True)
        else:
            write_text_atomic(side, old)
        raise
    if kept:
        write_sum(path, data)


def _own_meta(path: Path) -> dict:
    """The JSON object of the parquet schema metadata that holds a step (the eval file's own), or {}."""
    import pyarrow.parquet as pq
    try:
        metadata = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - unreadable: its reader names that
        return {}
    for blob in metadata.values():
        try:
            value = json.loads(blob)
        except ValueError:
            continue
        if isinstance(value, dict) and "step" in value:
            return value
    return {}


def checkpoint_problem(path: Path, meta: Optional[dict] = None) -> Optional[str]:
    """Why <run>/evals/step<N>/<name>.parquet is not the scores of checkpoints/step<N> (its metadata records
    another manifest_hash), or None, also where there is nothing to compare."""
    path = Path(path)
    recorded = (_own_meta(path) if meta is None else meta).get("manifest")
    ckpt = path.parents[2] / "checkpoints" / path.parent.name
    try:
        here = manifest_hash(ckpt) if recorded and path.parent.parent.name == "evals" else None
    except CorruptCheckpointError:  # the checkpoint's own finding (verify), not the eval file's
        return None
    if here is None or here == recorded:
        return None
    return (f"{path}: its metadata names another checkpoint (manifest {str(recorded)[:12]}…) than {ckpt} "
            f"beside it ({here[:12]}…): copied from another run, or scored before that checkpoint was replaced; "
            f"delete it and its {SUFFIX} and score again (probes score-run)")


def sum_problem(path: Path, meta: Optional[dict] = None, data: Optional[bytes] = None) -> Optional[str]:
    """Why `path` cannot be trusted, or None (`meta`, `data`: its metadata and bytes, when already read)."""
    path, side = Path(path), sum_path(path)
    if side.is_file():
        if _sha256(path, data) not in _recorded(side):
            return (f"{path} does not match its sha256 in {side.name}: damaged, or its write was cut short; "
                    f"score it again (probes score-run rewrites it) or delete both files")
        return None
    expected = (meta if meta is not None else _own_meta(path)).get(CHECKSUM_KEY) == CHECKSUM
    if expected:
        return (f"{path}: its {side.name} is missing (the file was written with one), so it cannot be checked; "
                f"score it again (probes score-run rewrites both) or restore {side.name}")
    return None
