"""Engines step one model: plain torch (one process or DDP under torchrun) or DeepSpeed (ZeRO).

Both expose the same five calls so the training loop does not know which one it drives:
loss = engine.loss(batch); engine.backward(loss); engine.step(lr) -> grad norm (None: unknown);
engine.save_resume(dir); engine.load_resume(dir).
"""
from __future__ import annotations

import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from train.digest import torch_save_hashed
from train.errors import ConfigError, reading
from train.optim import OptimConfig, accumulation_steps, build_optimizer, set_lr

if TYPE_CHECKING:  # imported where used: the config schema (train.config) and `plan` need no torch
    import torch

# How to get past a damaged resume checkpoint: the previous one (schedule.keep_resume) is whole.
RESUME_HINT = ("a truncated or damaged checkpoint: move {} away and rerun to resume from the previous "
               "resume checkpoint")


@dataclass
class EngineConfig:
    kind: str = "torch"  # torch | deepspeed; the switches below: docs/training.md's table
    zero_stage: int = 0  # deepspeed: 1 shards Adam states, 2 also gradients, 3 also the weights
    zero3_persistence_threshold: int = 100_000  # ZeRO-3: smaller parameters stay whole (0: shard all)
    precision: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16
    device: str = "auto"  # auto | cpu | cuda
    backend: str = "auto"  # auto (nccl on GPU, gloo on CPU) | nccl | gloo
    compile: bool = False  # torch.compile the training forward/backward (checkpoints save the plain module)
    # aot_eager: the same graphs on eager kernels (CPU tests: inductor's C++ build of the tiny model takes minutes)
    compile_backend: str = "inductor"
    pin_memory: bool = True  # CUDA: batches copied from page-locked memory, overlapping queued GPU work
    loss_chunk: int = 0  # torch engine: tokens per chunk of the fused head + cross-entropy (train/loss.py); 0: off

    def __post_init__(self):
        if self.kind not in ("torch", "deepspeed"):
            raise ValueError(f"engine.kind={self.kind!r}: expected torch or deepspeed")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"engine.zero_stage={self.zero_stage}: expected 0, 1, 2 or 3")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"engine.precision={self.precision!r}: expected auto, fp32 or bf16")
        if self.loss_chunk < 0 or (self.loss_chunk and self.kind != "torch"):
            raise ValueError(f"engine.loss_chunk={self.loss_chunk}: expected 0 (off) or tokens per chunk, "
                             "torch engine only")


@dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as torch_dist

            torch_dist.barrier()

    def mean(self, value: float) -> float:
        if self.world == 1:
            return value
        import torch
        import torch.distributed as torch_dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device)  # NCCL reduces GPU tensors only
        torch_dist.all_reduce(t)
        return t.item() / self.world


def init_distributed(cfg: EngineConfig) -> Dist:
    """Joins the process group that torchrun, the deepspeed launcher or SLURM (via submitit) set up
    in the environment. A lone process gets a one-member group of its own when DeepSpeed needs one:
    without MASTER_ADDR/RANK/... deepspeed falls into MPI discovery and fails on a missing mpi4py."""
    import torch
    import torch.distributed as torch_dist

    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if want_cuda else torch.device("cpu")
    if want_cuda:
        torch.cuda.set_device(device)
    if (world > 1 or cfg.kind == "deepspeed") and not torch_dist.is_initialized():
        backend = cfg.backend if cfg.backend != "auto" else ("nccl" if want_cuda else "gloo")
        store = None
        if world == 1:
            # A one-member group needs no agreed port, so its store binds port 0 itself. A port probed free
            # and bound a moment later, or a MASTER_PORT left in the environment by an earlier in-process
            # run whose store still listens, failed with EADDRINUSE (CI). DeepSpeed reads the environment,
            # or falls into MPI discovery.
            store = torch_dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), RANK="0", WORLD_SIZE="1",
                              LOCAL_RANK="0")
        torch_dist.init_process_group(backend=backend, rank=rank, world_size=world, store=store)
    return Dist(rank=rank, world=world, local_rank=local_rank, device=device)


def _use_bf16(cfg: EngineConfig, dist: Dist) -> bool:
    return dist.device.type == "cuda" if cfg.precision == "auto" else cfg.precision == "bf16"


def to_device(batch: torch.Tensor, device: torch.device, pin_memory: bool) -> torch.Tensor:
    """The batch on `device`. To CUDA with pin_memory: staged in page-locked memory and copied
    asynchronously (the copy is queued on the current stream, so kernels that read it wait for it;
    the caching host allocator keeps the pinned buffer alive until the copy is done)."""
    if device.type == "cuda" and pin_memory:
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


def _lm_loss(model, batch: torch.Tensor) -> torch.Tensor:
    # batch rows hold seq_len + 1 ids: inputs are [:-1], targets [1:] (one overlapping token).
    # No KV cache in training (it also conflicts with activation checkpointing).
    # The loss in float32 at least (bf16 logits lose digits in the log-softmax); a float64 model keeps
    # float64, so the tests can check accumulation and clipping against hand arithmetic exactly.
    import torch

    logits = model(input_ids=batch[:, :-1], use_cache=False).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                             batch[:, 1:].reshape(-1))


