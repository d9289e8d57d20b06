"""`python -m train.plan <overrides>`: what a run or a grid would cost, printed, nothing launched.

Takes the same overrides as `python -m train -m ...` (the grid is expanded by train/grid.py exactly as
the launcher expands it; `-m`/`--multirun` may be given and changes nothing: a plan is always of the
sweep, so a launch command becomes its plan by writing `train.plan` for `train`) and prints, per run: parameters, optimizer steps, tokens trained on, scheduled
checkpoints, estimated GPU-hours and checkpoint storage; then the grid's totals.

Assumptions (printed with the table):
* Steps come from the budget alone, as train/sequences.py cuts it: a view of ceil(budget/epochs) tokens
  in sequences of seq_len+1 tokens overlapping by one, the last partial batch dropped. The corpus need
  not exist; it must hold at least the budget (the run checks that at start). A run without a budget
  (data.budget_tokens=null: the whole corpus) cannot be planned.
* Compute = 6 * N * D FLOPs (N = all parameters, embeddings included; D = tokens trained on) at a stated
  model-FLOPs utilisation of a stated GPU's peak; probing and checkpoint time are not included.
* Storage under the checkpoint policy (checkpoints.md): every scheduled checkpoint keeps its weights
  (fp32 safetensors, 4 bytes/parameter; 2 for checkpoints without resume state when
  schedule.weights_dtype=bf16); the newest schedule.keep_resume also keep resume state:
  torch engine Adam moments, 8 bytes/parameter; DeepSpeed ZeRO fp32 master weights and moments
  (12 bytes/parameter, all ranks together) plus its own module copy (2 bytes bf16 on GPU).
* Memory per GPU (train/memory.py states the formulas and their sources): weights, gradients and Adam
  states under the run's engine and ZeRO stage over --gpus GPUs (ZeRO paper: 2+2+12 bytes/param in
  bf16), plus the activations of one micro-batch (Korthikanti et al. 2022, calibrated) under
  model.gradient_checkpointing and model.attn_implementation; a run fits a GPU when the total is at
  most 90 % of its memory.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from train.config import TrainConfig
from train.grid import compose_run, expand
from train.memory import GiB, Memory, estimate
from train.schedule import checkpoint_steps

A100_BF16_PEAK_TFLOPS = 312.0  # NVIDIA A100 dense bf16 tensor-core peak
DEFAULT_MFU = 0.40  # a typical achieved utilisation for GPT-NeoX training at these sizes
GB = 1e9


@dataclass
class Hardware:
    gpu: str = "A100 (bf16)"
    peak_tflops: float = A100_BF16_PEAK_TFLOPS
    mfu: float = DEFAULT_MFU
    gpus: int = 1  # GPUs (ranks) per run: ZeRO shards over them


@dataclass
class RunPlan:
    name: str  # the run directory under the sweep dir
    overrides: list[str]
    preset: str
    budget: int  # data.budget_tokens
    params: int
    seq_len: int
    global_batch: int
    steps: int
    tokens: int  # tokens trained on = steps x global batch x seq_len
    checkpoints: int
    gpu_hours: float
    storage_bytes: int
    memory: Memory  # per GPU
    setup: str  # engine, ZeRO stage, micro-batch, checkpointing: what the memory depends on


def planned_steps(cfg: TrainConfig) -> int:
    """Optimizer steps of a run, from its budget (mirrors SequenceStream.steps without the corpus)."""
    if cfg.data.budget_tokens is None:
        raise ValueError("data.budget_tokens is null (the whole corpus): the plan needs a budget to count "
                         "steps without the corpus; set data.budget_tokens or budget=<10M|100M|1B|3B>")
    seq_len = cfg.data.seq_len or cfg.model.max_position_embeddings
    view = math.ceil(cfg.data.budget_tokens / cfg.data.epochs)
    sequences = max(0, (view - 1) // seq_len) * cfg.data.epochs
    return sequences // cfg.optim.global_batch


def parameter_count(cfg: TrainConfig) -> int:
    """All parameters of the model, built on the meta device (no memory, no time)."""
    from train.model import build_model, count_parameters
    from train.tokenizer import tokenizer_length

    # model.vocab_size=null: the tokenizer's length padded to 128 (build_model pads), as in a real run
    vocab = None if cfg.model.vocab_size is not None else tokenizer_length(cfg.tokenizer)
    return count_parameters(build_model(cfg.model, vocab, device="meta"))


def storage_bytes(cfg: TrainConfig, params: int, checkpoints: int) -> int:
    with_resume = min(cfg.schedule.keep_resume, checkpoints)
    # Probe-only checkpoints: fp32, or bf16 with schedule.weights_dtype=bf16; resume ones stay fp32.
    probe_weights = (2 if cfg.schedule.weights_dtype == "bf16" else 4) * params
    resume = 8 * params if cfg.engine.kind == "torch" else (12 + 2) * params
    return (checkpoints - with_resume) * probe_weights + with_resume * (4 * params + resume)


def plan_run(overrides: Sequence[str], hw: Hardware, _params_cache: Optional[dict] = None) -> RunPlan:
    from train.grid import run_subdir

    cfg, choices = compose_run(overrides)
    cache = {} if _params_cache is None else _params_cache
    key = repr(cfg.model) + repr(cfg.tokenizer if cfg.model.vocab_size is None else None)
    if key not in cache:
        cache[key] = parameter_count(cfg)
    params = cache[key]
    seq_len = cfg.data.seq_len or cfg.model.max_position_embeddings
    steps = planned_steps(cfg)
    if steps < 1:
        raise ValueError(f"run {' '.join(overrides)}: budget {cfg.data.budget_tokens} tokens is not one "
                         f"step of optim.global_batch={cfg.optim.global_batch} x seq_len={seq_len}")
    tokens = steps * cfg.optim.global_batch * seq_len
    n_ckpt = len(checkpoint_steps(cfg.schedule, steps, cfg.optim.global_batch * seq_len))
    flops = 6.0 * params * tokens
    gpu_hours = flops / (hw.peak_tflops * 1e12 * hw.mfu) / 3600.0
    memory, setup = memory_per_gpu(cfg, params, seq_len, hw.gpus)
    return RunPlan(name=run_subdir(cfg), overrides=list(overrides), preset=choices.get("optim", "?"),
                   budget=cfg.data.budget_tokens, params=params, seq_len=seq_len, global_batch=cfg.optim.global_batch, steps=steps,
                   tokens=tokens, checkpoints=n_ckpt, gpu_hours=gpu_hours,
                   storage_bytes=storage_bytes(cfg, params, n_ckpt), memory=memory, setup=setup)


def memory_per_gpu(cfg: TrainConfig, params: int, seq_len: int, gpus: int) -> tuple[Memory, str]:
    """Training memory on one of `gpus` GPUs (precision auto = bf16 there), and a short label of the
    settings it depends on."""
    from train.model import pad_vocab

    e, m = cfg.engine, cfg.model
    vocab = m.vocab_size if m.vocab_size is not None else pad_vocab(cfg.tokenizer.vocab_size)
    stage = e.zero_stage if e.kind == "deepspeed" else 0
    memory = estimate(params=params, layers=m.num_hidden_layers, hidden=m.hidden_size,
                      heads=m.num_attention_heads, vocab=vocab, seq_len=seq_len,
                      micro_batch=cfg.optim.micro_batch, engine_kind=e.kind, zero_stage=stage,
                      bf16=e.precision != "fp32", gpus=gpus, checkpointing=m.gradient_checkpointing,
                      attn_implementation=m.attn_implementation, loss_chunk=getattr(e, "loss_chunk", 0))
    engine = f"ds-z{stage}" if e.kind == "deepspeed" else ("ddp" if gpus > 1 else "torch")
    setup = (f"{engine} mb{cfg.optim.micro_batch}{' ckpt' if m.gradient_checkpointing else ''}"
             f"{' lc' if getattr(e, 'loss_chunk', 0) else ''}")
    return memory, setup


def plan(overrides: Sequence[str], hw: Optional[Hardware] = None) -> list[RunPlan]:
    from train.grid import hydra_context

    hw = hw or Hardware()
    cache: dict = {}
    with hydra_context():
        return [plan_run(run, hw, cache) for run in expand(overrides)]


def _si(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.3g}"


def format_plan(plans: list[RunPlan], hw: Hardware) -> str:
    head = f"{'run':<28} {'preset':<9} {'params':>7} {'batch':>9} {'steps':>9} {'tokens':>8} " \
           f"{'ckpts':>5} {'GPU-h':>9} {'storage':>10}"
    lines = [head, "-" * len(head)]
    for p in plans:
        lines.append(f"{p.name:<28} {p.preset:<9} {_si(p.params):>7} {f'{p.global_batch}x{p.seq_len}':>9} "
                     f"{p.steps:>9,} {_si(p.tokens):>8} {p.checkpoints:>5} {p.gpu_hours:>9.2f} "
                     f"{p.storage_bytes / GB:>8.1f}GB")
    lines.append("-" * len(head))
    lines.append(f"{'total: ' + str(len(plans)) + ' runs':<38} {'':>9} {sum(p.steps for p in plans):>9,} "
                 f"{_si(sum(p.tokens for p in plans)):>8} {sum(p.checkpoints for p in plans):>5} "
                 f"{sum(p.gpu_hours for p in plans):>9.1f} "
                 f"{sum(p.storage_bytes for p in plans) / GB:>8.1f}GB")
    by_budget: dict[int, set[int]] = {}
    for p in plans:
        by_budget.setdefault(p.budget, set()).add(p.checkpoints)
    lines.append("checkpoints per run by budget (step 0 and the last step included): " + ", ".join(
        f"{_si(b)}: {'/'.join(map(str, sorted(c)))}" for b, c in sorted(by_budget.items())))
    lines += ["", _format_memory(plans, hw)]
    lines += [
        "",
        f"GPU-hours: 6*N*D FLOPs at {hw.mfu:.0%} MFU of a {hw.gpu} ({hw.peak_tflops:g} TFLOP/s peak); "
        "probing and checkpoint I/O not included.",
        "steps: from each budget (tokens trained on = steps x batch x seq_len <= budget); the corpus is "
        "not read and must hold the budget.",
        "storage: every checkpoint's weights (fp32; bf16 off the last keep_resume with "
        "schedule.weights_dtype=bf16) + resume state (optimizer, RNG) on the last schedule.keep_resume only.",
    ]
    return "\n".join(lines)


def _format_memory(plans: list[RunPlan], hw: Hardware) -> str:
    head = (f"memory per GPU (GiB), {hw.gpus} GPU{'s' if hw.gpus > 1 else ''} per run\n"
            f"{'run':<28} {'setup':<16} {'weights':>7} {'grads':>6} {'Adam':>6} {'activ':>6} {'total':>6}"
            f"  A100-40GB  A100-80GB")
    lines = [head]
    for p in plans:
        m = p.memory
        fit = ["fits" if m.fits(cap * GiB) else "no" for cap in (40, 80)]  # 40 and 80 GiB cards
        lines.append(f"{p.name:<28} {p.setup:<16} {m.weights / GiB:>7.1f} {m.grads / GiB:>6.1f} "
                     f"{m.optimizer / GiB:>6.1f} {m.activations / GiB:>6.1f} {m.total / GiB:>6.1f}"
                     f"  {fit[0]:>9}  {fit[1]:>9}")
    lines.append("memory: weights + gradients + Adam states (ZeRO paper: 2+2+12 B/param in bf16, sharded "
                 "by ZeRO-1/2/3; torch engine 4+4+8, DDP +4) + activations of one micro-batch "
                 "(Korthikanti et al. 2022 as transformers keeps them: 38sbh per layer under autocast, 36 in bf16; "
                 "eager attention +6as^2b; checkpointing: the layer inputs; the loss backward 12sbV; autocast's "
                 "bf16 weight copies 2 B/param; within 5 % of H100 peaks, bench/memory_peaks.csv). 'fits': total <= 90 % of the "
                 "GPU's memory (CUDA context and fragmentation not counted). See train/memory.py.")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.plan", description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m train -m")
    parser.add_argument("-m", "--multirun", action="store_true",
                        help="accepted as in python -m train -m; the plan always expands the sweep")
    parser.add_argument("--mfu", type=float, default=DEFAULT_MFU, help="model FLOPs utilisation (0-1)")
    parser.add_argument("--peak-tflops", type=float, default=A100_BF16_PEAK_TFLOPS)
    parser.add_argument("--gpu", default="A100 (bf16)", help="name printed with the assumptions")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per run (ZeRO shards states over them)")
    args = parser.parse_args(argv)
    if not 0 < args.mfu <= 1:
        parser.error(f"--mfu={args.mfu}: expected a fraction in (0, 1]")
    if args.gpus < 1:
        parser.error(f"--gpus={args.gpus}: expected at least 1")
    hw = Hardware(gpu=args.gpu, peak_tflops=args.peak_tflops, mfu=args.mfu, gpus=args.gpus)
    try:
        plans = plan(args.overrides, hw)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_plan(plans, hw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
