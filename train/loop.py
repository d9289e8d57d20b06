"""The training loop: data, model and engine are set up, then steps run until the budget is spent, with a
whole checkpoint (and the hooks) at every scheduled step. Read it top to bottom.

A preemption signal (train/preempt.py) ends it after the current step with a resume checkpoint and a requeue
status. A resume first proves the checkpoint is the one written by this run's config, cuts the log back to
its step and probes every saved checkpoint whose evals a crash prevented; so does the end of every run."""
from __future__ import annotations

import gc
import math
import os
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm
from transformers import GPTNeoXForCausalLM

from train.batch import batch_sha256, stream_of
from train.checkpoint import (CorruptCheckpointError, latest_resumable, list_checkpoints, load_rng,
                              missing_manifest, prune_resume_states, read_manifest, save_checkpoint,
                              verify_manifest)
from train.config import TrainConfig
from train.confighash import config_hash, trajectory_diff
from train.corpus import load_documents
from train.engine import RESUME_HINT, build_engine, heldout_loss, init_distributed
from train.errors import InputFileError, writing
from train.faults import fault_point
from train.files import read_trainer_state, versions, write_text_atomic
from train.hooks import HookContext, build_hooks, hooks_missing, run_hooks, run_post_train
from train.lock import RunLock
from train.logger import Logger, NullLogger, logged_steps
from train.model import build_model, count_parameters
from train.optim import lr_at
from train.preempt import Preemption, drop_unscheduled
from train.schedule import checkpoint_steps, warn_points_beyond_end
from train.slurm import export_distributed_env
from train.summary import recipe_warnings, startup_summary, warn_early
from train.start_token import RECORD, document_tokens, read_record
from train.token_store import DATA_KEY, build_or_load, check_resume_data, data_record
from train.tokenizer import load_tokenizer, pipeline_fingerprint, prepare_tokenizer, tokenizer_label
from train.weights import load_causal_lm


class NonFiniteError(RuntimeError):
    pass


def train(cfg: TrainConfig, run_dir: Path, on_accepted=None) -> Path:
    """on_accepted(): called on rank 0 once the run directory is accepted (a refused run writes nothing)."""
    export_distributed_env()  # in a SLURM job step: RANK, WORLD_SIZE, ... from SLURM_* / submitit
    dist = init_distributed(cfg.engine)
    # One job per run directory (rank 0 holds the lock); signals are recorded while training runs.
    with RunLock(run_dir, enabled=dist.main, announce=False) as lock, Preemption() as preempt:
        return _train(cfg, Path(run_dir), dist, preempt, lock, on_accepted)