def heldout_loss(model, ids, seq_len: int, batch: int, device: torch.device) -> float:
    """Mean next-token cross-entropy (nats) over held-out ids (train/sequences.py `heldout_ids`), cut as
    training cuts its view: windows of seq_len + 1 overlapping by one, so every id but the first is
    predicted once; the last, shorter window too. Every rank runs every window (ZeRO-3 gathers its
    parameters in each forward, so all ranks must run the same forwards)."""
    import torch

    ids = torch.as_tensor(ids, dtype=torch.long)
    windows = [ids[s:s + seq_len + 1] for s in range(0, len(ids) - 1, seq_len)]
    full = [w for w in windows if len(w) == seq_len + 1]
    groups = [torch.stack(full[i:i + batch]) for i in range(0, len(full), batch)] + \
        [w[None] for w in windows if len(w) < seq_len + 1]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():  # evaluation only: no graph kept
            total = sum(float(_lm_loss(model, g.to(device))) * g[:, 1:].numel() for g in groups)
    finally:
        model.train(was_training)
    return total / (len(ids) - 1)


class TorchEngine:
    def __init__(self, cfg: EngineConfig, optim: OptimConfig, model: torch.nn.Module, dist: Dist):
        import torch

        from train.loss import ChunkedLMLoss  # a torch.nn.Module: imported with torch

        self.dist, self.optim_cfg, self.pin = dist, optim, cfg.pin_memory
        self.module = model.to(dist.device)
        self.accum = accumulation_steps(optim, dist.world)
        self.bf16 = _use_bf16(cfg, dist)
        # with a chunked loss, DDP and compile wrap the loss module (the model's parameters, its forward)
        self.chunked = ChunkedLMLoss(self.module, cfg.loss_chunk) if cfg.loss_chunk else None
        inner = self.chunked or self.module
        self.ddp = torch.nn.parallel.DistributedDataParallel(inner) if dist.world > 1 else None
        self.model = self.ddp or inner
        if cfg.compile:
            # Compile the DDP wrapper, not the module inside it: DDP's hooks then bucket the compiled
            # graph's gradients (PyTorch's DDP + torch.compile notes). self.module stays uncompiled
            # and shares its parameters, so checkpoints and probes see plain names and weights.
            self.model = torch.compile(self.model, backend=cfg.compile_backend)
        self.optimizer = build_optimizer(optim, self.module)
        self._micro = 0

    def release(self) -> None:
        """Drops DDP's wrapper (and with it the reducer's hold on the process group) before the group
        is destroyed (train.loop._destroy_group)."""
        self.ddp, self.model = None, self.module

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        import torch

        last = self._micro == self.accum - 1
        # DDP all-reduces on every backward; skip it until the last micro-batch of the step.
        sync = nullcontext() if (last or self.ddp is None) else self.ddp.no_sync()
        autocast = torch.autocast(self.dist.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
        with sync, autocast:
            batch = to_device(batch, self.dist.device, self.pin)
            return self.model(batch) if self.chunked is not None else _lm_loss(self.model, batch)

    def backward(self, loss: torch.Tensor) -> None:
        # The forward pass under no_sync already told DDP whether this backward all-reduces.
        (loss / self.accum).backward()
        self._micro += 1

    def step(self, lr: float) -> float:
        import torch

        assert self._micro == self.accum, "step() before all micro-batches of the step were backpropagated"
        self._micro = 0
        norm = float(torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.optim_cfg.grad_clip))
        if math.isfinite(norm):  # a non-finite gradient never reaches the weights or the moments
            set_lr(self.optimizer, lr)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def discard(self) -> float:
        """Drops the step's gradients without an update (its loss was not finite); returns NaN."""
        self._micro = 0
        self.optimizer.zero_grad(set_to_none=True)
        return float("nan")

    def full_weights(self) -> Optional[dict]:
        """Every rank holds the whole fp32 module: save_pretrained reads it directly."""
        return None

    def save_resume(self, path: Path) -> None:
        # Every rank holds the same optimizer state under DDP; rank 0 writes it. Weights are resumed
        # from the checkpoint's fp32 model.safetensors.
        if self.dist.main:
            path.mkdir(parents=True, exist_ok=True)
            # hashed on its way to disk: the manifest does not read the largest file back (train.digest)
            torch_save_hashed(self.optimizer.state_dict(), path / "optimizer.pt")

    def load_resume(self, ckpt_dir: Path) -> None:
        # from_pretrained maps the on-disk names (transformers writes lm_head as embed_out) back to
        # the module's, so the state dict loads strictly: a missing tensor is an error, not a reset.
        import torch

        from train.weights import load_causal_lm

        weights, optimizer = ckpt_dir / "model.safetensors", ckpt_dir / "resume" / "optimizer.pt"
        with reading(weights, "the checkpoint's weights", RESUME_HINT.format(ckpt_dir)):
            saved = load_causal_lm(ckpt_dir, type(self.module), dtype=torch.float32)
        with reading(weights, "weights that fit this run's model (a checkpoint of another run, with "
                     "another tokenizer or model size?)", RESUME_HINT.format(ckpt_dir)):
            self.module.load_state_dict(saved.state_dict(), strict=True)
        with reading(optimizer, "the optimizer state", RESUME_HINT.format(ckpt_dir)):
            state = torch.load(optimizer, map_location=self.dist.device, weights_only=True)
            self.optimizer.load_state_dict(state)


