"""The fused, chunked output layer + cross-entropy (train/loss.py) computes the plain loss and its
gradients, on the real tiny GPT-NeoX, in fp32 and under bf16 autocast, and trains the same trajectory."""
from __future__ import annotations

import pytest
import torch

from train.engine import Dist, EngineConfig, TorchEngine, _lm_loss
from train.loss import ChunkedLMLoss
from train.model import ModelConfig, build_model
from train.optim import OptimConfig

CPU = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
V = 128
SMALL = dict(hidden_size=32, intermediate_size=64, vocab_size=V)
EPS32 = torch.finfo(torch.float32).eps
EPS_BF16 = torch.finfo(torch.bfloat16).eps


def batch(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (4, 17), generator=torch.Generator().manual_seed(seed))


def loss_and_grads(model, fn, bf16: bool):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = fn(batch())
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("chunk", [5, 64, 1000])  # ragged chunks, several, one chunk for all 64 tokens
def test_fp32_loss_and_every_gradient_equal_the_plain_loss(chunk):
    model = build_model(ModelConfig(**SMALL), seed=0)
    ref, g_ref = loss_and_grads(model, lambda b: _lm_loss(model, b), bf16=False)
    got, g_got = loss_and_grads(model, ChunkedLMLoss(model, chunk), bf16=False)
    # a logsumexp over V terms of magnitude ~|loss| each, rounded in fp32: V * eps * |loss|
    assert got == pytest.approx(ref, abs=V * EPS32 * abs(ref))
    for name, g in g_ref.items():
        # gradients: the same products summed in another order (chunks), each term rounded once
        assert torch.allclose(g_got[name], g, rtol=1e-4, atol=V * EPS32 * g.abs().max().item()), name


def test_bf16_autocast_loss_matches_within_bf16_rounding():
    model = build_model(ModelConfig(**SMALL), seed=0)
    ref, g_ref = loss_and_grads(model, lambda b: _lm_loss(model, b), bf16=True)
    got, g_got = loss_and_grads(model, ChunkedLMLoss(model, 16), bf16=True)
    # same bf16 logits, the same fp32 log-softmax: equal up to the order of the fp32 sums
    assert got == pytest.approx(ref, abs=V * EPS32 * abs(ref))
    # the head's weight (tied to the input embedding in the tiny model): per-chunk bf16 products summed
    # in fp32 vs one bf16 product, a few bf16 roundings of the largest entry
    w = next(n for n, p in model.named_parameters() if p is model.get_output_embeddings().weight)
    assert torch.allclose(g_got[w], g_ref[w], atol=4 * EPS_BF16 * g_ref[w].abs().max().item())


def test_the_engine_trains_the_same_trajectory_with_a_chunked_loss():
    def run(cfg: EngineConfig) -> list[float]:
        engine = TorchEngine(cfg, OptimConfig(global_batch=4, micro_batch=2), build_model(ModelConfig(**SMALL), seed=0), CPU)
        out = []
        for step in range(3):
            for micro in batch(step).split(2):
                loss = engine.loss(micro)
                engine.backward(loss)
                out.append(loss.item())
            engine.step(1e-2)
        return out

    plain, chunked = run(EngineConfig()), run(EngineConfig(loss_chunk=8))
    assert chunked == pytest.approx(plain, abs=1e-5)  # 3 Adam steps of lr 1e-2 on fp32 rounding


def test_bad_chunk_settings_are_config_errors():
    with pytest.raises(ValueError, match="engine.loss_chunk"):
        EngineConfig(loss_chunk=-1)
    with pytest.raises(ValueError, match="engine.loss_chunk"):
        EngineConfig(kind="deepspeed", loss_chunk=1024)


def test_compile_wraps_the_chunked_loss_and_follows_the_eager_trajectory():
    def run(cfg: EngineConfig) -> list[float]:
        engine = TorchEngine(cfg, OptimConfig(global_batch=4, micro_batch=4), build_model(ModelConfig(**SMALL), seed=0), CPU)
        out = []
        for step in range(2):
            loss = engine.loss(batch(step))
            engine.backward(loss)
            engine.step(1e-2)
            out.append(loss.item())
        return out

    eager = run(EngineConfig(loss_chunk=8))
    compiled = run(EngineConfig(loss_chunk=8, compile=True, compile_backend="aot_eager"))
    assert compiled == pytest.approx(eager, abs=1e-6)
