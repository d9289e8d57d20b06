"""train.slurm renders a grid file and a job-array sbatch script from the same overrides; bash parses
it; inside a job step the SLURM variables become torch.distributed's."""
from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from pathlib import Path

from slurmutil import VARIANTS, expected_lines
from train.grid import expand
from train.slurm import SbatchOptions, export_distributed_env, main, render

ROOT = Path(__file__).resolve().parents[1]

GRID = ["experiment=zhoblimp_grid", "model=pythia-14m,pythia-70m", "budget=10M", "seed=0,1",
        "data.paths=[/data/my corpus]"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_tiny_grid_renders_to_a_script_bash_accepts(tmp_path, variant):
    """Text and syntax only; tests/test_slurm_cluster.py submits each of these variants to a real cluster."""
    launcher, gpus = VARIANTS[variant]
    runs = expand(GRID)
    opts = SbatchOptions.from_launcher_yaml(partition="gpu", account="proj", gpus_per_node=gpus,
                                            launcher=launcher, setup=["module load cuda/12.4",
                                                                      "source .venv/bin/activate"])
    grid, sbatch = render(runs, opts, tmp_path / "out", "test")
    lines = grid.read_text().splitlines()
    assert len(lines) == 4 and [shlex.split(line) for line in lines] == runs  # quoting survives
    script = sbatch.read_text()
    subprocess.run(["bash", "-n", str(sbatch)], check=True)
    assert "@@" not in script
    present, absent = expected_lines(launcher, gpus)
    for line in ("#SBATCH --array=0-3%16", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "#SBATCH --nodes=1", "#SBATCH --signal=B:USR1@300", "module load cuda/12.4",
                 f"GRID_FILE={grid}", *present):
        assert line in script, line
    for text in absent:
        assert text not in script, text
    # The #SBATCH block is one run of lines: sbatch stops reading directives at the first command.
    header = script.split("#SBATCH --output")[0]
    assert "\n\n" not in header


def test_the_sbatch_defaults_are_the_launcher_yamls(tmp_path):
    """One place for the resources: configs/hydra/launcher/slurm.yaml feeds both cluster paths."""
    from omegaconf import OmegaConf

    yaml = OmegaConf.load(ROOT / "configs" / "hydra" / "launcher" / "slurm.yaml")
    opts = SbatchOptions.from_launcher_yaml(partition="gpu")
    assert (opts.gpus_per_node, opts.cpus_per_task, opts.mem_gb, opts.timeout_min, opts.signal_delay_s) == (
        yaml.gpus_per_node, yaml.cpus_per_task, yaml.mem_gb, yaml.timeout_min, yaml.signal_delay_s)
    _, sbatch = render([["seed=0"]], opts, tmp_path, "test")
    script = sbatch.read_text()
    for line in (f"#SBATCH --gpus-per-node={yaml.gpus_per_node}", f"#SBATCH --mem={yaml.mem_gb}G",
                 f"#SBATCH --cpus-per-task={yaml.cpus_per_task}", f"#SBATCH --signal=B:USR1@{yaml.signal_delay_s}"):
        assert line in script, line


@pytest.mark.parametrize("gpus, tasks", [(8, 8), (0, 1), (None, 1)])
def test_the_submitit_launcher_runs_one_task_per_gpu_and_one_without(gpus, tasks):
    """hydra.launcher.tasks_per_node follows gpus_per_node, so gpus_per_node=0 alone makes a CPU job."""
    from hydra import compose, initialize_config_dir

    from train.config import register

    extra = [] if gpus == 8 else [f"hydra.launcher.gpus_per_node={'null' if gpus is None else gpus}"]
    register()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=debug", *extra],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher.tasks_per_node == tasks
    # the launcher Hydra builds is the one that sizes each run from its plan (train/slurm.py, launch_planned)
    from hydra.core.plugins import Plugins

    # (Hydra's plugin scan loads the modules anew: compare the classes by name)
    mro = [c.__name__ for c in Plugins.instance().class_name_to_class[launcher._target_].__mro__]
    assert mro[:3] == ["PlannedSlurmLauncher", "SlurmLauncher", "BaseSubmititLauncher"]
    assert launcher._target_ == "hydra_plugins.syntax_dynamics_slurm.PlannedSlurmLauncher"
    assert launcher.setup == [f"export OMP_NUM_THREADS={launcher.cpus_per_task}"]


def test_the_script_reads_its_task_line_into_the_overrides(tmp_path):
    """The grid-line part of the script, run by bash for task 1: overrides with a space stay one word."""
    grid, sbatch = render(expand(GRID), SbatchOptions.from_launcher_yaml(partition="gpu"), tmp_path, "test")
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
    sized = ["--gpus-per-node", "4", "--mem-gb", "64", "--timeout-min", "600"]  # one request: one array
    assert main(["experiment=zhoblimp_grid", "seed=0", "--out", str(tmp_path), "--partition", "a100", *sized]) == 0
    assert len((tmp_path / "grid.txt").read_text().splitlines()) == 20
    assert "#SBATCH --partition=a100" in (tmp_path / "array.sbatch").read_text()
    # a `python -m train -m ...` command line works as it is (argparse used to refuse -m)
    assert main(["-m", "experiment=zhoblimp_grid", "seed=0", "--out", str(tmp_path / "m"), "--partition", "a100",
                 *sized]) == 0
    assert (tmp_path / "m" / "grid.txt").read_text() == (tmp_path / "grid.txt").read_text()


def test_a_placeholder_render_does_not_fill_is_named(tmp_path, monkeypatch):
    import train.slurm

    template = tmp_path / "array.sbatch.in"
    template.write_text("#!/bin/bash\n#SBATCH --partition=@@PARTITION@@\n#SBATCH --gres=@@GRES@@\n"
                        'echo "${OVERRIDES[@]}" "$@" user@@host\n')
    monkeypatch.setattr(train.slurm, "TEMPLATE", template)
    with pytest.raises(RuntimeError, match=r"array\.sbatch\.in: placeholder @@GRES@@ is not one render\(\) fills"):
        render([["seed=0"]], SbatchOptions.from_launcher_yaml(partition="gpu"), tmp_path / "out", "test")
    assert not (tmp_path / "out" / "array.sbatch").exists()
    template.write_text(template.read_text().replace("#SBATCH --gres=@@GRES@@\n", ""))
    _, sbatch = render([["seed=0"]], SbatchOptions.from_launcher_yaml(partition="gpu"), tmp_path / "out", "test")
    # bash's own $ and @ pass through untouched; only @@KEY@@ is a placeholder
    assert sbatch.read_text().endswith('#SBATCH --partition=gpu\necho "${OVERRIDES[@]}" "$@" user@@host\n')


@pytest.mark.parametrize("flag, value, message", [("--cpus-per-task", "0", "cpus_per_task=0: must be at least 1"),
                                                   ("--gpus-per-node", "-1", "gpus_per_node and signal_delay_s")])
def test_the_cli_names_a_bad_resource(tmp_path, capsys, flag, value, message):
    with pytest.raises(SystemExit):
        main(["seed=0", "--out", str(tmp_path), "--partition", "debug", flag, value])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "array.sbatch").exists()


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


