"""bench/gpu_check.sh: without a GPU it says so and exits 0 (without torch or Python, exit 2); each stage runs under its own time limit, so a
stage that fails or runs out of time is a row of the table and the others still run."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_a_gpu_it_says_so_and_exits_0(tmp_path):
    out = tmp_path / "gpu_check.csv"
    proc = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GPU_CHECK_OUT": str(out)})
    assert proc.returncode == 0 and "gpu_check: needs a CUDA GPU" in proc.stdout and not out.exists()


@pytest.mark.parametrize("python,says", [
    ("/nonexistent/python3", "gpu_check: no Python interpreter /nonexistent/python3"),
    ("no-torch", "cannot import torch (ModuleNotFoundError: No module named 'torch')"),
])
def test_a_python_without_torch_or_none_is_named_and_fails(tmp_path, python, says):
    """Issue 44: both said "needs a CUDA GPU" and exited 0, as if the machine had been checked."""
    if python == "no-torch":  # this interpreter without its site-packages: no torch
        python = tmp_path / "python-no-torch"
        python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
        python.chmod(0o755)
        says = f"gpu_check: {python} {says}"
    proc = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": str(python), "GPU_CHECK_OUT": str(tmp_path / "out.csv")})
    assert proc.returncode == 2 and says in proc.stderr and "CUDA" not in proc.stdout + proc.stderr, proc.stderr
    assert not (tmp_path / "out.csv").exists()


def test_a_stage_out_of_time_is_its_row_and_the_next_stages_still_run(tmp_path):
    # every stage (dry run: the CPU path) gets 1 s, too little to import torch: four rows saying so, one table
    out = tmp_path / "gpu_check.csv"
    limits = {f"GPU_CHECK_{s}_S": "1" for s in ("BENCH", "HOOK", "DEEPSPEED", "SCORING")}
    proc = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **limits, "GPU_CHECK_DRY": "1", "GPU_CHECK_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["stage"], r["verdict"]) for r in rows] == [
        (s, "TIMED OUT after 1 s") for s in ("bench", "hook", "deepspeed", "scoring")]
    table = proc.stdout[proc.stdout.index("stage  "):].splitlines()  # the printed table, after the rows as they came
    assert table[0].split() == ["stage", "measure", "value", "goal", "verdict", "note"] and len(table) == 6
    assert table[-1] == f"-> {out}"
