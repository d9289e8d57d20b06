"""``mode=paper``: the syntax questions asked and answered as in their paper (docs/syntax-questions.md says what
it asks, with which exemplars and budgets; ../shared/papers/000_*.txt is the paper).

Copied character for character: Figure 5's grammatical-subject templates and Figure 6's prompt (its instruction
lines, "Sentence: ", "Question: ", "Options: \\n A. <a>\\n ..." with a space after the colon and before each
letter, "Answer: The answer is “", exemplars closed by their answer and quote, no blank lines). Ours by analogy: the
other knowledge points' templates and the FITB instruction lines (Figure 6: "similar to" true/false).

Answers are read as docs/syntax-questions.md states (``parse_answer``); one not in the format counts wrong and is
counted (``unparsed``)."""
from __future__ import annotations

import random
import re
from collections import Counter
import warnings
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from probes.syntaxqa.config import PaperConfig, SyntaxQAConfig
from probes.syntaxqa.generation import greedy_generate
from probes.syntaxqa.items import SourceReport, collect_facts
from probes.syntaxqa.metrics import exact_match, strict_f1, words
from probes.syntaxqa.questions import (LETTERS, TEXTS, Candidate, Item, _rng, balanced_sample, candidates,
                                       distractors, fact_key, render)
from probes.syntaxqa.records import Fact

# kp -> (TF statement, TF negated, MC question, FITB question); question type -> (zero-shot instruction line,
# few-shot instruction line): templates.json says which are the paper's (Figures 5, 6) and which are ours
PAPER_TEMPLATES: dict[str, list[str]] = TEXTS["paper"]["templates"]
INSTRUCTIONS: dict[str, list[str]] = TEXTS["paper"]["instructions"]
ANSWER_PREFIX = "Answer: The answer is “"
CLOSING = ("”", '"')
MVP_TF_FROM: tuple[str, ...] = ("GS", "SC", "DO", "IO")  # Table 1, note ‡
_TF = {"true": "True", "false": "False"}
_LETTER_ALONE = re.compile(r"^\(?([A-D])\)?\.?$")
_LETTER_THEN = re.compile(r"^\(?([A-D])[.):]")


class GenerationBudgetWarning(UserWarning):
    """Some prompts leave less room in the model's positions than the paper's token budget."""


@dataclass
class PaperItem(Item):
    kp_also: str = ""  # "MVP" on GS/SC/DO/IO true/false items when MVP is asked: they count again in MVP's scores
    exemplar_ids: list[list[str]] = field(default_factory=list)  # per prompt, the exemplars' item ids


# ------------------------------------------------------------------------------- prompts
def question_text(kp: str, qtype: str, anchor: str, candidate: str = "", negated: bool = False) -> str:
    """One question from the templates (TF needs the candidate phrase and whether the statement is negated)."""
    tf, tf_neg, mc, fitb = PAPER_TEMPLATES[kp]
    if qtype == "TF" and not tf:
        raise ValueError(f"{kp} has no true/false template: its true/false items are GS/SC/DO/IO's (paper, Table 1)")
    text = (tf_neg if negated else tf) if qtype == "TF" else mc if qtype == "MC" else fitb
    return text.format(a=anchor, x=candidate)


def _block(item: Item) -> str:
    """Sentence, question, the option block (MC) and the answer prefix, which ends with the opening quote."""
    text = f"Sentence: {item.sentence}\nQuestion: {item.question}\n"
    if item.qtype == "MC":
        text += "Options: \n" + "".join(f" {LETTERS[i]}. {o}\n" for i, o in enumerate(item.options))
    return text + ANSWER_PREFIX


def build_paper_prompt(item: Item, exemplars: list[Item] = ()) -> str:
    """Figure 6: zero-shot (no exemplars) or few-shot prompt for one item."""
    zero, few = INSTRUCTIONS[item.qtype]
    if not exemplars:
        return f"{zero}\n{_block(item)}"
    shown = "".join(f"{_block(ex)}{ex.answer}{CLOSING[0]}\n" for ex in exemplars)
    return f"{few}\n{shown}{_block(item)}"


