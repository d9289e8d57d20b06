"""Per-format readers: one benchmark data file in, `Pair`s out, in file order and before the identical/duplicate
rule (probes.benchmarks.registry applies it once for every format). How each reader maps its authors' fields and
why, and the csv delimiter rule: docs/probing.md."""
from __future__ import annotations

import argparse
import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from probes.benchmarks.pairs import Pair

DATA_SUFFIXES = (".jsonl", ".csv", ".txt")
SUPPLEMENT_FIELDS = ("contrast", "template", "quad", "fragment", "row")


class BenchmarkFormatError(ValueError):
    """Bad benchmark input; the message names the file and line (and the field where one is missing)."""


@dataclass(frozen=True)
class FieldMap:
    """Column mapping for the generic jsonl/csv reader (None = the default below)."""

    good: Optional[str] = None  # default "sentence_good"
    bad: Optional[str] = None  # default "sentence_bad"
    paradigm: Optional[str] = None  # default: the file's path below the root, without suffix
    phenomenon: Optional[str] = None  # default: the paradigm
    pair_id: Optional[str] = None  # default: the record's ordinal in its file (0, 1, ...)
    delimiter: Optional[str] = None  # csv only; default: sniffed from the header row (DELIMITERS)


DELIMITERS = (",", ";", "\t", "|")
FIELD_OPTIONS = ("good_field", "bad_field", "paradigm_field", "phenomenon_field", "id_field", "delimiter")


def add_field_options(ap: argparse.ArgumentParser) -> None:
    """The generic reader's options (the field names of probes.evals.config.BenchmarkConfig) on a command
    that takes a benchmark file or folder: `benchmarks`, `score`, `score-run`, `watch`."""
    for f in FIELD_OPTIONS[:-1]:
        what = f.removesuffix("_field").replace("id", "pair id")
        ap.add_argument(f"--{f.replace('_', '-')}", help=f"generic jsonl/csv: the column holding the {what}")
    ap.add_argument("--delimiter", help="generic csv: the delimiter (default: the one of , ; | tab the header "
                                        "row holds most)")


def field_options(args: argparse.Namespace) -> dict:
    """The BenchmarkConfig keyword arguments `add_field_options` parsed."""
    return {f: getattr(args, f) for f in FIELD_OPTIONS}


# ---------------------------------------------------------------- low-level record readers
def _decode(path: Path) -> str:
    try:
        # utf-8-sig: a BOM written by a spreadsheet would otherwise end up in the first field name
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BenchmarkFormatError(f"{path}: not UTF-8 text ({e})") from None


def _lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, line without its CR) of each non-blank line. Split on "\n" only: str.splitlines would
    also split on U+2028 etc., which JSON allows raw inside strings, and would shift every later line number."""
    return [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, record) for each non-blank line; CRLF tolerated."""
    lines = _lines(_decode(path))
    # one parse of the whole file as a JSON array (a benchmark is ~1,000 lines; one C call instead
    # of one per line halves reading BLiMP). It holds exactly when every line is one object: a line
    # split over two, or two objects on one line, change the count or fail, and are then read line
    # by line, which names the bad line.
    try:
        records = json.loads("[" + ",".join(line for _, line in lines) + "]")
    except json.JSONDecodeError:
        records = None
    if records is not None and len(records) == len(lines) and all(isinstance(r, dict) for r in records):
        yield from zip((lineno for lineno, _ in lines), records)
        return
    for lineno, line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkFormatError(f"{path}:{lineno}: malformed JSON line ({e.msg} at column {e.colno})") from None
        if not isinstance(rec, dict):
            raise BenchmarkFormatError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        yield lineno, rec


def header_delimiter(path: Path) -> str:
    """The delimiter of `DELIMITERS` the file's first line holds most often (`,` when it holds none):
    a header row names columns, so unlike a sentence it holds the delimiter and no stray commas."""
    first = _decode(path).split("\n", 1)[0]
    return max(DELIMITERS, key=first.count) if any(d in first for d in DELIMITERS) else ","


def iter_csv_rows(path: Path, delimiter: str = ",") -> Iterator[tuple[int, list[str]]]:
    """(1-based line where the row starts, cells) for each non-blank row, header included."""
    if len(delimiter) != 1:
        raise BenchmarkFormatError(f"{path}: the csv delimiter must be one character, got {delimiter!r}")
    # newline="" semantics via StringIO: the csv module then handles CRLF and quoted embedded newlines
    reader = csv.reader(io.StringIO(_decode(path), newline=""), delimiter=delimiter)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # a field over csv's 131,072 characters: most often a quote left open
            raise BenchmarkFormatError(f"{path}:{start}: {e} (a quote left open runs on to the lines after "
                                       f"it)") from None
        if any(cell.strip() for cell in row):
            yield start, row
        start = reader.line_num + 1


