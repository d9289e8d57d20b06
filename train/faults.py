"""Fault injection for the crash and preemption tests: SYNTAX_DYNAMICS_FAULT=<point>:step<N> kills this
process with SIGKILL when it reaches <point> for step N; <point>:step<N>:<SIGNAL> (e.g. SIGUSR1) sends that
signal instead, so a preemption lands at a named step rather than whenever a test's poll catches up;
<point>:step<N>:<SIGNAL>@rank<R> only in the process of that RANK (a notice that reaches one node first).
Unset (always, outside the tests) nothing happens.

The points (where each call sits):
  mid_step          the loop, after the backward passes of step N, before the optimizer update
  checkpoint_write  train.checkpoint.save_checkpoint, with checkpoints/.tmp-step<N>/ half written
  after_rename      the loop, once checkpoints/step<N> is whole, before any hook ran on it
  eval_write        probes.scoring.store.write_pairs, with the eval file of step N under its temporary name
  eval_written      probes.scoring.store.write_pairs, once the eval file of step N is in place
  bf16_rewrite      train.checkpoint.weights_to_bf16, step N's bf16 weights renamed in, config.json not yet

SYNTAX_DYNAMICS_FAULT=<point>:stall makes a set-up point hang as a stuck C call or worker does: signals
blocked, asleep for an hour (stall_point), after printing `fault: stalled at <point> (pid N)` on stderr.
  tokenizer_training  inside sentencepiece's training call (train/tokenizer.py)
  load_dataset        a worker process of the corpus load, holding the first corpus file open (train/corpus.py)
"""
from __future__ import annotations

import os
import signal
import sys
import time

ENV = "SYNTAX_DYNAMICS_FAULT"
POINTS = ("mid_step", "checkpoint_write", "after_rename", "eval_write", "eval_written", "bf16_rewrite")


def fault_point(point: str, step: int) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    where, at, *sig = spec.split(":")
    sig, _, rank = (sig or [""])[0].partition("@rank")
    if (where, at) == (point, f"step{step}") and rank in ("", os.environ.get("RANK", "0")):
        # a handled signal runs its Python handler before the next bytecode: the step then finishes as
        # it would after a signal from outside
        os.kill(os.getpid(), signal.Signals[sig] if sig else signal.SIGKILL)


def stall_requested(point: str) -> bool:
    return os.environ.get(ENV) == f"{point}:stall"


def stall_point(point: str, hold_open: str | None = None) -> None:
    """Hangs here, deaf to SIGINT/SIGTERM, when SYNTAX_DYNAMICS_FAULT=<point>:stall (tests only)."""
    if not stall_requested(point):
        return
    handle = open(hold_open, "rb") if hold_open else None  # noqa: SIM115 - held open while stalled
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2})
    print(f"fault: stalled at {point} (pid {os.getpid()})", file=sys.stderr, flush=True)
    time.sleep(3600)
    if handle is not None:
        handle.close()


def stuck_worker(point: str, hold_open: str) -> None:
    """A worker process that stalls (stall_point) and is waited on, as datasets' pool waits on its
    workers, when SYNTAX_DYNAMICS_FAULT=<point>:stall."""
    if not stall_requested(point):
        return
    import multiprocessing

    proc = multiprocessing.get_context("fork").Process(target=stall_point, args=(point, hold_open))
    proc.start()
    proc.join()
