"""Training documents: local text/jsonl/parquet files or the built-in grammar corpus, as one Dataset. A text
file's document is a paragraph block (the shared corpora's blank-line separated documents: the `text`
builder's sample_by="paragraph")."""
from __future__ import annotations

import codecs
import hashlib
import _thread
import json
import os
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from train.errors import ConfigError, InputFileError
from train.faults import stuck_worker
from train.interrupt import guard_forks, kill_children, open_files
from train.names import check_name, resolve

if TYPE_CHECKING:
    import datasets

_EXTENSIONS = {"text": (".txt", ".text"), "jsonl": (".jsonl", ".json"), "parquet": (".parquet",)}
_BUILDER = {"text": "text", "jsonl": "json", "parquet": "parquet"}


@dataclass
class GrammarConfig:
    """The built-in grammar (probes/benchmarks/grammars/): one seed gives a corpus and minimal pairs. Here,
    beside DataConfig, because it is part of the trajectory; the probe benchmarks reuse it."""
    variant: str = "en"  # en | zh
    seed: int = 0
    n_documents: int = 2000
    sentences_per_document: int = 10
    pairs_per_paradigm: int = 200


@dataclass
class DataConfig:
    source: str = "grammar"  # "grammar" (built-in generator) | "files"
    generator: Optional[str] = None  # source=grammar: import path of GrammarConfig -> documents
    paths: list[str] = field(default_factory=list)  # files or directories, for source=files
    format: str = "auto"  # auto | text | jsonl | parquet  (auto: by file extension)
    text_field: str = "text"  # column for jsonl/parquet
    grammar: GrammarConfig = field(default_factory=GrammarConfig)
    budget_tokens: Optional[int] = None  # tokens trained on; None = the whole corpus once
    epochs: int = 1
    order_seed: int = 1234  # the fixed document order shared by all budgets and seeds
    seed: int = 0  # the run's data seed: order of sequences
    seq_len: Optional[int] = None  # None: filled from model.max_position_embeddings
    cache_dir: str = "~/.cache/syntax-dynamics"  # token stores and trained tokenizers live here
    num_proc: int = 2
    load_timeout_s: Optional[float] = 1800  # s a load may wait on datasets' lock or pool; null: forever
    nested_budgets: list[int] = field(default_factory=list)  # docs/recipe.md; empty: one shuffle over the view
    heldout_tokens: int = 20_000  # from the end of the order, never trained on, val/loss (docs/training.md); 0: off

    def __post_init__(self) -> None:
        if any(b < 1 for b in self.nested_budgets) or sorted(set(self.nested_budgets)) != list(self.nested_budgets):
            raise ConfigError(f"data.nested_budgets must be distinct positive token counts in increasing order, "
                             f"got {self.nested_budgets}")
        if self.nested_budgets and self.budget_tokens not in self.nested_budgets:
            raise ConfigError(f"data.budget_tokens={self.budget_tokens} is not one of data.nested_budgets="
                             f"{self.nested_budgets}: its run would not nest with theirs; add it, or set "
                             "data.nested_budgets=[] for one shuffle over the whole view")
        if self.epochs < 1:
            raise ConfigError(f"data.epochs={self.epochs}: must be at least 1")
        if self.budget_tokens is not None and self.budget_tokens < 1:
            raise ConfigError(f"data.budget_tokens={self.budget_tokens}: must be a positive number of tokens "
                              f"(or null: the whole corpus)")
        if self.heldout_tokens < 0:
            raise ConfigError(f"data.heldout_tokens={self.heldout_tokens}: a token count, or 0 for no held-out split")
        if self.generator is not None:  # refused when read, before anything would import it
            check_name("data.generator", self.generator)
        if self.num_proc < 1:
            raise ConfigError(f"data.num_proc={self.num_proc}: must be at least 1")


def generator(fn):
    """Marks `fn` (GrammarConfig -> documents) as one that data.generator may name."""
    fn.corpus_generator = True
    return fn