def iter_csv(path: Path, delimiter: Optional[str] = None) -> Iterator[tuple[int, dict[str, str]]]:
    """(1-based line where the record starts, row as a dict keyed by the header row); `delimiter`
    None: `header_delimiter`."""
    delimiter = delimiter or header_delimiter(path)
    rows = iter_csv_rows(path, delimiter)
    header: Optional[list[str]] = None
    for lineno, row in rows:
        if header is None:
            header = row
            other = [d for d in DELIMITERS if len(header) == 1 and d in header[0]]
            if other:
                raise BenchmarkFormatError(f"{path}:{lineno}: the header row is one column with delimiter "
                                           f"{delimiter!r}, but it holds {other[0]!r}: set the delimiter to {other[0]!r}")
            dupes = sorted({h for h in header if header.count(h) > 1})
            if dupes:
                raise BenchmarkFormatError(f"{path}:{lineno}: repeated column names in the header row: {dupes}")
            continue
        if len(row) != len(header):
            raise BenchmarkFormatError(f"{path}:{lineno}: {len(row)} columns, the header row has {len(header)} "
                                       f"(delimiter {delimiter!r}: set the delimiter option if it is another)")
        yield lineno, dict(zip(header, row))


def _get(rec: dict, keys: tuple[str, ...], path: Path, lineno: int, what: str) -> Any:
    """The first of `keys` present in `rec`; a clear error naming file, line and field otherwise."""
    for k in keys:
        if k in rec and rec[k] is not None:
            return rec[k]
    names = " or ".join(repr(k) for k in keys)
    raise BenchmarkFormatError(f"{path}:{lineno}: missing required field {names} ({what}); fields present: {sorted(rec)}")


