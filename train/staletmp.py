"""Temporary names that say who wrote them, so that what a killed writer left is removed by the next one.

A write under a temporary name is renamed into place when whole; SIGKILL (an OOM kill, `scancel`, a
node failure) leaves the temporary behind, and nothing else would ever delete it. Every temporary name
carries ``<pid>@<host>``: a later writer of the same target removes the ones whose process is gone (same
host, pid not running). Another host's, or a live process's, are left alone: they may be being written.
Names in the older format (no ``@``) were written by code before this and are stale by now.
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
    """Removes entries of `parent` named ``<prefix><pid>@<host><sep><random><suffix>`` whose writer is gone
    (files and directories), and old-format ``<prefix><random><suffix>`` ones. Returns what it removed."""
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
