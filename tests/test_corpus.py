"""Document loading: what a document is for each format, the corpus identity, and the error messages."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import probes.grammar
from train.corpus import DataConfig, load_documents

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _cfg(tmp_path, paths, **kw) -> DataConfig:
    return DataConfig(source="files", paths=[str(p) for p in paths], cache_dir=str(tmp_path / "cache"),
                      num_proc=1, **kw)


def test_text_documents_are_blank_line_separated_blocks(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("First para of doc one.\nSecond para of doc one.\n\nDoc two.\n\n\n\nDoc three.\n", encoding="utf-8")
    docs, ident = load_documents(_cfg(tmp_path, [f]))
    texts = [t.strip() for t in docs["text"]]
    assert texts == ["First para of doc one.\nSecond para of doc one.", "Doc two.", "Doc three."]
    assert docs.column_names == ["text"]
    assert str(f) in ident


def test_directory_walk_mixes_formats_and_identity_tracks_edits(tmp_path):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("alpha\n\nbeta\n", encoding="utf-8")
    (d / "sub" / "b.jsonl").write_text(json.dumps({"body": "gamma", "id": 1}) + "\n"
                                       + json.dumps({"body": "delta", "id": 2}) + "\n", encoding="utf-8")
    pd.DataFrame({"body": ["epsilon", "  "]}).to_parquet(d / "c.parquet")
    (d / "README.md").write_text("not a corpus file")
    (d / ".hidden.txt").write_text("skipped")
    cfg = _cfg(tmp_path, [d], text_field="body")
    docs, ident = load_documents(cfg)
    assert sorted(t.strip() for t in docs["text"]) == ["alpha", "beta", "delta", "epsilon", "gamma"]
    _, same = load_documents(cfg)
    assert same == ident
    (d / "a.txt").write_text("alpha\n\nbeta changed\n", encoding="utf-8")
    os.utime(d / "a.txt", ns=(1, 1))
    _, changed = load_documents(cfg)
    assert changed != ident


def test_errors_name_key_and_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data\.paths.*nope"):
        load_documents(_cfg(tmp_path, [tmp_path / "nope"]))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n\n")
    with pytest.raises(ValueError, match=r"empty.*empty\.txt"):
        load_documents(_cfg(tmp_path, [empty]))
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(ValueError, match=r"empty.*emptydir"):
        load_documents(_cfg(tmp_path, [tmp_path / "emptydir"]))
    j = tmp_path / "rows.jsonl"
    j.write_text('{"text": "ok"}\n\n{"content": "no text"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"rows\.jsonl:3: no field 'text' \(data\.text_field\)"):
        load_documents(_cfg(tmp_path, [j]))
    p = tmp_path / "t.parquet"
    pd.DataFrame({"content": ["x"]}).to_parquet(p)
    with pytest.raises(ValueError, match=r"t\.parquet: no column 'text' \(data\.text_field\)"):
        load_documents(_cfg(tmp_path, [p]))
    with pytest.raises(ValueError, match="data.source"):
        load_documents(DataConfig(source="web"))


@pytest.mark.skipif(not (SHARED / "corpora" / "en").is_dir(), reason=f"{SHARED}/corpora/en is absent")
def test_real_corpus_file(tmp_path):
    f = SHARED / "corpora" / "en" / "onestopenglish" / "onestopenglish_ele.txt"
    docs, _ = load_documents(_cfg(tmp_path, [f]))
    n_blocks = len([b for b in f.read_text(encoding="utf-8").split("\n\n") if b.strip()])
    assert len(docs) == n_blocks > 100
    assert docs[0]["text"].startswith("When you see the word Amazon")


@pytest.mark.skipif(not hasattr(probes.grammar, "corpus_documents"), reason="probes.grammar.corpus_documents not written yet")
def test_grammar_source(tmp_path):
    cfg = DataConfig(source="grammar", cache_dir=str(tmp_path))
    cfg.grammar.n_documents = 5
    try:
        docs, ident = load_documents(cfg)
    except NotImplementedError:
        pytest.skip("probes.grammar.corpus_documents is still a stub")
    assert 0 < len(docs) <= 5 and all(t.strip() for t in docs["text"])
    assert '"n_documents": 5' in ident
