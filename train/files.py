"""Files on disk that training writes and everything else reads: the atomic writer, the checkpoint
directory's names, its trainer state and manifest, and the package versions recorded beside results.
Standard library and train.errors only, so the trainer and every eval writer (probes/) share them.

Temporary names say who wrote them (``<pid>@<host>``), so that what a killed writer left is removed by the
next writer of the same target: SIGKILL leaves a temporary nothing else would delete. Another host's or a
live process's are left alone; names without ``@`` (older code) are stale by now."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import tempfile
import uuid
from functools import lru_cache
from pathlib import Path
from typing import IO, Iterator, Optional

from train.errors import InputFileError

STEP_DIR = re.compile(r"^step(\d+)$")  # checkpoints/step<N>, evals/step<N>: N = optimizer steps done
TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest.json"
REQUIRED_FILES = ("config.json", "model.safetensors", TRAINER_STATE)


class IncompleteCheckpointError(RuntimeError):
    pass


class CorruptCheckpointError(RuntimeError):
    """A file of a checkpoint is not the one its manifest recorded (damaged, replaced or unlisted)."""


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


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def step_dirs(parent: Path) -> dict[int, Path]:
    """{N: parent/step<N>} for every directory named step<N> (temporary names never match)."""
    out = {}
    if Path(parent).is_dir():
        for d in Path(parent).iterdir():
            m = STEP_DIR.match(d.name)
            if m and d.is_dir():
                out[int(m.group(1))] = d
    return out


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step{step}"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoints by step; temporary directories are not checkpoints."""
    return sorted(step_dirs(Path(run_dir) / "checkpoints").items())


def verify_checkpoint(path: Path) -> None:
    path = Path(path)
    if not path.is_dir():
        raise IncompleteCheckpointError(f"checkpoint {path} does not exist")
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise IncompleteCheckpointError(
            f"checkpoint {path} is incomplete: missing {', '.join(missing)} "
            f"(delete the directory to let the run rewrite it)")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", durable: bool = True) -> Iterator[IO]:
    """Write `path` whole or not at all: a hidden ``.<name>.<pid>@<host>.<random>.tmp`` beside it is written,
    fsynced and renamed over `path`. An error leaves the old file and no temporary; what SIGKILL leaves the
    next write removes (clear_stale). durable=False skips both fsyncs (2-15 ms each): for caches,
    whose readers recompute on a miss (a power cut may tear one, a crash of the process cannot)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_stale(path.parent, f".{path.name}.", ".", ".tmp")  # what a killed writer of `path` left
    tmp = path.with_name(f".{path.name}.{tag()}.{uuid.uuid4().hex[:12]}.tmp")
    # os.open with 0o666 honours the umask (mkstemp would make every output 0600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a failed write or flush names no file: ours
            e.filename = str(path)
        raise
    if durable:
        fsync_dir(path.parent)


@contextlib.contextmanager
def built_dir(final: Path, winner: Optional[str] = None) -> Iterator[Path]:
    """A directory assembled in a temporary one beside `final`, fsynced and renamed to it when the block ends:
    whole or not at all (an error removes it; what a kill left, the next build). `winner`: a file whose presence
    in `final` means a concurrent build finished first (kept); without one an older `final` is replaced."""
    final.parent.mkdir(parents=True, exist_ok=True)
    clear_stale(final.parent, f".{final.name}.tmp-", "-")  # a build a kill cut short
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{tag()}-", dir=final.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        if winner is None and final.exists():
            shutil.rmtree(final)
        try:
            os.replace(tmp, final)
        except OSError:
            if winner is None or not (final / winner).is_file():  # not a concurrent winner: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def write_json_atomic(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Every file and directory under `path`: before a directory assembled under a temporary name is renamed."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(root))


def read_trainer_state(ckpt_dir: Path, *, missing_ok: bool = False) -> dict:
    """``<ckpt>/trainer_state.json``; {} without one when `missing_ok` (a model that is not our checkpoint)."""
    f = Path(ckpt_dir) / TRAINER_STATE
    if missing_ok and not f.is_file():
        return {}
    try:
        state = json.loads(f.read_bytes())
    except json.JSONDecodeError as e:
        raise InputFileError(f"{f}: cannot read the trainer state (invalid JSON at line {e.lineno}: {e.msg}; a truncated or damaged file)") from None
    except UnicodeDecodeError as e:
        raise InputFileError(f"{f}: cannot read the trainer state (not UTF-8: {e.reason}; a damaged file)") from None
    if not isinstance(state, dict):
        raise InputFileError(f"{f}: expected a JSON object, got {type(state).__name__}")
    return state


def read_manifest(path: Path) -> Optional[dict]:
    """The checkpoint's manifest, or None for a checkpoint written before manifests existed."""
    f = Path(path) / MANIFEST
    if not f.is_file():
        return None
    try:
        manifest = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptCheckpointError(f"{f} is not valid JSON ({e}): the checkpoint cannot be verified") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CorruptCheckpointError(f"{f} has no 'files' table: the checkpoint cannot be verified")
    return manifest


def manifest_hash(ckpt_dir: Path) -> Optional[str]:
    """What an eval file records as the checkpoint it scored: sha256 of the manifest's step, tokens, config
    hash and file hashes without ``resume/`` (pruned, never scored); a file of our bf16 rewrite counts as the
    one it was derived from (``derived``), any other change is a new checkpoint. None: no manifest."""
    manifest = read_manifest(ckpt_dir) if ckpt_dir is not None else None
    if manifest is None:
        return None
    derived = manifest.get("derived") or {}
    files = {}
    for rel, digest in manifest["files"].items():
        if rel.startswith("resume/"):
            continue
        origin = derived.get(rel) or {}
        files[rel] = origin["from"] if origin.get("sha256") == digest and "from" in origin else digest
    ident = {"files": files, **{k: manifest.get(k) for k in ("step", "tokens", "config_hash")}}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Python and the installed versions of what decides the numbers (without importing any of it)."""
    from importlib import metadata
    out = {"python": platform.python_version()}
    for dist in ("syntax-dynamics", "torch", "transformers", "tokenizers", "deepspeed"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return dict(out)
