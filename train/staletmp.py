"""Temporary names that say who wrote them (``<pid>@<host>``), so that what a killed writer left is removed by
the next writer of the same target: SIGKILL leaves a temporary nothing else would delete. Another host's or a
live process's are left alone; names without ``@`` (older code) are stale by now.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from pathlib import Path


def tag() -> str:
    """``<pid>@<host>``, the part of a temporary name that says who writes it."""
    return f"{os.getpid()}@{socket.gethostname()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clear_stale(parent: Path, prefix: str, sep: str, suffix: str = "") -> list[Path]:
    """Removes (and returns) entries of `parent` named ``<prefix><pid>@<host><sep><random><suffix>`` whose writer
    is gone, and old-format ``<prefix><random><suffix>`` ones."""
    removed = []
    try:
        entries = list(os.scandir(parent))
    except FileNotFoundError:
        return removed
    host = socket.gethostname()
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) <= len(prefix) + len(suffix):
            continue
        middle = name[len(prefix):len(name) - len(suffix)]
        owner, found, rand = middle.rpartition(sep)
        if not found:  # old format: <random> only
            if not re.fullmatch(r"[A-Za-z0-9_]+", middle):
                continue
        else:
            pid, at, their_host = owner.partition("@")
            if not (at and pid.isdigit() and re.fullmatch(r"[A-Za-z0-9_]+", rand)) or their_host != host \
                    or _alive(int(pid)):
                continue
        path = Path(entry.path)
        with contextlib.suppress(FileNotFoundError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
        removed.append(path)
    return removed
