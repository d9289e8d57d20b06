"""Score ELAGENT items by likelihood twice, the context pair (``acc_pair``) and the answer letter (``acc``), each
continuation with the one primitive after the token prefix the context and all its continuations share."""
from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from train.corpus import generator
from probes.elagent.deduction import deduction_items
from probes.elagent.config import BENCHMARK, KIND, ElagentConfig
from probes.elagent.items import MCItem
from probes.elagent.precedence import precedence_items
from probes.scoring.primitive import REDUCTIONS, sentence_ids, token_logprobs


def build_items(cfg: ElagentConfig) -> list[MCItem]:
    items: list[MCItem] = []
    if "precedence" in cfg.tasks:
        items += precedence_items(cfg.items_per_paradigm, cfg.shots, cfg.seed, n_ops=cfg.n_operators,
                                  digits=cfg.digits, operators=cfg.operators, n_options=cfg.precedence_options)
    if {"babi", "predicates"} & set(cfg.tasks):
        items += [it for it in deduction_items(cfg.items_per_paradigm, cfg.shots, cfg.seed) if it.task in cfg.tasks]
    return items


@generator
def corpus_documents(cfg) -> list[str]:
    """A training corpus of the probes' kind (``data.generator=probes.elagent.score.corpus_documents``;
    ``cfg``: train.corpus.GrammarConfig): ``n_documents`` documents, solved items each in the letter layout,
    the cloze layout and the matched cloze context (both contexts of the pair are text of the corpus), drawn
    with the seed -1 - ``data.grammar.seed`` (a seed the probes, ``probes.elagent.seed`` >= 0, never use)."""
    n = -(-cfg.n_documents // (3 * 13))  # 13 paradigms
    items = build_items(ElagentConfig(items_per_paradigm=n, seed=-1 - cfg.seed))
    docs = [d for it in items for d in (f"{it.prompt} {it.labels[it.answer]}", f"{it.cloze} {it.options[it.answer]}",
                                        f"{it.matched} {it.matched_answer}")]
    return docs[:cfg.n_documents]


def continuation_ids(tokenizer, prompt: str, texts, item_id: str) -> tuple[list[int], list[list[int]]]:
    """(context ids with the start token, the ids of each text after it): context + tail_k is exactly the
    tokenisation of prompt + " " + text_k, and every text continues the same context."""
    enc = sentence_ids(tokenizer, [prompt] + [f"{prompt} {o}" for o in texts])
    n = len(os.path.commonprefix(enc))  # of lists: the start token and the shared token prefix
    tails = [e[n:] for e in enc[1:]]
    if any(not t for t in tails) or len({tuple(t) for t in tails}) != len(tails):
        raise ValueError(f"elagent item {item_id}: the tokenizer cannot tell its answers {tuple(texts)} apart")
    return enc[0][:n], tails


def option_sequences(tokenizer, item: MCItem) -> tuple[list[int], list[list[int]]]:
    """The letter prompt's context ids and the ids of each option's letter after it."""
    return continuation_ids(tokenizer, item.prompt, item.labels, item.item_id)


def pair_sequences(tokenizer, item: MCItem) -> list[tuple[list[int], int]]:
    """The four scored sequences of the context pair, A after C, B after C, A after C', B after C', each
    with the number of its last tokens that are the answer's."""
    texts = (item.options[item.answer], item.matched_answer)
    out = []
    for prompt in (item.cloze, item.matched):
        ctx, tails = continuation_ids(tokenizer, prompt, texts, item.item_id)
        out += [(ctx + t, len(t)) for t in tails]
    return out


def pair_credit(lp: np.ndarray) -> np.ndarray:
    """Credit of items from their log-probs ``lp[..., (A|C, B|C, A|C', B|C')]``: the mean of pair 1
    (A after C over A after C') and pair 2 (B after C' over B after C), a tie half right. With
    lp = f(text) + g(context), margin 2 is margin 1 negated, so the credit is exactly 0.5."""
    lp = np.asarray(lp, dtype=float)
    m1, m2 = lp[..., 0] - lp[..., 2], lp[..., 3] - lp[..., 1]
    return ((np.sign(m1) + 1) / 2 + (np.sign(m2) + 1) / 2) / 2


def check_lengths(tokenizer, items: list[MCItem], max_positions: int | None, seq_len: int | None = None) -> None:
    """Every prompt + continuation must fit the model: refused before any checkpoint is scored, naming the
    item. Prompts longer than the windows the model was trained on (``seq_len``) fit but are read at
    positions it never trained: a warning, naming the probe."""
    lengths = []
    for it in items:
        ctx, tails = option_sequences(tokenizer, it)
        n = max([len(ctx) + max(map(len, tails))] + [len(s) for s, _ in pair_sequences(tokenizer, it)])
        lengths.append(n)
        if max_positions is not None and n > max_positions:
            raise ValueError(f"probes.elagent: item {it.item_id} has {n} tokens with its longest option, more than "
                             f"model.max_position_embeddings={max_positions}; lower probes.elagent.shots or "
                             "leave that task out of probes.elagent.tasks")
    over = sum(n > seq_len for n in lengths) if seq_len else 0
    if over:
        print(f"warning: probes.elagent: {over} of {len(items)} prompts (median {int(np.median(lengths))} tokens, "
              f"longest {max(lengths)}) are longer than data.seq_len={seq_len}, the windows the model is trained "
              "on: their later tokens sit at positions it never trained; lower probes.elagent.shots or raise "
              "data.seq_len", file=sys.stderr, flush=True)


def score_items(model, tokenizer, items: list[MCItem], *, batch_size: int = 32, device=None) -> pd.DataFrame:
    """One row per item: options, their letters, answer, per-letter lp (sum) and ntok, predictions and
    correctness under the ``sum`` and ``mean`` reductions, the random baseline (1 / options); the context
    pair's texts, its four log-probs ``pair_lp`` (A|C, B|C, A|C', B|C') and its credit ``correct_pair``."""
    seqs, where = [], []
    for k, it in enumerate(items):
        ctx, tails = option_sequences(tokenizer, it)
        pairs = [(ctx + t, len(t)) for t in tails] + pair_sequences(tokenizer, it)
        seqs += [q for q, _ in pairs]
        where += [(k, n) for _, n in pairs]
    lps = token_logprobs(model, seqs, batch_size=batch_size, device=device)
    per_item: list[list[np.ndarray]] = [[] for _ in items]
    for (k, n), lp in zip(where, lps):
        per_item[k].append(lp[-n:])  # the continuation's own tokens: the last n positions
    rows = []
    for it, scored in zip(items, per_item):
        opt_lps, pair_lp = scored[:-4], [REDUCTIONS["sum"](x) for x in scored[-4:]]
        row = {"task": it.task, "paradigm": it.paradigm, "item_id": it.item_id, "prompt": it.prompt,
               "options": list(it.options), "labels": list(it.labels), "answer": it.answer, "n_options": len(it.options),
               "lp": [REDUCTIONS["sum"](x) for x in opt_lps], "ntok": [len(x) for x in opt_lps],
               "rand_acc": 1.0 / len(it.options), "cloze": it.cloze, "matched": it.matched,
               "pair_texts": [it.options[it.answer], it.matched_answer], "pair_lp": pair_lp,
               "correct_pair": float(pair_credit(pair_lp))}
        for name in ("sum", "mean"):
            s = np.array([REDUCTIONS[name](x) for x in opt_lps])
            others = np.delete(s, it.answer)
            row[f"pred_{name}"] = int(np.argmax(s))
            row[f"correct_{name}"] = bool(s[it.answer] > others.max())  # strict: a tie is wrong
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame) -> dict[str, float]:
    """acc (letter, sum reduction), acc_mean (per-token), acc_random (mean of 1/options), acc_pair (context
    pair; chance 0.5), their standard errors over items acc_se and acc_pair_se, n_items: over all items ("all/..."), per task and per paradigm
    ("<task or paradigm>/...")."""
    out: dict[str, float] = {}
    groups = [("all", df)] + list(df.groupby("task", sort=True)) + list(df.groupby("paradigm", sort=True))
    for name, d in groups:
        out[f"{name}/acc"] = float(d["correct_sum"].mean())
        out[f"{name}/acc_mean"] = float(d["correct_mean"].mean())
        out[f"{name}/acc_random"] = float(d["rand_acc"].mean())
        out[f"{name}/acc_pair"] = float(d["correct_pair"].mean())  # chance 0.5 exactly (pair_credit)
        for metric, col in (("acc_se", "correct_sum"), ("acc_pair_se", "correct_pair")):  # over items
            out[f"{name}/{metric}"] = float(d[col].astype(float).sem()) if len(d) > 1 else float("nan")
        out[f"{name}/n_items"] = float(len(d))
    return out


