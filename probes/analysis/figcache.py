"""The report's figure cache (docs/report.md, "Figure cache"). A false hit would show an old picture, so anything
the key cannot describe exactly makes the job uncacheable; a figure function must take its numbers as arguments."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from train.files import atomic_open

CACHE_DIR = ".figure-cache"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Uncacheable(Exception):
    """An argument the key cannot describe exactly: the job is drawn, not cached."""


def tree_hash(root: Path) -> str:
    """SHA-256 of every *.py under `root`: relative path and bytes of each."""
    h = hashlib.sha256()
    for f in sorted(Path(root).rglob("*.py")):
        data = f.read_bytes()
        h.update(f"{f.relative_to(root).as_posix()} {len(data)}\0".encode() + data)
    return h.hexdigest()


@functools.cache
def source_version() -> str:
    """tree_hash of the probes and train packages (all a figure function can reach of ours) and the versions
    of the drawing libraries; once per process."""
    import matplotlib
    import PIL

    import train

    versions = f"{matplotlib.__version__} {np.__version__} {pd.__version__} {PIL.__version__}"
    trees = [tree_hash(Path(__file__).resolve().parents[1]), tree_hash(Path(train.__file__).resolve().parent)]
    return f"{' '.join(trees)} {versions}"


def code_version() -> str:
    """source_version() and the rcParams in force now (a matplotlibrc changes every figure)."""
    import matplotlib

    rc = repr(sorted((k, repr(v)) for k, v in matplotlib.rcParams.items()))
    return hashlib.sha256((source_version() + rc).encode()).hexdigest()


class _Hasher:
    def __init__(self, root: Path):
        self.h = hashlib.sha256()
        self.root = root

    def tag(self, s: str) -> None:
        self.raw(s.encode())

    def raw(self, b: bytes) -> None:
        self.h.update(struct.pack("<Q", len(b)))
        self.h.update(b)

    def feed(self, x) -> None:
        if isinstance(x, pd.DataFrame):
            self.tag("DataFrame")
            self.raw(pickle.dumps(list(x.columns), protocol=5))
            self._index(x.index)
            for _, col in x.items():
                self._values(col)
        elif isinstance(x, pd.Series):
            self.tag("Series")
            self.raw(pickle.dumps(x.name, protocol=5))
            self._index(x.index)
            self._values(x)
        elif isinstance(x, np.ndarray):
            self.tag(f"ndarray {x.dtype.str} {x.shape}")
            self.raw(pickle.dumps(x.tolist(), protocol=5) if x.dtype.hasobject else np.ascontiguousarray(x).tobytes())
        elif isinstance(x, Path):  # inside the report, relative to it; another path's contents are not in the key
            try:
                self.tag("Path " + Path(os.path.abspath(x)).relative_to(self.root).as_posix())
            except ValueError:
                raise Uncacheable(f"path outside the report: {x}") from None
        elif x is None or isinstance(x, (bool, int, float, complex, str, bytes, np.generic)):
            self.tag(f"{type(x).__qualname__} {x!r}")  # repr of a float round-trips exactly
        elif isinstance(x, (list, tuple)):
            self.tag(f"{type(x).__qualname__} {len(x)}")
            for v in x:
                self.feed(v)
        elif isinstance(x, dict):
            self.tag(f"dict {len(x)}")
            for k, v in x.items():  # in order: a figure may draw its entries in that order
                self.feed(k)
                self.feed(v)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            self.tag(f"dataclass {type(x).__module__}.{type(x).__qualname__}")
            for f in dataclasses.fields(x):
                self.tag(f.name)
                self.feed(getattr(x, f.name))
        else:
            try:
                self.tag(f"pickle {type(x).__module__}.{type(x).__qualname__}")
                self.raw(pickle.dumps(x, protocol=5))
            except Exception as e:  # noqa: BLE001 -- whatever pickle refuses, the key cannot hold
                raise Uncacheable(f"{type(x).__qualname__}: {e}") from None

    def _index(self, idx: pd.Index) -> None:
        if isinstance(idx, pd.RangeIndex):
            self.tag(f"RangeIndex {idx.start} {idx.stop} {idx.step} {idx.name!r}")
        else:
            self.tag("Index")
            self.raw(pickle.dumps(idx, protocol=5))

    def _values(self, col: pd.Series) -> None:
        dt = col.dtype
        self.tag(f"dtype {dt!s}")
        if isinstance(dt, pd.CategoricalDtype):
            self.raw(pickle.dumps((list(dt.categories), dt.ordered), protocol=5))
            self.raw(col.cat.codes.to_numpy().tobytes())
        elif isinstance(dt, np.dtype) and not dt.hasobject:
            self.raw(np.ascontiguousarray(col.to_numpy()).tobytes())
        elif hasattr(dt, "numpy_dtype") and not isinstance(dt, pd.StringDtype):  # Int64, Float64, boolean
            na = col.isna().to_numpy()
            self.raw(na.tobytes())
            self.raw(col.to_numpy(dtype=dt.numpy_dtype, na_value=0).tobytes())
        elif pd.api.types.infer_dtype(col, skipna=False) == "string" or isinstance(dt, pd.StringDtype):
            # every value a str (or a string dtype with NA): pandas' 64-bit hash of each value, in order
            self.raw(col.isna().to_numpy().tobytes())
            self.raw(pd.util.hash_pandas_object(col.fillna(""), index=False).to_numpy().tobytes())
        else:  # objects of mixed kinds (1 and "1" hash alike as strings): exactly, by pickle
            try:
                self.raw(pickle.dumps(col.tolist(), protocol=5))
            except Exception as e:  # noqa: BLE001
                raise Uncacheable(f"column {col.name!r}: {e}") from None


def figure_key(fn, args: tuple, report_dir: Path, version: Optional[str] = None) -> Optional[str]:
    """The content key of fn(*args) drawn into `report_dir`, or None where it cannot be exact."""
    h = _Hasher(Path(os.path.abspath(report_dir)))
    h.tag(f"{fn.__module__}.{fn.__qualname__}")
    h.tag(version or code_version())
    try:
        h.feed(tuple(args))
    except Uncacheable:
        return None
    return h.h.hexdigest()


def png_intact(data: bytes) -> bool:
    """A whole PNG: the signature, every chunk's CRC right, IEND last (a torn write fails here)."""
    if not data.startswith(PNG_SIGNATURE):
        return False
    pos = len(PNG_SIGNATURE)
    while pos + 12 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        end = pos + 12 + n
        if end > len(data):
            return False
        body = data[pos + 4:pos + 8 + n]  # chunk type + data, what the CRC covers
        if zlib.crc32(body) != struct.unpack(">I", data[pos + 8 + n:end])[0]:
            return False
        if body[:4] == b"IEND":
            return end == len(data)
        pos = end
    return False


