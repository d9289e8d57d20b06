"""The run's tokenizer: trained once per corpus (sentencepiece) or taken from an existing HF directory;
either way a directory of HF files that `load_tokenizer` loads for the token store, probes and checkpoints.

The conversion is hand-written because transformers' own loaders disagree with sentencepiece (an empty
vocabulary, NFKC skipped, the leading `▁` dropped); built from the model proto (its normalisation map,
whitespace rules, piece scores or score-ranked merges) the fast tokenizer agrees with sentencepiece by
construction (tests/test_tokenizer.py). Format 2: one control piece ``<|endoftext|>`` (id 1) is BOS, EOS
and padding, as in Pythia; the saved tokenizer recognises it in text (``tok(tok.bos_token + s)``), while
corpus and benchmark text is encoded with ``split_special_tokens=True``, so a literal one stays text."""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from train.files import built_dir
from train.errors import ConfigError, InputFileError
from train.faults import stall_point
from train.interrupt import run_in_child
from train.start_token import write_record

if TYPE_CHECKING:  # imported where used: the config schema (train.config) and `plan` need neither
    import datasets
    import transformers

log = logging.getLogger(__name__)

UNK, DOC = "<unk>", "<|endoftext|>"
SPM_FILE = "tokenizer.model"
# Bumped when what prepare_tokenizer builds changes for the same config (2: one <|endoftext|> piece
# instead of <s>/</s>/<pad>); part of the cache key, so a cached older tokenizer is never reused.
FORMAT = 2
# sentencepiece never produces control or byte pieces from text; the HF Unigram lattice has no piece types,
# so they get this score (with every printable ASCII character a piece, _ASCII, text spells them plainly).
_NEVER = -1e9
# sentencepiece's default trainer_spec.max_sentence_length: longer training lines are skipped
SPM_MAX_SENTENCE_BYTES = 4192
_ASCII = "".join(chr(c) for c in range(0x21, 0x7F))


@dataclass
class TokenizerConfig:
    kind: str = "sentencepiece"  # sentencepiece (trained on the corpus) | pretrained (existing HF dir)
    path: Optional[str] = None  # kind=pretrained: a directory loadable by AutoTokenizer
    vocab_size: int = 8000
    model_type: str = "unigram"  # unigram | bpe
    character_coverage: float = 0.9995
    max_sentences: int = 1_000_000  # sentencepiece input_sentence_size (sampled)
    byte_fallback: bool = True  # unseen characters become byte pieces instead of <unk>
    num_threads: int = 2
    # False lets a small corpus (the grammar demo) end with fewer pieces than vocab_size instead of
    # failing; size the model's embedding from len(load_tokenizer(dir)), never from vocab_size.
    hard_vocab_limit: bool = True


def prepare_tokenizer(cfg: TokenizerConfig, docs: datasets.Dataset, corpus_id: str, cache_dir: Path) -> Path:
    """The run's tokenizer directory, trained once per (corpus_id, cfg) under cache_dir/tokenizers/<key>/."""
    if cfg.kind == "pretrained":
        return pretrained_dir(cfg)
    if cfg.kind != "sentencepiece":
        raise ValueError(f"tokenizer.kind must be 'sentencepiece' or 'pretrained', got {cfg.kind!r}")
    if cfg.model_type not in ("unigram", "bpe"):
        raise ValueError(f"tokenizer.model_type must be 'unigram' or 'bpe', got {cfg.model_type!r}")

    final = trained_dir(cfg, corpus_id, cache_dir)
    if (final / "tokenizer.json").is_file():
        return final
    with built_dir(final, winner="tokenizer.json") as tmp:  # under its final name only when complete
        _train_sentencepiece(cfg, docs, tmp, corpus_id)
        hf = _fast_from_spm(tmp / SPM_FILE)
        hf.save_pretrained(str(tmp))
        write_record(tmp, hf)
        (tmp / "training_config.json").write_text(json.dumps({"corpus_id": corpus_id, **asdict(cfg)}, indent=2))
    return final


