"""One optimizer step of the torch engine against hand arithmetic, in float64 on a tiny real GPT-NeoX:
gradient clipping and micro-batch accumulation. AdamW's first update is g / |g| per element whatever the
gradient's scale, so the weights after a step cannot tell a clipped or doubled gradient from the right
one; the first moment can: after step 1, exp_avg = (1 - beta1) x the gradient the optimizer was given."""
from __future__ import annotations

import math

import pytest
import torch

from train.engine import Dist, EngineConfig, TorchEngine
from train.model import ModelConfig, build_model
from train.optim import OptimConfig

CPU = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
SMALL = dict(hidden_size=32, intermediate_size=64, vocab_size=128)
# float64 throughout: two computations of one gradient in another order (micro-batches of 4 vs a batch
# of 8) agree to n x eps64 x magnitude (tests/numerics.py) ~ 1e-12 relative here; a doubled or unclipped
# gradient is off by a factor of 2 or more.
REL = 1e-9


def model64() -> torch.nn.Module:
    return build_model(ModelConfig(**SMALL), seed=0).double()


def batch(rows: int = 8) -> torch.Tensor:
    return torch.randint(0, 128, (rows, 17), generator=torch.Generator().manual_seed(0))


def first_moments(engine: TorchEngine) -> dict[str, torch.Tensor]:
    """exp_avg / (1 - beta1) per parameter: the gradient that AdamW's first step received."""
    beta1 = engine.optimizer.param_groups[0]["betas"][0]
    state = engine.optimizer.state
    return {n: state[p]["exp_avg"] / (1 - beta1) for n, p in engine.module.named_parameters()}


def one_step(optim: OptimConfig, rows: torch.Tensor) -> tuple[TorchEngine, float]:
    """What the training loop does for one step: every micro-batch's loss backpropagated, then step()."""
    engine = TorchEngine(EngineConfig(), optim, model64(), CPU)
    for micro in rows.split(optim.micro_batch):
        engine.backward(engine.loss(micro))
    return engine, engine.step(1e-3)


def hand_gradient(rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """The gradient of the mean next-token loss over all rows, computed once, outside the engine."""
    model = model64()
    logits = model(input_ids=rows[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1))
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name in want:
        scale = want[name].abs().max().item()
        assert (got[name] - want[name]).abs().max().item() <= REL * scale + 1e-300, name


def test_clipping_gives_the_hand_clipped_gradient():
    rows = batch()
    grad = hand_gradient(rows)
    norm = math.sqrt(sum(float((g * g).sum()) for g in grad.values()))
    clip = norm / 4  # active: the step must shrink the gradient 4-fold
    engine, reported = one_step(OptimConfig(global_batch=8, micro_batch=8, grad_clip=clip), rows)
    assert reported == pytest.approx(norm, rel=REL)  # the norm before clipping, as logged
    # torch's clip_grad_norm_: g x max_norm / (norm + 1e-6)
    assert_close(first_moments(engine), {n: g * (clip / (norm + 1e-6)) for n, g in grad.items()})


def test_a_clip_limit_above_the_norm_leaves_the_gradient_alone():
    rows = batch()
    grad = hand_gradient(rows)
    norm = math.sqrt(sum(float((g * g).sum()) for g in grad.values()))
    engine, reported = one_step(OptimConfig(global_batch=8, micro_batch=8, grad_clip=2 * norm), rows)
    assert reported == pytest.approx(norm, rel=REL)
    assert_close(first_moments(engine), grad)


@pytest.mark.parametrize("micro", [4, 2])
def test_accumulated_micro_batches_give_the_one_batch_gradient(micro):
    """global_batch 8 as 8/micro micro-batches: the gradient of the mean loss over all 8 rows, exactly
    (each micro-batch's loss is divided by the accumulation count), from step 1 on."""
    rows = batch()
    whole, norm_whole = one_step(OptimConfig(global_batch=8, micro_batch=8, grad_clip=1e9), rows)
    accum, norm_accum = one_step(OptimConfig(global_batch=8, micro_batch=micro, grad_clip=1e9), rows)
    assert accum.accum == 8 // micro
    assert norm_accum == pytest.approx(norm_whole, rel=REL)
    assert_close(first_moments(accum), first_moments(whole))
    assert_close(first_moments(whole), hand_gradient(rows))
    for p, q in zip(accum.module.parameters(), whole.module.parameters()):
        assert torch.allclose(p, q, rtol=REL, atol=0)
