"""The eval contract on disk: ``<run>/evals/step<N>/<benchmark>.parquet`` (eval_path), its metadata (eval_meta,
under META_KEY; read by eval_file_meta), the pair set and ``eval_done``: a file is done for a checkpoint when it
reads, was scored under the current CONVENTION on the same ``pair_set`` and records the checkpoint's current
``manifest_hash`` (a checkpoint replaced under its name is scored again). Standard library only (pyarrow in the
functions that read a schema), so the trainer and every eval writer can share it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Callable, Iterable, Optional

from train.errors import InputFileError
from train.files import STEP_DIR, TRAINER_STATE, read_trainer_state, versions
from train.evalsums import checkpoint_problem, sum_path, sum_problem

META_KEY = b"syntax_dynamics"  # parquet schema-metadata key of an eval file's JSON metadata
CONVENTION = "start_token_all_tokens_v2"  # the scoring convention (probes/scoring/primitive.py documents it)
# the decision rules a pair's lps are read by (probes.scoring.primitive.correct), ours and benchmark authors'
CONVENTIONS = {
    "mlp": "MLP: mean log-prob per token, good > bad (ours; RuBLiMP's lower perplexity is the same rule)",
    "sum": "sum-LP: summed log-prob, good > bad (BLiMP's full-sentence probability)",
    "sum_after_first": "summed log-prob of every token but the first, good > bad (minicons' default, "
                       "which leaves the first token unscored)",
}
REGIONS = ("prefix", "critical", "suffix")  # the generic per-pair regions of every eval file
ALL_SUFFIX = "_all"  # probes.final_all_pairs: every pair of <name> at the last checkpoint, as "<name>_all"
MINIMAL_PAIRS = "minimal_pairs"  # the `kind` of a per-pair eval file; each probe family writes its own (probes/families.py)
# files from before eval files said their kind (issue 39): the name rule of that day, frozen, and the kind values
# two families wrote then; a family added since writes `kind`, so nothing needs to be added here
_OLD_NAMES = {"syntax_qa": "syntax_questions", "syntax_qa_paper": "syntax_questions", "elagent": "elagent"}
_OLD_KINDS = {"syntax_qa_items": "syntax_questions", "elagent_items": "elagent"}
# benchmark names become file names: keep them to one safe path component
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class EvalInputError(InputFileError):
    """Bad eval-side input; the message names the run directory or file at fault."""


def eval_path(run_dir: Path, step: int, benchmark: str) -> Path:
    """``<run>/evals/step<N>/<benchmark>.parquet``."""
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if not _NAME.match(benchmark):
        raise ValueError(f"benchmark name {benchmark!r} cannot be a file name: use letters, digits, '_', '-', '.'")
    return Path(run_dir) / "evals" / f"step{step}" / f"{benchmark}.parquet"


def pair_key(pair) -> tuple:
    """What identifies a minimal pair in a pair set: its paradigm, id and both sentences."""
    return (pair.paradigm, str(pair.pair_id), pair.good, pair.bad)


def pair_set(pairs: Iterable, key: Callable[[object], tuple] = pair_key) -> str:
    """Order-free sha256 of the pairs (or items) an eval file holds (another sample or an edited file differs)."""
    lines = sorted(json.dumps(key(p), ensure_ascii=False) for p in pairs)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def file_pair_set(path: Path) -> str:
    """An eval file's pair_set: its metadata's, else computed from its rows as the writers compute it (pair_key), so a
    file from before the fingerprint is never matched on (paradigm, pair_id) alone; EvalInputError without either."""
    import pyarrow.parquet as pq

    try:
        fp = json.loads((pq.read_schema(path).metadata or {}).get(META_KEY, b"{}")).get("pair_set")
        if fp:
            return fp
        t = pq.read_table(path, columns=["paradigm", "pair_id", "good", "bad"]).to_pydict()
    except Exception:  # unreadable, or a column missing: pyarrow's errors are of several types
        raise EvalInputError(f"{path}: no pair_set in its metadata and no readable paradigm, pair_id, good and bad "
                             "columns to compute one from: its pairs cannot be told from others under the same ids") from None
    return pair_set(zip(t["paradigm"], t["pair_id"], t["good"], t["bad"]), key=lambda r: (r[0], str(r[1]), r[2], r[3]))


def eval_meta(*, step: int, tokens: int, benchmark: str, model_dir: Optional[Path], tokenizer: str,
              dtype: Optional[str], bf16: bool, manifest: Optional[str], n_pairs: int, pair_set: str,
              kind: str = MINIMAL_PAIRS, **extra) -> dict:
    """The metadata every eval file carries, whoever wrote it (step and tokens -1 when a model directory does not
    know them; tokenizer: its ids_fingerprint; manifest: the checkpoint's manifest_hash)."""
    return {"step": int(step), "tokens": int(tokens), "benchmark": benchmark, "kind": kind, "convention": CONVENTION,
            "model_dir": None if model_dir is None else str(Path(model_dir).resolve()),
            "tokenizer": tokenizer, "dtype": dtype, "bf16": bool(bf16), "manifest": manifest,
            "n_pairs": int(n_pairs), "pair_set": pair_set, "versions": versions(), **extra}


def old_kind(benchmark: str) -> str:
    """The kind of an eval file that does not say it, by its benchmark name (the rule of files before kind)."""
    return "lm_eval" if benchmark.startswith("lmeval_") else _OLD_NAMES.get(benchmark, MINIMAL_PAIRS)


def _kind(meta: dict, benchmark: str) -> str:
    return _OLD_KINDS.get(meta.get("kind"), meta.get("kind")) or old_kind(benchmark)


def eval_kind(path: Path) -> str:
    """The kind of an eval file from its schema alone, for a reader sorting a run's files; a file that does not
    read gets its name's kind (old_kind), so that its family's reader names the problem."""
    import pyarrow.parquet as pq

    try:
        return _kind(json.loads((pq.read_schema(path).metadata or {})[META_KEY]), Path(path).stem)
    except Exception:  # unreadable, foreign or without metadata: pyarrow's errors are of several types
        return old_kind(Path(path).stem)


def check_meta(meta: dict, where: str) -> None:
    """The keys every eval file's metadata holds, and their types (the writer and the reader check)."""
    for key, typ in (("step", int), ("tokens", int), ("benchmark", str), ("convention", str)):
        if key not in meta:
            raise EvalInputError(f"{where}: metadata lacks required key {key!r}")
        # bool is an int subclass; a True step is a bug, not a step
        if not isinstance(meta[key], typ) or isinstance(meta[key], bool):
            raise EvalInputError(f"{where}: metadata key {key!r} must be {typ.__name__}, got {meta[key]!r}")


def eval_file_meta(path: Path, schema_meta: Optional[dict] = None, data: Optional[bytes] = None) -> dict:
    """The metadata of an eval file by the one rule every reader uses: the JSON under META_KEY, what a file lacks
    filled in from its place ``<run>/evals/step<N>/<name>.parquet`` only (convention "unknown"); EvalInputError
    names a file that breaks it. `schema_meta`, `data`: the schema and bytes, when the caller holds them."""
    path = Path(path)
    has_sum = sum_path(path).is_file()
    if has_sum:  # first: a damaged file is named as such, whatever it reads as
        _check_sum(path, data=data)
    if schema_meta is None:
        import pyarrow.parquet as pq

        try:
            schema_meta = pq.read_schema(path).metadata or {}
        except Exception as e:  # pyarrow's errors for a torn or foreign file are of several types
            raise EvalInputError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    in_step = STEP_DIR.match(path.parent.name)
    dir_step = int(in_step.group(1)) if in_step and path.parent.parent.name == "evals" else None
    meta: dict = {}
    if META_KEY in schema_meta:
        try:
            meta = json.loads(schema_meta[META_KEY])
        except ValueError as e:
            raise EvalInputError(f"{path}: {META_KEY.decode()!r} metadata is not valid JSON: {e}") from None
        if not isinstance(meta, dict):
            raise EvalInputError(f"{path}: {META_KEY.decode()!r} metadata is not a JSON object")
    elif dir_step is None:
        raise EvalInputError(f"{path}: parquet has no {META_KEY.decode()!r} schema metadata and is not in a "
                             f"run's evals/step<N>/ directory; not an eval file")
    if dir_step is not None:
        meta = {"step": dir_step, "benchmark": path.stem, "convention": "unknown", **meta}
        if "tokens" not in meta:
            state = path.parents[2] / "checkpoints" / f"step{dir_step}" / TRAINER_STATE
            tokens = read_trainer_state(state.parent, missing_ok=True).get("tokens")
            if tokens is None:
                raise EvalInputError(f"{path}: no 'tokens' in its metadata, nor in {state}, to say how far "
                                     f"training was")
            meta["tokens"] = tokens
    check_meta(meta, str(path))
    meta["kind"] = _kind(meta, meta["benchmark"])
    if dir_step is not None and meta["step"] != dir_step:
        raise EvalInputError(f"{path}: metadata step {meta['step']} != directory step{dir_step}")
    named = path.name[:-len(TOKENS_SUFFIX)] if path.name.endswith(TOKENS_SUFFIX) else path.stem
    if dir_step is not None and meta["benchmark"] != named:  # another benchmark's file copied in under this name
        raise EvalInputError(f"{path}: holds benchmark {meta['benchmark']!r} under the name {named!r}; "
                             f"move it away (or to {meta['benchmark']}.parquet)")
    if not has_sum:  # lost, where the file says it was written with one
        _check_sum(path, meta)
    if dir_step is not None and (problem := checkpoint_problem(path, meta)):
        raise EvalInputError(problem)
    return meta


def _check_sum(path: Path, meta: Optional[dict] = None, data: Optional[bytes] = None) -> None:
    """Raises EvalInputError when the file does not match its .sha256, or lost it (train/evalsums.py)."""
    if problem := sum_problem(path, meta, data):
        raise EvalInputError(problem)


TOKENS_SUFFIX = ".tokens.parquet"  # the per-token sidecar beside an eval file (probes/scoring/tokens.py)


def tokens_path(eval_file: Path) -> Path:
    """``<dir>/<benchmark>.tokens.parquet`` beside ``<dir>/<benchmark>.parquet``."""
    eval_file = Path(eval_file)
    return eval_file.with_name(eval_file.name.removesuffix(".parquet") + TOKENS_SUFFIX)


def eval_done(path: Path, pairs_hash: str, manifest: Optional[str], per_token: bool = False) -> bool:
    """True when `path` holds the pair set `pairs_hash` scored on the checkpoint whose manifest_hash is `manifest`
    under the current convention: nothing to redo. `per_token`: its sidecar (tokens_path) must be there too."""
    if not Path(path).is_file() or (per_token and not tokens_path(path).is_file()):
        return False
    try:
        meta = eval_file_meta(path)  # without metadata: convention 'unknown', never done
        if per_token:  # a damaged or cut-short sidecar is scored again too
            _check_sum(tokens_path(path))
    except EvalInputError as e:  # a foreign or damaged file: scoring again replaces it
        logging.getLogger(__name__).warning("%s; it will be scored again", e)
        return False
    return [meta.get(k) for k in ("convention", "pair_set", "manifest")] == [CONVENTION, pairs_hash, manifest]
