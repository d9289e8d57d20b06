"""The multiple-choice item every ELAGENT generator produces, and the k-shot layouts they share: the letter layout
(the right option at a uniformly random letter, so chance is 1 / options) and the cloze layout with its matched
context for the context pair; why both: docs/elagent.md."""
from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Callable

# The answer slot every prompt ends with; an option is scored as " " + text after it.
ANSWER = "Answer:"


@dataclass(frozen=True)
class MCItem:
    task: str  # precedence | babi | predicates
    paradigm: str  # one item set of the task (e.g. babi_random); a curve of its own
    item_id: str
    prompt: str  # the k solved examples and the question, ending with ANSWER
    options: tuple[str, ...]  # option texts, scored after the prompt
    answer: int  # index of the right option
    cloze: str  # the same k examples and question in the cloze layout: licenses options[answer]
    matched: str  # the cloze prompt with one change (items.Solved.twin) that licenses matched_answer instead
    matched_answer: str

    @property
    def labels(self) -> tuple[str, ...]:
        """What is scored after the prompt: the options' letters, ``(a)`` ..."""
        return tuple(letters(len(self.options)))

    def __post_init__(self) -> None:
        if not 0 <= self.answer < len(self.options) or len(self.options) < 2:
            raise ValueError(f"item {self.item_id}: answer {self.answer} of {len(self.options)} options")
        if len(set(self.options)) != len(self.options):
            raise ValueError(f"item {self.item_id}: options repeat: {self.options}")
        if self.matched_answer == self.options[self.answer] or self.matched == self.cloze:
            raise ValueError(f"item {self.item_id}: its matched question must change the context and the answer")


@dataclass(frozen=True)
class Solved:
    """One generated question with its options and answer, before the k-shot prompt is assembled."""

    question: str  # ends with the options listed (``listed(options)``), not with ANSWER
    options: tuple[str, ...]
    answer: int
    twin: Solved | None = None  # the matched question: one change to this one, another right text

    @property
    def gold(self) -> str:
        """The answer as a solved example writes it: the right option's letter."""
        return letters(len(self.options))[self.answer]

    @property
    def stem(self) -> str:
        """The question without its options line (the cloze layout)."""
        return self.question.rpartition("\n")[0]

    @property
    def text(self) -> str:
        return self.options[self.answer]


def few_shot(examples: list[Solved], test: Solved, header: str = "", cloze: bool = False) -> str:
    """``header``, then each example with its answer, then the test question; blank lines between. ``cloze``:
    questions without their options line, answered by the right option's text."""
    blocks = [header] if header else []
    blocks += [f"{e.stem}\n{ANSWER} {e.text}" if cloze else f"{e.question}\n{ANSWER} {e.gold}" for e in examples]
    blocks.append(f"{test.stem if cloze else test.question}\n{ANSWER}")
    return "\n\n".join(blocks)


def mc_item(task: str, paradigm: str, item_id: str, examples: list[Solved], test: Solved, header: str = "",
            matched_examples: list[Solved] | None = None, matched_header: str | None = None) -> MCItem:
    """The item of ``test`` after ``examples``: both layouts, and the matched context (``test.twin`` after
    ``matched_examples`` under ``matched_header``, by default the same examples and header)."""
    if test.twin is None:
        raise ValueError(f"item {item_id}: its question has no matched twin")
    other_ex = examples if matched_examples is None else matched_examples
    other_head = header if matched_header is None else matched_header
    return MCItem(task, paradigm, item_id, few_shot(examples, test, header), test.options, test.answer,
                  few_shot(examples, test, header, cloze=True), few_shot(other_ex, test.twin, other_head, cloze=True),
                  test.twin.text)


def make_items(task: str, paradigm: str, n: int, shots: int, seed: int,
               draw: Callable[[random.Random], Solved], header: Callable[[random.Random], str] | None = None,
               ) -> list[MCItem]:
    """``n`` items of one paradigm, each with ``shots`` solved examples of the same paradigm before it.

    One generator per (seed, paradigm) (str seeds hash stably), so a paradigm's items do not depend on
    which other paradigms are generated. The examples of an item never repeat its question."""
    rng = random.Random(f"elagent/{seed}/{paradigm}")
    items = []
    for i in range(n):
        head = header(rng) if header else ""
        test = draw(rng)
        examples: list[Solved] = []
        tries = 0
        while len(examples) < shots:
            e = draw(rng)
            tries += 1
            if e.question != test.question or tries > 100:
                examples.append(e)
        items.append(mc_item(task, paradigm, f"{paradigm}-{i}", examples, test, head))
    return items


def letters(n: int) -> list[str]:
    return [f"({c})" for c in string.ascii_lowercase[:n]]


def listed(options: tuple[str, ...]) -> str:
    """The paper's option line: ``(a) cat (b) mouse (c) wolf``."""
    return " ".join(f"{k} {o}" for k, o in zip(letters(len(options)), options))


def random_name(rng: random.Random, lo: int = 4, hi: int = 6) -> str:
    """A random string of ``lo``-``hi`` letters, capitalised (ELAGENT App. C.5: "random strings of length four
    to six" replace names and animals)."""
    n = rng.randint(lo, hi)
    return rng.choice(string.ascii_uppercase) + "".join(rng.choice(string.ascii_lowercase) for _ in range(n - 1))


def distinct_names(rng: random.Random, k: int) -> list[str]:
    out: list[str] = []
    while len(out) < k:
        s = random_name(rng)
        if s not in out:
            out.append(s)
    return out
