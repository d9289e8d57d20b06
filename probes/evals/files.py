"""The eval contract on disk: names, the atomic writer, trainer state, manifests, eval-file metadata.

Standard library only (pyarrow is imported by the one function that reads a parquet schema), so the
trainer, the checkpoint code and every eval writer can share it without importing each other.

    <run>/checkpoints/step<N>/                 a whole checkpoint (STEP_DIR; hidden names are work in progress)
        trainer_state.json, manifest.json      read by read_trainer_state / read_manifest
    <run>/evals/step<N>/<benchmark>.parquet    eval_path; metadata (eval_meta) under META_KEY

An eval file is *done* for a checkpoint (``eval_done``) when it reads, was scored under the current
CONVENTION, records the checkpoint's current ``manifest_hash`` and the same ``pair_set`` as the
pairs now asked for. Anything else is scored again: a checkpoint replaced under the same name (a new
manifest) is never answered with the old checkpoint's scores.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import uuid
from functools import lru_cache
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Optional

META_KEY = b"syntax_dynamics"  # parquet schema-metadata key of an eval file's JSON metadata
CONVENTION = "start_token_all_tokens_v2"  # the scoring convention (probes/scoring/primitive.py documents it)
REGIONS = ("prefix", "critical", "suffix")  # the generic per-pair regions of every eval file
ALL_SUFFIX = "_all"  # probes.final_all_pairs: every pair of <name> at the last checkpoint, as "<name>_all"
STEP_DIR = re.compile(r"^step(\d+)$")  # checkpoints/step<N>, evals/step<N>: N = optimizer steps done
TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest.json"
REQUIRED_FILES = ("config.json", "model.safetensors", TRAINER_STATE)
# benchmark names become file names: keep them to one safe path component
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class EvalInputError(ValueError):
    """Bad eval-side input; the message names the run directory or file at fault."""


class IncompleteCheckpointError(RuntimeError):
    pass


class CorruptCheckpointError(RuntimeError):
    """A file of a checkpoint is not the one its manifest recorded (damaged, replaced or unlisted)."""


# ---------------------------------------------------------------- paths


def eval_path(run_dir: Path, step: int, benchmark: str) -> Path:
    """``<run>/evals/step<N>/<benchmark>.parquet``."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if not _NAME.match(benchmark):
        raise ValueError(
            f"benchmark name {benchmark!r} cannot be a file name: use letters, digits, '_', '-', '.'"
        )
    return Path(run_dir) / "evals" / f"step{step}" / f"{benchmark}.parquet"


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
    """Raises IncompleteCheckpointError naming the directory and what is missing."""
    path = Path(path)
    if not path.is_dir():
        raise IncompleteCheckpointError(f"checkpoint {path} does not exist")
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise IncompleteCheckpointError(
            f"checkpoint {path} is incomplete: missing {', '.join(missing)} "
            f"(delete the directory to let the run rewrite it)")


