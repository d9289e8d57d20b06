"""Two gloo processes under torchrun: DDP and DeepSpeed give the single-process loss trajectory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainutil import TINY, losses
from train.checkpoint import list_checkpoints

ROOT = Path(__file__).resolve().parents[1]
COMMON = [o for o in TINY if not o.startswith("probes.benchmarks")] + [
    "probes=none", "schedule=custom", "schedule.points=[10]", "data.grammar.n_documents=60"]


def launch(nproc: int, run_dir: Path, cache: Path, *overrides: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={29500 + os.getpid() % 1000}",
           "-m", "train", *COMMON, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "deepspeed"])
def test_two_processes_match_one(tmp_path, engine):
    cache = tmp_path / "cache"
    one, two = tmp_path / "one", tmp_path / "two"
    launch(1, one, cache, f"engine={engine}", "engine.zero_stage=1" if engine == "deepspeed" else "engine.backend=gloo")
    launch(2, two, cache, f"engine={engine}", "engine.zero_stage=1" if engine == "deepspeed" else "engine.backend=gloo")
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) and len(a) >= 10
    for step in a:
        # Same global batch split over two ranks: equal up to the order of float reductions.
        assert b[step] == pytest.approx(a[step], rel=1e-4, abs=1e-5), step
    assert [s for s, _ in list_checkpoints(one)] == [s for s, _ in list_checkpoints(two)]
    state = (list_checkpoints(two)[-1][1] / "trainer_state.json").read_text()
    assert '"world_size": 2' in state
