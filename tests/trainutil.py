"""Builds the real run config from configs/ (Hydra compose) for tiny CPU runs."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from train.config import TrainConfig, register, to_typed
from train.token_store import TokenStore, _finish

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# A 2-layer model on a small grammar corpus: about 60 optimizer steps of 8 x 32 tokens.
TINY = [
    "model=tiny", "model.hidden_size=32", "model.intermediate_size=128", "model.max_position_embeddings=64",
    "data=grammar", "data.grammar.n_documents=80", "data.grammar.sentences_per_document=10",
    "data.seq_len=32", "tokenizer.vocab_size=400", "tokenizer.hard_vocab_limit=false", "optim.global_batch=8", "optim.micro_batch=4",
    "optim.lr=3e-3", "schedule=log", "schedule.n_log=4", "logger.log_every=1", "logger.wandb=false",
    "probes.benchmarks=[{name: grammar, max_pairs_per_paradigm: 10}]", "curves_at_end=false",
    # no held-out split: the step counts the tests pin are those of the whole corpus (tests/test_heldout.py
    # and tests/test_wandb.py turn it on)
    "data.heldout_tokens=0",
]


def compose_cfg(overrides: list[str]):
    register()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=overrides)


def tiny_cfg(cache_dir: Path, *extra: str) -> TrainConfig:
    return to_typed(compose_cfg(TINY + [f"data.cache_dir={cache_dir}", *extra]))


def losses(run_dir: Path) -> dict[int, float]:
    """Last logged train/loss per step (a resumed run appends to the same log)."""
    out = {}
    for line in (Path(run_dir) / "logs" / "train.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "train/loss" in record:
            out[record["step"]] = record["train/loss"]
    return out


def signal_at_step(cmd: list[str], env: dict, step: int, *, timeout: float = 120) -> tuple[int, str]:
    """Runs `python -m train …` and has it send itself SIGUSR1 during step `step` (train/faults.py), as
    SLURM would before a time limit; returns the exit status and stderr. Deterministic: the signal lands
    in that step whatever the machine's load."""
    import subprocess

    from train.faults import ENV

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(cmd, cwd=root, env={**env, ENV: f"mid_step:step{step}:SIGUSR1"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return proc.returncode, proc.stderr


def train_records(run_dir: Path) -> list[dict]:
    """The train.jsonl records of trained steps, in order (a resume cuts the log back to its checkpoint)."""
    lines = (Path(run_dir) / "logs" / "train.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "train/loss" in r]


def write_token_store(path: Path, docs_ids: list[list[int]], dtype: str = "uint16", **meta) -> TokenStore:
    """A store from ids already in hand; the same files and atomic rename as train.token_store's build."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        offsets = np.zeros(len(docs_ids) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in docs_ids], out=offsets[1:])
        flat = np.fromiter((t for d in docs_ids for t in d), dtype=np.int64, count=int(offsets[-1]))
        if flat.size == 0:
            raise ValueError("cannot write a token store with zero tokens")
        np.asarray(flat, dtype=np.dtype(dtype)).tofile(tmp / "tokens.bin")
        _finish(tmp, offsets, np.dtype(dtype), {"fingerprint": path.name, **meta})
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return TokenStore(path)
