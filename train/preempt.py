"""Preemption as a plain object the training loop consults once per step.

SLURM warns a job before killing it (`--signal=USR1@120`, submitit's USR2, or SIGTERM). The handler only
records the signal (saving there would run mid-step, on one rank); the loop finishes the step, the ranks
agree, a resume checkpoint is written and the process exits with REQUEUE_EXIT, after calling submitit's own
handler when there was one. Rerunning the command resumes exactly: a step's batch is a pure function of it.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Iterable

import torch

from train.interrupt import REQUEUE_EXIT, Interrupted, kill_children, note_requeue

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)


class Preempted(SystemExit):
    """Raised out of train() after the resume checkpoint is whole; exits the process with REQUEUE_EXIT."""

    def __init__(self, step: int, signum: int):
        super().__init__(REQUEUE_EXIT)
        self.step, self.signum = step, signum

    def __str__(self) -> str:
        return (f"preempted by {signal.Signals(self.signum).name} after step {self.step}: resume "
                f"checkpoint saved; rerun the same command to continue (exit status {REQUEUE_EXIT})")


class Preemption:
    """In set-up (until training()) a signal stops the process at once (train/interrupt.py); then it is
    recorded and honoured after the step. Ctrl-C counts too; a second one during a step stops at once."""

    def __init__(self, signals: Iterable[int] = SIGNALS):
        self.signals = tuple(signals)
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self.setup = True
        self._raised = False
        self.stage = "starting"  # what set-up is doing, for the one-line message

    def training(self) -> None:
        self.setup = False

    def __enter__(self) -> "Preemption":
        # only the main thread may set handlers; elsewhere (a notebook thread) training runs without
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def _record(self, signum: int, frame) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if self._raised or not (self.setup or (not first and signum == signal.SIGINT)):
            return
        self._raised = True  # raised once: a further signal while unwinding is only recorded
        kill_children()
        raise Interrupted(signum, self.stage, during_training=not self.setup)

    def requested(self, dist) -> bool:
        """Whether any rank got a signal: collective, so every rank stops after the same step."""
        flag = int(self.signum is not None)
        if dist.world > 1:
            t = torch.tensor([flag], dtype=torch.int64, device=dist.device)  # nccl reduces GPU tensors only
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            flag = int(t.item())
            if flag and self.signum is None:  # a peer was signalled; this rank was not (yet)
                self.signum = signal.SIGUSR1
        return bool(flag)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def exit(self, step: int) -> None:
        """After the resume checkpoint: submitit's own handler (it requeues and exits), else REQUEUE_EXIT."""
        previous = self._previous.get(self.signum)
        self.uninstall()
        print(Preempted(step, self.signum), file=sys.stderr, flush=True)
        note_requeue(str(Preempted(step, self.signum)))
        # Ctrl-C's previous handler is the entry point's ("before the run started"), not a requeue
        if callable(previous) and self.signum != signal.SIGINT:
            previous(self.signum, None)  # submitit: checkpoint_and_try_requeue -> sys.exit
        raise Preempted(step, self.signum)


def drop_unscheduled(run_dir: Path, scheduled: set[int], before: int) -> None:
    """Deletes resume-only checkpoints a preemption wrote off the schedule once a later one is whole."""
    from train.checkpoint import list_checkpoints
    for step, path in list_checkpoints(run_dir):
        if step < before and step not in scheduled:
            doomed = path.with_name(f".deleting-step{step}")
            os.replace(path, doomed)
            shutil.rmtree(doomed)
