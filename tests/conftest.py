import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# W&B never reaches the network from tests; the deepspeed accelerator probe stays quiet on CPU.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TQDM_DISABLE", "1")


def skip_or_fail_in_ci(reason: str) -> None:
    """A test that cannot run here skips on a developer's machine; under CI=true (.ci/run's environment)
    it fails instead, so CI never passes with the tests that matter silently left out."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a test that cannot run fails rather than skips)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared():
    """`shared("benchmarks", "zhoblimp")` -> that path under ../shared (the real benchmarks, corpora and
    treebanks, never copied into the repository). Absent, the test skips locally and fails under CI=true:
    the real counts, the tokenizer's id equality on real sentences and the treebank readers run there."""

    def need(*parts: str) -> Path:
        path = SHARED.joinpath(*parts)
        if not path.exists():
            skip_or_fail_in_ci(f"{path} is absent: the real benchmarks, corpora and treebanks live in {SHARED}")
        return path

    return need


def _slurm_cluster_problem(nodes: int = 1) -> str | None:
    """None when a cluster of at least `nodes` nodes takes jobs (brought up by slurm/local-cluster.sh if need
    be), else why not."""
    import shutil
    import subprocess

    script = ROOT / "slurm" / "local-cluster.sh"
    size = ["--nodes", str(nodes)]
    if shutil.which("sinfo") and subprocess.run(["bash", str(script), "status", *size], capture_output=True,
                                                timeout=60).returncode == 0:
        return None
    if os.geteuid() != 0:
        return "no SLURM cluster, and slurm/local-cluster.sh up needs root to install and start one"
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        return "no SLURM cluster, and no apt-get to install slurm-wlm/munge"
    try:
        up = subprocess.run(["bash", str(script), "up", *size], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return "slurm/local-cluster.sh up did not finish within 900 s"
    if up.returncode != 0:
        return f"slurm/local-cluster.sh up {' '.join(size)} failed:\n{up.stderr[-3000:]}"
    return None


@pytest.fixture(scope="session")
def slurm_partition() -> str:
    """The partition of a real one-node SLURM cluster on this machine (slurm/local-cluster.sh). Skips where
    none can be brought up (not root, no apt); under CI=true that is a failure instead."""
    problem = _slurm_cluster_problem()
    if problem is not None:
        skip_or_fail_in_ci(problem)
    return "debug"


@pytest.fixture(scope="session")
def slurm_two_nodes() -> str:
    """The partition of a real two-node SLURM cluster on this machine (slurm/local-cluster.sh up --nodes 2:
    n1 and n2 on loopback); skips or fails under CI=true as slurm_partition does."""
    problem = _slurm_cluster_problem(nodes=2)
    if problem is not None:
        skip_or_fail_in_ci(problem)
    return "debug"
