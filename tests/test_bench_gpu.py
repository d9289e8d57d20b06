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


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    out = tmp_path / "table.txt"
    proc = subprocess.run([sys.executable, "bench/bench_gpu.py", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "needs a CUDA GPU" in proc.stdout and not out.exists()
