"""One command table per package (`python -m train`, `python -m probes`): each subcommand an import path and a
line of help, its module imported only when it runs (help starts in well under a CPU-second)."""
from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import Optional, Sequence

from train.errors import did_you_mean


def usage(prog: str, commands: dict[str, tuple[str, str]], head: str = "") -> str:
    width = max(map(len, commands)) + 2
    lines = [f"usage: {prog} COMMAND [-h] ...", "", *([head, ""] if head else [])]
    lines += [f"  {name:<{width}}{about}" for name, (_, about) in commands.items()]
    return "\n".join(lines + ["", f"run `{prog} COMMAND -h` for a command's options"])


def progress_bars_on_a_terminal_only() -> None:
    """tqdm's and datasets' progress bars only where stderr is a terminal: in a log file (SLURM's, a pipe) every
    redraw stayed, a wall of carriage returns (issue 44). Before tqdm is imported: it reads TQDM_* then."""
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_DISABLE", "1")


def dispatch(prog: str, commands: dict[str, tuple[str, str]], argv: Sequence[str], head: str = "") -> int:
    """Run the command argv[0] names with the rest of argv; --help lists the table."""
    progress_bars_on_a_terminal_only()
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog, commands, head))
        return 0 if argv else 2
    if argv[0] not in commands:
        print(f"error: unknown command {argv[0]!r}{did_you_mean(argv[0], commands)}; `{prog} --help` lists them",
              file=sys.stderr)
        return 2
    module, _, name = commands[argv[0]][0].partition(":")
    from train.interrupt import INTERRUPT_EXIT, guard_forks, kill_children

    def stop(signum, frame):  # forked workers ignore SIGINT (train/interrupt.py): this process ends them
        kill_children()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    try:
        with guard_forks():  # a forked worker dies with this process
            status: Optional[int] = getattr(importlib.import_module(module), name)(list(argv[1:]))
    except KeyboardInterrupt:  # one line, not the 46 of a traceback per process (issue 44)
        print(f"interrupted by SIGINT: {prog} {argv[0]} stopped (exit status {INTERRUPT_EXIT})", file=sys.stderr)
        return INTERRUPT_EXIT
    return status or 0
