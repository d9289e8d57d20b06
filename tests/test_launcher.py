"""Hydra's submitit launcher: a 2-run tiny grid through submitit_local finishes both runs with their
checkpoints and evals; the SLURM launcher refuses to start without a partition."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from trainutil import TINY, tiny_cfg
from train.checkpoint import list_checkpoints
from train.loop import train

ROOT = Path(__file__).resolve().parents[1]


def test_two_runs_through_submitit_local_finish_with_checkpoints_and_evals(tmp_path):
    cache, sweep = tmp_path / "cache", tmp_path / "sweep"
    # Both jobs start at once: build the shared token store first rather than twice concurrently.
    train(tiny_cfg(cache, "probes=none", "schedule=custom", "schedule.points=[]"), tmp_path / "warm")
    cmd = [sys.executable, "-m", "train", "-m", "hydra/launcher=local", *TINY, f"data.cache_dir={cache}",
           f"hydra.sweep.dir={sweep}", "seed=0,1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name for p in runs] == ["tiny-bfull-s0", "tiny-bfull-s1"]
    for run in runs:
        steps = [s for s, _ in list_checkpoints(run)]
        assert steps[0] == 0 and len(steps) >= 4
        for step in steps:
            df = pd.read_parquet(run / "evals" / f"step{step}" / "grammar.parquet")
            assert len(df) > 0 and (df.lp_good < 0).all()
    # Different seeds, different initial weights: the two jobs really ran their own overrides.
    a, b = (run / "checkpoints" / "step0" / "model.safetensors" for run in runs)
    assert a.read_bytes() != b.read_bytes()


def test_the_slurm_launcher_without_a_partition_is_refused(tmp_path):
    cmd = [sys.executable, "-m", "train", "-m", "hydra/launcher=slurm", *TINY, f"hydra.sweep.dir={tmp_path}"]
    env = {k: v for k, v in os.environ.items() if k != "SBATCH_PARTITION"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    # Refused while composing the launcher, before anything is submitted (no sbatch here either way).
    assert "Environment variable 'SBATCH_PARTITION' not found" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / ".submitit").exists()