# ------------------------------------------------------------------------------- items and exemplars
def render_paper(c: Candidate, facts: list[Fact], seed: int) -> PaperItem:
    """The item ``questions.render`` makes (answer, options, golds, random baselines), asked in the paper's words."""
    base, f = render(c, facts, seed), facts[c.fact]
    if c.qtype == "TF":
        form, truth = c.variant.split("-")
        uses_gold = (form == "pos") == (truth == "True")
        x = f.answer_text if uses_gold else _rng(seed, fact_key(f), "paper-TF", c.variant).choice(distractors(f))
        question = question_text(f.kp, "TF", f.anchor_text, x, negated=form == "neg")
    else:
        question = question_text(f.kp, c.qtype, f.anchor_text)
    return PaperItem(**{**{fl.name: getattr(base, fl.name) for fl in fields(Item)}, "question": question})


def exemplar_candidates(cands: list[Candidate], test: list[Candidate], facts: list[Fact], cfg: PaperConfig,
                        seed: int) -> list[Candidate]:
    """The held-out exemplar set: ``exemplar_k`` per tuple (the paper's reduced sample, §3.2) from sentences no test
    item asks about, topped up per (knowledge point, type) to ``shots`` x ``shot_seeds`` where a treebank has fewer."""
    def sentence(c: Candidate) -> tuple[str, str]:
        return facts[c.fact].sentence.source, facts[c.fact].sentence.sent_id

    asked = {sentence(c) for c in test}
    rest = [c for c in cands if sentence(c) not in asked]
    chosen = balanced_sample(rest, cfg.exemplar_k, seed)
    taken, have = {c.key for c in chosen}, Counter((c.kp, c.qtype) for c in chosen)
    spare: dict[tuple[str, str], list[Candidate]] = {}
    for c in sorted(rest, key=lambda c: c.key):
        if c.key not in taken:
            spare.setdefault((c.kp, c.qtype), []).append(c)
    for key, group in sorted(spare.items()):
        need = cfg.shots * cfg.shot_seeds - have[key]
        if need > 0:
            random.Random(f"{seed}|paper-topup|{'|'.join(key)}").shuffle(group)
            chosen += group[:need]
    return sorted(chosen, key=lambda c: c.key)


def attach_paper_prompts(items: list[PaperItem], exemplars: list[PaperItem], cfg: PaperConfig, seed: int) -> None:
    """Fill ``prompts`` and ``exemplar_ids``: one zero-shot prompt, or one few-shot prompt per exemplar seed,
    each with ``shots`` exemplars of the item's knowledge point and type drawn at random for that item."""
    pool: dict[tuple[str, str], list[PaperItem]] = {}
    for ex in sorted(exemplars, key=lambda e: e.item_id):
        pool.setdefault((ex.kp, ex.qtype), []).append(ex)
    for it in items:
        it.prompts, it.exemplar_ids = [], []
        if cfg.shots == 0:
            it.prompts.append(build_paper_prompt(it))
            it.exemplar_ids.append([])
            continue
        group = pool.get((it.kp, it.qtype), [])
        for s in range(cfg.shot_seeds):
            shown = random.Random(f"{seed}|paper-shots|{s}|{it.item_id}").sample(group, min(cfg.shots, len(group)))
            it.prompts.append(build_paper_prompt(it, shown))
            it.exemplar_ids.append([e.item_id for e in shown])


