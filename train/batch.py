"""`python -m train batch RUN_DIR --step N | --steps A:B [--text] [--out FILE.npy]`: the exact global batch of optimizer step N.

Step N is the N-th update (train.jsonl's "step": N; checkpoints/step<N>); its batch is the stream's batch N-1, a
pure function of the step, the data seed and the token store, so it is rebuilt from config.yaml alone however
many ranks trained it. A row is seq_len + 1 ids (inputs and labels). `batch_sha256`, logged for every step, is
the sha256 of the ids as little-endian int32 in C order; this prints the same hash. Later calls on a corpus and
tokenizer read the store alone (data.cache_dir/batch-index/; docs/public_suites.md)."""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Optional, Sequence

import numpy as np
from omegaconf import OmegaConf

from train.cli import exit_on_user_error
from train.config import TrainConfig, to_typed
from train.corpus import corpus_id_of, load_documents
from train.errors import ConfigError, InputFileError, check_writable
from train.files import atomic_open, write_json_atomic
from train.overrides import CONFIGS
from train.sequences import SequenceStream
from train.start_token import document_tokens
from train.tokenizer import load_tokenizer, prepare_tokenizer, pretrained_dir, trained_dir


def batch_ids(stream, step: int, global_batch: int) -> np.ndarray:
    """The global batch of optimizer step `step` (1-based, as logged): (global_batch, seq_len + 1) int64."""
    if step < 1:
        raise IndexError(f"--step {step}: optimizer steps count from 1 (step N is the N-th update; "
                         f"checkpoints/step0 holds the weights before any)")
    return stream.batches(step - 1, step, global_batch)[0]


def batch_sha256(ids) -> str:
    """sha256 of token ids as little-endian int32, C order (the hash train.jsonl records)."""
    arr = np.ascontiguousarray(np.asarray(ids), dtype="<i4")
    return hashlib.sha256(arr.tobytes()).hexdigest()


