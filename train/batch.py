"""`python -m train batch RUN_DIR --step N [--text] [--out FILE.npy]`: the exact global batch of optimizer step N.

Step N is the N-th update (train.jsonl's "step": N; checkpoints/step<N>); its batch is the stream's batch N-1, a
pure function of the step, the data seed and the token store, so it is rebuilt from config.yaml alone however
many ranks trained it. A row is seq_len + 1 ids (inputs and labels). `batch_sha256`, logged for every step, is
the sha256 of the ids as little-endian int32 in C order; this prints the same hash.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from omegaconf import OmegaConf

from train.cli import exit_on_user_error
from train.config import TrainConfig, to_typed
from train.corpus import load_documents
from train.errors import ConfigError, InputFileError, check_writable
from train.files import atomic_open
from train.overrides import CONFIGS
from train.sequences import SequenceStream
from train.start_token import document_tokens
from train.tokenizer import load_tokenizer, prepare_tokenizer


def batch_ids(stream, step: int, global_batch: int) -> np.ndarray:
    """The global batch of optimizer step `step` (1-based, as logged): (global_batch, seq_len + 1) int64."""
    if step < 1:
        raise IndexError(f"--step {step}: optimizer steps count from 1 (step N is the N-th update; "
                         f"checkpoints/step0 holds the weights before any)")
    return stream.batch(step - 1, global_batch).numpy()


def batch_sha256(ids) -> str:
    """sha256 of token ids as little-endian int32, C order (the hash train.jsonl records)."""
    arr = np.ascontiguousarray(np.asarray(ids), dtype="<i4")
    return hashlib.sha256(arr.tobytes()).hexdigest()


def load_run_config(run_dir: Path, cache_dir: Optional[Path] = None):
    """The run's TrainConfig from <run>/config.yaml, checked like a command line (optionally with another
    data.cache_dir); keys added since the run was written get the values it ran with."""
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
    from train.token_store import build_or_load  # imports datasets: `batch --help` need not
    cache_dir = Path(cfg.data.cache_dir).expanduser()
    docs, corpus_id = load_documents(cfg.data)
    tokenizer_dir = prepare_tokenizer(cfg.tokenizer, docs, corpus_id, cache_dir)
    store = build_or_load(docs, tokenizer_dir, corpus_id, cache_dir, num_proc=cfg.data.num_proc)
    tokenizer = load_tokenizer(tokenizer_dir)
    return tokenizer, stream_of(cfg, store, tokenizer)


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
    p.add_argument("--step", type=int, required=True, metavar="N",
                   help="optimizer step (1 = the first update; the step train.jsonl logs)")
    p.add_argument("--text", action="store_true", help="print each row decoded by the run's tokenizer")
    p.add_argument("--out", type=Path, default=None, metavar="FILE.npy",
                   help="save the ids as a numpy array, rows x (seq_len + 1), int32")
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
    tokenizer, stream = open_stream(cfg)
    total = stream.steps(cfg.optim.global_batch)
    if not 1 <= args.step <= total:
        raise ConfigError(f"--step {args.step}: {args.run_dir} trains steps 1..{total} "
                          f"(optim.global_batch={cfg.optim.global_batch}, {stream.num_sequences} sequences)")
    ids = batch_ids(stream, args.step, cfg.optim.global_batch)
    if args.out is not None:
        with atomic_open(args.out, "wb") as fh:
            np.save(fh, ids.astype("<i4"))
    if args.text:
        for i, row in enumerate(ids):
            print(f"--- row {i} ---")
            print(tokenizer.decode(row.tolist()))
    print(f"step {args.step}: {ids.shape[0]} rows x {ids.shape[1]} ids, batch_sha256 {batch_sha256(ids)}"
          + (f" -> {args.out}" if args.out is not None else ""), file=sys.stderr if args.text else sys.stdout)
    return 0
