"""Fault injection for the crash tests: SYNTAX_DYNAMICS_FAULT=<point>:step<N> kills this process with
SIGKILL when it reaches <point> for step N. Unset (always, outside the tests) nothing happens.

The points (where each call sits):
  mid_step          the loop, after the backward passes of step N, before the optimizer update
  checkpoint_write  train.checkpoint.save_checkpoint, with checkpoints/.tmp-step<N>/ half written
  after_rename      the loop, once checkpoints/step<N> is whole, before any hook ran on it
  eval_write        probes.store.write_pairs, with the eval file of step N under its temporary name
"""
from __future__ import annotations

import os
import signal

ENV = "SYNTAX_DYNAMICS_FAULT"
POINTS = ("mid_step", "checkpoint_write", "after_rename", "eval_write")


def fault_point(point: str, step: int) -> None:
    spec = os.environ.get(ENV)
    if spec and spec == f"{point}:step{step}":
        os.kill(os.getpid(), signal.SIGKILL)
