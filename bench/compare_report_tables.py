"""Diff two `probes report` outputs table by table: the check that a speed change left every result
as it was (issue 23: bench/bench_analysis_scale.py before and after, same grid).

    python bench/compare_report_tables.py BEFORE_REPORT_DIR AFTER_REPORT_DIR [--rtol 0] [--atol 0]

Compares every tables/*.csv and tables/*.parquet (same files, columns and rows; text, integer and
boolean cells exactly; floats within atol + rtol x |before|, NaN equal to NaN) and report.md line by
line. Prints one line per table (identical, or which columns differ and by how much) and exits 1 when
anything differs beyond the tolerances.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def read(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def compare(a: pd.DataFrame, b: pd.DataFrame, rtol: float, atol: float) -> list[str]:
    """What differs between two tables, one phrase per column (empty: equal within tolerance)."""
    if list(a.columns) != list(b.columns):
        return [f"columns {list(a.columns)} -> {list(b.columns)}"]
    if len(a) != len(b):
        return [f"{len(a)} rows -> {len(b)}"]
    out = []
    for col in a.columns:
        x, y = a[col], b[col]
        if pd.api.types.is_float_dtype(x) and pd.api.types.is_float_dtype(y):
            xv, yv = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
            same_nan = np.isnan(xv) == np.isnan(yv)
            both = ~np.isnan(xv) & ~np.isnan(yv)
            diff = np.abs(xv[both] - yv[both])
            bad = (~same_nan).sum() + (diff > atol + rtol * np.abs(xv[both])).sum()
            if bad:
                out.append(f"{col}: {bad} cells (max |diff| {diff.max() if diff.size else 0:.2e}, "
                           f"{(~same_nan).sum()} NaN mismatches)")
        else:
            na = (x.isna() & y.isna()).to_numpy()
            xs, ys = x.astype(object).astype(str).to_numpy(), y.astype(object).astype(str).to_numpy()
            differ = (xs != ys) & ~na
            bad = int(differ.sum())
            if bad:
                k = int(np.flatnonzero(differ)[0])
                out.append(f"{col}: {bad} cells (first: {xs[k]!r} -> {ys[k]!r})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rtol", type=float, default=0.0)
    ap.add_argument("--atol", type=float, default=0.0)
    a = ap.parse_args(argv)
    names = sorted({p.name for d in (a.before, a.after) for p in (d / "tables").glob("*")
                    if p.suffix in (".csv", ".parquet")})
    failed = False
    for name in names:
        pa, pb = a.before / "tables" / name, a.after / "tables" / name
        if not (pa.exists() and pb.exists()):
            print(f"{name:36s} only in {'before' if pa.exists() else 'after'}")
            failed = True
            continue
        diffs = compare(read(pa), read(pb), a.rtol, a.atol)
        print(f"{name:36s} {'identical' if not diffs else '; '.join(diffs)}")
        failed |= bool(diffs)
    la = (a.before / "report.md").read_text().splitlines()
    lb = (a.after / "report.md").read_text().splitlines()
    changed = [i for i, (x, y) in enumerate(zip(la, lb)) if x != y] + list(range(min(len(la), len(lb)), max(len(la), len(lb))))
    print(f"{'report.md':36s} {'identical' if not changed else f'{len(changed)} lines differ, first at line {changed[0] + 1}'}")
    failed |= bool(changed)
    print("SAME" if not failed else "DIFFERENT")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
