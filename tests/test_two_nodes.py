"""Two nodes, two processes each (gloo), on the two-node SLURM cluster of `slurm/local-cluster.sh up --nodes 2`
(n1 and n2, each slurmd in its own UTS namespace on loopback): every launcher of the sbatch script (srun,
torchrun, deepspeed) and the submitit launcher with hydra.launcher.nodes=2 train the one-process run's
trajectory; a preemption notice that reaches one node's process requeues the job and the rerun ends on the
uninterrupted two-node run; two tasks of one array on the same node each get a rendezvous port of
their own.

All jobs are submitted at once by the module fixture (the cluster runs them one after another: each takes
both nodes' CPUs), so the tests wait on jobs that are already running."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import GPTNeoXConfig

from numerics import loss_tol
from slurmutil import job_env, logs, requeued, sbatch, tasks, wait_done, wait_until
from trainutil import TINY, compose_cfg, losses
from train.checkpoint import list_checkpoints, read_state
from train.config import to_typed
from train.faults import ENV as FAULT
from train.loop import train
from train.slurm import main as render_main

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[1]
# The smallest run that still has three checkpoints (0, 10, 29) and probes on each: 29 steps of 8 x 32
# tokens, a micro batch of 2 so that 1, 2 and 4 processes split the global batch of 8 alike.
COMMON = [o for o in TINY if not o.startswith(("probes.benchmarks", "optim.micro_batch", "data.grammar.n_documents"))] + [
    "probes.benchmarks=[{name: grammar, max_pairs_per_paradigm: 2}]", "data.grammar.n_documents=40",
    "optim.micro_batch=2", "schedule=custom", "schedule.points=[10]", "seed=0"]
TWO_NODES = ["--nodes", "2", "--gpus-per-node", "2", "--cpus-per-task", "1", "--mem-gb", "2", "--timeout-min", "20",
             "--signal-delay-s", "30"]  # a first DeepSpeed job compiles its shm op (minutes on a busy machine)
# launcher -> engine overrides: each launcher once, both engines, ZeRO-1 and ZeRO-2
VARIANTS = {"srun": ["engine=torch"], "torchrun": ["engine=deepspeed", "engine.zero_stage=2"],
            "deepspeed": ["engine=deepspeed", "engine.zero_stage=1"]}
PREEMPT_STEP = 13  # off the schedule: the preemption writes a resume-only checkpoint
SUBMITIT_NAME = "syntax-dynamics-two-nodes"


def render(tmp: Path, name: str, overrides: list[str], *options: str) -> Path:
    out = tmp / name
    argv = [*COMMON, f"data.cache_dir={tmp / 'cache'}", f"hydra.run.dir={out}/runs/s${{seed}}", *overrides,
            "--out", str(out), "--partition", "debug", *options]
    assert render_main(argv) == 0
    return out


@pytest.fixture(scope="module")
def cluster(slurm_two_nodes, tmp_path_factory):
    """Submits every job of this module, then trains the one-process reference in-process (it also builds
    the token store first: the jobs would otherwise build it concurrently)."""
    tmp = tmp_path_factory.mktemp("two_nodes")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the jobs (OMP_NUM_THREADS=1)
    reference = tmp / "one"
    train(to_typed(compose_cfg([*COMMON, f"data.cache_dir={tmp / 'cache'}", "engine=torch"])), reference)
    jobs = {}
    # Two runs of one array on n1 (--nodelist overrides the script's own node choice), one deepspeed process
    # each, which both need a rendezvous port: submitted first, so that both start at once on the idle node
    out = render(tmp, "ports", ["engine=deepspeed", "probes=none", "seed=0,1"], "--launcher", "deepspeed",
                 "--nodes", "1", "--gpus-per-node", "0", "--cpus-per-task", "1", "--mem-gb", "2", "--timeout-min", "15")
    jobs["ports"] = (sbatch(out / "array.sbatch", job_env(), "--nodelist=n1"), out)
    for launcher, engine in VARIANTS.items():
        out = render(tmp, launcher, engine, "--launcher", launcher, *TWO_NODES)
        jobs[launcher] = (sbatch(out / "array.sbatch", job_env()), out)
    # srun/torch again, with a SIGUSR1 to rank 2 (the first process on n2) during step 13
    out = render(tmp, "preempt", ["engine=torch"], *TWO_NODES)
    jobs["preempt"] = (sbatch(out / "array.sbatch", {**job_env(), FAULT: f"mid_step:step{PREEMPT_STEP}:SIGUSR1@rank2"}),
                       out)
    sweep = tmp / "submitit"
    submitit = subprocess.Popen(
        [sys.executable, "-m", "train", "-m", "hydra/launcher=slurm", "hydra.launcher.partition=debug",
         "hydra.launcher.nodes=2", "hydra.launcher.gpus_per_node=2", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=15", f"hydra.launcher.name={SUBMITIT_NAME}",
         *COMMON, "engine=torch", f"data.cache_dir={tmp / 'cache'}", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield {"reference": reference, "jobs": jobs, "submitit": (submitit, sweep)}
    torch.set_num_threads(threads)
    submitit.kill()
    subprocess.run(["scancel", *(job for job, _ in jobs.values())], capture_output=True, timeout=60)
    subprocess.run(["scancel", f"--name={SUBMITIT_NAME}"], capture_output=True, timeout=60)


def finished(job: str, out: Path, n: int = 1, timeout: float = 900) -> None:
    job_tasks = wait_done(job, timeout)
    assert len(job_tasks) == n, job_tasks.keys()
    for name, fields in job_tasks.items():
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), \
            f"{name}: {fields['JobState']} {fields['ExitCode']}\n{logs(out)}"


def records(run: Path, event: str = "train") -> list[dict]:
    lines = (run / "logs" / "train.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def assert_same_run(run: Path, reference: Path) -> None:
    """The one-process run's batches and (within float reduction order) losses, on 4 processes, with one
    eval file per checkpoint written by one process."""
    ref, got = records(reference), records(run)
    assert [r["step"] for r in got] == [r["step"] for r in ref] and len(ref) == 29
    assert {r["world_size"] for r in got} == {4}
    assert [r["batch_sha256"] for r in got] == [r["batch_sha256"] for r in ref]
    config = GPTNeoXConfig.from_pretrained(list_checkpoints(reference)[0][1])
    a, b = losses(reference), losses(run)
    for step in a:  # 8 sequences of 32 tokens a step
        assert b[step] == pytest.approx(a[step], abs=loss_tol(config, 32, 8 * 32, a[step])), step
    last = read_state(list_checkpoints(run)[-1][1])
    assert last["world_size"] == 4 and last["step"] == last["total_steps"] == 29
    steps = [s for s, _ in list_checkpoints(run)]
    assert steps == [0, 10, 29]
    # one checkpoint record per checkpoint (one logger: rank 0), one eval file each, each pair once
    assert [r["step"] for r in records(run, "checkpoint")] == steps
    assert sorted(p.relative_to(run / "evals").as_posix() for p in (run / "evals").rglob("*.parquet")) == \
        [f"step{s}/grammar.parquet" for s in steps]
    for s in steps:
        pairs = pd.read_parquet(run / "evals" / f"step{s}" / "grammar.parquet")
        ref_pairs = pd.read_parquet(reference / "evals" / f"step{s}" / "grammar.parquet")
        assert pairs["pair_id"].is_unique and sorted(pairs["pair_id"]) == sorted(ref_pairs["pair_id"])


@pytest.mark.parametrize("launcher", list(VARIANTS))
def test_each_sbatch_launcher_trains_the_one_process_run_on_two_nodes(cluster, launcher):
    job, out = cluster["jobs"][launcher]
    finished(job, out)
    assert tasks(job)[f"{job}_0"]["NodeList"] == "n[1-2]"
    assert_same_run(out / "runs" / "s0", cluster["reference"])


def test_the_submitit_launcher_with_two_nodes_trains_the_one_process_run(cluster):
    proc, sweep = cluster["submitit"]
    _, err = proc.communicate(timeout=1200)
    assert proc.returncode == 0, err[-4000:]
    submission = next((sweep / ".submitit").glob("*/*_submission.sh")).read_text()
    assert "#SBATCH --nodes=2" in submission and "#SBATCH --ntasks-per-node=2" in submission
    (run,) = [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert_same_run(run, cluster["reference"])


def test_a_preemption_on_one_node_requeues_and_the_rerun_ends_on_the_uninterrupted_run(cluster):
    """SIGUSR1 reaches rank 2 (n2) alone during step 13: every rank stops after that step, the resume
    checkpoint holds all four ranks' state, the job exits 75 and requeues; the rerun trains steps 14-29 and
    its batches are the uninterrupted two-node run's (the srun job) and its losses too, within float
    reduction order (tests/numerics.py): not bitwise, as on one node (tests/test_preempt.py)."""
    job, out = cluster["jobs"]["preempt"]
    run = out / "runs" / "s0"
    wait_until(lambda: requeued(f"{job}_0"), 900, "the requeue")
    text = logs(out)
    assert f"preempted by SIGUSR1 after step {PREEMPT_STEP}" in text and "requeueing; the rerun resumes" in text, text
    assert max(r["step"] for r in records(run)) == PREEMPT_STEP
    resume = list_checkpoints(run)[-1][1] / "resume"
    assert sorted(p.name for p in resume.glob("rng_rank*.pt")) == [f"rng_rank{r}.pt" for r in range(4)]
    finished(job, out)
    assert tasks(job)[f"{job}_0"]["Restarts"] == "1"
    steps = [r["step"] for r in records(run)]
    assert steps == list(range(1, 30))  # every step trained once across the two runs of the job
    straight_job, straight = cluster["jobs"]["srun"]
    finished(straight_job, straight)
    assert_same_run(run, straight / "runs" / "s0")


def test_two_array_tasks_on_one_node_each_get_their_own_rendezvous_port(cluster):
    job, out = cluster["jobs"]["ports"]
    finished(job, out, n=2)
    job_tasks = tasks(job).values()
    assert {fields["NodeList"] for fields in job_tasks} == {"n1"}
    # they ran at the same time: one port for both would have been taken by the first
    assert max(f["StartTime"] for f in job_tasks) < min(f["EndTime"] for f in job_tasks)
    # the deepspeed runner prints its launch command, with the port, at the top of each task's log
    text = "\n".join(f.read_text(errors="replace") for f in (out / "logs").glob("*.out"))
    ports = {line.split("--master_port=")[1].split()[0] for line in text.splitlines() if "--master_port=" in line}
    assert len(ports) == 2, ports
    for seed in (0, 1):
        last = read_state(list_checkpoints(out / "runs" / f"s{seed}")[-1][1])
        assert last["step"] == last["total_steps"]