# ---------------------------------------------------------------- the atomic writer


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Write `path` whole or not at all: a hidden ``.<name>.<pid>@<host>.<random>.tmp`` in the same
    directory is written, flushed, fsynced and renamed over `path`, and the rename is made durable. An
    error leaves the old file (or none) and no temporary; SIGKILL leaves the temporary, which the next
    write of `path` removes (train/staletmp.py). Readers ignore names starting with "."."""
    from train.staletmp import clear_stale, tag

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
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a torn write."""
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
    """Every file and directory under `path`: what a directory assembled under a temporary name
    needs before it is renamed to its final name (checkpoints, tokenizers, token stores)."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(root))


# ---------------------------------------------------------------- what a checkpoint says about itself


def read_trainer_state(ckpt_dir: Path, *, missing_ok: bool = False) -> dict:
    """``<ckpt>/trainer_state.json`` as a dict; {} for a directory without one when `missing_ok`
    (a model directory that is not one of our checkpoints). Raises EvalInputError naming the file."""
    f = Path(ckpt_dir) / TRAINER_STATE
    if missing_ok and not f.is_file():
        return {}
    try:
        state = json.loads(f.read_bytes())
    except json.JSONDecodeError as e:
        raise EvalInputError(f"{f}: invalid JSON at line {e.lineno}: {e.msg} (a truncated or damaged file)") from None
    except UnicodeDecodeError as e:
        raise EvalInputError(f"{f}: not UTF-8 ({e.reason}; a damaged file)") from None
    if not isinstance(state, dict):
        raise EvalInputError(f"{f}: expected a JSON object, got {type(state).__name__}")
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
    """What an eval file records as the checkpoint it scored: sha256 of the manifest's step, tokens,
    config hash and file hashes, ``resume/`` left out (pruning the resume state changes nothing that is
    scored). A file our own bf16 rewrite produced counts as the file it was derived from (manifest
    ``derived``: {name: {sha256, from}}), so that rewrite is not a new checkpoint; any other change of
    a weight, config or tokenizer file is. None: no manifest (an older checkpoint, or no checkpoint)."""
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


# ---------------------------------------------------------------- eval-file metadata


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


def pair_key(pair) -> tuple:
    """What identifies a minimal pair in a pair set: its paradigm, id and both sentences."""
    return (pair.paradigm, str(pair.pair_id), pair.good, pair.bad)


def pair_set(pairs: Iterable, key: Callable[[object], tuple] = pair_key) -> str:
    """Order-free sha256 of the pairs (or items) an eval file holds: a sample of another seed or size,
    or an edited benchmark file, is another pair set."""
    lines = sorted(json.dumps(key(p), ensure_ascii=False) for p in pairs)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def eval_meta(*, step: int, tokens: int, benchmark: str, model_dir: Optional[Path], tokenizer: str,
              dtype: Optional[str], bf16: bool, manifest: Optional[str], n_pairs: int, pair_set: str,
              **extra) -> dict:
    """The metadata every eval file carries, whoever wrote it (the hook, score-run/watch, `probes
    score`, syntax-qa): step and tokens (-1 when a model directory does not know them), the scoring
    convention, the model directory resolved, the tokenizer's ids_fingerprint, the weights' dtype and
    whether bf16 autocast ran, the checkpoint's manifest_hash, the pair set, package versions."""
    return {"step": int(step), "tokens": int(tokens), "benchmark": benchmark, "convention": CONVENTION,
            "model_dir": None if model_dir is None else str(Path(model_dir).resolve()),
            "tokenizer": tokenizer, "dtype": dtype, "bf16": bool(bf16), "manifest": manifest,
            "n_pairs": int(n_pairs), "pair_set": pair_set, "versions": versions(), **extra}


def read_meta(path: Path) -> dict:
    """The metadata dict of an eval file, from its parquet schema alone (no rows read).
    Raises EvalInputError naming the file when it is not one of ours or does not read."""
    import pyarrow.parquet as pq

    from train.evalsums import sum_path

    if sum_path(path).is_file():  # first: a damaged file is named as such, whatever it reads as
        _check_sum(path)
    try:
        blob = (pq.read_schema(path).metadata or {}).get(META_KEY)
    except Exception as e:  # pyarrow's errors for a torn or foreign file are of several types
        raise EvalInputError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    if blob is None:
        raise EvalInputError(f"{path}: parquet has no {META_KEY.decode()!r} schema metadata; not an eval file")
    try:
        meta = json.loads(blob)
    except json.JSONDecodeError as e:
        raise EvalInputError(f"{path}: {META_KEY.decode()!r} metadata is not valid JSON: {e}") from None
    if not isinstance(meta, dict):
        raise EvalInputError(f"{path}: {META_KEY.decode()!r} metadata is not a JSON object")
    if not sum_path(path).is_file():
        _check_sum(path, meta)
    return meta


def _check_sum(path: Path, meta: Optional[dict] = None) -> None:
    """Raises EvalInputError when the file does not match its .sha256, or lost it (train/evalsums.py)."""
    from train.evalsums import sum_problem

    problem = sum_problem(path, meta)
    if problem:
        raise EvalInputError(problem)


TOKENS_SUFFIX = ".tokens.parquet"  # the per-token sidecar beside an eval file (probes/scoring/tokens.py)


def tokens_path(eval_file: Path) -> Path:
    """``<dir>/<benchmark>.tokens.parquet`` beside ``<dir>/<benchmark>.parquet``."""
    eval_file = Path(eval_file)
    stem = eval_file.name[:-len(".parquet")] if eval_file.name.endswith(".parquet") else eval_file.name
    return eval_file.with_name(stem + TOKENS_SUFFIX)


def eval_done(path: Path, pairs_hash: str, manifest: Optional[str], per_token: bool = False) -> bool:
    """True when `path` holds the scores of the pair set `pairs_hash` on the checkpoint whose
    manifest_hash is `manifest`, under the current convention (module doc): nothing to redo.
    `per_token`: its per-token sidecar (tokens_path) must be there too."""
    if not Path(path).is_file() or (per_token and not tokens_path(path).is_file()):
        return False
    try:
        meta = read_meta(path)
        if per_token:  # a damaged or cut-short sidecar is scored again too
            _check_sum(tokens_path(path))
    except EvalInputError as e:  # a foreign or damaged file: scoring again replaces it
        logging.getLogger(__name__).warning("%s; it will be scored again", e)
        return False
    return (meta.get("convention") == CONVENTION and meta.get("pair_set") == pairs_hash
            and meta.get("manifest") == manifest)
