"""The training loop: data, model and engine are set up, then steps run until the budget is spent,
with a whole checkpoint (and the hooks) at every scheduled step. Read it top to bottom.

A preemption signal (train/preempt.py) ends it early: after the current step a resume checkpoint is
written and the process exits with a requeue status; the same command then resumes exactly."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from train.checkpoint import (latest_resumable, list_checkpoints, load_rng, prune_resume_states,
                              read_state, save_checkpoint)
from train.config import TrainConfig, trajectory_diff
from train.corpus import load_documents
from train.engine import build_engine, init_distributed
from train.hooks import run_hooks
from train.lock import RunLock
from train.logger import Logger, NullLogger
from train.model import build_model
from train.optim import lr_at
from train.preempt import Preemption, drop_unscheduled
from train.schedule import checkpoint_steps
from train.sequences import SequenceStream
from train.slurm import export_distributed_env
from train.token_store import build_or_load
from train.tokenizer import load_tokenizer, prepare_tokenizer


def train(cfg: TrainConfig, run_dir: Path) -> Path:
    export_distributed_env()  # in a SLURM job step: RANK, WORLD_SIZE, ... from SLURM_* / submitit
    dist = init_distributed(cfg.engine)
    # One job per run directory (rank 0 holds the lock); signals are recorded while training runs.
    with RunLock(run_dir, enabled=dist.main), Preemption() as preempt:
        return _train(cfg, Path(run_dir), dist, preempt)


def _train(cfg: TrainConfig, run_dir: Path, dist, preempt: Preemption) -> Path:
    resolved = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    resume_from = _check_run_dir(cfg, resolved, run_dir)
    dist.barrier()
    if dist.main:
        _write_config(run_dir, resolved)

    # Data: rank 0 trains the tokenizer and builds the token store; the others then hit the cache.
    cache_dir = Path(cfg.data.cache_dir).expanduser()
    for turn in ("main", "others"):
        if dist.main == (turn == "main"):
            docs, corpus_id = load_documents(cfg.data)
            tokenizer_dir = prepare_tokenizer(cfg.tokenizer, docs, corpus_id, cache_dir)
            store = build_or_load(docs, tokenizer_dir, corpus_id, cache_dir, num_proc=cfg.data.num_proc)
        dist.barrier()
    tokenizer = load_tokenizer(tokenizer_dir)
    seq_len = cfg.data.seq_len or cfg.model.max_position_embeddings
    stream = SequenceStream(store, seq_len=seq_len, budget_tokens=cfg.data.budget_tokens,
                            epochs=cfg.data.epochs, order_seed=cfg.data.order_seed, seed=cfg.data.seed,
                            eos_id=tokenizer.eos_token_id)
    total_steps = stream.steps(cfg.optim.global_batch)
    if total_steps < 1:
        raise ValueError(f"the data view has {stream.view_tokens} tokens: not one optimizer step of "
                         f"optim.global_batch={cfg.optim.global_batch} x seq_len={seq_len}")
    tokens_per_step = cfg.optim.global_batch * seq_len
    save_steps = set(checkpoint_steps(cfg.schedule, total_steps, tokens_per_step))

    # Model and engine. Every rank draws the same initial weights from cfg.seed.
    model = build_model(cfg.model, len(tokenizer), seed=cfg.seed, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id)
    engine = build_engine(cfg.engine, cfg.optim, model, dist)
    torch.manual_seed(cfg.seed + dist.rank)

    start_step, wandb_id = 0, None
    if resume_from is not None:
        state = read_state(resume_from)
        engine.load_resume(resume_from)
        load_rng(resume_from / "resume", dist.rank)
        start_step, wandb_id = state["step"], state.get("wandb_run_id")
    logger = (Logger(cfg.logger, run_dir, config=resolved, name=run_dir.name, run_id=wandb_id)
              if dist.main else NullLogger())
    hooks = _build_hooks(cfg, tokenizer, run_dir)

    def checkpoint(step: int, loss: float | None, lr: float, *, scheduled: bool = True) -> None:
        state = {"step": step, "tokens": step * tokens_per_step, "total_steps": total_steps,
                 "tokens_per_step": tokens_per_step, "seq_len": seq_len, "seed": cfg.seed,
                 "data_seed": cfg.data.seed, "lr": lr, "loss": loss, "world_size": dist.world,
                 "engine": cfg.engine.kind, "zero_stage": cfg.engine.zero_stage,
                 # what ran, as transformers resolved it (not only what was asked for)
                 "attn_implementation": engine.module.config._attn_implementation,
                 "gradient_checkpointing": engine.module.is_activation_checkpointing,
                 "compile": cfg.engine.compile, "wandb_run_id": logger.run_id, "time": time.time(),
                 "versions": _versions(), "preempted": not scheduled}
        path = save_checkpoint(run_dir, step, engine, tokenizer, state, dist, with_resume=True)
        if dist.main:
            prune_resume_states(run_dir, cfg.schedule.keep_resume, cfg.schedule.weights_dtype)
            if scheduled:
                drop_unscheduled(run_dir, save_steps, before=step)
        if not scheduled:  # a preemption's resume-only checkpoint: not probed, not logged
            dist.barrier()
            return
        metrics = run_hooks(hooks, path, step, state["tokens"], engine.module)
        logger.log({"tokens": state["tokens"], **metrics}, step)
        dist.barrier()

    if start_step == 0 and 0 in save_steps:
        checkpoint(0, None, 0.0)
    bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step",
               disable=not dist.main or os.environ.get("TQDM_DISABLE") == "1")
    window_start, window_tokens = time.perf_counter(), 0
    done = start_step
    for step in range(start_step, total_steps):
        lr = lr_at(cfg.optim, step, total_steps)
        batch = stream.batch(step, cfg.optim.global_batch, dist.rank, dist.world)
        micro_losses = []
        for micro in batch.split(cfg.optim.micro_batch):
            loss = engine.loss(micro)
            engine.backward(loss)
            micro_losses.append(loss.item())
        grad_norm = engine.step(lr)
        loss = dist.mean(sum(micro_losses) / len(micro_losses))
        done, window_tokens = step + 1, window_tokens + tokens_per_step
        bar.update(1)
        if done % cfg.logger.log_every == 0 or done == total_steps:
            tokens_per_s = window_tokens / (time.perf_counter() - window_start)
            logger.log({"tokens": done * tokens_per_step, "train/loss": loss, "train/lr": lr,
                        "train/grad_norm": grad_norm, "train/tokens_per_s": tokens_per_s}, done)
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            window_start, window_tokens = time.perf_counter(), 0
        if done in save_steps:
            checkpoint(done, loss, lr)
        if done < total_steps and preempt.requested(dist):
            if done not in save_steps:
                checkpoint(done, loss, lr, scheduled=False)
            break
    bar.close()
    for hook in hooks:
        hook.close()
    logger.close()
    if preempt.signum is not None and done < total_steps:
        _destroy_group(dist)
        preempt.exit(done)  # raises: the process exits for requeue
    if dist.main and cfg.curves_at_end and cfg.probes.enabled:
        from probes.curves import main as curves_main

        curves_main([str(run_dir), "--out", str(run_dir / "curves")])
    _destroy_group(dist)
    return run_dir


def _build_hooks(cfg: TrainConfig, tokenizer, run_dir: Path) -> list:
    """On every rank: the probe hook shards the pairs across ranks and rank 0 writes the files."""
    if not cfg.probes.enabled:
        return []
    from probes.hook import ProbeHook

    hooks = [ProbeHook(cfg.probes, tokenizer, run_dir)]
    if cfg.probes.syntax_qa.enabled:
        from probes.syntaxqa.hook import SyntaxQAHook

        hooks.append(SyntaxQAHook(cfg.probes.syntax_qa, tokenizer, run_dir))
    return hooks


def _destroy_group(dist) -> None:
    if dist.world > 1:
        # A lone process keeps its one-member group: DeepSpeed caches it for the next run in-process.
        torch.distributed.destroy_process_group()


def _check_run_dir(cfg: TrainConfig, resolved: dict, run_dir: Path) -> Path | None:
    """The checkpoint to resume from, after making sure the run directory belongs to this config."""
    if not list_checkpoints(run_dir):
        return None
    if not cfg.resume:
        raise FileExistsError(f"{run_dir} already holds checkpoints and resume=false: choose another "
                              f"hydra.run.dir or set resume=true")
    saved_path = run_dir / "config.yaml"
    if saved_path.exists():
        saved = OmegaConf.to_container(OmegaConf.load(saved_path), resolve=True)
        diffs = trajectory_diff(saved, resolved)
        if diffs:
            raise ValueError(f"{saved_path} was written by a different run; resuming with a changed "
                             f"config would silently diverge. Changed: " + "; ".join(diffs))
    return latest_resumable(run_dir)


def _write_config(run_dir: Path, resolved: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / ".config.yaml.tmp"
    OmegaConf.save(OmegaConf.create(resolved), tmp)
    tmp.replace(run_dir / "config.yaml")


def _versions() -> dict:
    import transformers

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__}
    try:
        import deepspeed

        versions["deepspeed"] = deepspeed.__version__
    except ImportError:
        pass
    return versions
