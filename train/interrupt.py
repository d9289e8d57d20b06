"""Stopping promptly during set-up: corpus checks, dataset loading, tokenizer training, token store (docs/training.md,
"Stopping"). Before the first step there is nothing to save, so waiting only delays (a run under `timeout 120` hung
41 minutes on a dataset worker that ignored SIGTERM): the handler SIGKILLs the process's own workers (a pool's
teardown would wait on a stuck one) and raises Interrupted at once. Interrupted is a BaseException so that no
library's `except Exception` swallows it. Work in C that never returns to Python (sentencepiece's trainer) runs in
a child the parent waits on (run_in_child); every process below the trainer dies with its parent (die_with_parent).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

# SIGINT: the shell's convention, 128 + 2; the preemption signals keep the requeue status (nothing lost,
# the same command starts the run again).
INTERRUPT_EXIT = 130
# EX_TEMPFAIL (sysexits.h): "temporary failure, the user is invited to retry" -- the sbatch template
# requeues the task on exactly this status (train/preempt.py).
REQUEUE_EXIT = 75
# A launcher that starts the ranks (torchrun, deepspeed) reports their 75 as its own failure (1): where this
# variable names a file (slurm/array.sbatch.in sets it), every rank that exits 75 also writes its line there.
REQUEUE_FILE = "SYNTAX_DYNAMICS_REQUEUE_FILE"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None  # resolved here, not in a forked child
_forks = {"guarded": False, "parent": 0}


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


def note_requeue(message: str) -> None:
    """`message` into $SYNTAX_DYNAMICS_REQUEUE_FILE, where set: this process exits REQUEUE_EXIT."""
    if os.environ.get(REQUEUE_FILE):
        Path(os.environ[REQUEUE_FILE]).write_text(f"{message}\n")


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


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies, however it dies (PR_SET_PDEATHSIG, which a fork does not
    inherit); if `parent` is gone already (before the call), exit now: this process would be init's orphan."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _after_fork() -> None:
    # datasets' pool workers and manager: dying with their parent, and killable by a plain SIGTERM (the
    # ignore mask of run_in_child's child would otherwise be inherited: survivors under PID 1, issue 44).
    # SIGINT stays ignored: a terminal's Ctrl-C that reached a worker first killed it, and its parent's map then
    # failed with "a subprocess abruptly died" instead of the one line the parent's handler prints.
    if _forks["guarded"]:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT else signal.SIG_DFL)
        die_with_parent(_forks["parent"])


os.register_at_fork(before=lambda: _forks.update(parent=os.getpid()), after_in_child=_after_fork)


@contextlib.contextmanager
def guard_forks():
    """Every process forked (os.fork, as datasets' pools do) inside the block dies with its parent."""
    before, _forks["guarded"] = _forks["guarded"], True
    try:
        yield
    finally:
        _forks["guarded"] = before


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
    # A fresh interpreter, not a fork: a forked child of a process that has threads (torch's, a datasets
    # pool, an earlier sentencepiece run) inherits their locks held and can wait on them forever -- seen in
    # the test suite, where sentencepiece's trainer hung in a futex in the forked child (~1 s to start).
    # In its own process group: a terminal's Ctrl-C reaches only this process, whose handler kills the tree;
    # reaching the child while it imported, it printed a 60-line traceback (issue 44).
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(os.getpid()), str(write_end)],
                                stdin=subprocess.PIPE, pass_fds=(write_end,), process_group=0)
    finally:
        os.close(write_end)
    with open(read_end, "rb") as reader:
        try:
            with proc.stdin:
                pickle.dump(sys.path, proc.stdin)
                pickle.dump((fn, args), proc.stdin)
            proc.wait()
        except BrokenPipeError:  # it died before reading its work: its status says how
            proc.wait()
        finally:
            if proc.poll() is None:  # its descendants die with it (die_with_parent)
                _kill(proc.pid)
                proc.wait()
        os.set_blocking(read_end, False)
        message = (reader.read() or b"").decode(errors="replace")
    if message:
        raise RuntimeError(message)
    if proc.returncode != 0:
        raise RuntimeError(f"the child process ended with status {proc.returncode}")


_CHILD = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
          "from train.interrupt import _child; _child(int(sys.argv[1]), int(sys.argv[2]))")


def _child(parent: int, fd: int) -> None:
    # The parent handles the signals and kills this tree whole (kill_children): a `kill` of every process
    # (scancel) must not end this one first, orphaning its workers. If the parent dies without a handler
    # (SIGKILL), the kernel kills this child and, level by level, everything it forks.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    die_with_parent(parent)
    _forks["guarded"] = True
    message = ""
    try:
        fn, args = pickle.load(sys.stdin.buffer)
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as text
        message = f"{e}" or type(e).__name__
    with open(fd, "wb") as out:  # short: the parent reads it once this process has exited
        out.write(message.encode()[:60_000])
