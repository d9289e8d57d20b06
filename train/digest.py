"""sha256 of checkpoint files, each computed once: while the file is written (optimizer and RNG state, bf16
weights), else read once and remembered for the process, keyed by the file's identity (path, inode, size,
mtime), so the manifest does not read back a 1.4B checkpoint's ~17 GB (10-80 s per checkpoint)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, BinaryIO

_known: dict[tuple, str] = {}  # identity of a file as written -> its sha256


def _identity(path: Path) -> tuple:
    st = os.stat(path)
    return (str(Path(path).absolute()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def sha256_once(path: Path) -> str:
    """The file's sha256: remembered from its write or an earlier call, else read once."""
    key = _identity(path)
    if key not in _known:
        with open(path, "rb") as f:
            _known[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _known[key]


class HashingWriter:
    """A binary file that hashes what passes through write() (torch.save writes sequentially)."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.sha = raw, hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def torch_save_hashed(obj: Any, path: Path) -> str:
    """torch.save(obj, path), hashing the bytes on their way; returns and remembers the sha256."""
    import torch
    path = Path(path)
    with open(path, "wb") as raw:
        writer = HashingWriter(raw)
        torch.save(obj, writer)
        raw.flush()
    _known[_identity(path)] = writer.sha.hexdigest()
    return writer.sha.hexdigest()