def _train(cfg: TrainConfig, run_dir: Path, dist, preempt: Preemption, lock: RunLock, on_accepted) -> Path:
    resolved = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    run_hash = config_hash(resolved)
    resume_from = _check_run_dir(cfg, resolved, run_hash, run_dir)
    resumed = None
    if resume_from is not None:
        try:
            resumed = read_trainer_state(resume_from)
        except InputFileError as e:  # the reader names the file; the loop knows the way out
            raise InputFileError(f"{e}; {RESUME_HINT.format(resume_from)}") from None
    dist.barrier()
    if dist.main:
        if resumed is not None:
            print(f"resuming from step {resumed['step']} (tokens {resumed['tokens']}) in {resume_from}",
                  flush=True)
        lock.announce()
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(resolved)))
        # finishes a bf16 rewrite a kill cut short (a finished run saves no checkpoint that would)
        prune_resume_states(run_dir, cfg.schedule.keep_resume, cfg.schedule.weights_dtype)
        if on_accepted is not None:
            on_accepted()

    warned_for = warn_early(cfg) if dist.main else None  # a toy budget is named before the corpus is read

    # Data: rank 0 trains the tokenizer and builds the token store; the others then hit the cache.
    cache_dir = Path(cfg.data.cache_dir).expanduser()
    for turn in ("main", "others"):
        if dist.main == (turn == "main"):
            preempt.stage = "reading the corpus"  # a signal in set-up stops at once, naming the stage
            docs, corpus_id = load_documents(cfg.data)
            preempt.stage = "preparing the tokenizer"
            tokenizer_dir = prepare_tokenizer(cfg.tokenizer, docs, corpus_id, cache_dir)
            preempt.stage = "building the token store"
            store = build_or_load(docs, tokenizer_dir, corpus_id, cache_dir, num_proc=cfg.data.num_proc)
        dist.barrier()
    tokenizer = load_tokenizer(tokenizer_dir)
    doc_start, doc_end = document_tokens(tokenizer)  # the scorer's start token too (train/start_token.py)
    if resume_from is not None:
        check_resume_data(resume_from, resumed, corpus_id, store)  # first: a changed corpus is named as such
        # only with the ids and start token the run was trained with (tokenizer format 2 changed both)
        record = read_record(resume_from) or {}
        if pipeline_fingerprint(resume_from) != pipeline_fingerprint(tokenizer_dir) \
                or record.get("start_token_id") != doc_start:
            raise ValueError(
                f"{resume_from}: its tokenizer or start token ({RECORD}: {record.get('start_token')!r}) differs from "
                f"what this code prepares for the run's config ({tokenizer_dir}, start id {doc_start}); resuming "
                f"would change the ids mid-run. Finish the run with the code it was started with, or start a new "
                f"run directory")
    seq_len = cfg.data.seq_len or cfg.model.max_position_embeddings
    stream = stream_of(cfg, store, tokenizer)  # the one definition `train batch` rebuilds batches from
    total_steps = stream.steps(cfg.optim.global_batch)
    if total_steps < 1:
        raise ValueError(f"the data view has {stream.view_tokens} tokens: not one optimizer step of "
                         f"optim.global_batch={cfg.optim.global_batch} x seq_len={seq_len}")
    tokens_per_step = cfg.optim.global_batch * seq_len
    save_steps = set(checkpoint_steps(cfg.schedule, total_steps, tokens_per_step))
    heldout = stream.heldout_ids()  # documents no view holds (train/sequences.py); empty: data.heldout_tokens=0
    if dist.main:
        warn_points_beyond_end(cfg.schedule, total_steps, tokens_per_step)

    # Model and engine. Every rank draws the same initial weights from cfg.seed.
    preempt.stage = "building the model"
    model = build_model(cfg.model, len(tokenizer), seed=cfg.seed, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id)
    engine = build_engine(cfg.engine, cfg.optim, model, dist)
    torch.manual_seed(cfg.seed + dist.rank)

    start_step, wandb_id, skipped = 0, None, []
    if resumed is not None:
        engine.load_resume(resume_from)
        start_step, wandb_id = resumed["step"], resumed.get("wandb_run_id")
        skipped = list(resumed.get("skipped_steps", []))
    # The steps after the resumed checkpoint are trained (and logged) again: their records go first.
    described = {**resolved, "params": sum(p.numel() for p in model.parameters()),  # W&B config and tags
                 # the tokens trained on (corpus and tokenizer): runs of other data are no seeds of one cell
                 "data_key": (store.content_hash or store.path.name)[:8],
                 "tokenizer_label": tokenizer_label(cfg.tokenizer.kind, cfg.tokenizer.vocab_size, cfg.tokenizer.path,
                                                    cfg.tokenizer.model_type, len(tokenizer))}
    logger = (Logger(cfg.logger, run_dir, config=described, name=run_dir.name, run_id=wandb_id,
                     resume_step=start_step if resume_from is not None else None)
              if dist.main else NullLogger())
    preempt.stage = "loading the probes"
    hooks = _build_hooks(cfg, tokenizer, run_dir, total_steps, store)
    if dist.main:
        print(startup_summary(cfg, run_dir=run_dir, params=count_parameters(engine.module), tokenizer=tokenizer,
                              tokenizer_dir=tokenizer_dir, total_steps=total_steps, seq_len=seq_len,
                              save_steps=save_steps, hooks=hooks, start_step=start_step,
                              heldout=(len(heldout), len(stream.heldout))), flush=True)
        if warned_for != total_steps:  # warn_early gave the too-short warnings for the same steps
            for line in recipe_warnings(cfg, total_steps, seq_len):
                print(f"warning: {line}", file=sys.stderr, flush=True)

    def measured(model, step: int, tokens: int, path: Path) -> dict:
        """The hooks' metrics and the held-out loss of the checkpoint at `path` (weights in `model`)."""
        metrics = run_hooks(hooks, path, step, tokens, model)
        if len(heldout) > 1:
            # at most 8,192 tokens a forward: their fp32 logits over Pythia's 50k rows are 1.6 GB
            rows = max(1, min(cfg.optim.micro_batch, 8192 // seq_len))
            loss = heldout_loss(model, heldout, seq_len, rows, dist.device)
            metrics.update({"val/loss": loss, "val/ppl": math.exp(min(loss, 700.0))})  # exp overflows past ~709
        return metrics

    def checkpoint(step: int, loss: float | None, lr: float, *, scheduled: bool = True) -> None:
        state = {"step": step, "tokens": step * tokens_per_step, "total_steps": total_steps,
                 "tokens_per_step": tokens_per_step, "seq_len": seq_len, "seed": cfg.seed,
                 "data_seed": cfg.data.seed, "lr": lr, "loss": loss, "world_size": dist.world,
                 "engine": cfg.engine.kind, "zero_stage": cfg.engine.zero_stage,
                 # what ran, as transformers resolved it (not only what was asked for)
                 "attn_implementation": engine.module.config._attn_implementation,
                 "gradient_checkpointing": engine.module.is_activation_checkpointing,
                 "compile": cfg.engine.compile, "wandb_run_id": logger.run_id, "time": time.time(),
                 "versions": versions(), "preempted": not scheduled, "skipped_steps": skipped,
                 "config_hash": run_hash, "config": resolved, DATA_KEY: data_record(corpus_id, store)}
        with writing(run_dir / "checkpoints"):  # a full disk is named with the file it cut short
            path = save_checkpoint(run_dir, step, engine, tokenizer, state, dist, with_resume=True)
        if dist.main:
            prune_resume_states(run_dir, cfg.schedule.keep_resume, cfg.schedule.weights_dtype)
            if scheduled:
                drop_unscheduled(run_dir, save_steps, before=step)
        if not scheduled:  # a preemption's resume-only checkpoint: not probed, not logged
            dist.barrier()
            return
        fault_point("after_rename", step)
        metrics = measured(engine.module, step, state["tokens"], path)
        logger.log({"tokens": state["tokens"], **metrics}, step, event="checkpoint")
        dist.barrier()

    def probe_missed(current: int) -> None:
        """Runs the hooks on every scheduled checkpoint whose evals or log record a crash prevented."""
        todo = []
        if dist.main:
            logged = logged_steps(logger.path, "checkpoint")
            # only up to `current`: a later one is written, probed and logged again when training reaches it
            todo = [(s, p) for s, p in list_checkpoints(run_dir)
                    if s <= current and s in save_steps and (s not in logged or hooks_missing(hooks, s))]
        for step, path in _broadcast(todo, dist):
            if dist.main:
                print(f"probing checkpoint {path}: its evals were not written before the last stop",
                      flush=True)
            # the resumed checkpoint's weights are the engine's; an older one is read from disk
            model = engine.module if step == current else \
                load_causal_lm(path, GPTNeoXForCausalLM, dtype=torch.float32).to(dist.device)
            tokens = read_trainer_state(path)["tokens"]
            metrics = measured(model, step, tokens, path)
            if dist.main and step not in logged_steps(logger.path, "checkpoint"):
                logger.log({"tokens": tokens, **metrics}, step, event="checkpoint")
            dist.barrier()

    preempt.training()  # from here a signal is honoured after the step, with a resume checkpoint
    if resume_from is not None:
        probe_missed(start_step)
        # after probing: the RNG continues exactly where the checkpoint left it
        load_rng(resume_from / "resume", dist.rank)
    if resume_from is None and 0 in save_steps:  # a resume from step 0 has it (probe_missed saw to its hooks)
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
        fault_point("mid_step", step + 1)
        loss = dist.mean(sum(micro_losses) / len(micro_losses))
        # A non-finite loss is caught before the update; a non-finite grad norm makes the torch
        # engine skip the update itself (DeepSpeed has applied it: that run stops below).
        grad_norm = engine.step(lr) if math.isfinite(loss) else engine.discard()
        done, window_tokens = step + 1, window_tokens + tokens_per_step
        bar.update(1)
        if not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm)):
            _nonfinite(cfg, done, loss, grad_norm, skipped, run_dir)
            logger.log({"tokens": done * tokens_per_step, "train/skipped_batches": len(skipped),
                        "batch_sha256": _global_sha(batch, dist)}, done, event="skipped")
        elif done % cfg.logger.log_every == 0 or done == total_steps:
            tokens_per_s = window_tokens / (time.perf_counter() - window_start)
            logger.log({"tokens": done * tokens_per_step, "train/loss": loss, "train/lr": lr,
                        "train/grad_norm": float("nan") if grad_norm is None else grad_norm,
                        "train/tokens_per_s": tokens_per_s, "world_size": dist.world,
                        "batch_sha256": _global_sha(batch, dist)}, done)
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            window_start, window_tokens = time.perf_counter(), 0
        if done in save_steps:
            checkpoint(done, loss, lr)
        if done < total_steps and preempt.requested(dist):
            if done not in save_steps:
                checkpoint(done, loss, lr, scheduled=False)
            break
    bar.close()
    if done == total_steps:
        probe_missed(done)  # every checkpoint of a finished run has its evals
    for hook in hooks:
        hook.close()
    logger.close()
    if preempt.signum is not None and done < total_steps:
        _destroy_group(dist, engine)
        preempt.exit(done)  # raises: the process exits for requeue
    if dist.main and cfg.curves_at_end:
        run_post_train(hooks, run_dir)  # the end-of-run curves (probes.analysis.curves.CurvesHook)
    _destroy_group(dist, engine)
    return run_dir


