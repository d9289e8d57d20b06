"""Fault injection for the crash and preemption tests; unset (always, outside the tests) nothing happens.

SYNTAX_DYNAMICS_FAULT=<point>:step<N> kills this process (SIGKILL) when it reaches <point> for step N;
<point>:step<N>:<SIGNAL> sends that signal instead (a preemption at a named step), and @rank<R> after it
only in the process of that RANK. The points (POINTS): mid_step (after the backward passes of step N),
checkpoint_write (.tmp-step<N>/ half written), after_rename (step<N> whole, no hook run yet), eval_write
(step N's eval file under its temporary name), eval_written (step N's eval file in place), bf16_rewrite (bf16
weights renamed in, config.json not yet). <point>:stall hangs a set-up point as a stuck C call or worker does
(stall_point): tokenizer_training (inside sentencepiece's training) and load_dataset (a worker of the corpus
load holding a file open).
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


def stall_point(point: str, hold_open: str | None = None) -> None:
    """Hangs here, deaf to SIGINT/SIGTERM, when SYNTAX_DYNAMICS_FAULT=<point>:stall (tests only)."""
    if os.environ.get(ENV) != f"{point}:stall":
        return
    handle = open(hold_open, "rb") if hold_open else None  # noqa: SIM115 - held open while stalled
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2})
    print(f"fault: stalled at {point} (pid {os.getpid()})", file=sys.stderr, flush=True)
    time.sleep(3600)
    if handle is not None:
        handle.close()


def stuck_worker(point: str, hold_open: str) -> None:
    """A worker process that stalls and is waited on, as datasets' pool waits on its workers."""
    if os.environ.get(ENV) != f"{point}:stall":
        return
    import multiprocessing
    proc = multiprocessing.get_context("fork").Process(target=stall_point, args=(point, hold_open))
    proc.start()
    proc.join()
