"""Analysis outputs (tables, figures, text), each written by train.files.atomic_open: a crash or a full disk leaves
the old file or none, never a half-written one that a later reader would trust."""
from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import multiprocessing as mp
import os
import shutil
import signal
import uuid
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from probes.analysis.figcache import draw_and_store
from train.errors import NotWritableError, UserError, check_writable
from train.files import atomic_open, clear_stale, tag


def check_output_file(path: str | Path, flag: str = "--out") -> None:
    """Before any work, not after an hour of scoring: ValueError naming the flag where the output file cannot be
    written there (a parent that is a file, a read-only directory) or names a directory."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path}: is a directory; name the output file")
    try:
        check_writable(path.parent, flag)
    except NotWritableError as e:
        raise ValueError(f"{flag} {path}: cannot be written ({e})") from None


def write_text(path: str | Path, text: str) -> Path:
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_csv(path: str | Path, df: pd.DataFrame) -> Path:
    with atomic_open(path, "w") as fh:
        df.to_csv(fh, index=False)
    return Path(path)


def write_parquet(path: str | Path, df: pd.DataFrame) -> Path:
    table = pa.Table.from_pandas(df, preserve_index=False)
    # dictionaries for the text columns only: a grid's table of floats tried (and dropped) a dictionary
    # for every float column, a third of its write time
    text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    with atomic_open(path, "wb") as fh:
        pq.write_table(table, fh, use_dictionary=text)
    return Path(path)


def write_table(stem: str | Path, df: pd.DataFrame) -> list[Path]:
    """The same table as `<stem>.csv` (for eyes and spreadsheets) and `<stem>.parquet` (typed)."""
    stem = Path(stem)
    return [write_csv(stem.with_suffix(".csv"), df), write_parquet(stem.with_suffix(".parquet"), df)]


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """A Figure as PNG, atomically: drawn by Agg as savefig draws it (no bbox_inches="tight": it draws twice),
    written by Pillow as RGB at zlib level 3 (savefig's pixels, ~6 % smaller and ~10 % cheaper a figure)."""
    from PIL import Image

    fig.set_dpi(dpi)
    fig.canvas.draw()
    rgba = fig.canvas.buffer_rgba()
    img = Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1)
    if img.getextrema()[3][0] == 255:  # opaque everywhere: the alpha channel says nothing
        img = img.convert("RGB")
    with atomic_open(path, "wb") as fh:
        img.save(fh, format="png", compress_level=3)
    return Path(path)


# what a report writes, and what an older one may have left (an old figure cache goes with the report it served)
REPORT_ENTRIES = ("report.md", "figures", "appendix", "tables", "problems.txt", ".figure-cache", ".cache",
                  ".report-files")
MANIFEST = ".report-files"  # one path per line, relative to the report: what it wrote


@contextlib.contextmanager
def staged_output(out: Path, entries: tuple[str, ...] = REPORT_ENTRIES, manifest: str = MANIFEST,
                  check: bool = True) -> Iterator[Path]:
    """A command's output folder built whole under a hidden sibling, then moved into `out` entry by entry (each of
    `entries` it held goes: the command's own), report.md last: a killed command leaves the previous output as it
    was. `out`/`manifest` lists every file written; `check`: check_owned_output first and again before the swap
    (check=False: `out` is a run's own folder, e.g. RUN/curves, written by this project alone)."""
    out = Path(out)
    if check:
        check_owned_output(out, entries, manifest)
    out.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".tmp", ".old"):
        clear_stale(out.parent, f".{out.name}.", ".", suffix)
    stage = out.parent / f".{out.name}.{tag()}.{uuid.uuid4().hex[:12]}.tmp"
    stage.mkdir()
    try:
        yield stage
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if not p.is_dir())
        # a hidden folder the command made (its caches) is its own whole: a stale entry there goes with it
        caches = sorted(f"{p.name}/" for p in stage.iterdir() if p.is_dir() and p.name.startswith("."))
        write_text(stage / manifest, "\n".join([*files, *caches, manifest]) + "\n")
        new = {p.name for p in stage.iterdir()}
        if check:  # what the command wrote beyond its list (a probe family's table) is checked too
            check_owned_output(out, (*entries, *sorted(new - set(entries))), manifest)
        out.mkdir(exist_ok=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = out.parent / f".{out.name}.{tag()}.{uuid.uuid4().hex[:12]}.old"
    old.mkdir()
    # the old report.md goes first and the new one comes last: a kill mid-swap leaves no report.md
    # rather than one that describes other tables
    if (out / "report.md").exists():
        os.replace(out / "report.md", old / "report.md")
    for name in sorted({*entries, *new} - {"report.md"}):
        if (out / name).exists() or (out / name).is_symlink():
            os.replace(out / name, old / name)
        if name in new:
            os.replace(stage / name, out / name)
    if "report.md" in new:
        os.replace(stage / "report.md", out / "report.md")
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)