def _build_hooks(cfg: TrainConfig, tokenizer, run_dir: Path, total_steps: int | None = None,
                 store=None) -> list:
    """On every rank (the probe hook shards the pairs across ranks; rank 0 writes the files)."""
    return build_hooks(cfg.probes, HookContext(tokenizer, run_dir, final_step=total_steps,
                                               token_store=None if store is None else store.path,
                                               max_positions=cfg.model.max_position_embeddings))


def _global_sha(batch: torch.Tensor, dist) -> str | None:
    """batch_sha256 of the step's global batch (rank 0; None elsewhere). Rank r holds rows r, r+W, ... so the
    gathered (rows/W, W, L) stack in C order is the global batch; every rank takes part."""
    if dist.world == 1:
        return batch_sha256(batch)
    import torch.distributed as torch_dist
    mine = batch.to(dist.device)  # NCCL gathers GPU tensors only
    parts = [torch.empty_like(mine) for _ in range(dist.world)]
    torch_dist.all_gather(parts, mine)
    return batch_sha256(torch.stack(parts, dim=1).reshape(-1, mine.shape[1]).cpu()) if dist.main else None


def _nonfinite(cfg: TrainConfig, step: int, loss: float, grad_norm: float, skipped: list[int],
               run_dir: Path) -> None:
    """Stops the run at a non-finite step, or records it as skipped while max_skipped_batches allows."""
    what = f"step {step}: loss {loss}, grad norm {grad_norm}"
    if cfg.engine.kind != "torch" or len(skipped) >= cfg.max_skipped_batches:
        raise NonFiniteError(
            f"{what} is not finite; the run stops here (no checkpoint is written from this state). "
            f"Resume from the last checkpoint in {run_dir / 'checkpoints'}"
            + (f"; {len(skipped)} batch(es) already skipped at steps {skipped}, the limit "
               f"max_skipped_batches={cfg.max_skipped_batches}" if skipped else
               "; max_skipped_batches=N lets the run skip up to N such batches"))
    skipped.append(step)
    print(f"warning: {what} is not finite; batch skipped (no update), {len(skipped)} of "
          f"max_skipped_batches={cfg.max_skipped_batches}", file=sys.stderr, flush=True)


