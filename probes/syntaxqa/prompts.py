"""Zero- and few-shot prompts in the paper's format.

    <instruction line>
    Sentence: <sentence>
    Question: <question>
    A. <option>            (multiple choice only, one line per letter)
    Answer: The answer is "

The model's answer continues after the opening quote; few-shot exemplars (same knowledge point and
question type, other sentences) come first, each closed with its answer and the closing quote, one
blank line between blocks. Chinese sentences get the same frame in Chinese (“…” quotes,
正确/错误 for true/false), so a model trained only on Chinese text reads a prompt in its language.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from probes.syntaxqa.questions import LETTERS, Item


@dataclass(frozen=True)
class Frame:
    instruction: dict[str, str]  # per question type
    sentence: str
    question: str
    answer_prefix: str  # ends with the opening quote
    close: str  # the closing quote: generation stops here
    true: str
    false: str


FRAMES: dict[str, Frame] = {
    "en": Frame(
        instruction={
            "TF": 'Read the sentence and answer the question with "True" or "False".',
            "MC": "Read the sentence and answer the question with one of the options A, B, C or D.",
            "FITB": "Read the sentence and answer the question with a phrase copied from the sentence.",
        },
        sentence="Sentence: ", question="Question: ", answer_prefix='Answer: The answer is "', close='"',
        true="True", false="False",
    ),
    "zh": Frame(
        instruction={
            "TF": "阅读句子，用“正确”或“错误”回答问题。",
            "MC": "阅读句子，从选项A、B、C、D中选择一个回答问题。",
            "FITB": "阅读句子，用句子中的一个短语回答问题。",
        },
        sentence="句子：", question="问题：", answer_prefix="答案：答案是“", close="”",
        true="正确", false="错误",
    ),
}


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
    parts = [fr.instruction[item.qtype]]
    parts += [block(ex) + answer_text(ex) + fr.close for ex in exemplars]
    parts.append(block(item))
    return "\n\n".join(parts)


def attach_prompts(items: list[Item], pool: dict[tuple[str, str, str], list[Item]], shots: int, seeds: int, seed: int) -> None:
    """Fill ``item.prompts``: one zero-shot prompt, or one few-shot prompt per exemplar seed.

    ``pool[(lang, kp, qtype)]`` holds candidate exemplars (items not under test). For exemplar seed s
    the pool is shuffled once per (kp, type) and every test item takes the first ``shots`` exemplars
    that come from another sentence, so the few-shot context never contains the test sentence.
    """
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