class DeepSpeedEngine:
    def __init__(self, cfg: EngineConfig, optim: OptimConfig, model: torch.nn.Module, dist: Dist):
        import deepspeed

        self.dist, self.accum, self.pin = dist, accumulation_steps(optim, dist.world), cfg.pin_memory
        bf16 = _use_bf16(cfg, dist)
        ds_config = {
            "train_micro_batch_size_per_gpu": optim.micro_batch,
            "gradient_accumulation_steps": self.accum,
            "train_batch_size": optim.global_batch,
            "gradient_clipping": optim.grad_clip,
            "zero_optimization": {"stage": cfg.zero_stage, **({"stage3_param_persistence_threshold":
                                  cfg.zero3_persistence_threshold} if cfg.zero_stage == 3 else {})},
            "bf16": {"enabled": bf16},
            "steps_per_print": 10 ** 9,  # we log ourselves
            "wall_clock_breakdown": False,
        }
        model = model.to(dist.device)
        self.ds, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=build_optimizer(optim, model), config=ds_config)
        self.module = self.ds.module
        if cfg.compile:
            self.ds.compile(backend=cfg.compile_backend)  # compiles the wrapped module in place; names and ZeRO hooks unchanged
        self._norm = 0.0

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        return _lm_loss(self.ds, to_device(batch, self.dist.device, self.pin))

    def backward(self, loss: torch.Tensor) -> None:
        # DeepSpeed divides by the accumulation steps itself and steps only at the boundary.
        self.ds.backward(loss)
        if not self.ds.is_gradient_accumulation_boundary():
            self.ds.step()  # counts the micro-step; the optimizer runs in step() at the boundary

    def step(self, lr: float) -> float | None:
        set_lr(self.optimizer, lr)
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        # None: DeepSpeed did not compute one (fp32 ZeRO-0 here); the loop then checks the loss only
        return float(norm) if norm is not None else None

    def discard(self) -> float:
        # DeepSpeed cannot drop an accumulated step; the loop stops the run on this NaN.
        return float("nan")

    def full_weights(self) -> Optional[dict]:
        """Collective (every rank calls it): the module's state dict with every parameter replaced by
        its full fp32 master copy, on CPU, on rank 0 (None elsewhere). Under ZeRO-3 the module only
        holds this rank's shard; in bf16 it holds rounded copies of the fp32 weights being trained."""
        from deepspeed.utils import safe_get_full_fp32_param

        full = {}
        for name, param in self.module.named_parameters():
            value = safe_get_full_fp32_param(param)  # gathers across ranks: same order on every rank
            if value is None:  # no ZeRO optimizer partition (stage 0): the module holds the weights
                value = param.detach()
            if self.dist.main:
                full[name] = value.float().cpu()
        if not self.dist.main:
            return None
        state = {k: v for k, v in self.module.state_dict().items() if k not in full}  # buffers
        return {**state, **full}

    def save_resume(self, path: Path) -> None:
        self.ds.save_checkpoint(str(path), tag="deepspeed", save_latest=False)

    def load_resume(self, ckpt_dir: Path) -> None:
        from train.checkpoint import refuse_unsafe_pickles
        from train.files import read_trainer_state

        # ZeRO shards the optimizer state over the processes that saved it; DeepSpeed's loader stops on
        # another count with a traceback (ZeRORuntimeException: "... not currently supported").
        saved = read_trainer_state(ckpt_dir).get("world_size", self.dist.world)
        if saved != self.dist.world and self.ds.zero_optimization_stage() > 0:
            shards = ckpt_dir / "resume" / "deepspeed"
            raise ConfigError(
                f"{ckpt_dir}: DeepSpeed ZeRO-{self.ds.zero_optimization_stage()} state saved by {saved} processes, "
                f"this run has {self.dist.world}: resume it on {saved} processes (this loop loads no universal "
                f"checkpoint); DeepSpeed converts the shards for another count with `python -m "
                f"deepspeed.checkpoint.ds_to_universal --input_folder {shards} --output_folder {shards}_universal "
                f"--inject_missing_state`")
        refuse_unsafe_pickles(ckpt_dir / "resume" / "deepspeed")  # DeepSpeed unpickles them in full
        with reading(ckpt_dir / "resume", "the DeepSpeed resume state", RESUME_HINT.format(ckpt_dir)):
            self.ds.load_checkpoint(str(ckpt_dir / "resume"), tag="deepspeed", load_optimizer_states=True,
                                    load_lr_scheduler_states=False)


def build_engine(cfg: EngineConfig, optim: OptimConfig, model: torch.nn.Module, dist: Dist):
    return (DeepSpeedEngine if cfg.kind == "deepspeed" else TorchEngine)(cfg, optim, model, dist)