def load_run_config(run_dir: Path, cache_dir: Optional[Path] = None):
    """The run's TrainConfig from <run>/config.yaml, checked like a command line (optionally with another
    data.cache_dir); keys added since the run was written get the values it ran with. Its import paths name this
    project's code only (train/names.py)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise InputFileError(f"{path}: not found; {run_dir} is not a run directory")
    if (Path(run_dir) / "hub.json").is_file():  # probes score-run --hub wrote it: scores, no corpus
        raise InputFileError(f"{path}: a public suite's scores (probes score-run --hub, {Path(run_dir) / 'hub.json'}), "
                             f"not a run trained here: it has no corpus or token store to rebuild a batch from")
    try:
        saved = OmegaConf.load(path)
        if "heldout_tokens" not in saved.get("data", {}):  # a run from before held-out splits trained on all
            saved.data.heldout_tokens = 0
        if saved.get("probes") and "_target_" not in saved.probes:  # written before the section named its type
            default = OmegaConf.load(CONFIGS / "config.yaml")
            saved.probes._target_ = default.probes._target_
        cfg = to_typed(OmegaConf.merge(OmegaConf.structured(TrainConfig), saved))
    except (ValueError, TypeError) as e:  # omegaconf errors name the key
        raise ConfigError(f"{path}: {e}") from None
    if cache_dir is not None:
        cfg = replace(cfg, data=replace(cfg.data, cache_dir=str(cache_dir)))
    return cfg


def open_stream(cfg):
    """(tokenizer, SequenceStream) of a run as the loop builds them (from data.cache_dir, rebuilt if gone)."""
    from train.token_store import build_or_load
    cache_dir = Path(cfg.data.cache_dir).expanduser()
    docs, corpus_id = load_documents(cfg.data)
    tokenizer_dir = prepare_tokenizer(cfg.tokenizer, docs, corpus_id, cache_dir)
    store = build_or_load(docs, tokenizer_dir, corpus_id, cache_dir, num_proc=cfg.data.num_proc)
    tokenizer = load_tokenizer(tokenizer_dir)
    with contextlib.suppress(OSError):  # for cached_stream; unwritable: the next call rebuilds it again
        ids = {"store": store.path.name, "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
        write_json_atomic(_index_entry(cfg)[0], ids)
    return tokenizer, stream_of(cfg, store, tokenizer)


def cached_stream(cfg):
    """(tokenizer directory, SequenceStream) from the store and ids open_stream recorded for this corpus and
    tokenizer (in data.cache_dir/batch-index/), else None: nothing generated, trained or loaded but the store."""
    from train.token_store import TokenStore
    try:
        index, tokenizer_dir = _index_entry(cfg)
        rec = json.loads(index.read_text())
        return tokenizer_dir, stream_of(cfg, TokenStore(index.parent.parent / "stores" / rec.pop("store")),
                                        SimpleNamespace(**rec))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _index_entry(cfg) -> tuple[Path, Path]:
    """(batch-index entry, tokenizer directory), keyed by the corpus identity and the tokenizer's files' names,
    sizes and mtimes: a corpus or tokenizer changed since has another entry."""
    cache_dir, t = Path(cfg.data.cache_dir).expanduser(), cfg.tokenizer
    tdir = pretrained_dir(t) if t.kind == "pretrained" else trained_dir(t, corpus_id_of(cfg.data), cache_dir)
    files = sorted([f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in tdir.iterdir() if f.is_file())
    key = hashlib.sha256(json.dumps([corpus_id_of(cfg.data), str(tdir), files]).encode()).hexdigest()[:16]
    return cache_dir / "batch-index" / f"{key}.json", tdir


def stream_of(cfg, store, tokenizer):
    """The run's SequenceStream over `store`: one definition for the loop and the batch viewer."""
    doc_start, doc_end = document_tokens(tokenizer)
    return SequenceStream(store, seq_len=cfg.data.seq_len or cfg.model.max_position_embeddings,
                          budget_tokens=cfg.data.budget_tokens, epochs=cfg.data.epochs,
                          order_seed=cfg.data.order_seed, seed=cfg.data.seed, start_id=doc_start, end_id=doc_end,
                          nested_budgets=cfg.data.nested_budgets, heldout_tokens=cfg.data.heldout_tokens)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m train batch", description=__doc__.split("\n")[0].split(": ", 1)[1])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--step", type=int, metavar="N",
                       help="optimizer step (1 = the first update; the step train.jsonl logs)")
    which.add_argument("--steps", type=_step_range, metavar="A:B", help="steps A to B (inclusive) in one pass")
    p.add_argument("--text", action="store_true", help="print each row decoded by the run's tokenizer")
    p.add_argument("--out", type=Path, default=None, metavar="FILE.npy",
                   help="save the ids as a numpy array, rows x (seq_len + 1), int32 (--steps: steps x rows x ...)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="the token store's cache, where it is not the run's data.cache_dir")
    args = p.parse_args(argv)
    return exit_on_user_error(lambda: _main(args))


def _main(args) -> int:
    if args.out is not None and args.out.suffix != ".npy":
        raise ConfigError(f"--out {args.out}: name a .npy file")
    if args.out is not None:
        check_writable(args.out.parent, "--out")  # a read-only place: one line, before the corpus is read
    cfg = load_run_config(args.run_dir, args.cache_dir)
    first, last = args.steps or (args.step, args.step)
    cached = cached_stream(cfg)
    tokenizer, stream = (None, cached[1]) if cached else open_stream(cfg)
    total = stream.steps(cfg.optim.global_batch)
    for step in (first, last):
        if not 1 <= step <= total:
            raise ConfigError(f"--step {step}: {args.run_dir} trains steps 1..{total} "
                              f"(optim.global_batch={cfg.optim.global_batch}, {stream.num_sequences} sequences)")
    batches = stream.batches(first - 1, last, cfg.optim.global_batch)
    if args.out is not None:
        with atomic_open(args.out, "wb") as fh:
            np.save(fh, (batches[0] if args.steps is None else batches).astype("<i4"))
    if args.text and tokenizer is None:
        tokenizer = load_tokenizer(cached[0])
    out = sys.stderr if args.text else sys.stdout
    for step, ids in enumerate(batches, first):
        for i, row in enumerate(ids if args.text else ()):
            print(f"--- row {i} ---" if args.steps is None else f"--- step {step} row {i} ---")
            print(tokenizer.decode(row.tolist()))
        print(f"step {step}: {ids.shape[0]} rows x {ids.shape[1]} ids, batch_sha256 {batch_sha256(ids)}"
              + (f" -> {args.out}" if args.out is not None else ""), file=out)
    return 0


def _step_range(text: str) -> tuple[int, int]:
    a, _, b = text.partition(":")
    if not (a.isdigit() and b.isdigit() and int(a) <= int(b)):
        raise argparse.ArgumentTypeError(f"{text!r}: write A:B, steps A to B inclusive with A <= B (e.g. 1:100)")
    return int(a), int(b)
