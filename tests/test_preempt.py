"""Preemption: a signalled run saves a resume checkpoint and exits for requeue; the rerun of the same
command continues with no replayed or skipped step and the uninterrupted run's losses. Plus the run
directory lock."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainutil import TINY, losses, signal_at_step, tiny_cfg
from train.checkpoint import list_checkpoints, read_state
from train.lock import RunDirLocked, RunLock
from train.loop import train
from train.preempt import REQUEUE_EXIT

ROOT = Path(__file__).resolve().parents[1]
# ~60 steps of the tiny config, checkpoints at 20 and 40 (and 0, 60).
EXTRA = ["schedule=custom", "schedule.points=[20,40]", "logger.log_every=1", "probes=none"]


@pytest.fixture(autouse=True)
def one_thread():
    # The in-process runs share 2 cores with the subprocess: oversubscribed threads cost 3x here.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run; it also builds the token store the subprocesses reuse."""
    cache, run_dir = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("straight")
    train(tiny_cfg(cache, *EXTRA), run_dir)
    return cache, run_dir


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "logs" / "train.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "train/loss" in r]


def command(run_dir: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "train", *TINY, *EXTRA, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}"]


# 13: off the schedule, so the preemption writes a resume-only checkpoint; 20: on it, so the scheduled
# checkpoint is the resume checkpoint and nothing else is written.
@pytest.mark.parametrize("signalled", [13, 20])
def test_sigusr1_mid_run_then_rerun_gives_the_uninterrupted_trajectory(straight, tmp_path, signalled):
    cache, straight = straight
    broken = tmp_path / "broken"
    total = read_state(list_checkpoints(straight)[-1][1])["total_steps"]
    assert total == 60

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    returncode, err = signal_at_step(command(broken, cache), env, signalled)
    assert returncode == REQUEUE_EXIT, err[-3000:]
    assert f"preempted by SIGUSR1 after step {signalled}: resume checkpoint saved" in err
    # The signal arrived during step `signalled`: that step finishes, then the run stops.
    assert max(r["step"] for r in records(broken)) == signalled
    steps = [s for s, _ in list_checkpoints(broken)]
    assert steps == [0, signalled]
    last = list_checkpoints(broken)[-1][1]
    assert (last / "resume").is_dir()
    # Off the schedule no hooks ran on it and no checkpoint record was logged (a scheduled checkpoint
    # logs a record of its own, without train/loss).
    assert read_state(last)["preempted"] is (signalled == 13)
    text = (broken / "logs" / "train.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in text].count(signalled) == (1 if signalled == 13 else 2)

    # The requeued job: the same config and run directory (in-process here, which spares an interpreter
    # start; the preempted run above was a real process handling a real signal).
    train(tiny_cfg(cache, *EXTRA), broken)
    # Every step trained exactly once across the two processes: nothing replayed, nothing skipped.
    a, b = records(straight), records(broken)
    assert [r["step"] for r in b] == list(range(1, total + 1))
    assert [r["tokens"] for r in b] == [r["tokens"] for r in a]
    la, lb = losses(straight), losses(broken)
    for step in range(1, total + 1):
        assert lb[step] == pytest.approx(la[step], abs=1e-6), step
    # The preemption's resume-only checkpoint is gone once later checkpoints are whole.
    assert [s for s, _ in list_checkpoints(broken)] == [s for s, _ in list_checkpoints(straight)] == [0, 20, 40, 60]


def test_a_second_job_on_the_same_run_directory_is_refused(tmp_path):
    cache = tmp_path / "cache"
    with RunLock(tmp_path / "run"):
        with pytest.raises(RunDirLocked, match=r"run is in use by pid \d+ .*two jobs must not train"):
            train(tiny_cfg(cache, "probes=none"), tmp_path / "run")


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
    code = ("import sys, time; from train.lock import RunLock; RunLock(sys.argv[1]).acquire(); "
            "print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(RunDirLocked, match=f"pid {holder.pid}"):
        RunLock(tmp_path).acquire()
    holder.kill()
    holder.wait()
    with RunLock(tmp_path):  # the kernel dropped the dead holder's flock; the stale file is harmless
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()}")