def _broadcast(value, dist):
    """Rank 0's `value` on every rank (a decision every rank must take the same way)."""
    if dist.world == 1:
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _destroy_group(dist, engine=None) -> None:
    """Leaves the process group (a lone process keeps its group: DeepSpeed caches it for the next run)."""
    if dist.world > 1:
        # Every rank finishes its collectives before any tears down, and DDP's reducer lets go of the gloo
        # group here: otherwise its destructor joined threads waiting on a peer that had gone (a 2-rank SLURM
        # job hung until its time limit, a torchrun job aborted at exit).
        dist.barrier()
        release = getattr(engine, "release", None)
        if release is not None:
            release()
        gc.collect()
        torch.distributed.destroy_process_group()


def _check_run_dir(cfg: TrainConfig, resolved: dict, run_hash: str, run_dir: Path) -> Path | None:
    """The checkpoint to resume from, after proving the run directory belongs to this config (by config.yaml
    and by the checkpoint itself) and its files are the ones written. Reads only."""
    if not list_checkpoints(run_dir):
        return None
    if not cfg.resume:
        raise FileExistsError(f"{run_dir} already holds checkpoints and resume=false: choose another "
                              f"hydra.run.dir or set resume=true")
    saved_path = run_dir / "config.yaml"
    if saved_path.exists():
        saved = _read_saved_config(saved_path)
        diffs = trajectory_diff(saved, resolved)
        if diffs:
            raise ValueError(f"{saved_path} was written by a different run; resuming with a changed "
                             f"config would silently diverge. Changed: " + "; ".join(diffs))
    path = latest_resumable(run_dir)
    if path is None:
        return None
    manifest = read_manifest(path)
    if manifest is None and missing_manifest(path):
        raise CorruptCheckpointError(f"{missing_manifest(path)}; resume from another checkpoint (delete {path})")
    if manifest is None:
        # written before checkpoints carried manifests: only config.yaml can vouch for the config
        if not saved_path.exists():
            raise ValueError(f"cannot resume from {path}: it has no {path / 'manifest.json'} and "
                             f"{saved_path} is missing, so nothing proves this config is the run's")
        print(f"warning: {path} has no manifest.json (written by an older version): its files are "
              f"not verified", file=sys.stderr)
        return path
    if manifest.get("config_hash") != run_hash:
        try:  # the saved config names what changed (trainer_state.json is verified below, not yet)
            saved = read_trainer_state(path).get("config")
        except (OSError, ValueError):
            saved = None
        diffs = trajectory_diff(saved, resolved) if isinstance(saved, dict) else []
        raise ValueError(f"{path} was trained with a different config (config hash in "
                         f"{path / 'manifest.json'}); resuming would silently diverge. Changed: "
                         + ("; ".join(diffs) or f"keys unknown ({path / 'trainer_state.json'} "
                                                 f"holds no config)"))
    verify_manifest(path, manifest)
    # after: the resumed one's changed keys are named above. A checkpoint of another run copied in (its config
    # hash) would be probed on resume as this run's.
    for _step, other in list_checkpoints(run_dir):
        try:
            recorded = read_trainer_state(other, missing_ok=True).get("config_hash")
        except InputFileError:  # damaged: the reader of the resumed one names it, probing names others
            continue
        if recorded is not None and recorded != run_hash:
            raise CorruptCheckpointError(f"{other / 'trainer_state.json'}: config hash {recorded[:12]}… is not this "
                                         f"run's ({run_hash[:12]}…): a checkpoint of another run or config; move "
                                         f"it out of {run_dir / 'checkpoints'}")
    return path


def _read_saved_config(path: Path) -> dict:
    """config.yaml of the run as a dict; an empty, unparsable or non-mapping file is an InputFileError."""
    try:
        saved = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as e:  # noqa: BLE001 - yaml's and OmegaConf's errors are of several types
        detail = " ".join(str(e).split())[:300]
        raise InputFileError(f"{path}: cannot be read as the run's config ({type(e).__name__}: {detail}); "
                             f"restore it, or delete it (the checkpoints' manifests still prove the config)") from None
    if not isinstance(saved, dict) or not saved:
        raise InputFileError(f"{path}: empty or not a mapping; restore it, or delete it (the checkpoints' "
                             f"manifests still prove the config)")
    return saved
