"""The fast tokenizer we save must give sentencepiece's own ids on real Chinese and English sentences."""
from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import pytest
import sentencepiece as spm
import transformers

from train.start_token import read_record
from train.tokenizer import TokenizerConfig, load_tokenizer, prepare_tokenizer, pipeline_fingerprint

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _corpus_sample(n_lines_per_file: int = 150) -> list[str]:
    docs = []
    for lang in ("zh", "en"):
        for f in sorted((SHARED / "corpora" / lang).rglob("*.txt")):
            lines = [l for l in f.read_text(encoding="utf-8").splitlines() if l.strip()]
            docs.append("\n".join(lines[:n_lines_per_file]))
    return docs


def _benchmark_sentences() -> list[str]:
    out = []
    for f in sorted((SHARED / "benchmarks" / "zhoblimp" / "data" / "ZhoBLiMP").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                out += [r["sentence_good"], r["sentence_bad"]]
    rng = random.Random(0)
    for f in sorted((SHARED / "benchmarks" / "blimp" / "data").glob("*.jsonl")):
        rows = [json.loads(l) for l in f.read_text(encoding="utf-8").splitlines() if l.strip()]
        for r in rng.sample(rows, 150):
            out += [r["sentence_good"], r["sentence_bad"]]
    return out


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def trained(request, tmp_path_factory, shared):
    # the README's headline guarantee (id equality on real sentences): without ../shared it skips
    # locally and fails under CI=true
    shared("corpora"), shared("benchmarks", "zhoblimp"), shared("benchmarks", "blimp")
    cache = tmp_path_factory.mktemp("cache")
    docs = datasets.Dataset.from_dict({"text": _corpus_sample()})
    cfg = TokenizerConfig(model_type=request.param, vocab_size=4000, character_coverage=0.995, max_sentences=20_000)
    return prepare_tokenizer(cfg, docs, "test-corpus", cache), cfg, docs, cache


def test_ids_equal_sentencepiece_on_benchmarks(trained):
    path = trained[0]
    sp = spm.SentencePieceProcessor(model_file=str(path / "tokenizer.model"))
    tok = load_tokenizer(path)
    sents = _benchmark_sentences()
    assert sum("？" in s for s in sents) > 0  # the NFKC trap is in the sample
    extra = ["<s> a </s> <unk> <pad> <0x41>", "  two  spaces\tand tab ", "全角　空格？！", "emoji 🦜 ẞ ﬁ", ""]
    sents += extra + [d[:2000] for d in trained[2]["text"]]  # multi-line corpus documents too
    ours = tok(sents, add_special_tokens=False)["input_ids"]
    ref = sp.encode(sents)
    bad = [(s, a, b) for s, a, b in zip(sents, ours, ref) if a != b]
    assert len(sents) > 80_000
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def test_directory_reloads_and_specials(trained):
    path, cfg, docs, cache = trained
    tok = load_tokenizer(path)
    auto = transformers.AutoTokenizer.from_pretrained(str(path))
    s = "他们把杯子打碎了？ The cats that the dog chases are asleep."
    assert auto(s, add_special_tokens=False)["input_ids"] == tok(s, add_special_tokens=False)["input_ids"]
    # no BOS/EOS is added: the scorer prepends the start token itself
    ids = tok(s, add_special_tokens=False)["input_ids"]
    assert tok(s)["input_ids"] == ids
    # one document token, <|endoftext|>, is BOS, EOS and padding (Pythia-style); <unk> stays id 0
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.bos_token) == (1, 1, 1, "<|endoftext|>")
    assert tok.convert_ids_to_tokens(0) == "<unk>"
    assert read_record(path) == {"start_token": "<|endoftext|>", "start_token_id": 1,
                                 "end_token": None, "end_token_id": None}
    assert len(tok) == 4000
    sp = spm.SentencePieceProcessor(model_file=str(path / "tokenizer.model"))
    # the token written as text is the token (a consumer prepends tok.bos_token as text) ...
    assert tok(tok.bos_token + s)["input_ids"] == [1] + ids
    assert auto([tok.bos_token + s, tok.bos_token + "猫"], padding=True)["input_ids"][1][:2] == [1] + sp.encode("猫")[:1]
    # ... and text is text where the store and the scorer encode it: spelled as sentencepiece does
    lit = "a <|endoftext|> b"
    assert tok(lit, add_special_tokens=False, split_special_tokens=True)["input_ids"] == sp.encode(lit)
    assert 1 not in sp.encode(lit)
    # decoding returns the NFKC-normalised text, as sentencepiece does (？ -> ?)
    assert tok.decode(tok(s, add_special_tokens=False)["input_ids"]) == sp.decode(sp.encode(s)) == s.replace("？", "?")
    # cached: a second call returns the same directory without retraining
    fp = pipeline_fingerprint(path)
    mtime = (path / "tokenizer.json").stat().st_mtime_ns
    again = prepare_tokenizer(cfg, docs, "test-corpus", cache)
    assert again == path and (path / "tokenizer.json").stat().st_mtime_ns == mtime
    assert pipeline_fingerprint(again) == fp
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_control_and_byte_piece_spellings_and_checkpoint_copy(tmp_path, model_type):
    # A corpus without "<" or ">": the HF lattice must still spell "<s>" with ordinary pieces, as
    # sentencepiece does, and characters never seen must map to <unk> in both.
    words = "the cat sees a dog near red bird big small runs sleeps who that under".split()
    docs = datasets.Dataset.from_dict({"text": [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 5})
    path = prepare_tokenizer(TokenizerConfig(model_type=model_type, vocab_size=110, byte_fallback=False), docs, "words", tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(path / "tokenizer.model"))
    tok = load_tokenizer(path)
    texts = ["<s> the cat </s>", "a<pad>b<unk>c", "<0x41> 🦜 猫", "🦜🦜猫the", "the  cat\n\nsees"]
    assert tok(texts, add_special_tokens=False)["input_ids"] == sp.encode(texts)
    assert tok.bos_token_id not in tok("<s>", add_special_tokens=False)["input_ids"]
    assert 0 in sp.encode("🦜")
    # the copy a checkpoint writes with save_pretrained: same ids, same fingerprint
    tok.save_pretrained(str(tmp_path / "ckpt"))
    copy = load_tokenizer(tmp_path / "ckpt")
    assert copy(texts, add_special_tokens=False)["input_ids"] == sp.encode(texts)
    assert pipeline_fingerprint(tmp_path / "ckpt") == pipeline_fingerprint(path)
    with pytest.raises(ValueError, match="tokenizer.vocab_size=5"):
        prepare_tokenizer(TokenizerConfig(vocab_size=5), docs, "words", tmp_path)


def test_pretrained_missing_path_names_key(tmp_path):
    docs = datasets.Dataset.from_dict({"text": ["x"]})
    with pytest.raises(FileNotFoundError, match="tokenizer.path"):
        prepare_tokenizer(TokenizerConfig(kind="pretrained", path=str(tmp_path / "nope")), docs, "c", tmp_path)
    with pytest.raises(ValueError, match="tokenizer.path"):
        prepare_tokenizer(TokenizerConfig(kind="pretrained"), docs, "c", tmp_path)
    with pytest.raises(ValueError, match="tokenizer.model_type"):
        prepare_tokenizer(TokenizerConfig(model_type="wordpiece"), docs, "c", tmp_path)


def test_pretrained_dir_is_used_as_is(trained, tmp_path):
    path = trained[0]
    got = prepare_tokenizer(TokenizerConfig(kind="pretrained", path=str(path)), trained[2], "c", tmp_path)
    assert got == path.resolve()
    assert pipeline_fingerprint(got) == pipeline_fingerprint(path)