def _requests(out: Path) -> dict[str, tuple[str, str, str]]:
    """run (its overrides' model-budget) -> (gpus, mem, time) of the array script whose grid lists it."""
    found = {}
    for script in sorted(out.glob("array*.sbatch")):
        text = script.read_text()
        get = lambda key: text.split(f"#SBATCH --{key}=")[1].split("\n")[0]  # noqa: E731
        grid = out / script.name.replace("array", "grid").replace(".sbatch", ".txt")
        for line in grid.read_text().splitlines():
            words = dict(w.split("=", 1) for w in shlex.split(line))
            found[f"{words['model']}-{words['budget']}-s{words['seed']}"] = (get("gpus-per-node"), get("mem"), get("time"))
    return found


def test_the_grid_asks_each_run_for_the_gpus_memory_and_time_its_plan_needs(tmp_path, capsys):
    from train.plan import plan
    from train.slurm import SLURM_GPU

    out = tmp_path / "out"
    assert main(["experiment=zhoblimp_grid", "seed=0", "budget=10M,3B", "--out", str(out), "--partition", "gpu"]) == 0
    got = _requests(out)
    assert len(got) == 10
    # a 14M-parameter run on 10M tokens: one GPU, 8 GB + 16 B x 14M for its one process (-> 16 GB), 30 min of
    # overhead + 1.5 x its planned minutes (-> 1 h); not 8 GPUs, 480 GB, 24 h
    assert got["pythia-14m-10M-s0"] == ("1", "16G", "01:00:00")
    # pythia-1.4b on 3B tokens: 1.4e9 x 3e9 x 6 FLOPs at the plan's 41.6 % of an A100's 312 TFLOP/s = 54 GPU-h;
    # 1 or 2 GPUs would take over the yaml's 24 h, 4 do not (the global batch of 256 takes 4 x 64)
    (big,) = plan(["experiment=zhoblimp_grid", "seed=0", "budget=3B", "model=pythia-1.4b"], SLURM_GPU)
    assert 1.5 * big.gpu_hours / 2 > 24 > 1.5 * big.gpu_hours / 4
    assert got["pythia-1.4b-3B-s0"] == ("4", "128G", "24:00:00")
    assert all(int(g) in (1, 2, 4) for g, _, _ in got.values())  # 256 sequences in micro-batches of 64
    assert "submit: sbatch" in capsys.readouterr().out
    # a key the user sets is every run's; the others still follow the plan
    out2 = tmp_path / "two"
    assert main(["experiment=zhoblimp_grid", "seed=0", "budget=10M", "--out", str(out2), "--partition", "gpu",
                 "--gpus-per-node", "2"]) == 0
    got = _requests(out2)
    assert {g for g, _, _ in got.values()} == {"2"} and got["pythia-14m-10M-s0"][1] == "32G"  # 2 processes


