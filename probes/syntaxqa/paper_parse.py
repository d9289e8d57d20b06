"""Reading an answer out of a greedy generation that continues "Answer: The answer is “".

The paper asks for the answer between quotes (Figure 6: exemplars read 'The answer is “B”') and
scores the answer; it does not print its extraction code, so this is ours, stated exactly:

1. The answer text is the generation up to the first closing quote (” or a straight "), else up to
   the first newline (the model ended the line without closing the quote), else all of it (the token
   budget ran out); surrounding white space is dropped.
2. True/false: "True" or "False", any case, with trailing . , ; : ! allowed.
3. Multiple choice: a letter A-D alone ("B", "(B)", "B.") or followed by ".", ")" or ":" and anything
   ("B. Pierre Vinken"); else the text of exactly one option (compared as ``metrics.words``: case and
   punctuation ignored), read as its letter. "A nonexecutive director" is an option's text, not "A".
4. Fill in the blank: any non-empty answer text (scored by exact match and strict F1 later).

Anything else is *unparsed*: it is scored wrong (accuracy 0, F1 0), as the paper's accuracy over
all questions implies, and counted separately (the eval rows' ``unparsed``, the summary's
``<type>_unparsed``), so a reader can tell "answered wrongly" from "did not answer in the format".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from probes.syntaxqa.metrics import words
from probes.syntaxqa.questions import LETTERS

CLOSING = ("”", '"')
_TF = {"true": "True", "false": "False"}
_LETTER_ALONE = re.compile(r"^\(?([A-D])\)?\.?$")
_LETTER_THEN = re.compile(r"^\(?([A-D])[.):]")


@dataclass(frozen=True)
class Parsed:
    text: str  # the answer text (rule 1)
    answer: str | None  # "True"/"False", a letter, the FITB phrase; None = unparsed
    closed: bool  # a closing quote ended the answer


def answer_text(generation: str) -> tuple[str, bool]:
    """Rule 1: (the text before the closing quote / newline, whether a closing quote ended it)."""
    quote = min((i for i in (generation.find(q) for q in CLOSING) if i >= 0), default=-1)
    newline = generation.find("\n")
    if quote >= 0 and (newline < 0 or quote < newline):
        return generation[:quote].strip(), True
    if newline >= 0:
        return generation[:newline].strip(), False
    return generation.strip(), False


def parse_answer(generation: str, qtype: str, options: list[str] = ()) -> Parsed:
    text, closed = answer_text(generation)
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
    return Parsed(text, answer, closed)
