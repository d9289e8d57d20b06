"""The syntax-question paper's question templates and prompts, character for character where it prints them.

Source: "How Well Do Large Language Models Understand Syntax? An Evaluation by Asking Natural
Language Questions" (../shared/papers/000_*.txt). What the paper prints, copied exactly:

- Figure 5, the grammatical-subject (GS) templates: true/false "In the above sentence, the grammatical
  subject of “{verb_phrase}” is “{answer}”." and its "<NEG>" form "... is not “{answer}”." (with the
  correct or an incorrect answer: four statements), multiple choice "In the above sentence, which of
  the following is the grammatical subject of “{verb_phrase}”?" (options shuffled), fill in the blank
  "In the above sentence, the grammatical subject of “{verb_phrase}” is _____."
- Figure 6, the general prompt for foundation models: the instruction lines of true/false and multiple
  choice (zero-shot "..., please answer them with “True” or “False”." / "... with “A”, “B”, “C”, or
  “D”."; few-shot "... questions (with answers):"), "Sentence: ", "Question: ", the option block
  "Options: \\n A. <a>\\n B. <b>\\n C. <c>\\n D. <d>\\n" (space after the colon and before each letter,
  as printed), and "Answer: The answer is “" - the model's answer continues after the opening quote;
  exemplars end with their answer and the closing quote. Every line ends with "\\n"; no blank lines.

What the paper does not print, ours by analogy (``PAPER_VERBATIM`` says which is which): the templates
of the other eight knowledge points (Appendix A shows GS only; ours keep its frame "In the above
sentence, the <relation> of “{anchor}” is ..."), MVP's own true/false items (none: the paper reuses the
GS/SC/DO/IO ones, see ``paper_items``), and the fill-in-the-blank instruction lines (Figure 6 says only
that the FITB prompt "is similar to" the true/false one).
"""
from __future__ import annotations

from probes.syntaxqa.questions import LETTERS, Item

OPEN, CLOSE = "“", "”"  # the paper's quotes (Figures 5 and 6)

# kp -> (TF statement, TF negated statement, MC question, FITB question); {a} = anchor, {x} = candidate.
# MVP has no anchor and no TF templates of its own (its TF items are GS/SC/DO/IO's, Table 1 note ‡).
PAPER_TEMPLATES: dict[str, tuple[str, str, str, str]] = {
    "GS": ("In the above sentence, the grammatical subject of “{a}” is “{x}”.",
           "In the above sentence, the grammatical subject of “{a}” is not “{x}”.",
           "In the above sentence, which of the following is the grammatical subject of “{a}”?",
           "In the above sentence, the grammatical subject of “{a}” is _____."),
    "SC": ("In the above sentence, the subject complement of “{a}” is “{x}”.",
           "In the above sentence, the subject complement of “{a}” is not “{x}”.",
           "In the above sentence, which of the following is the subject complement of “{a}”?",
           "In the above sentence, the subject complement of “{a}” is _____."),
    "DO": ("In the above sentence, the direct object of “{a}” is “{x}”.",
           "In the above sentence, the direct object of “{a}” is not “{x}”.",
           "In the above sentence, which of the following is the direct object of “{a}”?",
           "In the above sentence, the direct object of “{a}” is _____."),
    "IO": ("In the above sentence, the indirect object of “{a}” is “{x}”.",
           "In the above sentence, the indirect object of “{a}” is not “{x}”.",
           "In the above sentence, which of the following is the indirect object of “{a}”?",
           "In the above sentence, the indirect object of “{a}” is _____."),
    "MVP": ("", "",
            "In the above sentence, which of the following is the main verb phrase?",
            "In the above sentence, the main verb phrase is _____."),
    # a noun phrase can have several post-modifiers and a verb several adverbials: "an", not "the",
    # and the statement names the candidate first so that its negation reads as a fact about it
    "ADJ": ("In the above sentence, “{x}” is an adjectival modifier of “{a}”.",
            "In the above sentence, “{x}” is not an adjectival modifier of “{a}”.",
            "In the above sentence, which of the following is an adjectival modifier of “{a}”?",
            "In the above sentence, an adjectival modifier of “{a}” is _____."),
    "ADV": ("In the above sentence, “{x}” is an adverbial modifier of “{a}”.",
            "In the above sentence, “{x}” is not an adverbial modifier of “{a}”.",
            "In the above sentence, which of the following is an adverbial modifier of “{a}”?",
            "In the above sentence, an adverbial modifier of “{a}” is _____."),
    "CO": ("In the above sentence, “{x}” is coordinated with “{a}”.",
           "In the above sentence, “{x}” is not coordinated with “{a}”.",
           "In the above sentence, which of the following is coordinated with “{a}”?",
           "In the above sentence, the phrase coordinated with “{a}” is _____."),
    "PPA": ("In the above sentence, the prepositional phrase “{a}” modifies “{x}”.",
            "In the above sentence, the prepositional phrase “{a}” does not modify “{x}”.",
            "In the above sentence, which of the following does the prepositional phrase “{a}” modify?",
            "In the above sentence, the prepositional phrase “{a}” modifies _____."),
}
PAPER_VERBATIM: frozenset[str] = frozenset({"GS"})  # knowledge points whose templates the paper prints

# question type -> (zero-shot instruction line, few-shot instruction line); FITB's are ours (module doc)
INSTRUCTIONS: dict[str, tuple[str, str]] = {
    "TF": ("The following are true or false questions, please answer them with “True” or “False”.",
           "The following are true or false questions (with answers):"),
    "MC": ("The following are multiple choice questions, please answer them with “A”, “B”, “C”, or “D”.",
           "The following are multiple choice questions (with answers):"),
    "FITB": ("The following are fill in the blank questions, please answer them with words from the sentence.",
             "The following are fill in the blank questions (with answers):"),
}
ANSWER_PREFIX = "Answer: The answer is “"


def question_text(kp: str, qtype: str, anchor: str, candidate: str = "", negated: bool = False) -> str:
    """One question from the templates (TF needs the candidate phrase and whether the statement is negated)."""
    tf, tf_neg, mc, fitb = PAPER_TEMPLATES[kp]
    if qtype == "TF":
        if not tf:
            raise ValueError(f"{kp} has no true/false template: its true/false items are GS/SC/DO/IO's (paper, Table 1)")
        return (tf_neg if negated else tf).format(a=anchor, x=candidate)
    return (mc if qtype == "MC" else fitb).format(a=anchor)


def block(item: Item) -> str:
    """Sentence, question, the option block (MC) and the answer prefix, every line closed by a newline
    except the last, which ends with the opening quote the model continues."""
    text = f"Sentence: {item.sentence}\nQuestion: {item.question}\n"
    if item.qtype == "MC":
        text += "Options: \n" + "".join(f" {LETTERS[i]}. {o}\n" for i, o in enumerate(item.options))
    return text + ANSWER_PREFIX


def exemplar_answer(item: Item) -> str:
    """What an exemplar shows between the quotes: True/False, the letter, or the gold phrase."""
    return item.answer


def build_paper_prompt(item: Item, exemplars: list[Item] = ()) -> str:
    """Figure 6: zero-shot (no exemplars) or few-shot prompt for one item."""
    zero, few = INSTRUCTIONS[item.qtype]
    if not exemplars:
        return f"{zero}\n{block(item)}"
    shown = "".join(f"{block(ex)}{exemplar_answer(ex)}{CLOSE}\n" for ex in exemplars)
    return f"{few}\n{shown}{block(item)}"