def test_runs_the_plan_marks_cannot_start_are_named_and_the_gpu_of_the_times_said(tmp_path, capsys):
    """Issue 44: 11 arrays for 60 runs the plan marks CANNOT START, without a word; the plan's hours were an
    H100's, the time limits an A100's, and neither output said so."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c .\n" * 1000)  # 8 kB: ~1,300 tokens by the plan's estimate, far below 10M
    assert main(["experiment=zhoblimp_grid", "seed=0,1", "model=pythia-14m", "budget=10M", f"data.paths=[{corpus}]",
                 "--out", str(tmp_path / "out"), "--partition", "gpu"]) == 0
    out, err = capsys.readouterr()
    assert "warning: 2 of 2 runs CANNOT START, as `python -m train plan` marks them (budget 10M needs a corpus" in err
    assert err.rstrip().endswith("their tasks would stop at start: pythia-14m-b10000000-s0, pythia-14m-b10000000-s1")
    assert ("time limits: the plan's hours on an A100-80GB (bf16) (312 TFLOP/s peak) x 1.5 + 30 min (`train plan "
            "--gpu A100 --peak-tflops 312`: the same hours)") in out


def test_a_run_the_plan_cannot_size_asks_for_the_whole_node_and_says_why(tmp_path, capsys):
    assert main(["experiment=demo", "data.budget_tokens=null", "--out", str(tmp_path), "--partition", "debug"]) == 0
    script = (tmp_path / "array.sbatch").read_text()
    assert "#SBATCH --gpus-per-node=8" in script and "#SBATCH --mem=480G" in script
    assert "data.budget_tokens is null" in capsys.readouterr().err
