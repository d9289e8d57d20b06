"""``mode=paper``: the syntax questions asked and answered as in their paper (docs/syntax-questions.md).

Every answer is generated greedily (padding = the tokenizer's pad else the start token) and read by
``paper_parse``; an item's correct / f1 / unparsed are means over its exemplar seeds. When prompt + budget
overruns the model's positions, the budget is cut to fit (a warning counts the prompts); a prompt that does
not fit at all is an error naming the item. Rows are those of ``score.score_items`` with ``mode = "paper"``
and ``kp_also``, ``generations``, ``preds``, ``unparsed``, ``n_shots``, ``exemplar_ids``, ``max_new_tokens``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from probes.syntaxqa.generation import greedy_generate
from probes.syntaxqa.items import SourceReport, collect_facts
from probes.syntaxqa.metrics import exact_match, strict_f1
from probes.syntaxqa.paper_items import (PaperItem, attach_paper_prompts, exemplar_candidates, mark_mvp_reuse,
                                         paper_candidates, render_paper)
from probes.syntaxqa.paper_parse import CLOSING, parse_answer
from probes.syntaxqa.questions import Item, balanced_sample, candidates
from probes.syntaxqa.config import SyntaxQAConfig


class GenerationBudgetWarning(UserWarning):
    """Some prompts leave less room in the model's positions than the paper's token budget."""


def build_paper_items_and_reports(cfg: SyntaxQAConfig) -> tuple[list[PaperItem], list[PaperItem], list[SourceReport]]:
    """(test items with prompts, the exemplar set, source reports)."""
    facts, reports = collect_facts(cfg.sources, cfg.knowledge_points, cfg.max_sentences)
    other = sorted({f.sentence.source for f in facts if f.sentence.lang != "en"})
    if other:
        raise ValueError(f"syntax_qa.mode=paper asks in the paper's English templates; source {other[0]} is not "
                         "English (use mode=likelihood, whose questions have a Chinese frame)")
    cands = paper_candidates(candidates(facts, cfg.seed, tuple(cfg.question_types)))
    test = balanced_sample(cands, cfg.k_per_tuple, cfg.seed, cfg.max_items)
    items = [render_paper(c, facts, cfg.seed) for c in test]
    exemplars = []
    if cfg.paper.shots > 0:
        exemplars = [render_paper(c, facts, cfg.seed) for c in exemplar_candidates(cands, test, facts, cfg.paper, cfg.seed)]
    mark_mvp_reuse(items, cfg.knowledge_points)
    attach_paper_prompts(items, exemplars, cfg.paper, cfg.seed)
    return items, exemplars, reports


def _budgets(model, tokenizer, items: list[PaperItem], cfg: SyntaxQAConfig) -> list[list[int]]:
    """Per item and prompt: the paper's budget, cut to the model's positions (module doc)."""
    from probes.scoring.primitive import sentence_ids

    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    out, cut = [], 0
    for it in items:
        want = cfg.paper.max_new_tokens_fitb if it.qtype == "FITB" else cfg.paper.max_new_tokens_choice
        row = []
        for ids in sentence_ids(tokenizer, it.prompts):
            room = want if limit is None else min(want, limit - len(ids))
            if room < 1:
                raise ValueError(f"syntax-qa item {it.item_id}: a paper-mode prompt of {len(ids)} tokens leaves no room "
                                 f"in the model's max_position_embeddings={limit}; lower syntax_qa.paper.shots")
            cut += room < want
            row.append(room)
        out.append(row)
    if cut:
        warnings.warn(f"syntax-qa paper mode: {cut} prompt(s) get fewer new tokens than the paper's budget "
                      f"(model max_position_embeddings={limit}); their rows record it in max_new_tokens",
                      GenerationBudgetWarning, stacklevel=3)
    return out


def score_generations(item: Item, generations: list[str]) -> dict:
    """An item's scores from its generations (one per exemplar seed), each read by ``parse_answer``:
    correct (exact answer; FITB: ``exact_match`` against every gold), f1 (FITB's strict F1, else NaN) and
    unparsed (share of generations with no answer; those score 0 in both), each a mean over the seeds;
    preds: the parsed answers ("" = unparsed)."""
    parsed = [parse_answer(g, item.qtype, item.options).answer for g in generations]
    if item.qtype == "FITB":
        correct = [exact_match(p, item.golds) if p is not None else 0.0 for p in parsed]
        f1 = float(np.mean([strict_f1(p, item.golds) if p is not None else 0.0 for p in parsed]))
    else:
        correct = [float(p == item.answer) for p in parsed]
        f1 = float("nan")
    return {"correct": float(np.mean(correct)), "f1": f1, "unparsed": float(np.mean([p is None for p in parsed])),
            "preds": [p or "" for p in parsed]}


def score_paper_items(model, tokenizer, items: list[PaperItem], cfg: SyntaxQAConfig, device=None) -> pd.DataFrame:
    """One row per item (columns: module doc); correct, f1 and unparsed are means over the exemplar seeds."""
    for it in items:
        if not it.prompts:
            raise ValueError(f"syntax-qa item {it.item_id} has no prompt; build items with build_paper_items_and_reports")
    budgets = _budgets(model, tokenizer, items, cfg)
    flat = [(i, j) for i, it in enumerate(items) for j in range(len(it.prompts))]
    gens = greedy_generate(model, tokenizer, [items[i].prompts[j] for i, j in flat], [budgets[i][j] for i, j in flat],
                           stops=CLOSING + ("\n",), batch_size=cfg.batch_size, device=device)
    by_item: dict[int, list[str]] = {}
    for (i, _), g in zip(flat, gens):
        by_item.setdefault(i, []).append(g)
    rows = []
    for i, it in enumerate(items):
        sc = score_generations(it, by_item[i])
        rows.append({
            "item_id": it.item_id, "source": it.source, "sent_id": it.sent_id, "lang": it.lang, "kp": it.kp,
            "qtype": it.qtype, "category": it.category, "sentence": it.sentence, "question": it.question,
            "answer": it.answer, "options": list(it.options), "golds": list(it.golds), "n_prompts": len(it.prompts),
            "mode": "paper", "pred": sc["preds"][0], "correct": sc["correct"], "f1": sc["f1"],
            "lp_options": [], "rand_acc": it.rand_acc, "rand_f1": it.rand_f1,
            "kp_also": it.kp_also, "generations": by_item[i], "preds": sc["preds"], "unparsed": sc["unparsed"],
            "n_shots": min(len(e) for e in it.exemplar_ids), "exemplar_ids": it.exemplar_ids,
            "max_new_tokens": min(budgets[i]),
        })
    return pd.DataFrame(rows)
