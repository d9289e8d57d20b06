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

from trainutil import TINY, losses, signal_after_steps, tiny_cfg
from train.checkpoint import list_checkpoints, read_state
from train.lock import RunDirLocked, RunLock
from train.loop import train
from train.preempt import REQUEUE_EXIT

ROOT = Path(__file__).resolve().parents[1]
# ~60 steps of the tiny config: a step takes tens of ms, so a signal sent after step 10 lands mid-run.
EXTRA = ["schedule=custom", "schedule.points=[20,40]", "logger.log_every=1", "probes=none"]


@pytest.fixture(autouse=True)
def one_thread():
    # The in-process runs share 2 cores with the subprocess: oversubscribed threads cost 3x here.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "logs" / "train.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "train/loss" in r]


def command(run_dir: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "train", *TINY, *EXTRA, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}"]


def test_sigusr1_mid_run_then_rerun_gives_the_uninterrupted_trajectory(tmp_path):
    cache, straight, broken = tmp_path / "cache", tmp_path / "straight", tmp_path / "broken"
    train(tiny_cfg(cache, *EXTRA), straight)  # also builds the token store the subprocesses reuse
    total = read_state(list_checkpoints(straight)[-1][1])["total_steps"]
    assert total > 50

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    returncode, err = signal_after_steps(command(broken, cache), broken, tmp_path, env)
    assert returncode == REQUEUE_EXIT, err[-3000:]
    assert "preempted by SIGUSR1" in err
    stopped = max(r["step"] for r in records(broken))
    assert 10 <= stopped < total
    # The resume checkpoint at the step it stopped: whole, with resume state, and -- off the schedule --
    # no hooks ran on it (a scheduled checkpoint logs a record of its own, without train/loss).
    steps = [s for s, _ in list_checkpoints(broken)]
    if stopped not in (20, 40):
        assert steps[-1] == stopped and read_state(list_checkpoints(broken)[-1][1])["preempted"] is True
        text = (broken / "logs" / "train.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in text].count(stopped) == 1
    assert (list_checkpoints(broken)[-1][1] / "resume").is_dir()

    # The requeued job: the same config and run directory (in-process here, which spares an interpreter
    # start; the preempted run above was a real process receiving a real signal).
    train(tiny_cfg(cache, *EXTRA), broken)
    # Every step trained exactly once across the two processes: nothing replayed, nothing skipped.
    a, b = records(straight), records(broken)
    assert [r["step"] for r in b] == list(range(1, total + 1))
    assert [r["tokens"] for r in b] == [r["tokens"] for r in a]
    la, lb = losses(straight), losses(broken)
    for step in range(1, total + 1):
        assert lb[step] == pytest.approx(la[step], abs=1e-6), step
    # The preemption's resume-only checkpoint is gone once later checkpoints are whole.
    assert [s for s, _ in list_checkpoints(broken)] == [s for s, _ in list_checkpoints(straight)]


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
