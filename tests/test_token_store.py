"""Token store: ids equal the tokenizer's, built once, atomic, cached by (corpus, tokenizer)."""
from __future__ import annotations

import json
import random
import re

import datasets
import numpy as np
import pytest

from train.token_store import TokenStore, build_or_load, store_fingerprint
from train.tokenizer import TokenizerConfig, load_tokenizer, prepare_tokenizer

WORDS = "the a cat dog bird sees chases likes who that small big red runs sleeps near under".split()


def _docs(n: int = 120, seed: int = 0) -> datasets.Dataset:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        sents = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))).capitalize() + "."
                 for _ in range(rng.randint(1, 4))]
        texts.append("\n".join(sents))
    return datasets.Dataset.from_dict({"text": texts})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    docs = _docs()
    tokdir = prepare_tokenizer(TokenizerConfig(vocab_size=600, hard_vocab_limit=False, num_threads=1), docs, "tiny", cache)
    return docs, tokdir, cache


def test_ids_equal_tokenizer_and_index(setup):
    docs, tokdir, cache = setup
    store = build_or_load(docs, tokdir, "tiny", cache, num_proc=2)
    tok = load_tokenizer(tokdir)
    expected = tok(list(docs["text"]), add_special_tokens=False)["input_ids"]
    assert len(store) == len(docs)
    assert store.meta["vocab_size"] == len(tok) < 600  # a soft limit on a tiny corpus
    assert store.tokens.dtype == np.uint16 and isinstance(store.tokens, np.memmap)
    assert store.doc_offsets.dtype == np.int64 and store.doc_offsets[0] == 0
    for i, ids in enumerate(expected):
        assert store.doc(i).tolist() == ids
    assert store.meta["n_tokens"] == sum(map(len, expected)) == len(store.tokens)
    assert store.meta["n_docs"] == len(docs)
    assert tok.eos_token_id not in store.tokens  # EOS is the stream's job
    with pytest.raises(IndexError, match="out of range"):
        store.doc(len(docs))


def test_literal_special_token_in_text_stays_text(setup):
    # A document that spells the document token must not gain a document boundary: the stream
    # alone decides where documents start (the saved tokenizer itself reads the spelling as the token).
    _, tokdir, cache = setup
    tok = load_tokenizer(tokdir)
    text = f"the cat {tok.eos_token} sees a dog"
    assert tok(text, add_special_tokens=False)["input_ids"].count(tok.eos_token_id) == 1
    store = build_or_load(datasets.Dataset.from_dict({"text": [text, "a dog"]}), tokdir, "literal", cache, num_proc=1)
    assert tok.eos_token_id not in store.doc(0).tolist()
    assert tok.decode(store.doc(0).tolist()) == text


def test_second_call_loads_without_rebuilding(setup):
    docs, tokdir, cache = setup
    first = build_or_load(docs, tokdir, "tiny", cache, num_proc=1)
    meta = first.path / "meta.json"
    mtime = meta.stat().st_mtime_ns
    # Loading must not even need the documents: an empty dataset would fail a rebuild.
    again = build_or_load(datasets.Dataset.from_dict({"text": []}), tokdir, "tiny", cache)
    assert again.path == first.path and meta.stat().st_mtime_ns == mtime
    assert np.array_equal(np.asarray(again.tokens), np.asarray(first.tokens))
    assert json.loads(meta.read_text())["fingerprint"] == store_fingerprint("tiny", tokdir) == first.path.name
    other = build_or_load(docs.select(range(10)), tokdir, "tiny-10", cache, num_proc=1)
    assert other.path != first.path and len(other) == 10


def test_failed_build_leaves_nothing(setup):
    _, tokdir, cache = setup
    bad = datasets.Dataset.from_dict({"text": ["fine text.", None]})
    with pytest.raises(ValueError, match="document 1: text is NoneType"):
        build_or_load(bad, tokdir, "broken", cache, num_proc=1)
    stores = cache / "stores"
    assert not (stores / store_fingerprint("broken", tokdir)).exists()
    assert not [p for p in stores.iterdir() if p.name.startswith(".")]
    # a rerun with good input builds under the same name
    good = datasets.Dataset.from_dict({"text": ["fine text.", "more text."]})
    assert len(build_or_load(good, tokdir, "broken", cache, num_proc=1)) == 2


def test_corrupt_store_is_reported(setup):
    docs, tokdir, cache = setup
    store = build_or_load(docs, tokdir, "tiny", cache, num_proc=1)
    tmp = cache / "copy"
    tmp.mkdir()
    for f in store.path.iterdir():
        (tmp / f.name).write_bytes(f.read_bytes())
    np.save(tmp / "offsets.npy", store.doc_offsets[:-1])
    with pytest.raises(ValueError, match="offsets.npy does not match meta.json"):
        TokenStore(tmp)


@pytest.mark.parametrize("name", ["tokens.bin", "offsets.npy", "meta.json"])
def test_truncated_cache_file_is_named(setup, name, tmp_path):
    import shutil

    docs, tokdir, shared = setup
    build_or_load(docs, tokdir, "tiny", shared, num_proc=1)
    cache = tmp_path / "cache"  # a copy: the fixture's cache is shared by the module's tests
    shutil.copytree(shared / "stores", cache / "stores")
    store = build_or_load(docs, tokdir, "tiny", cache, num_proc=1)
    f = store.path / name
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"{re.escape(str(f))}.*delete {re.escape(str(store.path))} and rerun"):
        build_or_load(docs, tokdir, "tiny", cache, num_proc=1)
