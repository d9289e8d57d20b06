"""Training throughput and MFU on one CUDA GPU: pythia-160m/410m/1.4b at the grid's batch, bf16, each
speed switch on and off.

    python bench/bench_gpu.py --out bench_gpu.txt            # the whole table (< 8 minutes on an H100)
    python bench/bench_gpu.py --sizes 160m --steps 2         # a quick look

Without CUDA it prints that it needs a GPU and exits with status 0 (nothing measured, nothing written).

What runs: the training engine itself (train/engine.py TorchEngine: bf16 autocast, fp32 weights, AdamW,
grad clipping) on random token ids, at the zhoblimp preset's batch (configs/optim/zhoblimp.yaml: 32
sequences x 2048 tokens per step, micro-batch 8, so 4 forward/backward passes per optimizer step).
Each size runs a baseline (sdpa attention, fused AdamW, pinned non-blocking batch copies, no activation
checkpointing, no torch.compile, the plain loss) and then one switch flipped at a time; the last rows
combine the chunked loss (engine.loss_chunk) with the micro-batch it frees room for, and compile. The
"planned GiB" column is train/plan.py's estimate of the same setup, beside the measured peak.
Not yet measured on a GPU (issue 23 §4; the CPU tests in tests/test_loss.py show the chunked loss
computes the same loss and gradients): run this on a lent GPU and copy the table into docs/speed.md. --warmup steps (untimed: CUDA
context, cuBLAS heuristics, compilation) precede --steps timed optimizer steps.

MFU (PaLM, Chowdhery et al. 2022, App. B): model FLOPs per token = 6N + 12·L·h·s, where N counts the
parameters in matrix products (all but the input embedding, a lookup; the untied output head counts)
and 12·L·h·s is attention's QK^T and AV (forward + backward) over the full s x s square. Recomputation
under activation checkpointing is not model FLOPs, so it lowers MFU. MFU = tokens/s x FLOPs per token /
the GPU's dense bf16 peak (--peak-tflops; by default from the device name: A100 312, H100/H200 989).
Anchor: GPT-NeoX reports ~150 TFLOP/s per A100 (48 % of 312) without FlashAttention, ~180 with it.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from train.engine import EngineConfig, build_engine, init_distributed  # noqa: E402
from train.plan import GiB, estimate  # noqa: E402
from train.model import ModelConfig, build_model  # noqa: E402
from train.optim import OptimConfig  # noqa: E402

PEAK_BF16_TFLOPS = {"A100": 312.0, "H100": 989.0, "H200": 989.0}  # dense, SXM
GPT_NEOX_A100_TFLOPS = 150.0  # per A100, without FlashAttention (48 % of 312)
SIZES = ("160m", "410m", "1.4b")
VOCAB = 50304  # Pythia's padded vocabulary

# (label, model overrides, engine overrides, optim overrides): the baseline, then one switch flipped.
VARIANTS = [
    ("baseline", {}, {}, {}),
    ("+checkpointing", {"gradient_checkpointing": True}, {}, {}),
    ("+compile", {}, {"compile": True}, {}),
    ("eager attention", {"attn_implementation": "eager"}, {}, {}),
    ("foreach AdamW", {}, {}, {"impl": "foreach"}),
    ("no pinned copies", {}, {"pin_memory": False}, {}),
    # issue 23: the fused, chunked head + cross-entropy (train/loss.py) frees the 12 B/token/vocab-row loss
    # peak (train/plan.py); the freed memory buys a larger micro-batch (fewer, larger GEMMs), with compile
    ("+chunked loss", {}, {"loss_chunk": 8192}, {}),
    ("+chunked loss mb16", {}, {"loss_chunk": 8192}, {"micro_batch": 16}),
    ("+chunked mb16 compile", {}, {"loss_chunk": 8192, "compile": True}, {"micro_batch": 16}),
]


def model_config(size: str) -> ModelConfig:
    fields = yaml.safe_load((ROOT / "configs" / "model" / f"pythia-{size}.yaml").read_text())
    fields["vocab_size"] = fields.get("vocab_size") or VOCAB
    return ModelConfig(**fields)


def flops_per_token(model: torch.nn.Module, cfg: ModelConfig, seq_len: int) -> float:
    n = sum(p.numel() for p in model.parameters()) - model.gpt_neox.embed_in.weight.numel()
    return 6.0 * n + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * seq_len


def planned_gib(mcfg: ModelConfig, ecfg: EngineConfig, ocfg: OptimConfig, seq_len: int) -> float:
    """train/plan.py's estimate of this setup's peak (the engine of ecfg, bf16, one GPU)."""
    params = sum(p.numel() for p in build_model(mcfg, device="meta").parameters())
    return estimate(params=params, layers=mcfg.num_hidden_layers, hidden=mcfg.hidden_size,
                    heads=mcfg.num_attention_heads, vocab=mcfg.vocab_size, seq_len=seq_len,
                    micro_batch=ocfg.micro_batch, engine_kind=ecfg.kind,
                    zero_stage=ecfg.zero_stage if ecfg.kind == "deepspeed" else 0, bf16=True, gpus=1,
                    checkpointing=mcfg.gradient_checkpointing, attn_implementation=mcfg.attn_implementation,
                    loss_chunk=ecfg.loss_chunk).total / GiB


def peak_tflops(name: str) -> float:
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value
    raise SystemExit(f"unknown GPU {name!r}: pass --peak-tflops (its dense bf16 peak)")


def measure(size: str, mcfg: ModelConfig, ecfg: EngineConfig, ocfg: OptimConfig, *, seq_len: int,
            warmup: int, steps: int) -> tuple[float, float, float, list]:
    """(tokens/s, FLOPs per token, peak GiB allocated, each step's mean loss) of `steps` timed optimizer
    steps of the engine ecfg names (the one the training loop builds); on the CPU (bench/gpu_check.py's dry
    run) the peak is nan."""
    dist = init_distributed(ecfg)  # DeepSpeed gets a one-process group (NCCL on a GPU)
    cuda = dist.device.type == "cuda"
    torch.manual_seed(0)
    model = build_model(mcfg, seed=0, device=dist.device)  # initialised on the GPU: seconds, not minutes
    per_token = flops_per_token(model, mcfg, seq_len)
    engine = build_engine(ecfg, ocfg, model, dist)
    # Host batches as the loop hands them over (CPU tensors), one per optimizer step.
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, mcfg.vocab_size, (ocfg.global_batch, seq_len + 1), generator=gen) for _ in range(2)]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses = []

    def step(i: int) -> None:
        micro_losses = []
        for micro in batches[i % 2].split(ocfg.micro_batch):
            loss = engine.loss(micro)
            engine.backward(loss)
            micro_losses.append(loss.detach())  # read after the clock stops: no sync inside a step
        engine.step(1e-4)
        losses.append(micro_losses)

    for i in range(warmup):
        step(i)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    sync()
    elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else float("nan")
    del engine, model
    return (steps * ocfg.global_batch * seq_len / elapsed, per_token, peak,
            [float(torch.stack(m).float().mean()) for m in losses])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=SIZES)
    parser.add_argument("--variants", nargs="+", default=[v[0] for v in VARIANTS],
                        choices=[v[0] for v in VARIANTS])
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=2, help="untimed optimizer steps (compile happens here)")
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_gpu: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured. "
              "Run it on a GPU node.")
        return 0
    name = torch.cuda.get_device_name()
    peak = args.peak_tflops or peak_tflops(name)
    torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers (the loss upcast) on tensor cores
    head = (f"{'model':<12} {'variant':<22} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6} {'peak GiB':>8} "
            f"{'planned':>8}")
    lines = [f"bench_gpu: {name}, bf16 peak {peak:g} TFLOP/s; batch {args.global_batch} x {args.seq_len} "
             f"tokens, micro-batch {args.micro_batch}; {args.warmup} warmup + {args.steps} timed steps; "
             f"torch {torch.__version__}", head, "-" * len(head)]
    print("\n".join(lines), flush=True)
    ocfg = OptimConfig(global_batch=args.global_batch, micro_batch=args.micro_batch)
    started = time.perf_counter()
    for size in args.sizes:
        mcfg = model_config(size)
        for label, m_over, e_over, o_over in VARIANTS:
            if label not in args.variants:
                continue
            m_cfg, e_cfg, o_cfg = replace(mcfg, **m_over), EngineConfig(**e_over), replace(ocfg, **o_over)
            planned = planned_gib(m_cfg, e_cfg, o_cfg, args.seq_len)
            try:
                tok_s, per_token, mem, _ = measure(size, m_cfg, e_cfg, o_cfg, seq_len=args.seq_len,
                                                   warmup=args.warmup, steps=args.steps)
                tflops = tok_s * per_token / 1e12
                line = (f"pythia-{size:<5} {label:<22} {tok_s:>10,.0f} {tflops:>8.1f} {tflops / peak:>6.1%} "
                        f"{mem:>8.1f} {planned:>8.1f}")
            except torch.OutOfMemoryError:
                line = f"pythia-{size:<5} {label:<22} {'out of memory':>10} {'':>24} {planned:>8.1f}"
            gc.collect()
            torch.cuda.empty_cache()
            torch._dynamo.reset()  # each compiled variant compiles its own model
            lines.append(line)
            print(line, flush=True)
    lines += ["-" * len(head),
              f"total {time.perf_counter() - started:.0f} s. MFU = tokens/s x (6N + 12·L·h·s) / peak "
              "(PaLM App. B; N without the input embedding; recomputation not counted). "
              f"GPT-NeoX: ~{GPT_NEOX_A100_TFLOPS:g} TFLOP/s per A100 = "
              f"{GPT_NEOX_A100_TFLOPS / PEAK_BF16_TFLOPS['A100']:.0%} of 312 without FlashAttention, ~180 with it."]
    print("\n".join(lines[-2:]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