def build_paper_items_and_reports(cfg: SyntaxQAConfig) -> tuple[list[PaperItem], list[PaperItem], list[SourceReport]]:
    """(test items with prompts, the exemplar set, source reports)."""
    facts, reports = collect_facts(cfg.sources, cfg.knowledge_points, cfg.max_sentences)
    other = sorted({f.sentence.source for f in facts if f.sentence.lang != "en"})
    if other:
        raise ValueError(f"syntax_qa.mode=paper asks in the paper's English templates; source {other[0]} is not "
                         "English (use mode=likelihood, whose questions have a Chinese frame)")
    # every candidate but MVP's own true/false statements (they are GS/SC/DO/IO's)
    cands = [c for c in candidates(facts, cfg.seed, tuple(cfg.question_types)) if not (c.kp == "MVP" and c.qtype == "TF")]
    test = balanced_sample(cands, cfg.k_per_tuple, cfg.seed, cfg.max_items)
    items = [render_paper(c, facts, cfg.seed) for c in test]
    exemplars = []
    if cfg.paper.shots > 0:
        exemplars = [render_paper(c, facts, cfg.seed) for c in exemplar_candidates(cands, test, facts, cfg.paper, cfg.seed)]
    if "MVP" in cfg.knowledge_points:
        for it in items:
            if it.qtype == "TF" and it.kp in MVP_TF_FROM:
                it.kp_also = "MVP"
    attach_paper_prompts(items, exemplars, cfg.paper, cfg.seed)
    return items, exemplars, reports


# ------------------------------------------------------------------------------- answers and scores
def answer_text(generation: str) -> tuple[str, bool]:
    """(the text before the closing quote / newline, whether a closing quote ended it)."""
    quote = min((i for i in (generation.find(q) for q in CLOSING) if i >= 0), default=-1)
    newline = generation.find("\n")
    if quote >= 0 and (newline < 0 or quote < newline):
        return generation[:quote].strip(), True
    if newline >= 0:
        return generation[:newline].strip(), False
    return generation.strip(), False


def parse_answer(generation: str, qtype: str, options: list[str] = ()) -> str | None:
    """"True"/"False", a letter, the FITB phrase; None: unparsed (module doc)."""
    text, _ = answer_text(generation)
    answer: str | None = None
    if qtype == "TF":
        answer = _TF.get(text.rstrip(".,;:!").strip().lower())
    elif qtype == "MC":
        m = _LETTER_ALONE.match(text) or _LETTER_THEN.match(text)
        letters = LETTERS[: len(options)] if options else LETTERS
        if m and m.group(1) in letters:
            answer = m.group(1)
        elif text:
            same = [LETTERS[i] for i, o in enumerate(options) if words(o) == words(text)]
            answer = same[0] if len(same) == 1 else None
    elif qtype == "FITB":
        answer = text or None
    else:
        raise ValueError(f"unknown question type {qtype!r}")
    return answer


def _budgets(model, tokenizer, items: list[PaperItem], cfg: SyntaxQAConfig) -> list[list[int]]:
    """Per item and prompt: the paper's budget, cut to the model's positions (a warning counts the prompts cut); a
    prompt that leaves no room is an error."""
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
    """An item's correct (FITB: ``exact_match`` against every gold), f1 (FITB's strict F1, else NaN) and unparsed
    (share of generations with no answer; those score 0 in both), means over its generations; preds ("" = unparsed)."""
    parsed = [parse_answer(g, item.qtype, item.options) for g in generations]
    if item.qtype == "FITB":
        correct = [exact_match(p, item.golds) if p is not None else 0.0 for p in parsed]
        f1 = float(np.mean([strict_f1(p, item.golds) if p is not None else 0.0 for p in parsed]))
    else:
        correct = [float(p == item.answer) for p in parsed]
        f1 = float("nan")
    return {"correct": float(np.mean(correct)), "f1": f1, "unparsed": float(np.mean([p is None for p in parsed])),
            "preds": [p or "" for p in parsed]}


def score_paper_items(model, tokenizer, items: list[PaperItem], cfg: SyntaxQAConfig, device=None) -> pd.DataFrame:
    """One row per item, ``Item.row``'s and kp_also, generations, preds, unparsed, n_shots, exemplar_ids,
    max_new_tokens; correct, f1 and unparsed are means over the exemplar seeds (greedy generations)."""
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
        rows.append({**it.row("paper"), "pred": sc["preds"][0], "correct": sc["correct"], "f1": sc["f1"],
                     "kp_also": it.kp_also, "generations": by_item[i], "preds": sc["preds"], "unparsed": sc["unparsed"],
                     "n_shots": min(len(e) for e in it.exemplar_ids), "exemplar_ids": it.exemplar_ids,
                     "max_new_tokens": min(budgets[i])})
    return pd.DataFrame(rows)
