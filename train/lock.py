"""One job per run directory: an exclusive flock on <run>/.lock, held for the life of the process. The kernel
drops an flock when its holder dies, so a stale lock file never blocks the requeued job; the pid written
into it is only for the error message."""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from pathlib import Path

from train.errors import UserError

EVAL_LOCK = ".eval.lock"


class RunDirLocked(UserError, RuntimeError):
    pass


class RunLock:
    """Training's lock; with name=EVAL_LOCK the one `probes score-run` and `watch` take (a watch runs beside
    training, so it cannot take training's lock)."""

    def __init__(self, run_dir: Path, *, enabled: bool = True, name: str = ".lock",
                 why: str = "two jobs must not train into one run directory; wait for it, or give this "
                            "run another hydra.run.dir", announce: bool = True):
        self.path = Path(run_dir) / name
        self.enabled = enabled  # only rank 0 of a job locks: the other ranks belong to the same job
        self.why = why
        # announce=False: the pid is written by announce() later (the trainer: once the run is accepted)
        self._announce = announce
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        if not self.enabled:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a .lock planted as a symlink would have announce() overwrite its target; a hard
        # link (or a FIFO, a device) is refused by the fstat below for the same reason.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise RunDirLocked(f"{self.path} is a symbolic link: refused (the lock file is written to); "
                               f"delete it") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise RunDirLocked(f"{self.path} is not a plain file of its own ({'hard-linked' if stat.S_ISREG(st.st_mode) else 'not a regular file'}): "
                               f"refused (the lock file is written to); delete it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunDirLocked(f"{self.path.parent} is in use by {holder} (lock {self.path}): {self.why}") from None
        self._fd = fd
        if self._announce:
            self.announce()
        return self

    def announce(self) -> None:
        """The holder's pid and host into the lock file, once the run is accepted (a refused run changes nothing)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
