"""Score ELAGENT multiple-choice items by likelihood; summarise; write ``evals/step<N>/elagent.parquet``.

Every question lists its options with letters and is answered by the letter (probes.elagent.items): an item's
letters ``(a)``, ``(b)`` ... are scored as continuations of the same prompt with the one scoring primitive
(``probes.scoring.primitive.token_logprobs``): the prompt and each prompt + " " + letter are tokenised whole (as
the model would read them), the context is the token prefix all of them share, and a letter's score is the
named reduction (``probes.scoring.primitive.REDUCTIONS``) of its remaining tokens' log-probs: ``sum`` (the
accuracy the curves show) and ``mean`` (per token). Right = the right letter scores strictly higher than every
other one (a tie is wrong, as for minimal pairs).

The rule is length-neutral: what is scored is a letter, not the option's text, and the right option sits at a
uniformly random letter, so a model without the knowledge -- one whose scores ignore the item's content, or
follow its lengths -- is right with probability 1 / options. That is the baseline drawn (``acc_random``); at
step 0 an untrained model scores it (tests/test_elagent_chance.py). Scoring the texts, an untrained model's
accuracy ran from 0.00 to 0.46 against these baselines (it picks the shortest text).
"""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from probes.elagent.deduction import deduction_items
from probes.elagent.config import BENCHMARK, KIND, ElagentConfig
from probes.elagent.items import MCItem
from probes.elagent.precedence import precedence_items
from probes.scoring.primitive import ENCODE, REDUCTIONS, start_id, token_logprobs



def build_items(cfg: ElagentConfig) -> list[MCItem]:
    items: list[MCItem] = []
    if "precedence" in cfg.tasks:
        items += precedence_items(cfg.items_per_paradigm, cfg.shots, cfg.seed, n_ops=cfg.n_operators,
                                  digits=cfg.digits, operators=cfg.operators, n_options=cfg.precedence_options)
    if {"babi", "predicates"} & set(cfg.tasks):
        items += [it for it in deduction_items(cfg.items_per_paradigm, cfg.shots, cfg.seed) if it.task in cfg.tasks]
    return items


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def option_sequences(tokenizer, item: MCItem) -> tuple[list[int], list[list[int]]]:
    """(context ids with the start token, the ids of each option's letter after it): context + tail_k is
    exactly the tokenisation of prompt + " " + letter_k, and every letter continues the same context."""
    texts = [item.prompt] + [f"{item.prompt} {o}" for o in item.labels]
    enc = [list(map(int, e)) for e in tokenizer(texts, **ENCODE)["input_ids"]]
    n = min([len(enc[0])] + [_lcp(enc[0], e) for e in enc[1:]])
    tails = [e[n:] for e in enc[1:]]
    if any(not t for t in tails) or len({tuple(t) for t in tails}) != len(tails):
        raise ValueError(f"elagent item {item.item_id}: the tokenizer cannot tell its answer letters {item.labels} apart")
    return [start_id(tokenizer)] + enc[0][:n], tails


def check_lengths(tokenizer, items: list[MCItem], max_positions: int | None) -> None:
    """Every prompt + option must fit the model: refused before any checkpoint is scored, naming the item."""
    if max_positions is None:
        return
    for it in items:
        ctx, tails = option_sequences(tokenizer, it)
        n = len(ctx) + max(map(len, tails))
        if n > max_positions:
            raise ValueError(f"probes.elagent: item {it.item_id} has {n} tokens with its longest option, more than "
                             f"model.max_position_embeddings={max_positions}; lower probes.elagent.shots or "
                             "leave that task out of probes.elagent.tasks")


def score_items(model, tokenizer, items: list[MCItem], *, batch_size: int = 32, device=None) -> pd.DataFrame:
    """One row per item: options, their letters, answer, per-letter lp (sum) and ntok, predictions and
    correctness under the ``sum`` and ``mean`` reductions, the random baseline (1 / options)."""
    seqs, where = [], []
    for k, it in enumerate(items):
        ctx, tails = option_sequences(tokenizer, it)
        for j, t in enumerate(tails):
            seqs.append(ctx + t)
            where.append((k, j, len(t)))
    lps = token_logprobs(model, seqs, batch_size=batch_size, device=device)
    per_item: list[list[np.ndarray]] = [[] for _ in items]
    for (k, _j, n), lp in zip(where, lps):
        per_item[k].append(lp[-n:])  # the letter's own tokens: the last n positions
    rows = []
    for it, opt_lps in zip(items, per_item):
        row = {"task": it.task, "paradigm": it.paradigm, "item_id": it.item_id, "prompt": it.prompt,
               "options": list(it.options), "labels": list(it.labels), "answer": it.answer, "n_options": len(it.options),
               "lp": [REDUCTIONS["sum"](x) for x in opt_lps], "ntok": [len(x) for x in opt_lps],
               "rand_acc": 1.0 / len(it.options)}
        for name in ("sum", "mean"):
            s = np.array([REDUCTIONS[name](x) for x in opt_lps])
            others = np.delete(s, it.answer)
            row[f"pred_{name}"] = int(np.argmax(s))
            row[f"correct_{name}"] = bool(s[it.answer] > others.max())  # strict: a tie is wrong
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame) -> dict[str, float]:
    """acc (sum reduction), acc_mean (per-token), acc_random (mean of 1/options), n_items: over all items
    ("all/..."), per task and per paradigm ("<task or paradigm>/...")."""
    out: dict[str, float] = {}
    groups = [("all", df)] + list(df.groupby("task", sort=True)) + list(df.groupby("paradigm", sort=True))
    for name, d in groups:
        out[f"{name}/acc"] = float(d["correct_sum"].mean())
        out[f"{name}/acc_mean"] = float(d["correct_mean"].mean())
        out[f"{name}/acc_random"] = float(d["rand_acc"].mean())
        out[f"{name}/n_items"] = float(len(d))
    return out


def item_key(item) -> tuple:
    """What identifies an item in the pair set of an elagent eval file (an MCItem or one of its rows)."""
    return tuple(getattr(item, k, None) for k in ("item_id", "prompt"))


def evaluate_items(model, tokenizer, items: list[MCItem], cfg: ElagentConfig, *, step: int, tokens: int,
                   ckpt_dir, run_dir: Path):
    """Score `items` and write ``evals/step<N>/elagent.parquet`` through probes.scoring.evaluate.evaluate_checkpoint
    (the metadata of every eval file, plus config, reduction and summary); returns the Evaluation."""
    from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint

    def describe(df: pd.DataFrame) -> dict:
        return {"config": asdict(cfg), "reduction": "sum", "scored": "letter",
                "summary": {k: (None if math.isnan(v) else v) for k, v in summarize(df).items()}}

    return evaluate_checkpoint(
        model, tokenizer, items, name=BENCHMARK, step=step, tokens=tokens, ckpt_dir=ckpt_dir, run_dir=run_dir,
        opts=ScoreOptions(batch_size=cfg.batch_size), key=item_key,
        score=lambda m, tok, its, opts: score_items(m, tok, its, batch_size=opts.batch_size, device=opts.device),
        describe=describe, kind=KIND)
