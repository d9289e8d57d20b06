"""Test set, held-out exemplar set and few-shot prompts of the syntax-question paper's setting (§3.2,
Appendix D.1, Table 1; docs/syntax-questions.md says what mode=paper asks).

- Test set: k = 5 questions per (question type, knowledge point, answer category), ``questions.balanced_sample``.
- Exemplar set: the paper's "reduced sample size" (1,300 exemplars beside 3,170 test questions: ``exemplar_k``
  = 2 per tuple), drawn only from sentences no test item asks about. Where a (knowledge point, type) has fewer
  than ``shots`` x ``shot_seeds`` exemplars (a small treebank), it is topped up from the other unused
  questions of that knowledge point and type, so that the seeds can differ.
- MVP's true/false items are the GS/SC/DO/IO ones (Table 1, ‡; 440 = 130 + 130 + 150 + 30): they carry
  ``kp_also = "MVP"`` and are counted once overall and again in MVP's scores (``score.summarize``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, fields

from probes.syntaxqa.config import PaperConfig  # noqa: F401  (the config lives with the eval contract)
from probes.syntaxqa.paper_prompts import build_paper_prompt, question_text
from probes.syntaxqa.questions import Candidate, Item, _rng, balanced_sample, distractors, fact_key, render
from probes.syntaxqa.records import Fact

MVP_TF_FROM: tuple[str, ...] = ("GS", "SC", "DO", "IO")  # Table 1, note ‡


@dataclass
class PaperItem(Item):
    kp_also: str = ""  # "MVP" on GS/SC/DO/IO true/false items when MVP is asked (module doc)
    exemplar_ids: list[list[str]] = field(default_factory=list)  # per prompt, the exemplars' item ids


def paper_candidates(cands: list[Candidate]) -> list[Candidate]:
    """Every candidate but MVP's own true/false statements (they are GS/SC/DO/IO's, module doc)."""
    return [c for c in cands if not (c.kp == "MVP" and c.qtype == "TF")]


def render_paper(c: Candidate, facts: list[Fact], seed: int) -> PaperItem:
    """The item ``questions.render`` makes (answer, options, golds, random baselines), asked in the paper's words."""
    base = render(c, facts, seed)
    f = facts[c.fact]
    if c.qtype == "TF":
        form, truth = c.variant.split("-")
        uses_gold = (form == "pos") == (truth == "True")
        x = f.answer_text if uses_gold else _rng(seed, fact_key(f), "paper-TF", c.variant).choice(distractors(f))
        question = question_text(f.kp, "TF", f.anchor_text, x, negated=form == "neg")
    else:
        question = question_text(f.kp, c.qtype, f.anchor_text)
    values = {fl.name: getattr(base, fl.name) for fl in fields(Item)}
    return PaperItem(**{**values, "question": question})


def _sentence(c: Candidate, facts: list[Fact]) -> tuple[str, str]:
    s = facts[c.fact].sentence
    return s.source, s.sent_id


def exemplar_candidates(cands: list[Candidate], test: list[Candidate], facts: list[Fact], cfg: PaperConfig,
                        seed: int) -> list[Candidate]:
    """The held-out exemplar set: ``exemplar_k`` per tuple (``balanced_sample``) of the questions on sentences no test item
    asks about, topped up per (knowledge point, type) to ``shots`` x ``shot_seeds`` where there are more."""
    asked = {_sentence(c, facts) for c in test}
    rest = [c for c in cands if _sentence(c, facts) not in asked]
    chosen = balanced_sample(rest, cfg.exemplar_k, seed)
    taken = {c.key for c in chosen}
    want = cfg.shots * cfg.shot_seeds
    have: dict[tuple[str, str], int] = {}
    for c in chosen:
        have[(c.kp, c.qtype)] = have.get((c.kp, c.qtype), 0) + 1
    spare: dict[tuple[str, str], list[Candidate]] = {}
    for c in sorted(rest, key=lambda c: c.key):
        if c.key not in taken:
            spare.setdefault((c.kp, c.qtype), []).append(c)
    for key, group in sorted(spare.items()):
        need = want - have.get(key, 0)
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


def mark_mvp_reuse(items: list[PaperItem], knowledge_points) -> None:
    """GS/SC/DO/IO true/false items also count for MVP when MVP is asked (Table 1, ‡)."""
    if "MVP" not in knowledge_points:
        return
    for it in items:
        if it.qtype == "TF" and it.kp in MVP_TF_FROM:
            it.kp_also = "MVP"
