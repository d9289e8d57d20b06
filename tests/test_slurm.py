"""train.slurm renders a grid file and a job-array sbatch script from the same overrides; bash parses
it; inside a job step the SLURM variables become torch.distributed's."""
from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from train.grid import expand
from train.slurm import SbatchOptions, export_distributed_env, main, render

GRID = ["experiment=zhoblimp_grid", "model=pythia-14m,pythia-70m", "budget=10M", "seed=0,1",
        "data.paths=[/data/my corpus]"]


@pytest.mark.parametrize("launcher", ["srun", "torchrun", "deepspeed"])
def test_a_tiny_grid_renders_to_a_script_bash_accepts(tmp_path, launcher):
    runs = expand(GRID)
    opts = SbatchOptions(partition="gpu", account="proj", nodes=2, gpus_per_node=4, launcher=launcher,
                         setup=["module load cuda/12.4", "source .venv/bin/activate"])
    grid, sbatch = render(runs, opts, tmp_path / "out", "test")
    lines = grid.read_text().splitlines()
    assert len(lines) == 4 and [shlex.split(line) for line in lines] == runs  # quoting survives
    script = sbatch.read_text()
    subprocess.run(["bash", "-n", str(sbatch)], check=True)
    assert "@@" not in script
    for line in ("#SBATCH --array=0-3%16", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "#SBATCH --nodes=2", "#SBATCH --gpus-per-node=4", "#SBATCH --signal=B:USR1@300",
                 f"#SBATCH --ntasks-per-node={4 if launcher == 'srun' else 1}", "module load cuda/12.4",
                 f"LAUNCHER={launcher}", f"GRID_FILE={grid}"):
        assert line in script, line


def test_the_script_reads_its_task_line_into_the_overrides(tmp_path):
    """The grid-line part of the script, run by bash for task 1: overrides with a space stay one word."""
    grid, sbatch = render(expand(GRID), SbatchOptions(partition="gpu"), tmp_path, "test")
    script = sbatch.read_text()
    start, end = script.index("LINE=$("), script.index('eval "OVERRIDES=($LINE)"') + len('eval "OVERRIDES=($LINE)"')
    snippet = f"GRID_FILE={grid}\n{script[start:end]}\nprintf '%s\\n' \"${{OVERRIDES[@]}}\"\n"
    out = subprocess.run(["bash", "-c", snippet], env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == expand(GRID)[1] and len(out) == 5  # the corpus path with a space stays one word


def test_the_cli_requires_a_partition_and_writes_both_files(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["experiment=zhoblimp_grid", "--out", str(tmp_path)])
    assert "--partition" in capsys.readouterr().err
    assert main(["experiment=zhoblimp_grid", "seed=0", "--out", str(tmp_path), "--partition", "a100"]) == 0
    assert len((tmp_path / "grid.txt").read_text().splitlines()) == 20
    assert "#SBATCH --partition=a100" in (tmp_path / "array.sbatch").read_text()


def test_slurm_task_variables_become_torch_distributed_ones(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "SUBMITIT_EXECUTOR", "MASTER_ADDR"):
        monkeypatch.setenv(key, "")  # recorded, so the teardown restores the original environment
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    with pytest.raises(RuntimeError, match="without MASTER_ADDR"):
        export_distributed_env()
    monkeypatch.setenv("MASTER_ADDR", "node17")
    export_distributed_env()
    assert [os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")] == ["5", "8", "1", "20123"]
