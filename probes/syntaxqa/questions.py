"""Questions from facts (true/false, multiple choice, fill-in-the-blank), balanced down-sampling, and the
likelihood mode's prompts (mode=paper's: ``paper``); docs/syntax-questions.md says how a fact becomes questions.
Randomness is seeded by (seed, item id): an item does not change when other items come or go."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib import resources

import pandas as pd

from probes.syntaxqa.metrics import exact_match, strict_f1
from probes.syntaxqa.records import KNOWLEDGE_POINTS, QUESTION_TYPES, Fact

LETTERS = ("A", "B", "C", "D")
TF_VARIANTS = ("pos-True", "pos-False", "neg-True", "neg-False")

# The question templates and prompt frames of both modes are package data (templates.json, which says what is ours
# and what the paper's): kp -> (wh-question, positive statement, negated statement) per language; {a} = anchor,
# {x} = candidate phrase.
TEXTS = json.loads(resources.files("probes.syntaxqa").joinpath("templates.json").read_text(encoding="utf-8"))
TEMPLATES: dict[str, dict[str, list[str]]] = TEXTS["likelihood"]["questions"]


@dataclass
class Item:
    """One question, self-contained (no tree objects), ready to prompt and score."""

    item_id: str
    source: str
    sent_id: str
    lang: str
    kp: str
    qtype: str  # TF | MC | FITB
    category: str  # answer category (docs/syntax-questions.md)
    sentence: str
    question: str
    answer: str  # "True"/"False", a letter A–D, or the gold phrase (FITB)
    options: list[str] = field(default_factory=list)  # MC: the phrases behind A–D
    golds: list[str] = field(default_factory=list)  # every correct phrase (FITB is scored against all)
    rand_acc: float = 0.0  # expected accuracy of a random guess (TF 1/2, MC 1/4, FITB: a random phrase of the sentence)
    rand_f1: float = float("nan")  # FITB only: expected strict F1 of a random option
    prompts: list[str] = field(default_factory=list)  # one per few-shot seed (attach_prompts)

    def row(self, mode: str) -> dict:
        """The item's eval row before scoring (score.score_items and paper.score_paper_items fill the scores)."""
        return {"item_id": self.item_id, "source": self.source, "sent_id": self.sent_id, "lang": self.lang,
                "kp": self.kp, "qtype": self.qtype, "category": self.category, "sentence": self.sentence,
                "question": self.question, "answer": self.answer, "options": list(self.options),
                "golds": list(self.golds), "n_prompts": len(self.prompts), "mode": mode, "pred": "",
                "correct": float("nan"), "f1": float("nan"), "lp_options": [], "rand_acc": self.rand_acc,
                "rand_f1": self.rand_f1}


@dataclass(frozen=True)
class Candidate:
    fact: int  # index into the fact list
    kp: str
    qtype: str
    variant: str  # TF variant, "" otherwise
    category: str
    key: str  # stable id


def fact_key(f: Fact) -> str:
    anchor = f"{f.anchor.start}-{f.anchor.end}" if f.anchor else "-"
    return f"{f.sentence.sent_id}|{f.kp}|{anchor}|{f.answer.start}-{f.answer.end}"


def distractors(f: Fact) -> list[str]:
    """Phrases of the same sentence that are not (part of) a correct answer or of the anchor."""
    s = f.sentence
    banned = {s.phrase(g) for g in f.golds} | ({f.anchor_text} if f.anchor else set())
    texts = (s.phrase(span) for span in s.phrases if not any(span.overlaps(g) for g in f.golds + f.avoid)
             and not (f.anchor is not None and span.overlaps(f.anchor)))
    return list(dict.fromkeys(t for t in texts if t not in banned))


def _rng(seed: int, *parts: str) -> random.Random:
    return random.Random("|".join([str(seed), *parts]))  # str seeds hash with SHA-512: stable across runs


def candidates(facts: list[Fact], seed: int, types: tuple[str, ...] = QUESTION_TYPES) -> list[Candidate]:
    out: list[Candidate] = []
    for i, f in enumerate(facts):
        base = fact_key(f)
        n_dis = len(distractors(f))
        if "TF" in types:
            for v in TF_VARIANTS:
                if v in ("pos-True", "neg-False") or n_dis >= 1:
                    out.append(Candidate(i, f.kp, "TF", v, v, f"{base}|TF|{v}"))
        if "MC" in types and n_dis >= 3:
            letter = LETTERS[_rng(seed, base, "MC").randrange(4)]
            out.append(Candidate(i, f.kp, "MC", "", letter, f"{base}|MC"))
        if "FITB" in types:
            out.append(Candidate(i, f.kp, "FITB", "", f.category, f"{base}|FITB"))
    return out


def balanced_sample(cands: list[Candidate], k: int, seed: int, max_items: int | None = None) -> list[Candidate]:
    """k per (type, knowledge point, answer category), seeded; ``max_items`` keeps the balance by taking
    the groups round-robin."""
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in cands:
        groups.setdefault((c.qtype, c.kp, c.category), []).append(c)
    picked: list[list[Candidate]] = []
    for key in sorted(groups):
        g = sorted(groups[key], key=lambda c: c.key)
        _rng(seed, "sample", *key).shuffle(g)
        picked.append(g[:k])
    rows = [c for i in range(k) for g in picked if i < len(g) for c in [g[i]]]  # round-robin order
    if max_items is not None:
        rows = rows[:max_items]
    return sorted(rows, key=lambda c: c.key)


