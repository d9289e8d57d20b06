"""tokenizer=pretrained tokenizer.path=DIR: a user's HF tokenizer directory (e.g. chinese-llama's) sizes
the model (model.vocab_size=null follows it), trains the run and is saved in every checkpoint."""
from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from trainutil import compose_cfg, tiny_cfg
from train.checkpoint import list_checkpoints
from train.config import to_typed
from train.loop import train
from train.model import pad_vocab
from train.plan import parameter_count
from train.tokenizer import TokenizerConfig, prepare_tokenizer, tokenizer_length


def _user_tokenizer(dest: Path) -> int:
    """A byte-level BPE saved with save_pretrained, as a downloaded tokenizer directory is; its length."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    words = "the a dog cat dogs cats sees see runs run that who near with 那个 人 会 做 什么 任何".split()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(words)] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<|pad|>")
    fast.save_pretrained(dest)
    return len(fast)


def test_a_user_tokenizer_directory_sizes_and_trains_the_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative tokenizer.path is taken from where `python -m train` starts
    n = _user_tokenizer(tmp_path / "my-tokenizer")
    assert 256 < n <= 300  # 256 byte symbols + merges + 2 specials: not a multiple of 128
    cfg = tiny_cfg(tmp_path / "cache", "tokenizer=pretrained", "tokenizer.path=my-tokenizer", "probes=none")
    assert tokenizer_length(cfg.tokenizer) == n
    train(cfg, tmp_path / "run")
    _, last = list_checkpoints(tmp_path / "run")[-1]
    model = GPTNeoXForCausalLM.from_pretrained(last)
    assert model.config.vocab_size == pad_vocab(n) == 384
    saved = AutoTokenizer.from_pretrained(last)
    assert saved.get_vocab() == AutoTokenizer.from_pretrained(tmp_path / "my-tokenizer").get_vocab()
    # train.plan sizes the model from the same directory, without a corpus
    assert parameter_count(cfg) == sum(p.numel() for p in model.parameters())


def test_plan_counts_pythia_parameters_with_a_50k_pretrained_tokenizer(tmp_path, monkeypatch):
    """With a ~50k tokenizer (chinese-llama has 49,953 pieces) the Pythia-14m count holds up to the
    48 rows its padding differs by (50,048 vs 50,304 rows of 128)."""
    monkeypatch.chdir(tmp_path)
    words = [f"w{i}" for i in range(49_951)]  # + <unk>, <|endoftext|> = 49,953 ids, as chinese-llama
    tok = Tokenizer(models.WordLevel({w: i + 2 for i, w in enumerate(words)} | {"<unk>": 0, "<|endoftext|>": 1},
                                     unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<|endoftext|>",
                            eos_token="<|endoftext|>").save_pretrained(tmp_path / "zh-llama")
    cfg = to_typed(compose_cfg(["model=pythia-14m", "tokenizer=pretrained", "tokenizer.path=zh-llama"]))
    assert tokenizer_length(cfg.tokenizer) == 49_953
    assert parameter_count(cfg) == 14_067_712 - 2 * (50304 - 50048) * 128


def test_a_bad_tokenizer_path_names_the_key(tmp_path):
    with pytest.raises(ValueError, match="tokenizer.path must name"):
        prepare_tokenizer(TokenizerConfig(kind="pretrained"), None, "c", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"tokenizer.path=.*nope: no such directory"):
        prepare_tokenizer(TokenizerConfig(kind="pretrained", path=str(tmp_path / "nope")), None, "c", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"tokenizer.path=.*empty: .* has none of tokenizer.json"):
        prepare_tokenizer(TokenizerConfig(kind="pretrained", path=str(tmp_path / "empty")), None, "c", tmp_path)
