"""What `python -m train` adds around the loop: user errors as one line `error: …` with exit status 2 (bugs
keep their traceback: train/errors.py), and a run directory that cannot be written refused before Hydra
writes into it."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, TypeVar

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from train.errors import check_writable, disk_full_error, is_user_error

T = TypeVar("T")


def exit_on_user_error(fn: Callable[[], T]) -> T:
    from train.interrupt import REQUEUE_EXIT, Interrupted, note_requeue
    try:
        return fn()
    except Interrupted as e:  # a signal in set-up (or a second Ctrl-C): one line, not a traceback
        print(e, file=sys.stderr, flush=True)
        sys.stdout.flush()
        if e.code == REQUEUE_EXIT:
            note_requeue(str(e))
        # the temporaries are gone and the lock released (their `finally`s ran): teardown only delays
        os._exit(e.code)
    except Exception as e:
        # a full disk anywhere (an eval file, the log) is the user's to fix, not a bug
        message = e if is_user_error(e) else disk_full_error(e)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None


class CheckRunDir(Callback):
    """A read-only run directory fails inside Hydra's logging setup, the path buried in a chained error:
    checked first (configs/config.yaml's hydra.callbacks; under `-m` the sweep directory)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        exit_on_user_error(lambda: check_writable(Path(config.hydra.run.dir), "hydra.run.dir"))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        exit_on_user_error(lambda: check_writable(Path(config.hydra.sweep.dir), "hydra.sweep.dir"))