def check_owned_output(out: Path, entries: tuple[str, ...], manifest: str, flag: str = "--out") -> None:
    """The one rule of every command that writes a folder (report, compare, curves, score-run --hub, exposure):
    it writes only `entries` (names in `out`, a folder one replaced whole) and lists what it wrote in
    `out`/`manifest`. Refuses, in one line and before any work, an `out` that is no folder (a file, a link to
    nothing) and any file under those entries, hidden ones included, that the manifest does not list."""
    out = Path(out)
    if out.is_symlink() and not out.exists() or out.exists() and not out.is_dir():
        what = "a link to nothing" if out.is_symlink() and not out.exists() else "not a folder"
        raise UserError(f"{flag} {out}: {what}; give a folder (a new one is made)")
    try:
        written = set((out / manifest).read_text().splitlines())
    except OSError:
        written = set()
    found = []
    for name in entries:
        path = out / name
        for f in ([path] if not path.is_dir() else sorted(path.rglob("*"))):
            if (f.is_file() or f.is_symlink()) and str(f.relative_to(out)) not in written \
                    and not any(str(f.relative_to(out)).startswith(w) for w in written if w.endswith("/")):
                found.append(f)
    if found:
        command = manifest.strip(".").removesuffix("-files")
        raise UserError(f"{found[0]}: not written by probes {command} (not in {out / manifest}), which replaces "
                        f"{', '.join(entries)} whole ({len(found)} such file(s)): move them out of {out}, or give "
                        f"{flag} another folder")


def fork_pool(workers: int):
    """`workers` forked processes, or None (one worker, or no fork): a spawned worker spends ~2 s importing
    pandas and matplotlib. The work must not touch CUDA or threads of the parent."""
    if workers <= 1 or "fork" not in mp.get_all_start_methods():
        return None
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_worker_start,
                               initargs=(os.getpid(),))


def _worker_start(parent: int) -> None:
    """gc.freeze() the inherited objects (a collection walking the parent's heap copied its pages: 0.6 CPU-s of
    a grid report), and SIGKILL when the parent dies (a killed report left its workers blocked for good)."""
    gc.freeze()  # relinks the generations' lists: touches no object

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the shutdown in FigureJobs.close() is all there is
        pass
    if os.getppid() != parent:
        os._exit(1)


class FigureJobs(contextlib.AbstractContextManager):
    """Figures drawn in forked workers while the caller computes (drawing is Python under the GIL: threads do not
    help), or copied from the `cache` (figcache.FigureCache); arguments travel by pickle, so pass only the rows a
    figure needs. workers=1, or no fork: drawn in the caller at submit time."""

    def __init__(self, workers: int | None = None, cache=None):
        self._pool = fork_pool(workers if workers is not None else min(2, os.cpu_count() or 1))
        self._jobs: list[tuple[str | None, object]] = []
        self.cache = cache
        self._forked = False

    def submit(self, title: str | None, fn, *args) -> Path | None:
        # the one argument that is a path ending in .png (None: not known; drawn, not cached)
        pngs = [Path(a) for a in args if isinstance(a, (str, Path)) and str(a).endswith(".png")]
        path = pngs[0] if len(pngs) == 1 else None
        key = self.cache.key(fn, args) if self.cache is not None and path is not None else None
        if key is not None and self.cache.fetch(key, path):
            self._jobs.append((title, path))
            return path
        entry = self.cache.entry(key) if key is not None else None
        call = (draw_and_store, fn, args, entry)
        self._jobs.append((title, self._submit(*call) if self._pool else draw_and_store(*call[1:])))
        return path

    def compute(self, fn, *args) -> Future:
        if self._pool is not None:
            return self._submit(fn, *args)
        done = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001 -- raised by result(), as a worker's error is
            done.set_exception(e)
        return done

    def _submit(self, fn, *args):
        """pool.submit; the first call forks the workers (all of them, under fork), prepared for that."""
        if not self._forked:
            # matplotlib's Agg backend and the default font (a tiny text drawn, ~0.3 s) loaded here, before the
            # pool forks its workers: each inherits them instead of paying for them
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            fig = Figure(figsize=(1.0, 1.0))
            FigureCanvasAgg(fig)
            fig.subplots().set_title("0.5 1M")
            fig.savefig(io.BytesIO(), format="png", dpi=20)
            self._forked = True
        return self._pool.submit(fn, *args)

    def results(self) -> list[tuple[str, Path]]:
        try:
            done = [(t, Path(j.result() if hasattr(j, "result") else j)) for t, j in self._jobs]
            if self.cache is not None:
                self.cache.prune()
            return [(t, p) for t, p in done if t is not None]
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __exit__(self, *exc) -> None:
        self.close()

