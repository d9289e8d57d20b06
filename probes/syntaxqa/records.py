"""Records shared by the syntax-question readers: a sentence with token offsets, and a fact about it (one answer
to one knowledge-point question about one sentence, from which questions are rendered later). Spans are token
ranges ``[start, end)`` over the surface tokens (traces removed), so every phrase reads exactly as in the sentence."""
from __future__ import annotations

from dataclasses import dataclass, field

BENCHMARK = "syntax_qa"  # the name of its eval files: evals/step<N>/syntax_qa.parquet
PAPER_BENCHMARK = "syntax_qa_paper"  # mode=paper's eval files, beside the likelihood mode's


def benchmark_name(mode: str) -> str:
    """The eval-file name of a syntax-question mode ("likelihood" or "paper")."""
    return PAPER_BENCHMARK if mode == "paper" else BENCHMARK
# The nine knowledge points, in the order of the paper's tables.
KNOWLEDGE_POINTS: tuple[str, ...] = ("GS", "SC", "DO", "IO", "MVP", "ADJ", "ADV", "CO", "PPA")
# true/false, multiple choice, fill-in-the-blank (probes.syntaxqa.questions renders them)
QUESTION_TYPES: tuple[str, ...] = ("TF", "MC", "FITB")


@dataclass(frozen=True)
class Span:
    start: int  # first token
    end: int  # one past the last token

    def overlaps(self, other: "Span") -> bool:
        return self.start < other.end and other.start < self.end


@dataclass
class Sentence:
    source: str  # file the sentence was read from
    sent_id: str  # unique within the source (PTB: "wsj_0001.mrg#1", UD: the sent_id comment)
    line: int  # 1-based line where the sentence starts in the source file
    lang: str  # "en" | "zh": picks the question templates
    tokens: list[str]
    is_punct: list[bool]
    text: str = ""
    offsets: list[tuple[int, int]] = field(default_factory=list)  # character span of each token
    # Every phrase of the sentence (constituents / dependency subtrees): the pool distractors come from.
    phrases: list[Span] = field(default_factory=list)

    def trim(self, span: Span) -> Span | None:
        """Drop punctuation at both edges (", 61 years old ," reads "61 years old"); None if nothing is left."""
        s, e = span.start, span.end
        while s < e and self.is_punct[s]:
            s += 1
        while e > s and self.is_punct[e - 1]:
            e -= 1
        return Span(s, e) if s < e else None

    def phrase(self, span: Span) -> str:
        """The span's text exactly as it appears in the sentence (original spacing kept)."""
        return self.text[self.offsets[span.start][0] : self.offsets[span.end - 1][1]]


@dataclass(frozen=True)
class Fact:
    kp: str  # one of KNOWLEDGE_POINTS
    sentence: Sentence
    anchor: Span | None  # what the question names (the verb, the noun phrase, the PP, a conjunct); None for MVP
    answer: Span  # the whole-phrase answer
    category: str  # answer category used for balanced down-sampling (e.g. "NP", "verb", "noun")
    golds: tuple[Span, ...] = ()  # every correct answer to the same question (answer included)
    # Stretches no distractor may overlap: correct answers that could not become facts themselves
    # (a non-contiguous subtree is still a correct answer, so it must not be offered as a wrong one).
    avoid: tuple[Span, ...] = ()

    @property
    def anchor_text(self) -> str:
        return self.sentence.phrase(self.anchor) if self.anchor is not None else ""

    @property
    def answer_text(self) -> str:
        return self.sentence.phrase(self.answer)


def join_tokens(tokens: list[str], space_after: list[bool]) -> tuple[str, list[tuple[int, int]]]:
    """Concatenate tokens, a space after each one whose flag is set; return the text and token offsets."""
    text, offsets = "", []
    for i, tok in enumerate(tokens):
        offsets.append((len(text), len(text) + len(tok)))
        text += tok + (" " if space_after[i] and i < len(tokens) - 1 else "")
    return text, offsets


def finish_facts(facts: list[Fact], avoid: dict[tuple[str, Span | None], list[Span]] | None = None) -> list[Fact]:
    """Fill ``golds`` (all answers to the same question: sentence, knowledge point and anchor) and drop duplicates:
    a verb with two adverbials has two correct ADV answers, neither a distractor of the other nor wrong in
    fill-in-the-blank. ``avoid[(kp, anchor)]``: further stretches holding correct answers (``Fact.avoid``)."""
    avoid = avoid or {}
    groups: dict[tuple, list[Fact]] = {}
    for f in facts:
        if not balanced(f.answer_text) or not balanced(f.anchor_text):
            continue  # 'baker, "Pie Guy' cuts a quotation in half: it would not read as a phrase
        groups.setdefault((id(f.sentence), f.kp, f.anchor), []).append(f)
    out: list[Fact] = []
    for group in groups.values():
        seen: dict[Span, Fact] = {}
        for f in group:
            seen.setdefault(f.answer, f)
        golds = tuple(sorted(seen, key=lambda s: (s.start, s.end)))
        for f in seen.values():
            out.append(Fact(f.kp, f.sentence, f.anchor, f.answer, f.category, golds, tuple(avoid.get((f.kp, f.anchor), ()))))
    return out


def anchor_is_unique(sent: Sentence, span: Span) -> bool:
    """True when the anchor's token sequence occurs once in the sentence, so the question is unambiguous."""
    target = sent.tokens[span.start : span.end]
    n = len(target)
    return sum(sent.tokens[i : i + n] == target for i in range(len(sent.tokens) - n + 1)) == 1


def balanced(text: str) -> bool:
    """Quotes and brackets open and close inside the phrase."""
    if text.count('"') % 2:
        return False
    depth = 0
    for ch in text:
        depth += ch in "([{（"
        depth -= ch in ")]}）"
        if depth < 0:
            return False
    return depth == 0 and text.count("“") == text.count("”")