def trained_dir(cfg: TokenizerConfig, corpus_id: str, cache_dir: Path) -> Path:
    """Where prepare_tokenizer keeps the sentencepiece tokenizer of (corpus, cfg), trained or not yet."""
    spec = {k: v for k, v in asdict(cfg).items() if k not in ("num_threads", "path")}
    spec["format"] = FORMAT
    key = hashlib.sha256(json.dumps({"corpus": corpus_id, "cfg": spec}, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / "tokenizers" / key


# Files that make a directory loadable by AutoTokenizer (a fast tokenizer.json, or a config naming the
# class plus that class's vocabulary, e.g. chinese-llama's tokenizer_config.json + tokenizer.model).
_HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def pretrained_dir(cfg: TokenizerConfig) -> Path:
    """tokenizer.path of kind=pretrained, checked, resolved once (every rank and the saved config agree)."""
    if not cfg.path:
        raise ValueError("tokenizer.path must name an HF tokenizer directory when tokenizer.kind=pretrained "
                         "(e.g. tokenizer=pretrained tokenizer.path=/data/chinese-llama)")
    path = Path(cfg.path).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer.path={cfg.path}: no such directory ({path})")
    if not any((path / f).is_file() for f in _HF_TOKENIZER_FILES):
        raise FileNotFoundError(f"tokenizer.path={cfg.path}: {path} has none of {', '.join(_HF_TOKENIZER_FILES)} "
                                f"(a directory saved by tokenizer.save_pretrained() or downloaded from the Hub)")
    return path


def tokenizer_length(cfg: TokenizerConfig) -> int:
    """Ids the model's embedding must hold, without a corpus: len() of a pretrained tokenizer, or the
    sentencepiece vocab_size to be trained (an upper bound when hard_vocab_limit=false)."""
    if cfg.kind == "pretrained":
        return len(load_tokenizer(pretrained_dir(cfg)))
    return cfg.vocab_size


def tokenizer_label(kind: str, vocab_size: Optional[int] = None, path: Optional[str] = None,
                    model_type: str = "unigram", length: Optional[int] = None) -> str:
    """What a size name stands beside: ``sentencepiece-unigram 49,953``, or a pretrained one's directory name."""
    if kind == "pretrained":
        name = Path(str(path)).name if path else "pretrained"
        return f"{name} {length:,}" if length else name
    n = length if length is not None else vocab_size
    return f"sentencepiece-{model_type} {n:,}" if n else f"sentencepiece-{model_type}"


def load_tokenizer(path: Path) -> transformers.PreTrainedTokenizerBase:
    """THE one way to load the run's tokenizer (from a prepared directory or a checkpoint)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {path}")
    import transformers
    return transformers.AutoTokenizer.from_pretrained(str(path))


def pipeline_fingerprint(path: Path) -> str:
    """Hash of what decides the ids (the backend pipeline and the special tokens): the token store's cache
    key and what a resume must agree on. From the loaded tokenizer, not the files, so a checkpoint's copy
    (save_pretrained drops tokenizer.model and rewrites the config) agrees with the directory."""
    tok = load_tokenizer(path)
    backend = getattr(tok, "backend_tokenizer", None)
    h = hashlib.sha256()
    if backend is not None:
        h.update(backend.to_str().encode())
    else:  # a slow-only pretrained tokenizer: fall back to its files
        for f in sorted(p for p in Path(path).iterdir() if p.is_file()):
            h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    specials = {"ids": [tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id],
                "split_special_tokens": bool(getattr(tok, "split_special_tokens", False)), "len": len(tok)}
    h.update(json.dumps(specials, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _train_sentencepiece(cfg: TokenizerConfig, docs: datasets.Dataset, out_dir: Path, corpus_id: str = "") -> None:
    # whole documents in a fixed random order until max_sentences lines: bounded however large the corpus
    order = list(range(len(docs)))
    random.Random(0).shuffle(order)
    lines_file = out_dir / "sentences.txt"
    n = too_long = longest = 0
    with open(lines_file, "w", encoding="utf-8") as f:
        for i in order:
            for line in docs[i]["text"].splitlines():
                line = line.strip()
                if line:
                    f.write(line + "\n")
                    n += 1
                    size = len(line.encode("utf-8"))
                    too_long += size > SPM_MAX_SENTENCE_BYTES
                    longest = max(longest, size)
            if n >= cfg.max_sentences:
                break
    if n == 0:
        raise ValueError("cannot train a tokenizer: the corpus has no non-empty lines")
    # sentencepiece skips longer lines without a word; when they are most of the corpus its error then
    # blames vocab_size. Say what happened, naming the corpus files.
    skipped = (f"{too_long} of {n} lines of the corpus {_corpus_files(corpus_id)} are longer than "
               f"sentencepiece's max_sentence_length ({SPM_MAX_SENTENCE_BYTES} bytes; the longest has "
               f"{longest}) and are skipped when the tokenizer is trained") if too_long else ""
    # minutes without output otherwise (2.5 on the English corpus, 7 on the Chinese one)
    print(f"training the tokenizer: sentencepiece {cfg.model_type}, tokenizer.vocab_size={cfg.vocab_size:,}, on {n:,} "
          f"lines ({lines_file.stat().st_size / 1e6:,.1f} MB) of the corpus; cached in {out_dir.parent} for every later "
          f"run on this corpus", flush=True)
    try:
        # in a child process: sentencepiece's trainer never returns to Python until done, so a signal
        # could not stop it here (train/interrupt.py)
        run_in_child(_spm_train, cfg, lines_file, out_dir)
    except RuntimeError as e:
        # a vocabulary too small for the corpus's characters: sentencepiece's message ends with the count
        # ("Vocabulary size is smaller than required_chars. 4000 vs 4837"), which a skipped line or two
        # must not hide behind the line-length hint
        small = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(e))
        if small:
            need = int(small.group(2))
            raise ConfigError(
                f"tokenizer.vocab_size={cfg.vocab_size} is too small for the corpus {_corpus_files(corpus_id)}: "
                f"its characters (those covering tokenizer.character_coverage={cfg.character_coverage} of the "
                f"text, and printable ASCII) need {need:,} pieces before any longer piece; set "
                f"tokenizer.vocab_size above {need:,} (e.g. {math.ceil(need * 1.25 / 1000) * 1000:,}), or lower "
                f"tokenizer.character_coverage (rarer characters become byte pieces)") from None
        if skipped:
            raise InputFileError(f"sentencepiece training failed: {skipped}; break the text into lines of "
                                 f"one paragraph (or sentence) each ({str(e).strip()})") from None
        raise ValueError(f"sentencepiece training failed (check tokenizer.vocab_size={cfg.vocab_size} and "
                         f"tokenizer.character_coverage={cfg.character_coverage}): {e}") from None
    if skipped:
        log.warning("%s", skipped)
    lines_file.unlink()
    (out_dir / "tokenizer.vocab").unlink(missing_ok=True)


def _corpus_files(corpus_id: str) -> str:
    """The files named in a corpus identity (train/corpus.py), for messages."""
    try:
        files = [f[0] for f in json.loads(corpus_id).get("files", [])]
    except (ValueError, AttributeError, TypeError, IndexError):
        files = []
    if len(files) > 3:  # a corpus of 57 files is named by its directory, not 57 paths on one line
        return f"({len(files)} files under {os.path.commonpath(files)})"
    return f"({', '.join(files)})" if files else "(data.paths)"


def _spm_train(cfg: TokenizerConfig, lines_file: Path, out_dir: Path) -> None:
    import sentencepiece as spm
    stall_point("tokenizer_training")
    spm.SentencePieceTrainer.train(
        input=str(lines_file),
        model_prefix=str(out_dir / "tokenizer"),
        model_type=cfg.model_type,
        vocab_size=cfg.vocab_size,
        character_coverage=cfg.character_coverage,
        input_sentence_size=cfg.max_sentences,
        shuffle_input_sentence=True,
        byte_fallback=cfg.byte_fallback,
        # one document token, as in GPT-NeoX: no separate BOS (which training would never feed) or pad
        unk_id=0, eos_id=1, bos_id=-1, pad_id=-1, unk_piece=UNK, eos_piece=DOC,
        # text spelling a control or byte piece ("<s>", "<0x41>") always has a path of ordinary pieces:
        # without "<" the HF lattice would pick the "<s>" piece, which sentencepiece never emits from text
        required_chars=_ASCII,
        hard_vocab_limit=cfg.hard_vocab_limit,
        num_threads=cfg.num_threads,
        minloglevel=2,
    )


def _fast_from_spm(model_file: Path) -> transformers.PreTrainedTokenizerFast:
    from sentencepiece import sentencepiece_model_pb2 as pb
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    import transformers
    proto = pb.ModelProto()
    proto.ParseFromString(model_file.read_bytes())
    ns, ts = proto.normalizer_spec, proto.trainer_spec
    normal = pb.ModelProto.SentencePiece.NORMAL
    if ts.model_type == pb.TrainerSpec.UNIGRAM:
        vocab = [(p.piece, p.score if p.type in (normal, pb.ModelProto.SentencePiece.USER_DEFINED) else _NEVER)
                 for p in proto.pieces]
        tok = Tokenizer(models.Unigram(vocab, ts.unk_id, ts.byte_fallback))
    elif ts.model_type == pb.TrainerSpec.BPE:
        tok = Tokenizer(_bpe_model(proto, normal, models))
    else:
        raise ValueError(f"{model_file}: only unigram and bpe sentencepiece models are converted")

    steps = []
    if ns.precompiled_charsmap:
        steps.append(normalizers.Precompiled(ns.precompiled_charsmap))
    if ns.remove_extra_whitespaces:
        # sentencepiece drops leading/trailing spaces and collapses runs of spaces (after NFKC, which
        # may itself produce spaces, e.g. from U+3000).
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip(left=True, right=True)]
    if steps:
        tok.normalizer = normalizers.Sequence(steps)
    scheme = "always" if ns.add_dummy_prefix else "never"
    # split=True: sentencepiece's split_by_whitespace keeps pieces from crossing word boundaries.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(content=" ", left=1 if ns.add_dummy_prefix else 0, right=0),
    ])
    # No unk_token: it would become an added token matched in text (sentencepiece spells "<unk>" plainly).
    # split_special_tokens=False: a consumer prepends tok.bos_token as text; corpus text splits them.
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=DOC, eos_token=DOC,
                                                pad_token=DOC, split_special_tokens=False)


def _bpe_model(proto, normal, models):
    """sentencepiece BPE merges the adjacent pair whose joined piece scores highest; HF BPE applies the
    lowest-ranked merge. Listing every split of every normal piece, ranked by that piece's score, makes
    the two orders the same."""
    ids = {p.piece: i for i, p in enumerate(proto.pieces)}
    merges = []
    for i, p in enumerate(proto.pieces):
        if p.type != normal or len(p.piece) < 2:
            continue
        for k in range(1, len(p.piece)):
            a, b = p.piece[:k], p.piece[k:]
            if a in ids and b in ids and proto.pieces[ids[a]].type == normal and proto.pieces[ids[b]].type == normal:
                merges.append((-p.score, i, ids[a], ids[b], a, b))
    merges.sort()
    return models.BPE(vocab=ids, merges=[(a, b) for *_, a, b in merges], unk_token=UNK,
                      byte_fallback=proto.trainer_spec.byte_fallback, fuse_unk=True)