def render(c: Candidate, facts: list[Fact], seed: int) -> Item:
    f = facts[c.fact]
    s = f.sentence
    q, pos, neg = TEMPLATES.get(s.lang, TEMPLATES["en"])[f.kp]
    golds = [s.phrase(g) for g in f.golds]
    dis = distractors(f)
    rng = _rng(seed, fact_key(f), c.qtype, c.variant)
    common = dict(item_id=c.key, source=s.source, sent_id=s.sent_id, lang=s.lang, kp=f.kp, qtype=c.qtype,
                  category=c.category, sentence=s.text, golds=golds)
    a = f.anchor_text
    if c.qtype == "TF":
        form, truth = c.variant.split("-")
        uses_gold = (form == "pos") == (truth == "True")
        x = f.answer_text if uses_gold else rng.choice(dis)
        stmt = (pos if form == "pos" else neg).format(a=a, x=x)
        return Item(question=stmt, answer=truth, rand_acc=0.5, **common)
    if c.qtype == "MC":
        options = _options(f, dis, seed)
        return Item(question=q.format(a=a), answer=LETTERS[options.index(f.answer_text)], options=options,
                    rand_acc=1 / len(options), **common)
    # FITB's random guess: a uniformly chosen phrase of the sentence outside the anchor (an answer or a distractor)
    guesses = list(dict.fromkeys(golds + dis))
    return Item(question=q.format(a=a), answer=f.answer_text, rand_acc=sum(exact_match(o, golds) for o in guesses) / len(guesses),
                rand_f1=sum(strict_f1(o, golds) for o in guesses) / len(guesses), **common)


def _options(f: Fact, dis: list[str], seed: int) -> list[str]:
    """The answer at its seeded letter among three seeded distractors."""
    rng = _rng(seed, fact_key(f), "MC")
    slot = rng.randrange(4)  # the same draw that fixed the candidate's category
    chosen = rng.sample(dis, min(3, len(dis)))
    chosen.insert(min(slot, len(chosen)), f.answer_text)
    return chosen


def statistics_table(items: list[Item]) -> pd.DataFrame:
    """Items per knowledge point (rows, the nine in the paper's order, then a total) and type (columns)."""
    df = pd.DataFrame([(it.kp, it.qtype) for it in items], columns=["kp", "qtype"])
    table = pd.crosstab(df["kp"], df["qtype"]) if len(df) else pd.DataFrame()
    table = table.reindex(index=list(KNOWLEDGE_POINTS), columns=list(QUESTION_TYPES), fill_value=0).fillna(0).astype(int)
    table["total"] = table.sum(axis=1)
    table.loc["total"] = table.sum(axis=0)
    table.index.name = "kp"
    return table


# ------------------------------------------------------------------------------- prompts
# The instruction line, few-shot exemplars closed by their answer and quote, then the item, blocks apart by a blank
# line; the answer continues after the opening quote. Chinese sentences get a Chinese frame, so that a model trained
# only on Chinese text reads a prompt in its language.
@dataclass(frozen=True)
class Frame:
    instruction: dict[str, str]  # per question type
    sentence: str
    question: str
    answer_prefix: str  # ends with the opening quote
    close: str  # the closing quote: generation stops here
    true: str
    false: str


FRAMES: dict[str, Frame] = {lang: Frame(**f) for lang, f in TEXTS["likelihood"]["frames"].items()}


def frame_for(item: Item) -> Frame:
    return FRAMES.get(item.lang, FRAMES["en"])


def answer_text(item: Item) -> str:
    """What follows the answer prefix when the answer is right (the exemplar's answer)."""
    fr = frame_for(item)
    if item.qtype == "TF":
        return fr.true if item.answer == "True" else fr.false
    return item.answer


def continuations(item: Item) -> list[str]:
    """The strings compared by likelihood: True/False (framed words) or the letters A–D in use."""
    fr = frame_for(item)
    if item.qtype == "TF":
        return [fr.true, fr.false]
    if item.qtype == "MC":
        return list(LETTERS[: len(item.options)])
    raise ValueError(f"item {item.item_id}: {item.qtype} is generated, not compared by likelihood")


def block(item: Item) -> str:
    """Sentence, question, options and the answer prefix of one item (no instruction)."""
    fr = frame_for(item)
    lines = [fr.sentence + item.sentence, fr.question + item.question]
    lines += [f"{LETTERS[i]}. {opt}" for i, opt in enumerate(item.options)] if item.qtype == "MC" else []
    lines.append(fr.answer_prefix)
    return "\n".join(lines)


def build_prompt(item: Item, exemplars: list[Item] = ()) -> str:
    fr = frame_for(item)
    exemplar_blocks = [block(ex) + answer_text(ex) + fr.close for ex in exemplars]
    return "\n\n".join([fr.instruction[item.qtype], *exemplar_blocks, block(item)])


def attach_prompts(items: list[Item], pool: dict[tuple[str, str, str], list[Item]], shots: int, seeds: int, seed: int) -> None:
    """Fill ``item.prompts``: one zero-shot prompt, or one few-shot prompt per exemplar seed. For seed s the pool
    of ``(lang, kp, qtype)`` (items not under test) is shuffled once, and each item takes its first ``shots``
    exemplars from other sentences, so the few-shot context never contains the test sentence."""
    if shots <= 0:
        for it in items:
            it.prompts = [build_prompt(it)]
        return
    orders: dict[tuple, list[Item]] = {}
    for it in items:
        key = (it.lang, it.kp, it.qtype)
        it.prompts = []
        for s in range(max(1, seeds)):
            if (key, s) not in orders:
                cand = list(pool.get(key, []))
                random.Random(f"{seed}|shots|{s}|{'|'.join(key)}").shuffle(cand)
                orders[(key, s)] = cand
            ex = [e for e in orders[(key, s)] if e.sent_id != it.sent_id or e.source != it.source][:shots]
            it.prompts.append(build_prompt(it, ex))