def _store(data: bytes, entry: Path) -> None:
    """A cache entry, atomically but not fsynced: png_intact refuses a torn one."""
    with atomic_open(entry, "wb", durable=False) as fh:
        fh.write(data)


class FigureCache:
    """Figures of the report being built in `out`, reused from `previous`'s cache (default `out`'s own); the
    entries it used are written into `out`'s cache, and prune() drops any other."""

    def __init__(self, out: Path, previous: Optional[Path] = None):
        self.out = Path(out)
        self.version = code_version()  # once: the rcParams' repr cost ~15 ms a figure
        self.read_dir = Path(previous if previous is not None else out) / CACHE_DIR
        self.dir = self.out / CACHE_DIR
        self.used: set[str] = set()
        self.hits = self.misses = 0

    def key(self, fn, args: tuple) -> Optional[str]:
        return figure_key(fn, args, self.out, self.version)

    def entry(self, key: str) -> Path:
        """Where this report's copy of a figure with `key` goes (written by whoever draws it)."""
        self.used.add(key)
        return self.dir / f"{key}.png"

    def fetch(self, key: str, dest: Path) -> bool:
        """Copy the cached figure `key` to `dest` (and into this report's cache); False on a miss or a torn entry."""
        try:
            data = (self.read_dir / f"{key}.png").read_bytes()
        except OSError:
            data = b""
        if not png_intact(data):
            self.misses += 1
            return False
        with atomic_open(dest, "wb") as fh:
            fh.write(data)
        entry = self.entry(key)
        if entry.resolve() != (self.read_dir / f"{key}.png").resolve():
            _store(data, entry)
        self.hits += 1
        return True

    def prune(self) -> None:
        """Remove the entries (and temporaries) of `out`'s cache that this report did not use."""
        if not self.dir.is_dir():
            return
        for p in self.dir.iterdir():
            if (p.name.startswith(".") or p.stem not in self.used or p.suffix != ".png") and p.is_file():
                p.unlink(missing_ok=True)


def draw_and_store(fn, args: tuple, entry: Optional[Path]):
    """fn(*args) (a figure function returning the path it wrote), then a copy into the cache `entry`;
    module-level so that a forked worker can run it."""
    path = fn(*args)
    if entry is not None:
        _store(Path(path).read_bytes(), entry)
    return path
