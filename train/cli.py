"""What `python -m train` adds around the loop: user errors as one line `error: …` with exit status 2
(bugs keep their traceback; train/errors.py tells them apart), and a run directory that cannot be
written refused before Hydra writes into it."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, TypeVar

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from train.errors import check_writable, disk_full_error, is_user_error

T = TypeVar("T")


def exit_on_user_error(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except Exception as e:
        # a full disk anywhere (an eval file, the log) is the user's to fix, not a bug
        message = e if is_user_error(e) else disk_full_error(e)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None


class CheckRunDir(Callback):
    """Hydra writes its log and .hydra/ into the run directory before main() runs, so a read-only
    one fails inside Hydra's logging setup with the path buried in a chained error. Checked first
    (configs/config.yaml registers this under hydra.callbacks). Under `-m` Hydra calls on_multirun_start
    instead, before the launcher creates the sweep directory that holds every job's run directory."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        exit_on_user_error(lambda: check_writable(Path(config.hydra.run.dir), "hydra.run.dir"))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        exit_on_user_error(lambda: check_writable(Path(config.hydra.sweep.dir), "hydra.sweep.dir"))
