"""User errors vs bugs: a user error (a config key, a corpus file, a damaged checkpoint, a full disk) is
printed as one line `error: …` naming the key, file or line (exit status 2); a bug keeps its traceback."""
from __future__ import annotations

import contextlib
import difflib
import errno
import io
import json
import linecache
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

_PACKAGES = tuple(str(Path(__file__).resolve().parents[1] / name) + "/" for name in ("train", "probes"))


class UserError(Exception):
    """Bad input from the user; the message names the config key, file or line."""


class ConfigError(UserError, ValueError):
    """A config value that cannot work (the message names the dotted key)."""


class InputFileError(UserError, ValueError):
    """A file we read is malformed, truncated or foreign (the message names the path, and line)."""


class _OSUserError(UserError, OSError):
    def __str__(self) -> str:  # the message alone, without OSError's "[Errno N]" prefix
        return self.strerror or super().__str__()


class DiskFullError(_OSUserError):
    """A write failed for lack of space (the message names the file being written)."""


class NotWritableError(_OSUserError):
    """A directory we must write into is read-only or not a directory."""


def is_user_error(exc: BaseException) -> bool:
    """Ours (UserError), or a ValueError / OSError / RuntimeError raised by a `raise` statement of our
    own validation code in train/ or probes/ -- every such message names what is wrong. The same
    types raised inside a library (or by a builtin call in our code) are bugs until shown otherwise."""
    if isinstance(exc, UserError):
        return True
    if not isinstance(exc, (ValueError, OSError, RuntimeError)):
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    if not filename.startswith(_PACKAGES):
        return False
    return linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise ")


# What a truncated or foreign file raises while it is read (torch's "PytorchStreamReader failed" and
# size mismatches are RuntimeErrors, json's a ValueError; safetensors' own type is added in `reading`)
_READ_ERRORS = (ValueError, RuntimeError, EOFError, KeyError, pickle.UnpicklingError)


@contextlib.contextmanager
def reading(path: Path, what: str, hint: str = "") -> Iterator[None]:
    """A failure while reading `path` as an InputFileError naming it. An OSError keeps its type (it names
    its file, and `watch` retries one: a checkpoint being replaced); memory errors stay what they are."""
    from safetensors import SafetensorError
    try:
        yield
    except (UserError, OSError, MemoryError):
        raise
    except (*_READ_ERRORS, SafetensorError) as e:
        if type(e).__name__ == "OutOfMemoryError":  # torch's CUDA OOM is a RuntimeError
            raise
        # one line: torch's state-dict errors put the informative part ("size mismatch for …") on
        # the lines after a heading
        detail = " ".join(str(e).split())[:400] or type(e).__name__
        if isinstance(e, json.JSONDecodeError):
            detail = f"invalid JSON at line {e.lineno}: {e.msg}"
        raise InputFileError(f"{path}: cannot read {what} ({type(e).__name__}: {detail})"
                             + (f"; {hint}" if hint else "")) from e


def _disk_full(e: BaseException) -> bool:
    # torch.save reports a failed write as "PytorchStreamWriter failed writing file …" / "unexpected
    # pos …" without the errno; safetensors as an I/O error. Walk the chain for the OSError too.
    for x in _chain(e):
        text = str(x)
        if isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT) or any(
                m in text for m in ("No space left on device", "Disk quota exceeded")) or isinstance(
                x, RuntimeError) and any(m in text for m in ("unexpected pos", "failed writing", "file write failed")):
            return True
    return False


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _newest_file(directory: Path) -> Path | None:
    newest, when = None, -1
    for f in Path(directory).rglob("*"):
        try:
            mtime = f.stat().st_mtime_ns
        except OSError:
            continue
        if f.is_file() and mtime > when:
            newest, when = f, mtime
    return newest


def _open_file_in_traceback(e: BaseException) -> Path | None:
    """The file a failed write was writing when its OSError names none (a write to an open file): the
    innermost traceback frame holding an open file, as a local or an attribute of one (`self._jsonl`)."""
    def named(value) -> str | None:
        name = getattr(value, "name", None) if isinstance(value, io.IOBase) else None
        return name if isinstance(name, str) else None

    for exc in _chain(e):
        frames, tb = [], exc.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for value in frame.f_locals.values():
                name = named(value) or next((n for n in map(named, getattr(value, "__dict__", {}).values()) if n), None)
                if name:
                    return Path(name)
    return None


def disk_full_error(e: BaseException, where: Path | None = None) -> DiskFullError | None:
    """A DiskFullError naming the file a failed write was writing (the OSError's filename, the open file,
    else the newest file under `where`), or None when `e` is not a failed write for lack of space."""
    if not _disk_full(e):
        return None
    names = [x.filename for x in _chain(e) if isinstance(x, OSError) and x.filename]
    file = Path(names[0]) if names else _open_file_in_traceback(e)
    if file is None:
        file = _newest_file(where) if where and Path(where).is_dir() else where
    free = ""
    for p in (Path(file or where or "."), *Path(file or where or ".").parents):
        if p.exists():
            free = f" ({shutil.disk_usage(p).free / 2**20:.1f} MiB left on its filesystem)"
            break
    return DiskFullError(errno.ENOSPC, f"disk full while writing {file or 'a file'}{free}: free some space "
                         f"and rerun the same command (a write cut short is never used)")


@contextlib.contextmanager
def writing(where: Path) -> Iterator[None]:
    """A write under `where` that failed for lack of space as DiskFullError naming the file."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:  # HF tokenizers raises a bare Exception("No space left on device (os error 28)")
        full = disk_full_error(e, Path(where))
        if full is None:
            raise
        raise full from e


def check_writable(directory: Path, what: str) -> None:
    """Refuses a directory (or the nearest existing parent) that cannot be written: a probe file is created,
    as permission bits say nothing for root or a read-only mount."""
    directory = Path(directory).expanduser().absolute()
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise NotWritableError(errno.ENOTDIR, f"{what} {directory}: {existing} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-test-")
    except OSError as e:
        raise NotWritableError(e.errno, f"{what} {directory} is not writable: {e.strerror} ({existing})") from None
    os.close(fd)
    os.unlink(probe)


def did_you_mean(name: str, options) -> str:
    """' (did you mean X?)' for the closest of `options` to a misspelt `name`, else ''."""
    close = difflib.get_close_matches(name, list(options), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
