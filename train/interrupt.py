"""Stopping promptly during set-up: corpus checks, dataset loading, tokenizer training, token store.

Once steps run, a signal is honoured after the step (train/preempt.py). Before the first step there is nothing
to save, so waiting only delays (a run under `timeout 120` hung 41 minutes on a dataset worker that ignored
SIGTERM): the handler SIGKILLs the process's own workers (a pool's teardown would wait on a stuck one) and
raises Interrupted at once; every cache is built under a temporary name (files.built_dir), so nothing
half-written stays. Interrupted is a BaseException so that no library's `except Exception` swallows it. Work
in C that never returns to Python (sentencepiece's trainer) runs in a child the parent waits on (run_in_child).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Iterable

# SIGINT: the shell's convention, 128 + 2; the preemption signals keep the requeue status (nothing lost,
# the same command starts the run again).
INTERRUPT_EXIT = 130
# EX_TEMPFAIL (sysexits.h): "temporary failure, the user is invited to retry" -- the sbatch template
# requeues the task on exactly this status (train/preempt.py).
REQUEUE_EXIT = 75


class Interrupted(BaseException):
    def __init__(self, signum: int, stage: str, during_training: bool = False):
        super().__init__(signum, stage)
        self.signum, self.stage, self.during_training = signum, stage, during_training
        self.code = INTERRUPT_EXIT if signum == signal.SIGINT else REQUEUE_EXIT

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        if self.during_training:  # a second Ctrl-C: no resume checkpoint of this step
            return (f"interrupted by a second {name} during a step: stopped without saving it; rerun the same "
                    f"command to resume from the last checkpoint (exit status {self.code})")
        return (f"interrupted by {name} while {self.stage}: stopped before training, nothing half-written "
                f"was kept; rerun the same command to start again (exit status {self.code})")


def children(pid: int | None = None) -> list[int]:
    """Direct child processes of `pid` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def kill_children() -> None:
    """SIGKILL this process's descendants (dataset workers, datasets' manager, a tokenizer trainer): a worker
    that ignores SIGTERM cannot make the parent wait. Each is stopped before its children are listed, so no
    pool can fork a replacement in between, and none is orphaned (an orphan leaves our reach: datasets'
    manager ignores SIGINT and kept the terminal's pipes open, a hang)."""
    for pid in _stop_tree(os.getpid())[1:]:
        _kill(pid)


def _stop_tree(pid: int) -> list[int]:
    found = [pid]
    for child in children(pid):
        _kill(child, signal.SIGSTOP)
        found += _stop_tree(child)
    return found


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def open_files(among: Iterable[Path]) -> list[Path]:
    """Which of `among` this process or its children have open now (/proc/<pid>/fd): the file a stuck
    load is reading, named instead of every path of the corpus."""
    wanted = {str(Path(p).resolve()): Path(p) for p in among}
    hits = []
    for pid in [os.getpid(), *children()]:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target in wanted and wanted[target] not in hits:
                hits.append(wanted[target])
    return hits


def run_in_child(fn: Callable, *args) -> None:
    """fn(*args) in a child process, waited on in Python so that a signal's handler runs in the parent at
    once (Interrupted, after kill_children). An exception in the child comes back as RuntimeError with
    its message; the child's exit without one (killed, out of memory) as RuntimeError naming the status.
    fn and args must pickle (a module-level function, plain data)."""
    import multiprocessing

    # spawn, not fork: a forked child of a process that has threads (torch's, a datasets pool, an earlier
    # sentencepiece run) inherits their locks held and can wait on them forever -- seen in the test suite,
    # where sentencepiece's trainer hung in a futex in the forked child. A fresh interpreter costs ~1 s.
    ctx = multiprocessing.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(writer, fn, args), daemon=True)
    proc.start()
    writer.close()
    try:
        while proc.is_alive() and not reader.poll(0.2):
            pass
        try:
            message = reader.recv() if reader.poll() else None
        except EOFError:  # killed from outside before it could answer: its status says how
            message = None
        proc.join()
    finally:
        if proc.is_alive():
            _kill(proc.pid)
            proc.join()
        reader.close()
    if message:
        raise RuntimeError(message)
    if proc.exitcode != 0:
        raise RuntimeError(f"the child process ended with status {proc.exitcode}")


def _child(writer, fn: Callable, args) -> None:
    # The parent handles the signals and kills this tree whole (kill_children). Dying at once on a
    # terminal's Ctrl-C instead orphaned this child's workers and datasets' manager before the parent
    # could find them. If the parent dies without a handler (SIGKILL), the kernel kills this child.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    try:
        fn(*args)
        writer.send("")
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as text
        writer.send(f"{e}" or type(e).__name__)
    finally:
        writer.close()
