"""The sbatch script variants the tests render (tests/test_slurm.py) and submit to the one-node cluster
(tests/test_slurm_cluster.py), and small helpers around sbatch/squeue/scontrol."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# name -> (launcher, gpus_per_node). "cpu": a CPU-only partition (one process per node, no GPU request);
# "2gpu": a GPU job, which the test cluster schedules on its two stand-in GPUs (slurm/local-cluster.sh)
# and whose two ranks then train on the CPU through gloo.
VARIANTS = {
    "srun-cpu": ("srun", 0),
    "torchrun-cpu": ("torchrun", 0),
    "deepspeed-cpu": ("deepspeed", 0),
    "srun-2gpu": ("srun", 2),
}


def expected_lines(launcher: str, gpus: int) -> tuple[list[str], list[str]]:
    """(lines the script must contain, substrings it must not) for a variant."""
    procs = max(gpus, 1)
    present = [f"#SBATCH --ntasks-per-node={procs if launcher == 'srun' else 1}", f"LAUNCHER={launcher}"]
    absent = ["--ntasks-per-node=0", "--nproc_per_node=0", "--num_gpus=0"]
    if gpus:
        present.append(f"#SBATCH --gpus-per-node={gpus}")
    else:
        absent.append("#SBATCH --gpus-per-node")
    if launcher == "torchrun":
        present.append(f"--nproc_per_node={procs}")
    if launcher == "deepspeed":
        present.append(f"--num_gpus={procs}")
    return present, absent


def job_env() -> dict:
    """The environment sbatch passes on to the job (--export=ALL): this interpreter's `python` first, and
    none of the rank variables an earlier in-process DeepSpeed test set in this process (init_distributed
    sets RANK=0, WORLD_SIZE=1 for a lone DeepSpeed process): exported into a 2-task step they made both
    tasks rank 0, as no login shell that submits a job would."""
    dist = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    return {**{k: v for k, v in os.environ.items() if k not in dist},
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


def sbatch(script: Path, env: dict, *options: str) -> str:
    """Submits the script (options such as --nodelist=n1 override its #SBATCH lines); returns the job id."""
    out = subprocess.run(["sbatch", "--parsable", *options, str(script)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def tasks(job: str) -> dict[str, dict[str, str]]:
    """The job's array tasks (or the job itself) as scontrol shows them: {"<job>_<task>": {key: value}}."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    result = {}
    for line in out.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        # A pending array not yet split shows its tasks with the throttle: ArrayTaskId=0%16 (or 0-1%16).
        name = (f"{fields['ArrayJobId']}_{fields['ArrayTaskId'].split('%')[0]}" if "ArrayTaskId" in fields
                else fields["JobId"])
        result[name] = fields
    return result


def wait_until(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def in_queue(job: str) -> bool:
    """Pending, running or completing (squeue leaves finished jobs out)."""
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True, timeout=30)
    return bool(out.stdout.strip())


def wait_done(job: str, timeout: float) -> dict[str, dict[str, str]]:
    wait_until(lambda: not in_queue(job), timeout, f"job {job} to finish")
    return tasks(job)


def logs(directory: Path) -> str:
    return "\n".join(f"== {p}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(Path(directory).rglob("*.out")))


def requeued(job: str):
    """The task once `scontrol requeue` put it back (Restarts=1, pending). SLURM holds a requeued batch job
    for about two minutes (BeginTime) before it may start again: release it in 2 s (not at once: a launch
    in the second of the requeue is refused, "Job credential revoked")."""
    fields = next(iter(tasks(job).values()))
    if fields["Restarts"] == "1" and fields["JobState"] == "PENDING":
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+2"], check=True, timeout=30)
        return fields
    return None