def item_key(item) -> tuple:
    """What identifies an item in the pair set of an elagent eval file (an MCItem or one of its rows)."""
    return tuple(getattr(item, k, None) for k in ("item_id", "prompt", "matched"))


def evaluate_items(model, tokenizer, items: list[MCItem], cfg: ElagentConfig, *, step: int, tokens: int,
                   ckpt_dir, run_dir: Path):
    """Score `items` and write ``evals/step<N>/elagent.parquet`` through probes.scoring.evaluate.evaluate_checkpoint
    (the metadata of every eval file, plus config, reduction and summary); returns the Evaluation."""
    from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint

    def describe(df: pd.DataFrame) -> dict:
        return {"config": asdict(cfg), "reduction": "sum", "scored": {"acc": "letter", "acc_pair": "context pair"},
                "summary": {k: (None if math.isnan(v) else v) for k, v in summarize(df).items()}}

    return evaluate_checkpoint(
        model, tokenizer, items, name=BENCHMARK, step=step, tokens=tokens, ckpt_dir=ckpt_dir, run_dir=run_dir,
        opts=ScoreOptions(batch_size=cfg.batch_size), key=item_key,
        score=lambda m, tok, its, opts: score_items(m, tok, its, batch_size=opts.batch_size, device=opts.device),
        describe=describe, kind=KIND)
