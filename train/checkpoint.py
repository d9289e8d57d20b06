"""Checkpoints on disk: written whole or not at all, found again for resume, resume state pruned.

Layout (checkpoints.md documents it for users):
  <run>/checkpoints/step<N>/config.json, model.safetensors, tokenizer files   (from_pretrained works)
  <run>/checkpoints/step<N>/trainer_state.json
  <run>/checkpoints/step<N>/resume/                 optimizer / DeepSpeed state, RNG (last K only)
A checkpoint is assembled under checkpoints/.tmp-step<N>/ and renamed to step<N> once every file is
fsynced, so a directory with a final name is always whole; readers ignore names starting with ".".
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Optional

import torch

REQUIRED_FILES = ("config.json", "model.safetensors", "trainer_state.json")
_STEP_DIR = re.compile(r"^step(\d+)$")


class IncompleteCheckpointError(RuntimeError):
    pass


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step{step}"


def fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a torn write (temporary name, fsync, rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


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


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Whole checkpoints by step; temporary directories are not checkpoints."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    return sorted(found)


def latest_resumable(run_dir: Path) -> Optional[Path]:
    for _step, path in reversed(list_checkpoints(run_dir)):
        if (path / "resume").is_dir():
            verify_checkpoint(path)
            return path
    return None


def read_state(path: Path) -> dict:
    with open(Path(path) / "trainer_state.json") as f:
        return json.load(f)


def save_checkpoint(run_dir: Path, step: int, engine, tokenizer, state: dict, dist, *,
                    with_resume: bool) -> Path:
    """Collective: every rank calls it (DeepSpeed writes its shards from every rank)."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(f".tmp-step{step}")
    if dist.main:
        if tmp.exists():  # left by a crash mid-write: never trusted
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    dist.barrier()
    if with_resume:
        engine.save_resume(tmp / "resume")
        rng = {"torch": torch.random.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()
               if torch.cuda.is_available() else []}
        (tmp / "resume").mkdir(exist_ok=True)
        torch.save(rng, tmp / "resume" / f"rng_rank{dist.rank}.pt")
    dist.barrier()
    weights = engine.full_weights()  # collective under DeepSpeed: gathers the fp32 weights on rank 0
    if dist.main:
        engine.module.save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_json_atomic(tmp / "trainer_state.json", state)
        fsync_tree(tmp)
        if final.exists():  # a rerun re-saving a step it already has: the old copy is whole too
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_tree(final.parent)
    dist.barrier()
    return final


def prune_resume_states(run_dir: Path, keep: int, weights_dtype: str = "fp32") -> None:
    """Drops resume/ from all but the newest `keep` checkpoints that have one. The directory is renamed
    away first so a crash mid-delete never leaves a half resume state under the name resume/.
    weights_dtype="bf16" then halves the weights of every checkpoint left without resume state."""
    with_resume = [p for _s, p in list_checkpoints(run_dir) if (p / "resume").is_dir()]
    for path in with_resume[:-keep] if keep else with_resume:
        doomed = path / ".resume-deleting"
        if doomed.exists():
            shutil.rmtree(doomed)
        os.replace(path / "resume", doomed)
        shutil.rmtree(doomed)
    if weights_dtype == "bf16":
        for _s, path in list_checkpoints(run_dir):
            if not (path / "resume").is_dir():
                weights_to_bf16(path)


def weights_to_bf16(path: Path) -> None:
    """Rewrites a probe-only checkpoint's model.safetensors in bf16, atomically. config.json's dtype is
    updated last and marks the work done, so a crash in between is redone by the next call. Resume
    checkpoints keep fp32 weights: the run continues from them exactly."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    config_path = Path(path) / "config.json"
    config = json.loads(config_path.read_text())
    if config.get("dtype") == "bfloat16":
        return
    weights = Path(path) / "model.safetensors"
    with safe_open(weights, framework="pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}
    tmp = weights.with_name(f".{weights.name}.tmp")
    save_file(tensors, tmp, metadata=metadata)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, weights)
    config["dtype"] = "bfloat16"
    write_json_atomic(config_path, config)


def load_rng(resume_dir: Path, rank: int) -> None:
    path = Path(resume_dir) / f"rng_rank{rank}.pt"
    if path.exists():
        rng = torch.load(path, weights_only=False)
        torch.random.set_rng_state(rng["torch"])
        if rng["cuda"]:
            torch.cuda.set_rng_state_all(rng["cuda"])
