"""Document loading: what a document is for each format, the corpus identity, and the error messages."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from train.corpus import DataConfig, load_documents


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


def test_real_corpus_file(tmp_path, shared):
    f = shared("corpora", "en", "onestopenglish", "onestopenglish_ele.txt")
    docs, _ = load_documents(_cfg(tmp_path, [f]))
    n_blocks = len([b for b in f.read_text(encoding="utf-8").split("\n\n") if b.strip()])
    assert len(docs) == n_blocks > 100
    assert docs[0]["text"].startswith("When you see the word Amazon")


def test_grammar_source(tmp_path):
    cfg = DataConfig(source="grammar", cache_dir=str(tmp_path), generator="probes.benchmarks.grammar.corpus_documents")
    cfg.grammar.n_documents = 5
    docs, ident = load_documents(cfg)
    assert 0 < len(docs) <= 5 and all(t.strip() for t in docs["text"])
    assert '"n_documents": 5' in ident


def _bad_corpus_files(tmp_path) -> dict:
    """name -> (file, the message expected): each fault of issue 12's corpus list."""
    d = tmp_path / "bad"
    d.mkdir()
    good = "".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(1500))
    cases = {}
    (d / "zero.txt").write_bytes(b"")
    cases["zero"] = (d / "zero.txt", r"zero\.txt: empty file \(0 bytes\)")
    (d / "random.txt").write_bytes(b"fine first line\nsecond\n" + bytes(range(128, 256)) * 4)
    cases["random_text"] = (d / "random.txt", r"random\.txt:3: not UTF-8")
    (d / "random.jsonl").write_bytes(b'{"text": "ok"}\n\xff\xfe\x80garbage\n')
    cases["random_jsonl"] = (d / "random.jsonl", r"random\.jsonl:2: not UTF-8")
    (d / "null.jsonl").write_text(good + '{"text": null}\n', encoding="utf-8")
    cases["null"] = (d / "null.jsonl", r"null\.jsonl:1501: field 'text' \(data\.text_field\) is null")
    (d / "number.jsonl").write_text('{"text": 17}\n', encoding="utf-8")
    cases["number"] = (d / "number.jsonl", r"number\.jsonl:1: field 'text' \(data\.text_field\) is int")
    (d / "late.jsonl").write_text(good + '{"text": "a"} {"text": "b"}\n', encoding="utf-8")
    cases["malformed_past_1000"] = (d / "late.jsonl", r"late\.jsonl:1501: invalid JSON")
    (d / "late_field.jsonl").write_text(good + '{"body": "a"}\n', encoding="utf-8")
    cases["field_past_1000"] = (d / "late_field.jsonl", r"late_field\.jsonl:1501: no field 'text'")
    (d / "random.parquet").write_bytes(os.urandom(2000))
    cases["random_parquet"] = (d / "random.parquet", r"random\.parquet: not a readable parquet file")
    pd.DataFrame({"text": ["a", None, "c"]}).to_parquet(d / "null.parquet")
    cases["null_parquet"] = (d / "null.parquet", r"null\.parquet: row 1: column 'text' .* is null")
    pd.DataFrame({"text": [1, 2]}).to_parquet(d / "int.parquet")
    cases["int_parquet"] = (d / "int.parquet", r"int\.parquet: column 'text' \(data\.text_field\) holds int64")
    return cases


@pytest.mark.parametrize("case", ["zero", "random_text", "random_jsonl", "null", "number", "malformed_past_1000",
                                  "field_past_1000", "random_parquet", "null_parquet", "int_parquet"])
def test_bad_corpus_files_are_named_with_their_line(tmp_path, case):
    path, message = _bad_corpus_files(tmp_path)[case]
    with pytest.raises(ValueError, match=message):
        load_documents(_cfg(tmp_path, [path]))


def test_a_checked_file_is_not_read_again_until_it_changes(tmp_path, monkeypatch):
    import train.corpus

    f = tmp_path / "rows.jsonl"
    f.write_text('{"text": "one"}\n', encoding="utf-8")
    calls = []
    real = train.corpus._check_jsonl
    monkeypatch.setattr(train.corpus, "_check_jsonl", lambda *a: calls.append(a) or real(*a))
    load_documents(_cfg(tmp_path, [f]))
    load_documents(_cfg(tmp_path, [f]))
    assert len(calls) == 1
    f.write_text('{"text": null}\n', encoding="utf-8")
    os.utime(f, ns=(1, 1))
    with pytest.raises(ValueError, match=r"rows\.jsonl:1: .* is null"):
        load_documents(_cfg(tmp_path, [f]))


def test_one_huge_line_is_blamed_rather_than_the_vocab_size(tmp_path):
    from train.tokenizer import TokenizerConfig, prepare_tokenizer

    f = tmp_path / "huge.txt"
    words = [f"w{i % 997}" for i in range(3000)]
    f.write_text(" ".join(words) + "\n", encoding="utf-8")  # ~15 KB on one line
    docs, ident = load_documents(_cfg(tmp_path, [f]))
    with pytest.raises(ValueError, match=r"1 of 1 lines of the corpus \(.*huge\.txt\) are longer than sentencepiece's "
                                         r"max_sentence_length \(4192 bytes; the longest has 1\d{4}\)"):
        prepare_tokenizer(TokenizerConfig(vocab_size=300, num_threads=1), docs, ident, tmp_path / "cache")