def load_documents(cfg: DataConfig) -> tuple[datasets.Dataset, str]:
    """(Dataset with one column "text", corpus identity: what the tokenizer and token store are keyed by)."""
    import datasets
    if cfg.source == "grammar":
        if not cfg.generator:
            raise ConfigError("data.generator is not set: data.source=grammar needs the import path of the "
                              "grammar's document generator (configs/data/grammar.yaml names it)")
        generate = resolve("data.generator", cfg.generator)
        if not getattr(generate, "corpus_generator", False):  # not any function of ours: a marked one
            raise ConfigError(f"data.generator={cfg.generator!r} is not a corpus generator (@train.corpus.generator)")
        docs = [d for d in generate(cfg.grammar) if d.strip()]
        if not docs:
            raise ValueError(f"data.grammar {asdict(cfg.grammar)} produced no documents")
        return datasets.Dataset.from_dict({"text": docs}), corpus_id_of(cfg)
    if cfg.source != "files":
        raise ValueError(f"data.source must be 'grammar' or 'files', got {cfg.source!r}")
    if cfg.format not in ("auto", *_EXTENSIONS):
        raise ValueError(f"data.format must be one of auto, text, jsonl, parquet; got {cfg.format!r}")
    if not cfg.paths:
        raise ValueError("data.paths is empty: name at least one file or directory when data.source=files")

    groups = _collect_files(cfg)
    parts = []
    cache = str(Path(cfg.cache_dir).expanduser() / "datasets")
    for fmt, files in sorted(groups.items()):
        for f in files:
            _check_file(f, fmt, cfg.text_field, Path(cfg.cache_dir).expanduser())
        kwargs = {"sample_by": "paragraph"} if fmt == "text" else {}
        size = sum(f.stat().st_size for f in files)  # data.num_proc, but no pool where it does not pay
        workers = max(1, min(cfg.num_proc, len(files), size // POOL_MIN_BYTES_PER_WORKER))
        with bounded_wait(cfg.load_timeout_s, Path(cache), files), guard_forks():  # its pool dies with us
            stuck_worker("load_dataset", str(files[0]))  # tests only: a worker that ignores SIGTERM
            ds = datasets.load_dataset(_BUILDER[fmt], data_files=[str(f) for f in files], split="train",
                                       cache_dir=cache, num_proc=workers, **kwargs)
        col = "text" if fmt == "text" else cfg.text_field
        ds = ds.select_columns([col])
        if col != "text":
            ds = ds.rename_column(col, "text")
        parts.append(ds)
    if len(parts) > 1:
        # builders disagree on string vs large_string; one type lets the parts concatenate
        parts = [p.cast(datasets.Features({"text": datasets.Value("large_string")})) for p in parts]
    docs = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    # Blank documents add nothing but an EOS (null cells were refused by _check_file).
    docs = docs.filter(lambda b: [t is not None and t.strip() != "" for t in b["text"]], batched=True)
    if len(docs) == 0:
        raise ValueError(f"data.paths: the corpus is empty (no non-blank documents in "
                         f"{sorted(str(f) for fs in groups.values() for f in fs)})")
    return docs, corpus_identity(cfg, groups)


def corpus_id_of(cfg: DataConfig) -> str:
    """load_documents' corpus identity without reading or generating a document (`train batch`)."""
    if cfg.source == "grammar":
        return json.dumps({"source": "grammar", "grammar": asdict(cfg.grammar)}, sort_keys=True)
    return corpus_identity(cfg)


def corpus_identity(cfg: DataConfig, groups: Optional[dict[str, list[Path]]] = None) -> str:
    """The corpus identity of data.source=files from names, sizes and mtimes alone (train/plan.py uses it)."""
    all_files = sorted(f for fs in (groups or _collect_files(cfg)).values() for f in fs)
    return json.dumps({
        "source": "files", "format": cfg.format, "text_field": cfg.text_field,
        "files": [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in all_files],
    }, sort_keys=True)


# Below this many bytes per worker a pool of processes costs more than it saves (forking, pickling the
# builder) and brings the one way a load can hang forever: a worker that dies or stops answering.
POOL_MIN_BYTES_PER_WORKER = 256 * 2**20


@contextmanager
def bounded_wait(timeout_s: Optional[float], cache: Path, files: list[Path]):
    """Stops a load_dataset call that has not returned after timeout_s, saying what it waits on: `datasets`
    waits forever on a builder lock another process holds, and on a dead worker of its pool. A timer
    interrupts the main thread (the lock wait polls in Python) and the error names the locks' holders."""
    if timeout_s is None:
        yield
        return
    fired, reading = threading.Event(), []

    def interrupt():
        # the corpus file open when the load stopped (before the workers holding it are stopped), else how many
        open_now = open_files(files) or (files if len(files) == 1 else [])
        reading.append(f"It was reading {', '.join(map(str, open_now))}." if open_now else
                       f"It was reading {len(files)} files under {os.path.commonpath([str(f) for f in files])}.")
        fired.set()
        kill_children()  # a stuck worker would hold the pool's teardown forever
        _thread.interrupt_main()

    timer = threading.Timer(timeout_s, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    except BaseException:  # KeyboardInterrupt, or Interrupted where the trainer handles SIGINT
        if not fired.is_set():
            raise
        raise TimeoutError(f"datasets.load_dataset did not finish in data.load_timeout_s={timeout_s} s. "
                           f"{_stuck(cache)} {reading[0] if reading else ''}") from None
    finally:
        timer.cancel()


def _stuck(cache: Path) -> str:
    """The locks under `cache` that some process holds (from /proc/locks) and the unfinished builds."""
    holders: dict[int, str] = {}
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
            if len(parts) > 5 and parts[1] == "FLOCK":
                holders[int(parts[5].rsplit(":", 1)[1])] = parts[4]
    except (OSError, ValueError, IndexError):
        pass
    held = []
    for lock in sorted(cache.rglob("*.lock")):
        pid = holders.get(lock.stat().st_ino)
        if pid is not None:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                cmd = "?"
            held.append(f"{lock} held by pid {pid} ({cmd[:200]})")
    incomplete = [str(p) for p in sorted(cache.rglob("*.incomplete"))]
    return ("Held: " + "; ".join(held) + "." if held else "No datasets lock under the cache is held "
            "(a worker of its pool may have died).") + (
        f" Unfinished builds: {', '.join(incomplete)}." if incomplete else "") + (
        " Wait for that process or stop it; a build it leaves unfinished is redone." if held else "")


def _format_of(path: Path, fmt: str) -> Optional[str]:
    if fmt != "auto":
        return fmt
    for name, exts in _EXTENSIONS.items():
        if path.name.lower().endswith(exts):
            return name
    return None


def _collect_files(cfg: DataConfig) -> dict[str, list[Path]]:
    """Files grouped by format; directories are walked (sorted, hidden files skipped)."""
    groups: dict[str, list[Path]] = {}
    for p in cfg.paths:
        path = Path(p).expanduser().resolve()
        if not path.exists():
            raise FileNotFoundError(f"data.paths: no such file or directory: {path}")
        if path.is_file():
            fmt = _format_of(path, cfg.format)
            if fmt is None:
                raise ValueError(f"data.paths: cannot tell the format of {path} from its extension; "
                                 f"set data.format to text, jsonl or parquet")
            groups.setdefault(fmt, []).append(path)
            continue
        found = False
        for f in sorted(path.rglob("*")):
            if not f.is_file() or any(part.startswith(".") for part in f.relative_to(path).parts):
                continue
            fmt = _format_of(f, "auto")
            if fmt is not None and (cfg.format == "auto" or fmt == cfg.format):
                groups.setdefault(fmt, []).append(f)
                found = True
        if not found:
            kind = "text, jsonl or parquet" if cfg.format == "auto" else cfg.format
            raise ValueError(f"data.paths: the corpus is empty: no {kind} files under {path}")
    return groups


def _check_file(path: Path, fmt: str, text_field: str, cache: Path) -> None:
    """Every line (row) checked once, naming file and line, before `datasets` reads it (its own errors name
    neither); a file that passed is remembered by path, size and mtime."""
    stat = path.stat()
    key = hashlib.sha256(json.dumps([str(path), stat.st_size, stat.st_mtime_ns, fmt, text_field]).encode())
    marker = cache / "checked" / key.hexdigest()[:32]
    if marker.exists():
        return
    if stat.st_size == 0:
        raise InputFileError(f"{path}: empty file (0 bytes); remove it from data.paths")
    if fmt == "text":
        _check_text(path)
    else:
        (_check_jsonl if fmt == "jsonl" else _check_parquet)(path, text_field)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{path}\n")


def _check_text(path: Path) -> None:
    """UTF-8 throughout (datasets' text builder would fail with a bare UnicodeDecodeError)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, offset = 1, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                line = lines + chunk.count(b"\n", 0, max(0, e.start))
                raise InputFileError(f"{path}:{line}: not UTF-8 text (at byte offset {offset + max(0, e.start)}); "
                                     f"the corpus must be UTF-8") from None
            lines += chunk.count(b"\n")
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InputFileError(f"{path}:{lines}: not UTF-8 text (the file ends inside a character)") from None


def _check_jsonl(path: Path, text_field: str) -> None:
    """Every line: valid JSON, an object, with a string under data.text_field."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputFileError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputFileError(f"{path}:{lineno}: invalid JSON ({e})") from None
            if not isinstance(row, dict) or text_field not in row:
                keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise InputFileError(f"{path}:{lineno}: no field {text_field!r} (data.text_field); found {keys}")
            if not isinstance(row[text_field], str):
                kind = "null" if row[text_field] is None else type(row[text_field]).__name__
                raise InputFileError(f"{path}:{lineno}: field {text_field!r} (data.text_field) is {kind}, "
                                     f"not a string")


def _check_parquet(path: Path, text_field: str) -> None:
    """A string column under data.text_field without nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:  # the checks' InputFileErrors pass through: neither an ArrowException nor an OSError
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
        if text_field not in schema.names:
            raise InputFileError(f"{path}: no column {text_field!r} (data.text_field); found {schema.names}")
        kind = schema.field(text_field).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise InputFileError(f"{path}: column {text_field!r} (data.text_field) holds {kind}, not strings")
        column = pf.read(columns=[text_field]).column(text_field)
    except (pa.ArrowException, OSError) as e:
        raise InputFileError(f"{path}: not a readable parquet file ({e})") from None
    if column.null_count:
        first = column.is_null().to_numpy(zero_copy_only=False).argmax()
        raise InputFileError(f"{path}: row {first}: column {text_field!r} (data.text_field) is null "
                             f"({column.null_count} null rows)")
