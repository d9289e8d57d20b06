"""Memory per GPU in `python -m train.plan`: hand-computed numbers for Pythia-1.4B, and the model-state
bytes the torch engine really allocates for the tiny model."""
from __future__ import annotations

import pytest
import torch

from train.engine import Dist, EngineConfig, TorchEngine
from train.memory import GiB, estimate
from train.model import ModelConfig, build_model, count_parameters
from train.optim import OptimConfig
from train.plan import Hardware, main, plan

P14 = 1_414_647_808  # Pythia-1.4B with the 50304-row embedding and untied head
# Pythia's own vocabulary and a Pythia-style batch (micro-batch 8 x 2048 tokens), pinned: the grid preset
# follows its tokenizer's vocabulary and the ZhoBLiMP paper's 64-token sequences
GRID_14B = ["experiment=zhoblimp_grid", "model=pythia-1.4b", "budget=10M", "seed=0", "model.vocab_size=50304",
            "data.seq_len=2048", "optim.global_batch=32", "optim.micro_batch=8"]


def test_pythia_1_4b_on_one_gpu_matches_the_hand_computation():
    (p,) = plan(GRID_14B)  # DeepSpeed ZeRO-1, bf16, micro-batch 8 x 2048 tokens, sdpa, no checkpointing
    assert p.params == P14
    m = p.memory
    # ZeRO paper: 2 + 2 + 12 bytes/param; one GPU shards nothing.
    assert (m.weights, m.grads, m.optimizer) == (2 * P14, 2 * P14, 12 * P14)
    # 24 layers x 32 x s b h (2048 x 8 x 2048) + head 10 x s b V (V = 50304)
    assert m.activations == 24 * 32 * 2048 * 8 * 2048 + 10 * 2048 * 8 * 50304 == 34_011_611_136
    assert m.total == 56_645_976_064  # 52.8 GiB: an A100-80GB, not a 40GB one
    assert m.fits(80 * GiB) and not m.fits(40 * GiB)


def test_zero_stages_checkpointing_and_eager_attention_change_what_they_should():
    (z3,) = plan(GRID_14B + ["engine.zero_stage=3", "model.gradient_checkpointing=true"], Hardware(gpus=8))
    m = z3.memory
    assert (m.weights, m.grads, m.optimizer) == (2 * P14 / 8, 2 * P14 / 8, 12 * P14 / 8)
    # checkpointing: each layer keeps its input (2sbh); one layer (32sbh) recomputed at a time; head.
    assert m.activations == 24 * 2 * 2048 * 8 * 2048 + 32 * 2048 * 8 * 2048 + 10 * 2048 * 8 * 50304
    assert m.fits(40 * GiB)
    (z2,) = plan(GRID_14B + ["engine.zero_stage=2"], Hardware(gpus=8))
    assert (z2.memory.weights, z2.memory.grads, z2.memory.optimizer) == (2 * P14, 2 * P14 / 8, 12 * P14 / 8)
    (eager,) = plan(GRID_14B + ["model.attn_implementation=eager"])
    # eager attention keeps each layer's softmax output: 2 a s^2 b bytes (a = 16 heads)
    assert eager.memory.activations - p_activations() == 24 * 2 * 16 * 2048 * 2048 * 8
    (ddp,) = plan(GRID_14B + ["engine=torch"], Hardware(gpus=8))
    assert (ddp.memory.weights, ddp.memory.grads, ddp.memory.optimizer) == (4 * P14, 8 * P14, 8 * P14)


def p_activations() -> int:
    return plan(GRID_14B)[0].memory.activations


def test_torch_engine_states_match_the_bytes_it_allocates():
    model = build_model(ModelConfig(hidden_size=32, intermediate_size=64, vocab_size=128), seed=0)
    dist = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
    engine = TorchEngine(EngineConfig(), OptimConfig(global_batch=2, micro_batch=2), model, dist)
    loss = engine.loss(torch.randint(0, 128, (2, 9)))
    engine.backward(loss)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    engine.step(1e-3)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    # Adam's moments (the per-tensor scalar step counters are not per-parameter memory)
    adam = sum(t.numel() * t.element_size() for st in engine.optimizer.state.values()
               for k, t in st.items() if k in ("exp_avg", "exp_avg_sq"))
    est = estimate(params=count_parameters(model), layers=2, hidden=32, heads=4, vocab=128, seq_len=8,
                   micro_batch=2, engine_kind="torch", zero_stage=0, bf16=False, gpus=1,
                   checkpointing=False, attn_implementation="sdpa")
    assert (est.weights, est.grads, est.optimizer) == (weights, grads, adam)


def test_the_cli_prints_the_memory_table(capsys):
    assert main(["--gpus", "8", *GRID_14B, "engine.zero_stage=3"]) == 0
    out = capsys.readouterr().out
    assert "memory per GPU (GiB), 8 GPUs per run" in out and "ds-z3 mb8" in out
    row = next(line for line in out.splitlines() if line.startswith("pythia-1.4b") and "ds-z3" in line)
    assert row.split()[-2:] == ["fits", "fits"]
    with pytest.raises(SystemExit):
        main(GRID_14B + ["--gpus", "0"])
