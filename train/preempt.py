"""Preemption as a plain object the training loop consults once per step.

SLURM warns a job before killing it: `--signal=USR1@120` (our sbatch template), USR2 (submitit's
default, `signal_delay_s` ahead of the time limit), or SIGTERM with KillWait seconds of grace. A handler
must not save a checkpoint itself -- it would run in the middle of a step, on one rank only -- so it only
records the signal; the loop finishes the current step, all ranks agree, a resume checkpoint is written,
and the process exits with REQUEUE_EXIT. Under submitit the handler that was installed before ours (its
checkpoint-and-requeue) is called after the save, so submitit requeues the job as it would have.

The other half of requeue -- rerunning the same command resumes exactly -- needs nothing here: the
batch of step s is a pure function of s (train/sequences.py) and the resume checkpoint holds weights,
optimizer and RNG.
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

from train.interrupt import REQUEUE_EXIT, Interrupted, kill_children

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
    """Until training() is called (set-up: corpus, tokenizer, token store, model, probes), a signal stops
    the process at once (train/interrupt.py); from then on it is recorded and honoured after the step.
    Ctrl-C (SIGINT) counts as a preemption too; a second Ctrl-C during a step stops at once."""

    def __init__(self, signals: Iterable[int] = SIGNALS):
        self.signals = tuple(signals)
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self.setup = True
        self._raised = False
        self.stage = "starting"  # what set-up is doing, for the one-line message

    def training(self) -> None:
        """Steps begin: signals are recorded from here on (a checkpoint can then be saved)."""
        self.setup = False

    def install(self) -> "Preemption":
        # Python only lets the main thread set handlers; elsewhere (a notebook thread) there is no
        # preemption to catch, and training still runs.
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __enter__(self) -> "Preemption":
        return self.install()

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
        """After the resume checkpoint: hand over to submitit's own handler (it requeues the job and
        exits) when it had installed one, else exit with REQUEUE_EXIT."""
        previous = self._previous.get(self.signum)
        self.uninstall()
        print(Preempted(step, self.signum), file=sys.stderr, flush=True)
        # Ctrl-C's previous handler is the entry point's (train/__main__.py: "before the run started"), not
        # a requeue: calling it printed that false line and exited 130 after the checkpoint was saved
        if callable(previous) and self.signum != signal.SIGINT:
            previous(self.signum, None)  # submitit: checkpoint_and_try_requeue -> sys.exit
        raise Preempted(step, self.signum)


def drop_unscheduled(run_dir: Path, scheduled: set[int], before: int) -> None:
    """Deletes resume-only checkpoints that a preemption wrote off the schedule, once a later checkpoint
    is whole: they exist to resume from, not to be probed. Renamed away first so a crash mid-delete
    never leaves a partial directory under a checkpoint name."""
    from train.checkpoint import list_checkpoints

    for step, path in list_checkpoints(run_dir):
        if step < before and step not in scheduled:
            doomed = path.with_name(f".deleting-step{step}")
            os.replace(path, doomed)
            shutil.rmtree(doomed)
