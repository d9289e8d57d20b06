"""A word-level tokenizer and a tiny GPT-NeoX shared by the probe tests (real objects, built in ms)."""
from __future__ import annotations

import random

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

WORDS = "the a cat cats dog dogs runs run sees see .".split()


def word_tokenizer(words: list[str] = WORDS) -> PreTrainedTokenizerFast:
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(["[UNK]", "<bos>", "<eos>"] + words)},
                              unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   unk_token="[UNK]")


def tiny_neox(vocab: int = len(WORDS) + 3, seed: int = 0) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32))
    with torch.no_grad():  # a sharper output layer: lps of different sentences differ clearly
        model.get_output_embeddings().weight.mul_(30.0)
    return model


def generate_pairs(engine, template, n: int, seed: int, benchmark: str = "zhoblimp_generated"):
    """n pairs of one template, reproducible per (template, seed): the real engine, seeded as a test wants."""
    return engine.pairs(template, n, random.Random(f"zhoblimp:{template.name}:{seed}"), benchmark)


def write_items(df, path, *, step: int, tokens: int, model_dir, tokenizer, cfg, reports) -> None:
    """Syntax-question rows already scored, written to ``path`` with the metadata the in-loop hook writes."""
    from probes.scoring.evaluate import evaluate_checkpoint
    from probes.syntaxqa.config import KIND
    from probes.syntaxqa.records import benchmark_name
    from probes.syntaxqa.score import _describe, item_key

    evaluate_checkpoint(None, tokenizer, list(df.itertuples(index=False)), name=benchmark_name(cfg.mode), step=step,
                        tokens=tokens, ckpt_dir=model_dir, out=path, key=item_key, score=lambda *_: df,
                        describe=lambda d: _describe(d, cfg, reports), kind=KIND, mode=cfg.mode)
