"""One memory-mapped token array + document index per (corpus, tokenizer), built once and reused by every run.

cache_dir/stores/<fingerprint>/: tokens.bin (every document's ids, no start/end token, uint16 or uint32),
offsets.npy (int64 [n_docs + 1]) and meta.json (counts, dtype, fingerprints, and the size, mtime and sha256
of both files); built under a temporary name and renamed when complete. Text is encoded with
``split_special_tokens=True``: a literal ``<|endoftext|>`` in a document stays text, never the control id.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from train.files import built_dir, sha256_file
from train.errors import InputFileError, UserError, reading
from train.interrupt import run_in_child
from train.tokenizer import load_tokenizer, pipeline_fingerprint

if TYPE_CHECKING:  # `train batch` reads a built store without datasets
    import datasets

_CHUNK_DOCS = 10_000  # documents per write: memory stays flat however large the corpus
# Part of the store fingerprint: bumped when the same tokenizer would encode the corpus differently
# (2: special-token spellings in text stay text), so an older store is never reused.
_ENCODING = 2


class TokenStore:
    """Read-only view of a built store: `tokens` is a memmap, nothing is loaded eagerly."""

    def __init__(self, path: Path):
        self.path = Path(path)
        # a store is renamed into place whole: a short file here was damaged later
        hint = f"a damaged token store: delete {self.path} and rerun to rebuild it"
        with reading(self.path / "meta.json", "the token store's meta.json", hint):
            self.meta: dict = json.loads((self.path / "meta.json").read_text())
            dtype, n_tokens = np.dtype(self.meta["dtype"]), int(self.meta["n_tokens"])
        with reading(self.path / "offsets.npy", "the token store's document index", hint):
            self.doc_offsets: np.ndarray = np.load(self.path / "offsets.npy")
        tokens = self.path / "tokens.bin"
        if tokens.stat().st_size != n_tokens * dtype.itemsize:
            raise InputFileError(f"{tokens}: {tokens.stat().st_size} bytes, meta.json says {n_tokens} tokens "
                                 f"of {dtype} ({n_tokens * dtype.itemsize} bytes); {hint}")
        self.tokens: np.ndarray = np.memmap(tokens, dtype=dtype, mode="r", shape=(n_tokens,))
        if len(self.doc_offsets) != self.meta["n_docs"] + 1 or self.doc_offsets[-1] != n_tokens:
            raise InputFileError(f"{self.path}: offsets.npy does not match meta.json (a corrupt store: delete it)")
        self.check(full=False)

    def check(self, full: bool = True) -> None:
        """Every file against the size and sha256 recorded at build; full=False trusts a file whose size and
        mtime are the recorded ones (any write moves the mtime), full=True (`train verify`) hashes all."""
        for name, rec in (self.meta.get("files") or {}).items():
            f = self.path / name
            st = f.stat()
            if st.st_size != rec["size"]:
                raise InputFileError(f"{f}: {st.st_size} bytes, meta.json records {rec['size']}; a damaged "
                                     f"token store: delete {self.path} and rerun to rebuild it")
            if (full or st.st_mtime_ns != rec["mtime_ns"]) and sha256_file(f) != rec["sha256"]:
                raise InputFileError(f"{f} does not match its sha256 in meta.json: the token store was damaged "
                                     f"after it was built; delete {self.path} and rerun to rebuild it")

    @property
    def content_hash(self) -> str | None:
        """sha256 of the store's recorded file hashes: what a run's checkpoints record as its data."""
        files = self.meta.get("files")
        if not files:
            return None
        return hashlib.sha256(json.dumps({k: v["sha256"] for k, v in files.items()}, sort_keys=True)
                              .encode()).hexdigest()

    def __len__(self) -> int:
        return self.meta["n_docs"]

    def doc(self, i: int) -> np.ndarray:
        if not -len(self) <= i < len(self):
            raise IndexError(f"document {i} out of range for a store of {len(self)} documents")
        i %= len(self)
        return self.tokens[self.doc_offsets[i]:self.doc_offsets[i + 1]]


def store_fingerprint(corpus_id: str, tokenizer_dir: Path) -> str:
    key = f"{corpus_id}\0{pipeline_fingerprint(tokenizer_dir)}\0encoding={_ENCODING}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def build_or_load(docs: datasets.Dataset, tokenizer_dir: Path, corpus_id: str, cache_dir: Path,
                  num_proc: int = 2) -> TokenStore:
    """The store for (corpus_id, tokenizer): loaded when cached, otherwise tokenised once and saved."""
    fp = store_fingerprint(corpus_id, tokenizer_dir)
    final = Path(cache_dir).expanduser() / "stores" / fp
    if (final / "meta.json").is_file():
        return TokenStore(final)
    print(f"building the token store: tokenizing {len(docs):,} documents ({docs.data.nbytes / 1e6:,.1f} MB of text) "
          f"with data.num_proc={num_proc}; cached in {final.parent} for every later run on this corpus and "
          f"tokenizer", flush=True)
    with built_dir(final, winner="meta.json") as tmp:
        if num_proc > 1:
            # datasets' worker pool inside a spawned child that a signal kills whole (train/interrupt.py): in
            # this process a killed worker left the pool's task-queue lock held and its teardown hung on a
            # forked replacement waiting for it (3 hangs in 3 Ctrl-Cs, issue 38)
            run_in_child(_build, docs, Path(tokenizer_dir), corpus_id, fp, tmp, num_proc)
        else:
            _build(docs, Path(tokenizer_dir), corpus_id, fp, tmp, num_proc)
    return TokenStore(final)


def _build(docs: datasets.Dataset, tokenizer_dir: Path, corpus_id: str, fp: str, out: Path, num_proc: int) -> None:
    if "text" not in docs.column_names:
        raise ValueError(f"documents need a 'text' column; got {docs.column_names}")
    if len(docs) == 0:
        raise ValueError("cannot build a token store from an empty corpus")
    tok = load_tokenizer(tokenizer_dir)
    dtype = np.dtype(np.uint16 if len(tok) <= 65535 else np.uint32)

    def encode(batch, idx):
        for i, t in zip(idx, batch["text"]):
            if not isinstance(t, str):
                raise ValueError(f"document {i}: text is {type(t).__name__}, not str")
        ids = tok(batch["text"], add_special_tokens=False, split_special_tokens=True, verbose=False)["input_ids"]
        return {"ids": ids, "n": [len(x) for x in ids]}

    mapped = docs.map(encode, batched=True, with_indices=True, batch_size=1000, remove_columns=docs.column_names,
                      num_proc=max(1, min(num_proc, len(docs))) if num_proc > 1 else None,
                      new_fingerprint=f"syntax-dynamics-tokens-{fp}", desc="tokenizing")
    lengths = np.asarray(mapped.with_format("numpy")["n"], dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    n_tokens = int(offsets[-1])
    if n_tokens == 0:
        raise ValueError("cannot build a token store: the corpus tokenizes to zero tokens")

    arr = np.memmap(out / "tokens.bin", dtype=dtype, mode="w+", shape=(n_tokens,))
    pos = 0
    from tqdm.auto import tqdm
    with tqdm(total=n_tokens, unit="tok", desc="writing token store") as bar:
        # Arrow batches flatten to one numpy array without a Python loop over tokens.
        for batch in mapped.select_columns(["ids"]).with_format("arrow").iter(batch_size=_CHUNK_DOCS):
            flat = batch["ids"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
            if flat.size and flat.max() > np.iinfo(dtype).max:
                raise ValueError(f"token id {int(flat.max())} does not fit {dtype} (tokenizer {tokenizer_dir})")
            arr[pos:pos + flat.size] = flat
            pos += flat.size
            bar.update(flat.size)
    assert pos == n_tokens, (pos, n_tokens)
    arr.flush()
    del arr
    _finish(out, offsets, dtype, {"fingerprint": fp, "vocab_size": len(tok),
                                  "tokenizer_fingerprint": pipeline_fingerprint(tokenizer_dir),
                                  "tokenizer_dir": str(tokenizer_dir), "corpus_id": corpus_id})


def _finish(out: Path, offsets: np.ndarray, dtype: np.dtype, meta: dict) -> None:
    """The index and meta beside tokens.bin (built_dir fsyncs them all before the rename)."""
    with open(out / "offsets.npy", "wb") as f:
        np.save(f, offsets)
    meta = {**meta, "n_tokens": int(offsets[-1]), "n_docs": len(offsets) - 1, "dtype": np.dtype(dtype).name}
    for name in ("tokens.bin", "offsets.npy"):  # fsync first: it does not move the mtime recorded here
        with open(out / name, "rb") as f:
            os.fsync(f.fileno())
    meta["files"] = {name: {"size": (out / name).stat().st_size, "mtime_ns": (out / name).stat().st_mtime_ns,
                            "sha256": sha256_file(out / name)} for name in ("tokens.bin", "offsets.npy")}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))


# What a run trained on, recorded in every checkpoint's trainer_state.json under DATA_KEY and checked on resume:
# the corpus files (path, size, mtime) and the store's content hash, which with the config hash fixes the tokens
# the run reads. A changed corpus is named before the tokenizer check (a retrained tokenizer would be blamed);
# a file merely touched gives the same store and is accepted.
DATA_KEY = "data"  # trainer_state.json key


class DataChangedError(UserError, ValueError):
    pass


def data_record(corpus_id: str, store) -> dict:
    """{corpus, store, store_sha256} for trainer_state.json."""
    return {"corpus": json.loads(corpus_id), "store": str(store.path), "store_sha256": store.content_hash}


def _files(corpus: dict) -> dict[str, tuple]:
    return {f[0]: tuple(f[1:]) for f in corpus.get("files", [])}


def check_resume_data(ckpt: Path, state: dict, corpus_id: str, store) -> None:
    """Refuses a resume whose data differ from the checkpoint's (one without the record is not checked)."""
    saved: Optional[dict] = state.get(DATA_KEY)
    if not saved or saved.get("store_sha256") is None or store.content_hash is None:
        return
    if saved["store_sha256"] == store.content_hash:
        return
    before, now = _files(saved.get("corpus", {})), _files(json.loads(corpus_id))
    changed = [f"{p} (size {before[p][0]} -> {now[p][0]}, mtime changed)" for p in sorted(before.keys() & now.keys())
               if before[p] != now[p]]
    changed += [f"{p} (gone)" for p in sorted(before.keys() - now.keys())]
    changed += [f"{p} (new)" for p in sorted(now.keys() - before.keys())]
    what = "; ".join(changed) if changed else (f"the corpus {json.dumps(saved.get('corpus'))[:200]} gives other "
                                               f"tokens now")
    raise DataChangedError(f"{ckpt}: the corpus changed since this checkpoint was written ({what}); resuming would "
                           f"train on other data. Restore the corpus files, or start a new run directory")
