"""Both cluster paths on a real one-node SLURM cluster (slurmctld + slurmd on this machine, brought up by
slurm/local-cluster.sh): the sbatch job array of `python -m train.slurm` in each rendered variant, the
submitit launcher, a preemption by `scancel -b -s USR1` that requeues and resumes onto the uninterrupted
trajectory, and slurmctld's own time-limit warning (`#SBATCH --signal`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slurmutil import VARIANTS, expected_lines, job_env, logs, requeued, sbatch, tasks, wait_done, wait_until
from trainutil import TINY, losses, tiny_cfg
from train.checkpoint import list_checkpoints, read_state
from train.loop import train
from train.slurm import main as render_main

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[1]
# Jobs are tiny: 1 CPU, 2 GB, well inside the test node.
RESOURCES = ["--cpus-per-task", "1", "--mem-gb", "2", "--timeout-min", "10"]
PREEMPT = ["probes=none", "schedule=custom", "schedule.points=[20,40]", "data.epochs=5"]  # ~300 steps
SUBMITIT_NAME = f"syntax-dynamics-test-{os.getpid()}"
# ~3700 steps (over a minute and a half): still training when the time-limit warning comes.
# 2000 epochs of the tiny corpus (120,000 steps): far longer than the 2-minute limit on any machine (60
# epochs ended in 33 s on a quiet one, before slurmctld's warning came)
TIMELIMIT = ["probes=none", "schedule=custom", "schedule.points=[]", "data.epochs=2000", "seed=0"]


@pytest.fixture(scope="module")
def cluster(slurm_partition, tmp_path_factory):
    """The partition, a scratch directory, and the shared token store built once (the jobs start at the
    same time and would otherwise build it concurrently)."""
    tmp = tmp_path_factory.mktemp("slurm")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the jobs (OMP_NUM_THREADS=1): the in-process losses compare exactly
    train(tiny_cfg(tmp / "cache", "probes=none", "schedule=custom", "schedule.points=[]"), tmp / "warm")
    state = {"partition": slurm_partition, "tmp": tmp, "cache": tmp / "cache", "jobs": []}
    # Submitted first: its wait for slurmctld's warning overlaps the array test (checked second).
    state["timelimit"] = render(state, "timelimit", TIMELIMIT, "--gpus-per-node", "0", "--timeout-min", "2",
                                "--signal-delay-s", "60")
    state["timelimit_job"] = submit(state, state["timelimit"])
    yield state
    submitted = state["jobs"]
    torch.set_num_threads(threads)
    # Nothing of a failed test stays on the node (submitit's jobs go by the name the test gives them).
    # (Two calls: scancel given job ids and a filter only cancels the ids that match it.)
    subprocess.run(["scancel", *submitted], capture_output=True, timeout=60)
    subprocess.run(["scancel", f"--name={SUBMITIT_NAME}"], capture_output=True, timeout=60)


def render(cluster, name: str, overrides: list[str], *options: str) -> Path:
    """`python -m train.slurm` for the tiny config: returns the sweep directory (array.sbatch, logs/)."""
    out = cluster["tmp"] / name
    argv = [*TINY, f"data.cache_dir={cluster['cache']}", f"hydra.run.dir={out}/runs/s${{seed}}", *overrides,
            "--out", str(out), "--partition", cluster["partition"], *RESOURCES, *options]
    assert render_main(argv) == 0
    return out


def submit(cluster, out: Path) -> str:
    job = sbatch(out / "array.sbatch", job_env())
    cluster["jobs"].append(job)
    return job


def assert_completed(job_tasks: dict, n: int, out: Path) -> None:
    assert len(job_tasks) == n, job_tasks.keys()
    for name, fields in job_tasks.items():
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), f"{name}: {fields['JobState']} " \
            f"{fields['ExitCode']}\n{logs(out)}"


@pytest.fixture(scope="module")
def array_grid(cluster):
    """The sbatch path's two-run grid (seeds 0 and 1), submitted once for the tests that need it, in any
    order or alone: (sweep directory, its job's tasks)."""
    out = render(cluster, "array", ["seed=0,1"], "--gpus-per-node", "0")
    return out, wait_done(submit(cluster, out), 180)


def test_the_sbatch_array_trains_a_two_run_grid_on_a_cpu_partition(array_grid):
    out, job_tasks = array_grid
    present, absent = expected_lines("srun", 0)
    script = (out / "array.sbatch").read_text()
    assert all(line in script for line in present) and not any(text in script for text in absent)
    assert_completed(job_tasks, 2, out)
    runs = [out / "runs" / f"s{seed}" for seed in (0, 1)]
    for run in runs:
        steps = [s for s, _ in list_checkpoints(run)]
        assert steps[0] == 0 and steps[-1] == read_state(list_checkpoints(run)[-1][1])["total_steps"]
        assert (run / "evals" / f"step{steps[-1]}" / "grammar.parquet").is_file()
    # Each task ran its own line of the grid: different seeds, different initial weights.
    a, b = (run / "checkpoints" / "step0" / "model.safetensors" for run in runs)
    assert a.read_bytes() != b.read_bytes()


def test_the_time_limit_warning_preempts_and_requeues(cluster):
    """Submitted by the fixture with --time=2 min and --signal=B:USR1@60: slurmctld warns the batch shell
    30 to 60 s into the job (it checks time limits every 30 s); the test signals nothing. The run is long
    enough to be training then. Checked before SLURM's ~2 min hold on the requeued task ends, and the task
    is then cancelled: a rerun resuming is the scancel test's below."""
    out, job = cluster["timelimit"], cluster["timelimit_job"]
    assert "#SBATCH --time=00:02:00" in (out / "array.sbatch").read_text()
    run = out / "runs" / "s0"
    wait_until(lambda: int(tasks(job)[f"{job}_0"]["Restarts"]) >= 1, 180, "the time-limit warning and the requeue")
    subprocess.run(["scancel", job], check=True, timeout=30)
    text = logs(out)
    assert "preempted by SIGUSR1" in text and "requeueing; the rerun resumes" in text, text
    assert "DUE TO TIME LIMIT" not in text  # warned in time, not killed at the limit
    steps = [r["step"] for r in records(run)]
    state = read_state(list_checkpoints(run)[-1][1])
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < state["total_steps"]
    assert state["step"] == steps[-1] and state["preempted"] is True
    assert (list_checkpoints(run)[-1][1] / "resume").is_dir()


def test_every_rendered_launcher_variant_runs_on_the_cluster(cluster):
    """The other variants tests/test_slurm.py renders (srun-cpu is the grid above), submitted together.
    srun-2gpu asks for 2 GPUs (the test node's stand-ins) and trains as 2 ranks that the SLURM variables
    wire together; the others run one process on a CPU-only request."""
    jobs = {}
    for variant in ("torchrun-cpu", "deepspeed-cpu", "srun-2gpu"):
        launcher, gpus = VARIANTS[variant]
        out = render(cluster, variant, ["probes=none", "seed=0"], "--launcher", launcher,
                     "--gpus-per-node", str(gpus))
        present, absent = expected_lines(launcher, gpus)
        script = (out / "array.sbatch").read_text()
        assert all(line in script for line in present) and not any(text in script for text in absent)
        jobs[variant] = (submit(cluster, out), out)
    try:
        for variant, (job, out) in jobs.items():
            assert_completed(wait_done(job, 240), 1, out)
            last = read_state(list_checkpoints(out / "runs" / "s0")[-1][1])
            assert last["step"] == last["total_steps"] and last["world_size"] == max(VARIANTS[variant][1], 1), variant
    finally:  # a job that failed this test must not hold the one node while the next tests wait for it
        subprocess.run(["scancel", *(job for job, _ in jobs.values())], capture_output=True, timeout=60)


def test_the_submitit_launcher_trains_the_same_grid_on_a_cpu_partition(cluster, array_grid):
    sweep = cluster["tmp"] / "submitit"
    cmd = [sys.executable, "-m", "train", "-m", "hydra/launcher=slurm",
           f"hydra.launcher.partition={cluster['partition']}", "hydra.launcher.gpus_per_node=0",
           "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=10",
           f"hydra.launcher.name={SUBMITIT_NAME}", *TINY,
           f"data.cache_dir={cluster['cache']}", f"hydra.sweep.dir={sweep}", "seed=0,1"]
    proc = subprocess.run(cmd, cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    submission = next((sweep / ".submitit").glob("*/*_submission.sh")).read_text()
    # gpus_per_node=0 alone made it one task per node (configs/hydra/launcher/slurm.yaml).
    assert "#SBATCH --ntasks-per-node=1" in submission and "#SBATCH --partition=debug" in submission
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name for p in runs] == ["tiny-bfull-s0", "tiny-bfull-s1"]
    for run in runs:
        last = read_state(list_checkpoints(run)[-1][1])
        assert last["step"] == last["total_steps"]
    # The same run as the sbatch path's seed 0: both cluster paths train one and the same trajectory,
    # bitwise (one process, OMP_NUM_THREADS=1 in both jobs: the same kernels on the same machine).
    out, job_tasks = array_grid
    assert_completed(job_tasks, 2, out)
    array_s0 = losses(out / "runs" / "s0")
    assert len(array_s0) > 10 and losses(runs[0]) == array_s0


def records(run: Path) -> list[dict]:
    lines = (run / "logs" / "train.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "train/loss" in r]


def logged_steps(run: Path) -> int:
    log = run / "logs" / "train.jsonl"
    return log.read_text().count("train/loss") if log.exists() else 0


def test_scancel_usr1_requeues_the_task_and_the_rerun_ends_on_the_uninterrupted_trajectory(cluster):
    out = render(cluster, "preempt", [*PREEMPT, "seed=0"], "--gpus-per-node", "0")
    run = out / "runs" / "s0"
    job = submit(cluster, out)
    # The uninterrupted run, in this process while the job starts.
    straight = cluster["tmp"] / "straight"
    train(tiny_cfg(cluster["cache"], *PREEMPT), straight)
    total = len(records(straight))
    wait_until(lambda: logged_steps(run) >= 10, 120, "10 logged steps")
    # As SLURM preempts: USR1 to the batch shell, which passes it to the training step.
    subprocess.run(["scancel", "-b", "-s", "USR1", f"{job}_0"], check=True, timeout=30)
    wait_until(lambda: requeued(f"{job}_0"), 120, "the requeue")
    text = logs(out)
    assert "preempted by SIGUSR1" in text and "requeueing; the rerun resumes" in text, text
    stopped = max(r["step"] for r in records(run))
    assert 10 <= stopped < total, (stopped, total)
    assert_completed(wait_done(job, 180), 1, out)
    assert tasks(job)[f"{job}_0"]["Restarts"] == "1"
    # Every step trained exactly once across the two runs of the task, with the uninterrupted losses.
    assert [r["step"] for r in records(run)] == list(range(1, total + 1))
    la, lb = losses(straight), losses(run)
    assert lb == pytest.approx(la, abs=1e-6)
