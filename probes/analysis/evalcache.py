"""The reduced-read cache <run>/evals/.reduced-<benchmark>.npz (docs/probing.md): plain numpy arrays, keyed by the
step, size, mtime and sha256 of every eval file it came from and checked by the sha256 of its own arrays. Files
only after its first checkpoint are new (a run still training): those alone are read and added; anything else
means a fresh read. A read-only run directory just goes uncached."""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from probes.analysis import evalfile
from probes.analysis.evalfile import PairOutcomes
from probes.evals.files import REGIONS
from train.evalsums import sum_path
from train.files import atomic_open

CACHE_VERSION = 3
_CACHE_FRAME = ("step", "tokens", "n_pairs", "acc_mlp", "acc_sum", *[f"delta_{r}" for r in ("total", *REGIONS)])


def cache_path(run_dir: Path, benchmark: str) -> Path:
    return Path(run_dir) / "evals" / f".reduced-{benchmark}.npz"


def _entries(paths: list[tuple[int, Path]]) -> list[list]:
    """Per eval file: step, name, size, mtime and the sha256 its .sha256 records (None without one), so a
    file replaced under the same size and mtime is another key."""
    rows = []
    for step, f in paths:
        st = f.stat()
        try:
            digest = sum_path(f).read_text().split()[0]
        except (OSError, IndexError):
            digest = None
        rows.append([step, f.name, st.st_size, st.st_mtime_ns, digest])
    return rows


def _digest(arrays: dict) -> str:
    """sha256 of the cached arrays: a cache edited after it was written (acc 0.99 planted) is not used."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        if k != "meta":
            h.update(k.encode() + b"\0" + np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()


@dataclass
class _Cached:
    entries: list[list]
    out: PairOutcomes
    df: pd.DataFrame
    conventions: dict[str, str]
    problems: list[str]
    phen: dict[str, str]
    row_key: Optional[str]  # of the file whose pair order `out` has (evalfile.Seen)


def _read_cache(run_dir: Path, bench: str) -> Optional[_Cached]:
    path = cache_path(run_dir, bench)
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        meta = json.loads(str(a["meta"]))
        if meta.get("version") != CACHE_VERSION or meta.get("sha256") != _digest(a):
            return None
    except Exception:  # absent, torn by a crash, written by another version: read the eval files
        return None
    paradigms = [str(p) for p in a["paradigms"]]
    out = PairOutcomes(run="", benchmark=bench, steps=a["steps"], tokens=a["tokens"], paradigms=paradigms,
                       row_paradigm=a["row_paradigm"], pair_ids=a["pair_ids"].astype(object),
                       correct=a["correct"])
    names = np.asarray(paradigms, dtype=object)
    phenomena = np.asarray(meta["phenomena"], dtype=object)
    df = pd.DataFrame({c: a[f"t_{c}"] for c in _CACHE_FRAME})
    df.insert(2, "paradigm", names[a["t_paradigm"]])
    df["phenomenon"] = phenomena[a["t_paradigm"]]
    df["benchmark"] = bench
    return _Cached(meta["files"], out, df, meta["conventions"], meta["problems"],
                   dict(zip(paradigms, (str(p) for p in phenomena))), meta.get("row_key"))


def _write_cache(run_dir: Path, bench: str, entries: list[list], out: PairOutcomes, df: pd.DataFrame,
                 conventions: dict[str, str], problems: list[str], row_key: Optional[str]) -> None:
    # the rows' paradigms as codes into out.paradigms, and each paradigm's first row (for its phenomenon):
    # by index lookups, not a Python pass over a run's rows (half of this function's time)
    code = pd.Index(out.paradigms).get_indexer(df["paradigm"]).astype(np.int32)
    first = np.full(len(out.paradigms), -1)
    present, at = np.unique(code, return_index=True)
    first[present] = at
    phen = df["phenomenon"].to_numpy()
    meta = {"version": CACHE_VERSION, "files": entries, "conventions": conventions, "problems": problems,
            "phenomena": [str(phen[i]) if i >= 0 else "" for i in first], "row_key": row_key}
    arrays = {
        "meta": np.array(json.dumps(meta)),
        "steps": out.steps, "tokens": out.tokens, "paradigms": np.asarray(out.paradigms, dtype=str),
        "row_paradigm": out.row_paradigm, "pair_ids": np.asarray(out.pair_ids, dtype=str), "correct": out.correct,
        "t_paradigm": code,
        **{f"t_{c}": df[c].to_numpy() for c in _CACHE_FRAME},
    }
    arrays["meta"] = np.array(json.dumps({**meta, "sha256": _digest(arrays)}))
    # a unique temporary name per writer: report threads and a probe hook may refresh one run at once
    # not fsynced: a torn file fails np.load's zip checks and is read afresh
    with contextlib.suppress(OSError), atomic_open(cache_path(run_dir, bench), "wb", durable=False) as fh:
        np.savez(fh, **arrays)


def read_benchmark(name: str, run_dir: Path, bench: str, paths: list[tuple[int, Path]], cache: bool,
                   cached_only: bool = False):
    """(PairOutcomes, per-paradigm rows, conventions, problems) of one benchmark of a run from `paths` [(step,
    eval file)], through the cache unless cache=False; cached_only: None where the cache is not current."""
    entries = _entries(paths)
    hit = _read_cache(run_dir, bench) if cache else None
    if hit is not None and hit.entries == entries:
        hit.out.run = name
        return hit.out, hit.df, hit.conventions, hit.problems
    if cached_only:
        return None
    # positions in `entries` of files the cache lacks, or None when it cannot simply be extended: a cached file
    # was rewritten or deleted, or a new first checkpoint (the pair order is taken from the first)
    old = {tuple(e) for e in hit.entries} if hit is not None else None
    new = [i for i, e in enumerate(entries) if tuple(e) not in old] \
        if old is not None and old <= {tuple(e) for e in entries} else None
    if new is not None and any(entries[i][0] <= hit.entries[0][0] for i in new):
        new = None
    # the reference (the pair order every file is aligned to) is the cached one, else the first file's;
    # files stored with its rows are read without decoding their strings, and token counts stored as
    # the file's before are not decoded again (evalfile.Seen)
    convs = dict(hit.conventions) if new is not None else {}
    seen = evalfile.Seen(row_key=hit.row_key if new is not None else None)

    def read(todo: list[tuple[int, Path]]):
        for step, f in todo:  # one at a time, in step order: evalfile.assemble consumes them so
            res = evalfile.read_eval_file(f, step, run_dir, seen)
            convs.setdefault(res.convention, str(f))
            seen.counts_key, seen.counts = res.counts_key, res.counts
            yield res

    if new is not None:
        problems, names = list(hit.problems), np.asarray(hit.out.paradigms, dtype=object)
        ref = evalfile.Reference(names[hit.out.row_paradigm], np.asarray(hit.out.pair_ids, dtype=object),
                                 hit.out.row_paradigm.astype(np.int64), list(hit.out.paradigms), hit.phen,
                                 int(hit.out.steps[0]), row_key=hit.row_key)
        out, df = evalfile.assemble(name, str(run_dir), bench, read([paths[i] for i in new]), problems,
                                   ref, (hit.out, hit.df))
    else:
        todo, problems = sorted(paths), []
        first = next(read(todo[:1]))
        seen.row_key = first.row_key
        out, df = evalfile.assemble(name, str(run_dir), bench, itertools.chain([first], read(todo[1:])), problems)
    if cache:
        _write_cache(run_dir, bench, entries, out, df, convs, problems, seen.row_key)
    return out, df, convs, problems