def _sentence(rec: dict, key: str, path: Path, lineno: int) -> str:
    value = _get(rec, (key,), path, lineno, "sentence")
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkFormatError(f"{path}:{lineno}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def paradigm_by_path(file: Path, root: Path) -> str:
    rel = file.relative_to(root) if root.is_dir() else Path(file.name)
    return rel.with_suffix("").as_posix()


# ---------------------------------------------------------------- format readers
def _pair(rec: dict, file: Path, lineno: int, label: str, paradigm: str, phenomenon, pair_id) -> Pair:
    """The Pair of a `sentence_good`/`sentence_bad` record; `phenomenon`, `pair_id`: the value, or the keys of
    the record that may hold it (the first present)."""
    def value(v, what: str) -> str:
        return str(_get(rec, v, file, lineno, what) if isinstance(v, tuple) else v)

    return Pair(label, paradigm, value(phenomenon, "phenomenon"), value(pair_id, "pair id"),
                _sentence(rec, "sentence_good", file, lineno), _sentence(rec, "sentence_bad", file, lineno))


def _blimp_pair(rec: dict, file: Path, lineno: int, label: str) -> Pair:
    return _pair(rec, file, lineno, label, str(rec.get("UID") or file.stem), ("linguistics_term",), ("pairID", "pair_id"))


def read_blimp(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    return [_blimp_pair(rec, file, n, label) for n, rec in iter_jsonl(file)]


def read_zhoblimp(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    # the phenomenon is the data file's own label; the file-name prefix (BA_, ...) is not it
    return [_pair(rec, file, n, label, str(rec.get("UID") or file.stem), ("phenomenon",), ("pairID",))
            for n, rec in iter_jsonl(file)]


def read_sling(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    paradigm = paradigm_by_path(file, root)
    folder = paradigm.split("/")[0] if "/" in paradigm else None  # the phenomenon
    if file.suffix == ".txt":
        return [Pair(label, paradigm, folder or file.parent.name, str(i), good, bad)
                for i, (lineno, good, bad) in enumerate(_iter_sling_txt(file))]
    return [_pair(rec, file, n, label, paradigm, folder or ("Phenomenon", "phenomenon"), ("pair_ID", "pairID", "pair_id"))
            for n, rec in iter_jsonl(file)]


def _iter_sling_txt(file: Path) -> Iterator[tuple[int, str, str]]:
    for lineno, line in _lines(_decode(file)):
        parts = line.split("@@@")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise BenchmarkFormatError(f"{file}:{lineno}: expected 'good@@@bad', got {line!r}")
        yield lineno, parts[0], parts[1]


def read_climp(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    text = _decode(file)
    first = text.split("\n", 1)[0].rstrip("\r")
    if "," not in first:
        return _climp_headerless(file, text, label)
    rows = list(iter_csv_rows(file))[1:]  # header ",0,1,2,3" carries no names
    if len(rows) % 2:
        raise BenchmarkFormatError(f"{file}:{rows[-1][0]}: odd number of rows; CLiMP rows come in good/bad pairs")
    out = []
    for k in range(0, len(rows), 2):
        (ln_good, g), (ln_bad, b) = rows[k], rows[k + 1]
        for ln, row, want in ((ln_good, g, "1"), (ln_bad, b, "0")):
            if len(row) != 5:
                raise BenchmarkFormatError(f"{file}:{ln}: {len(row)} columns, expected 5 (index, phenomenon, "
                                           "paradigm, sentence, label)")
            if row[4].strip() != want:
                raise BenchmarkFormatError(f"{file}:{ln}: label {row[4]!r}, expected {want!r}: CLiMP rows alternate "
                                           "good (1) / bad (0)")
            if not row[3].strip():
                raise BenchmarkFormatError(f"{file}:{ln}: empty sentence")
        if (g[1], g[2]) != (b[1], b[2]):
            raise BenchmarkFormatError(f"{file}:{ln_bad}: the bad row names another paradigm than the good row (line {ln_good})")
        out.append(Pair(label, g[2], g[1], str(k // 2), g[3], b[3]))
    return out


def _climp_headerless(file: Path, text: str, label: str) -> list[Pair]:
    # ba_construction_1000.csv: one sentence a line, CRLF, no header, no final newline
    lines = _lines(text)
    if len(lines) % 2:
        raise BenchmarkFormatError(f"{file}:{lines[-1][0]}: odd number of sentences; lines alternate good/bad")
    name = file.stem
    # "ba_construction_1000" -> "ba_construction": the other CLiMP files name it so in their columns
    if name.rsplit("_", 1)[-1].isdigit():
        name = name.rsplit("_", 1)[0]
    return [Pair(label, name, name, str(k // 2), lines[k][1], lines[k + 1][1]) for k in range(0, len(lines), 2)]


def read_babylm(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    return [_blimp_pair(rec, file, n, label) if "linguistics_term" in rec
            else _pair(rec, file, n, label, file.stem, file.stem, i) for i, (n, rec) in enumerate(iter_jsonl(file))]


def _generic(records: Iterator[tuple[int, dict]], file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    good_key, bad_key = fields.good or "sentence_good", fields.bad or "sentence_bad"
    default_paradigm = paradigm_by_path(file, root)
    out = []
    for i, (lineno, rec) in enumerate(records):
        # labels are stripped: TurBLiMP writes one phenomenon as "quantifiers" and "quantifiers  "
        paradigm = str(_get(rec, (fields.paradigm,), file, lineno, "paradigm_field")).strip() if fields.paradigm else default_paradigm
        phenomenon = str(_get(rec, (fields.phenomenon,), file, lineno, "phenomenon_field")).strip() if fields.phenomenon else paradigm
        pair_id = str(_get(rec, (fields.pair_id,), file, lineno, "id_field")) if fields.pair_id else str(i)
        out.append(Pair(label, paradigm, phenomenon, pair_id,
                        _sentence(rec, good_key, file, lineno), _sentence(rec, bad_key, file, lineno)))
    return out


def read_jsonl(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    return _generic(iter_jsonl(file), file, root, label, fields)


def read_csv(file: Path, root: Path, label: str, fields: FieldMap) -> list[Pair]:
    return _generic(iter_csv(file, fields.delimiter), file, root, label, fields)


Reader = Callable[[Path, Path, str, FieldMap], list[Pair]]
READERS: dict[str, Reader] = {"blimp": read_blimp, "zhoblimp": read_zhoblimp, "climp": read_climp, "sling": read_sling,
                              "babylm": read_babylm, "jsonl": read_jsonl, "csv": read_csv}


# ---------------------------------------------------------------- discovery and sniffing
def data_files(path: Path) -> list[Path]:
    """The data files under `path` (itself if a file), sorted; hidden and temporary names skipped."""
    if path.is_file():
        return [path]
    files = [p for p in path.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES
             and not any(part.startswith((".", "~", "__")) for part in p.relative_to(path).parts)
             and ".tmp" not in p.name and not p.name.lower().startswith("readme")]
    return sorted(files, key=lambda p: p.relative_to(path).as_posix())


def sniff_format(file: Path) -> str:
    """Guess one file's format from its first record (format=auto)."""
    if file.suffix == ".csv":
        first = _decode(file).split("\n", 1)[0].rstrip("\r")
        if first.replace(" ", "") == ",0,1,2,3" or not any(d in first for d in DELIMITERS):
            return "climp"
        return "csv"
    if file.suffix == ".txt":
        first = _decode(file).split("\n", 1)[0]
        if "@@@" in first:
            return "sling"
        raise BenchmarkFormatError(f"{file}: unknown .txt format (only SLING's 'good@@@bad' lines are read)")
    if file.suffix != ".jsonl":
        raise BenchmarkFormatError(f"{file}: unknown file type {file.suffix!r}; expected one of {DATA_SUFFIXES}")
    keys = set(next((rec for _, rec in iter_jsonl(file)), {}))  # the first record's
    if "linguistics_term" in keys:
        return "blimp"
    if {"UID", "phenomenon"} <= keys:
        return "zhoblimp"
    if "pair_ID" in keys and ({"paradigm", "Paradigm"} & keys):
        return "sling"
    if {"sentence_good", "sentence_bad"} <= keys and (set(SUPPLEMENT_FIELDS) & keys):
        return "babylm"
    return "jsonl"
