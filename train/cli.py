"""What `python -m train` adds around the loop: user errors as one line `error: …` with exit status 2
(bugs keep their traceback; train/errors.py tells them apart), and a run directory that cannot be
written refused before Hydra writes into it."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, TypeVar

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from train.errors import check_writable, is_user_error

T = TypeVar("T")


def exit_on_user_error(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except Exception as e:
        if not is_user_error(e):
            raise
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


class CheckRunDir(Callback):
    """Hydra writes its log and .hydra/ into the run directory before main() runs, so a read-only
    one fails inside Hydra's logging setup with the path buried in a chained error. Checked first
    (configs/config.yaml registers this under hydra.callbacks)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        exit_on_user_error(lambda: check_writable(Path(config.hydra.run.dir), "hydra.run.dir"))
