"""The speed/memory switches a 1.4B run needs, on CPU with the real model: each changes how a step is
computed, never what it computes."""
from __future__ import annotations

import json

import pytest
import torch

from trainutil import losses, tiny_cfg
from train.checkpoint import list_checkpoints
from train.engine import Dist, EngineConfig, TorchEngine, to_device
from train.loop import train
from train.model import ModelConfig, build_model
from train.optim import OptimConfig, adamw_impl, build_optimizer

CPU = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
SMALL = dict(hidden_size=32, intermediate_size=64, vocab_size=128)


def batch(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 128, (4, 17), generator=torch.Generator().manual_seed(seed))


def train_steps(engine: TorchEngine, n: int = 3) -> list[float]:
    out = []
    for step in range(n):
        loss = engine.loss(batch(step))
        engine.backward(loss)
        engine.step(1e-2)
        out.append(loss.item())
    return out


def engine_for(model_cfg: ModelConfig, engine_cfg: EngineConfig = EngineConfig(),
               optim_cfg: OptimConfig = OptimConfig(global_batch=4, micro_batch=4)) -> TorchEngine:
    return TorchEngine(engine_cfg, optim_cfg, build_model(model_cfg, seed=0), CPU)


def test_gradient_checkpointing_recomputes_each_layer_and_keeps_the_trajectory():
    plain, ckpt = engine_for(ModelConfig(**SMALL)), engine_for(ModelConfig(**SMALL, gradient_checkpointing=True))
    calls = {"plain": 0, "ckpt": 0}
    for key, eng in (("plain", plain), ("ckpt", ckpt)):
        # a pre-hook: the recompute stops once it has what backward needs, before the MLP returns
        eng.module.gpt_neox.layers[1].mlp.register_forward_pre_hook(
            lambda *_a, key=key: calls.__setitem__(key, calls[key] + 1))
    a, b = train_steps(plain), train_steps(ckpt)
    # Checkpointing drops the layer's activations after the forward and runs it again in backward.
    assert calls == {"plain": 3, "ckpt": 6}
    assert b == pytest.approx(a, abs=1e-6)
    for p, q in zip(plain.module.parameters(), ckpt.module.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_attention_implementation_is_the_configured_one():
    ids = batch()[:, :-1]
    logits = {}
    for impl in ("sdpa", "eager"):
        model = build_model(ModelConfig(**SMALL, attn_implementation=impl), seed=0).eval()
        assert model.config._attn_implementation == impl
        with torch.no_grad():
            logits[impl] = model(ids).logits
    assert torch.allclose(logits["sdpa"], logits["eager"], atol=1e-5)
    with pytest.raises(ValueError, match="model.attn_implementation='flash'"):
        ModelConfig(attn_implementation="flash")


def test_adamw_kernel_is_fused_on_cuda_foreach_on_cpu_and_all_kernels_agree():
    assert adamw_impl(OptimConfig(), torch.device("cuda", 0)) == "fused"
    assert adamw_impl(OptimConfig(), torch.device("cpu")) == "foreach"
    assert adamw_impl(OptimConfig(impl="for-loop"), torch.device("cuda", 0)) == "for-loop"
    opt = build_optimizer(OptimConfig(), build_model(ModelConfig(**SMALL)))
    assert (opt.defaults["foreach"], opt.defaults["fused"]) == (True, False)
    # The same gradients through each kernel. (Real gradients would do too, except that the key
    # bias gets a rounding-noise gradient that Adam scales up to lr: kernels would differ by noise.)
    trained = {}
    for impl in ("for-loop", "foreach", "fused"):  # fused AdamW has a CPU kernel too
        model = build_model(ModelConfig(**SMALL), seed=0)
        opt = build_optimizer(OptimConfig(impl=impl), model)
        assert (opt.defaults["fused"], opt.defaults["foreach"]) == (impl == "fused", impl == "foreach")
        gen = torch.Generator().manual_seed(1)
        for _step in range(3):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        trained[impl] = list(model.parameters())
    for impl in ("foreach", "fused"):
        for p, q in zip(trained["for-loop"], trained[impl]):
            assert torch.allclose(p, q, rtol=0, atol=1e-6), impl
    with pytest.raises(ValueError, match="optim.impl='apex'"):
        OptimConfig(impl="apex")


def test_compiled_engine_follows_the_eager_trajectory_and_saves_plain_names():
    # aot_eager: dynamo and AOTAutograd trace the real forward and backward graphs; only inductor's
    # kernel generation (a C++ build that takes minutes on CPU) is left out.
    eager = engine_for(ModelConfig(**SMALL))
    compiled = engine_for(ModelConfig(**SMALL), EngineConfig(compile=True, compile_backend="aot_eager"))
    assert type(compiled.model).__name__ == "OptimizedModule" and compiled.model._orig_mod is compiled.module
    assert train_steps(compiled) == pytest.approx(train_steps(eager), abs=1e-6)
    names = set(compiled.module.state_dict())
    assert "gpt_neox.embed_in.weight" in names and not any("_orig_mod" in n for n in names)


def test_batches_reach_the_device_unchanged():
    b = batch()
    assert to_device(b, torch.device("cpu"), pin_memory=True) is b  # CPU path: no copy, no pinning
    if torch.cuda.is_available():  # the real path, where a GPU exists
        for pin in (True, False):
            on_gpu = to_device(b, torch.device("cuda"), pin_memory=pin)
            torch.cuda.synchronize()
            assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), b)


@pytest.mark.slow
def test_switches_in_a_real_run_are_recorded_in_trainer_state(tmp_path):
    common = ["probes=none", "schedule=custom", "schedule.points=[6]", "data.grammar.n_documents=20"]  # ~15 steps
    plain, switched = tmp_path / "plain", tmp_path / "switched"
    train(tiny_cfg(tmp_path / "cache", *common), plain)
    train(tiny_cfg(tmp_path / "cache", *common, "model.gradient_checkpointing=true",
                   "model.attn_implementation=eager", "optim.impl=for-loop", "engine.compile=true",
                   "engine.compile_backend=aot_eager"), switched)
    a, b = losses(plain), losses(switched)
    assert sorted(a) == sorted(b)
    for step in a:
        assert b[step] == pytest.approx(a[step], abs=1e-5), step
    state = json.loads((list_checkpoints(switched)[-1][1] / "trainer_state.json").read_text())
    assert (state["attn_implementation"], state["gradient_checkpointing"], state["compile"]) == ("eager", True, True)
    state = json.loads((list_checkpoints(plain)[-1][1] / "trainer_state.json").read_text())
    assert (state["attn_implementation"], state["gradient_checkpointing"], state["compile"]) == ("sdpa", False, False)


@pytest.mark.slow
def test_deepspeed_compiles_its_module_and_keeps_the_trajectory():
    from train.engine import DeepSpeedEngine, init_distributed

    def ds_losses(compile: bool) -> list[float]:
        cfg = EngineConfig(kind="deepspeed", zero_stage=2, compile=compile, compile_backend="aot_eager")
        eng = DeepSpeedEngine(cfg, OptimConfig(global_batch=4, micro_batch=4),
                              build_model(ModelConfig(**SMALL), seed=0), init_distributed(cfg))
        assert eng.ds.is_compiled == compile
        out = train_steps(eng)
        assert not any("_orig_mod" in n for n in eng.full_weights())  # checkpoints keep plain names
        return out

    assert ds_losses(True) == pytest.approx(ds_losses(False), abs=1e-6)
