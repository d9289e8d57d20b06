"""`python -m train -m ...` with Hydra's basic launcher (experiment=zhoblimp_mini's default): the runs of a
sweep one after another in one process, each in its own directory, each with its checkpoints and evals."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trainutil import TINY
from train.checkpoint import list_checkpoints

ROOT = Path(__file__).resolve().parents[1]


def test_a_sweep_runs_in_one_process_with_the_basic_launcher(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "train", "-m", *TINY, f"data.cache_dir={tmp_path / 'cache'}",
           f"hydra.sweep.dir={sweep}", "seed=0,1", "probes.final_all_pairs=true"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("run directory:") == 4  # each run: its start-up summary and its last line
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name for p in runs] == ["tiny-bfull-s0", "tiny-bfull-s1"]
    for run in runs:
        steps = [s for s, _ in list_checkpoints(run)]
        assert steps[0] == 0 and len(steps) >= 4
        assert (run / "evals" / f"step{steps[-1]}" / "grammar_all.parquet").is_file()
        assert not (run / "evals" / f"step{steps[-2]}" / "grammar_all.parquet").exists()
