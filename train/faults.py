"""Fault injection for the crash and preemption tests: SYNTAX_DYNAMICS_FAULT=<point>:step<N> kills this
process with SIGKILL when it reaches <point> for step N; <point>:step<N>:<SIGNAL> (e.g. SIGUSR1) sends that
signal instead, so a preemption lands at a named step rather than whenever a test's poll catches up. Unset
(always, outside the tests) nothing happens.

The points (where each call sits):
  mid_step          the loop, after the backward passes of step N, before the optimizer update
  checkpoint_write  train.checkpoint.save_checkpoint, with checkpoints/.tmp-step<N>/ half written
  after_rename      the loop, once checkpoints/step<N> is whole, before any hook ran on it
  eval_write        probes.scoring.store.write_pairs, with the eval file of step N under its temporary name
  bf16_rewrite      train.checkpoint.weights_to_bf16, step N's bf16 weights renamed in, config.json not yet
"""
from __future__ import annotations

import os
import signal

ENV = "SYNTAX_DYNAMICS_FAULT"
POINTS = ("mid_step", "checkpoint_write", "after_rename", "eval_write", "bf16_rewrite")


def fault_point(point: str, step: int) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    where, at, *sig = spec.split(":")
    if (where, at) == (point, f"step{step}"):
        # a handled signal runs its Python handler before the next bytecode: the step then finishes as
        # it would after a signal from outside
        os.kill(os.getpid(), signal.Signals[sig[0]] if sig else signal.SIGKILL)
