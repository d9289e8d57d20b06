"""Checkpoints on disk: written whole or not at all, found again for resume, resume state pruned.

Layout: checkpoints.md. A checkpoint is assembled under checkpoints/.tmp-step<N>/ and renamed to step<N> once
every file is fsynced; its manifest (written last) lets a resume prove the files and the config are the ones
written (a damaged byte is refused, not trained on)."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Optional

# defined in train/files.py (probes read checkpoints by them), re-exported here for train/ and its tests
from train.files import (MANIFEST, REQUIRED_FILES, CorruptCheckpointError, IncompleteCheckpointError,  # noqa: F401
                         atomic_open, checkpoint_dir, fsync_tree, list_checkpoints, read_manifest,
                         read_trainer_state, sha256_file, verify_checkpoint, write_json_atomic,
                         write_text_atomic)
from train.digest import sha256_once, torch_save_hashed
from train.faults import fault_point
from train.start_token import write_record

read_state = read_trainer_state  # the name train/ and its tests use


def checkpoint_files(path: Path) -> list[str]:
    """Every file of a checkpoint, relative and sorted; the manifest and hidden names excluded."""
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), path)
            if rel != MANIFEST and not name.startswith("."):
                out.append(rel)
    return sorted(out)


def write_manifest(path: Path, state: dict, param_count: int) -> dict:
    """manifest.json: {files: {name: sha256}, sizes: {name: bytes}, step, tokens, param_count,
    config_hash}, atomically. Files hashed while they were written are not read again (train.digest);
    sizes let `verify --fast` check a checkpoint without hashing it."""
    rels = checkpoint_files(path)
    manifest = {"files": {rel: sha256_once(Path(path) / rel) for rel in rels},
                "sizes": {rel: (Path(path) / rel).stat().st_size for rel in rels},
                "step": state.get("step"), "tokens": state.get("tokens"), "param_count": param_count,
                "config_hash": state.get("config_hash")}
    write_json_atomic(Path(path) / MANIFEST, manifest)
    return manifest


def manifest_problems(path: Path, manifest: dict, actual: Optional[dict] = None) -> list[tuple[str, str, str]]:
    """(file, kind, what) for every listed file that is missing or changed and every unlisted file; [] when
    the checkpoint is the one written. `actual`: name -> sha256 of the files present, when already hashed.
    resume/ is checked only while it exists: pruning drops it from the manifest first, and a crash between
    the two leaves a probe-only checkpoint, which no resume reads."""
    path = Path(path)
    if actual is None:
        actual = {rel: sha256_file(path / rel) for rel in checkpoint_files(path)}
    has_resume = (path / "resume").is_dir()
    problems = []
    for rel, digest in sorted(manifest["files"].items()):
        if rel.startswith("resume/") and not has_resume:
            continue
        if rel not in actual:
            problems.append((rel, "missing", f"listed in {MANIFEST} but missing"))
        # the sha256 `rel` had before weights_to_bf16 recorded its rewrite: an unfinished rewrite is not damage
        elif actual[rel] != digest and actual[rel] != ((manifest.get("derived") or {}).get(rel) or {}).get("from"):
            problems.append((rel, "changed", f"does not match its sha256 in {MANIFEST}: the file was damaged "
                                             f"or replaced after it was written"))
    problems += [(rel, "unlisted", f"not listed in {MANIFEST}") for rel in actual if rel not in manifest["files"]]
    return problems


def verify_manifest(path: Path, manifest: dict) -> None:
    """CorruptCheckpointError naming the first file that is not the one written, or every unlisted one."""
    path = Path(path)
    problems = manifest_problems(path, manifest)
    for rel, kind, what in problems:
        if kind == "missing":
            raise CorruptCheckpointError(f"{path / rel} is {what}")
        if kind == "changed":
            raise CorruptCheckpointError(f"{path / rel} {what}; resume from another checkpoint (delete "
                                         f"{path}) or restore the file")
    unlisted = [rel for rel, kind, _ in problems if kind == "unlisted"]
    if unlisted:
        raise CorruptCheckpointError(f"{path} holds files its {MANIFEST} does not list: {', '.join(unlisted)}")


def _drop_from_manifest(path: Path, prefix: str = "", updates: Optional[dict] = None,
                        sizes: Optional[dict] = None) -> None:
    """Rewrites the manifest without the entries under `prefix`, with `updates` (name -> sha256) and `sizes`;
    an updated file is recorded under ``derived`` as made from the one it replaces, so manifest_hash (the
    eval files' record of the checkpoint) sees the same checkpoint."""
    manifest = read_manifest(path)
    if manifest is None:
        return
    files = {k: v for k, v in manifest["files"].items() if not (prefix and k.startswith(prefix))}
    derived = dict(manifest.get("derived") or {})
    for rel, digest in (updates or {}).items():
        before = files.get(rel)
        if before is not None and before != digest:
            prior = derived.get(rel, {})
            # a file rewritten twice still stands for the one the checkpoint was written with
            derived[rel] = {"sha256": digest, "from": prior["from"] if prior.get("sha256") == before else before}
        files[rel] = digest
    out = {**manifest, "files": files}
    if "sizes" in manifest:
        out["sizes"] = {k: v for k, v in {**manifest["sizes"], **(sizes or {})}.items() if k in files}
    if derived:
        out["derived"] = derived
    write_json_atomic(Path(path) / MANIFEST, out)


def missing_manifest(path: Path) -> Optional[str]:
    """Why a checkpoint without manifest.json is damaged, or None when it has one or predates them:
    config_hash came with manifests, so a trainer state recording one lost its manifest since."""
    path = Path(path)
    if (path / MANIFEST).exists():
        return None
    try:
        state = read_trainer_state(path, missing_ok=True)
    except ValueError:
        return None  # an unreadable trainer state is reported as such
    if "config_hash" not in state:
        return None
    return (f"{path / MANIFEST} is missing, but {path / 'trainer_state.json'} shows a version that writes one "
            f"wrote this checkpoint: deleted since, so its files cannot be trusted")


def latest_resumable(run_dir: Path) -> Optional[Path]:
    for _step, path in reversed(list_checkpoints(run_dir)):
        if (path / "resume").is_dir():
            verify_checkpoint(path)
            return path
    return None


def save_checkpoint(run_dir: Path, step: int, engine, tokenizer, state: dict, dist, *, with_resume: bool) -> Path:
    """Collective: every rank calls it (DeepSpeed writes its shards from every rank)."""
    import torch  # here, not at the top: `verify --help` and the listings need no torch
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
        torch_save_hashed(rng, tmp / "resume" / f"rng_rank{dist.rank}.pt")
    dist.barrier()
    weights = engine.full_weights()  # collective under DeepSpeed: gathers the fp32 weights on rank 0
    if dist.main:
        engine.module.save_pretrained(tmp, state_dict=weights, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_record(tmp, tokenizer)  # start_token.json: what `probes score` conditions sentences on
        write_json_atomic(tmp / "trainer_state.json", state)
        fault_point("checkpoint_write", step)
        # Last: it hashes every file above (every rank's resume shards are written: barrier above).
        write_manifest(tmp, state, sum(p.numel() for p in engine.module.parameters()))
        fsync_tree(tmp)
        if final.exists():  # a rerun re-saving a step it already has: the old copy is whole too
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_tree(final.parent)
    dist.barrier()
    return final


def prune_resume_states(run_dir: Path, keep: int, weights_dtype: str = "fp32") -> None:
    """Drops resume/ from all but the newest `keep` checkpoints that have one (renamed away first: a crash
    never leaves half a resume/); weights_dtype="bf16" then halves the weights of the ones without."""
    with_resume = [p for _s, p in list_checkpoints(run_dir) if (p / "resume").is_dir()]
    for path in with_resume[:-keep] if keep else with_resume:
        _drop_from_manifest(path, "resume/")
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
    """Rewrites a probe-only checkpoint's model.safetensors in bf16. The manifest learns the new files first
    (as derived from the ones they replace), then the weights and config.json (whose dtype marks the work
    done) are replaced: at every point each file is one the manifest vouches for, and the next call finishes
    the work. Damaged weights are refused, not converted and vouched for."""
    from safetensors import safe_open
    import torch
    from safetensors.torch import save
    config_path = Path(path) / "config.json"
    config = json.loads(config_path.read_text())
    if config.get("dtype") == "bfloat16":
        return
    weights = Path(path) / "model.safetensors"
    manifest = read_manifest(path)
    if manifest is not None:
        problems = [p for p in manifest_problems(path, manifest) if p[0] in ("model.safetensors", "config.json")]
        if problems:
            raise CorruptCheckpointError(f"{path / problems[0][0]} {problems[0][2]}; not rewritten in bf16")
    with safe_open(weights, framework="pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}
    blob = save(tensors, metadata=metadata)
    config["dtype"] = "bfloat16"
    text = json.dumps(config, indent=2, sort_keys=True)
    # hashed from memory (not read back), and recorded before the files are replaced (docstring)
    _drop_from_manifest(path, updates={"model.safetensors": hashlib.sha256(blob).hexdigest(),
                                       "config.json": hashlib.sha256(text.encode()).hexdigest()},
                        sizes={"model.safetensors": len(blob), "config.json": len(text.encode())})
    with atomic_open(weights, "wb") as f:
        f.write(blob)
    fault_point("bf16_rewrite", read_trainer_state(path).get("step", -1))
    write_text_atomic(config_path, text)


# Every global DeepSpeed's own resume shards name beyond torch's weights_only list (read from real shards,
# zero_stage 0-3 and bf16: tests/test_attack.py re-reads them). Exact names only: a prefix ("deepspeed.")
# admits `deepspeed.launcher.runner.os.system`, which a protocol-4 GLOBAL resolves to os.system.
DEEPSPEED_GLOBALS = frozenset({
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
})


def refuse_unsafe_pickles(directory: Path, allowed: frozenset[str] = DEEPSPEED_GLOBALS) -> None:
    """Before DeepSpeed unpickles its resume shards in full, every *.pt under `directory` is scanned without
    running it: a global outside torch's weights_only list and `allowed` is refused (a planted payload)."""
    import torch
    for f in sorted(Path(directory).rglob("*.pt")):
        try:
            names = torch.serialization.get_unsafe_globals_in_checkpoint(f)
        except Exception as e:  # not a torch zip file: nothing DeepSpeed should be handed either
            raise CorruptCheckpointError(f"{f} is not a readable torch file ({e})") from None
        bad = sorted(n for n in names if n not in allowed)
        if bad:
            raise CorruptCheckpointError(f"{f} names code that loading it would run ({', '.join(bad)}); "
                                         f"refused: only tensors and DeepSpeed's own records belong there")


def load_rng(resume_dir: Path, rank: int) -> None:
    import torch
    path = Path(resume_dir) / f"rng_rank{rank}.pt"
    if path.exists():
        # weights_only: a full unpickle would run whatever code a planted file names, on resume
        try:
            rng = torch.load(path, weights_only=True)
        except pickle.UnpicklingError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CorruptCheckpointError(f"{path} holds more than tensors and is refused "
                                         f"(only RNG state belongs there): {first}") from None
        torch.random.set_rng_state(rng["torch"])
        if rng["cuda"]:
            torch.cuda.set_rng_state_all(rng["cuda"])
