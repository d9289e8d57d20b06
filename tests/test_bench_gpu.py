"""bench/bench_gpu.py on a machine without CUDA, and its FLOPs count against a hand computation."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def test_model_flops_per_token_follow_palm():
    from bench_gpu import flops_per_token, model_config
    from train.model import build_model

    cfg = model_config("160m")
    model = build_model(cfg, device="meta")
    # Pythia-160m: 162,322,944 parameters, of which the input embedding 50304 x 768 is a lookup.
    n = 162_322_944 - 50304 * 768
    assert flops_per_token(model, cfg, 2048) == 6 * n + 12 * 12 * 768 * 2048 == 968_629_248


def test_the_planned_column_is_the_memory_plan_of_the_measured_setup():
    from bench_gpu import VARIANTS, planned_gib, model_config
    from train.engine import EngineConfig
    from train.optim import OptimConfig

    ocfg = OptimConfig(global_batch=32, micro_batch=8)
    # bench/memory_peaks.csv: pythia-1.4b baseline measured 61.5 GiB on an H100, planned 61.4
    assert round(planned_gib(model_config("1.4b"), EngineConfig(), ocfg, 2048), 1) == 61.4
    labels = [v[0] for v in VARIANTS]
    assert "+chunked loss" in labels and "+chunked loss mb16" in labels
    # the chunked loss frees the loss peak, 12 B x s b V, less one chunk's logits (bf16, fp32, bf16 gradient:
    # 8 B x 8192 x V), the head weight's fp32 gradient 4Vh and the hidden states' gradient and copy 6sbh
    freed = planned_gib(model_config("160m"), EngineConfig(), ocfg, 2048) - \
        planned_gib(model_config("160m"), EngineConfig(loss_chunk=8192), ocfg, 2048)
    s, b, v, h = 2048, 8, 50304, 768
    assert freed * 2 ** 30 == pytest.approx(12 * s * b * v - (8 * 8192 * v + 4 * v * h + 6 * s * b * h))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    out = tmp_path / "table.txt"
    proc = subprocess.run([sys.executable, "bench/bench_gpu.py", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "needs a CUDA GPU" in proc.stdout and not out.exists()
