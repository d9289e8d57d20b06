"""ELAGENT Task 1: arithmetic with redefined operator precedence (paper §2.1, Fig. 1, Table 26, App. C.1), as
multiple choice between the value under the new rule and under the usual one (more options: other precedences'
values, as Task 2's wrong choices, C.2), answered by letter; the matched context states the usual priorities,
its examples answered under them. Division is left out by default (``operators``): the paper's decimal answers
(``[63.67567567567567]``) would make the comparison one of 16-digit strings; ``"+-*/"`` restores it."""
from __future__ import annotations

import operator
import random
from fractions import Fraction

from probes.elagent.items import MCItem, Solved, listed, mc_item

STANDARD = {"*": 2, "/": 2, "+": 4, "-": 4}  # Fig. 1(a): slots 1-5, smaller = evaluated first
SLOTS = (1, 2, 3, 4, 5)
PARADIGMS = {"precedence_1move": 1, "precedence_2moves": 2}
# a / 0 raises ZeroDivisionError: the caller draws again
APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def evaluate(operands: list[int], ops: list[str], slots: dict[str, int]) -> Fraction:
    """Value of ``operands[0] ops[0] operands[1] ...`` when the operator in the smallest slot goes first,
    ties left to right (the paper's rule for operators of equal priority)."""
    if len(operands) != len(ops) + 1:
        raise ValueError(f"{len(operands)} operands for {len(ops)} operators")
    vals = [Fraction(v) for v in operands]
    ops = list(ops)
    while ops:
        i = min(range(len(ops)), key=lambda k: (slots[ops[k]], k))
        vals[i:i + 2] = [APPLY[ops[i]](vals[i], vals[i + 1])]
        del ops[i]
    return vals[0]


def rule_text(ops: list[str], slots: dict[str, int]) -> str:
    """The priorities of the expression's operators, highest first: ``'+' > '*' = '-'``."""
    used = sorted(set(ops), key=lambda o: (slots[o], "*/+-".index(o)))  # ties as the paper writes them
    out = f"'{used[0]}'"
    for prev, op in zip(used, used[1:]):
        out += (" = " if slots[op] == slots[prev] else " > ") + f"'{op}'"
    return out


def expression_text(operands: list[int], ops: list[str]) -> str:
    return " ".join([str(operands[0])] + [f"{o} {v}" for o, v in zip(ops, operands[1:])])


def value_text(v: Fraction) -> str:
    """``[52]``; a non-integer as Python prints the float (the paper's ``[63.67567567567567]``)."""
    return f"[{v.numerator}]" if v.denominator == 1 else f"[{float(v)!r}]"


def _operands(rng: random.Random, n: int, digits: int) -> list[int]:
    return [rng.randint(10 ** (digits - 1), 10 ** digits - 1) for _ in range(n)]


def _moved(rng: random.Random, ops: list[str], moves: int) -> dict[str, int]:
    slots = dict(STANDARD)
    for op in rng.sample(sorted(set(ops)), moves):
        slots[op] = rng.choice([s for s in SLOTS if s != STANDARD[op]])
    return slots


def _values(rng: random.Random, operands: list[int], ops: list[str], slots: dict[str, int],
            n_options: int) -> list[Fraction] | None:
    """[value under ``slots``, value under the usual rule, further values under other precedences] -- all
    distinct, ``n_options`` of them -- or None when the expression does not allow it (C.1 keeps an expression
    only if the new precedence changes its value)."""
    try:
        values = [evaluate(operands, ops, slots), evaluate(operands, ops, STANDARD)]
    except ZeroDivisionError:
        return None
    if values[0] == values[1]:
        return None
    for _ in range(50):  # further distractors: the values under other precedences (as Task 2's wrong choices)
        if len(values) >= n_options:
            break
        try:
            v = evaluate(operands, ops, _moved(rng, ops, rng.randint(1, len(set(ops)))))
        except ZeroDivisionError:
            continue
        if v not in values:
            values.append(v)
    return values if len(values) >= n_options else None


def _question(rng: random.Random, text: str, values: list[Fraction]) -> Solved:
    """The question with its values listed in a random order (the right one, values[0], at a uniform letter);
    its twin: the same question under the usual rule, whose value is values[1] (the matched context)."""
    order = list(range(len(values)))
    rng.shuffle(order)
    options = tuple(value_text(values[k]) for k in order)
    question = f"{text}\n{listed(options)}"
    return Solved(question, options, order.index(0), Solved(question, options, order.index(1)))


def draw_item(rng: random.Random, *, moves: int, n_ops: int, digits: int, operators: str, shots: int,
              n_options: int, item_id: str, paradigm: str) -> MCItem:
    """One item: a new precedence, a test expression whose value it changes, ``shots`` solved examples (each
    with its own options, answered by the letter of its value under the new rule)."""
    while True:
        ops = rng.sample(list(operators), n_ops)
        operands = _operands(rng, n_ops + 1, digits)
        slots = _moved(rng, ops, moves)
        values = _values(rng, operands, ops, slots, n_options)
        if values is not None:
            break
    examples = []
    while len(examples) < shots:
        ex_ops = rng.sample(ops, len(ops))  # the same operators, so the stated rule covers them
        ex_operands = _operands(rng, n_ops + 1, digits)
        ex_values = _values(rng, ex_operands, ex_ops, slots, n_options)
        if ex_values is not None:
            examples.append(_question(rng, f"What is the value of {expression_text(ex_operands, ex_ops)}?", ex_values))
    test = _question(rng, f"Based on the new priorities, what is the value of {expression_text(operands, ops)}?",
                     values)
    header = "We redefine the priorities of elementary arithmetic operators as follows: {}"
    # the matched context states the usual priorities, and its examples are answered under them
    return mc_item("precedence", paradigm, item_id, examples, test, header.format(rule_text(ops, slots)),
                   [e.twin for e in examples], header.format(rule_text(ops, STANDARD)))


def precedence_items(n: int, shots: int, seed: int, *, n_ops: int = 3, digits: int = 1, operators: str = "+-*",
                     n_options: int = 2) -> list[MCItem]:
    """``n`` items per paradigm (one move; two moves where the expression has two operators to move)."""
    out = []
    for paradigm, moves in PARADIGMS.items():
        if moves > n_ops:
            continue
        rng = random.Random(f"elagent/{seed}/{paradigm}")
        out += [draw_item(rng, moves=moves, n_ops=n_ops, digits=digits, operators=operators, shots=shots,
                          n_options=n_options, item_id=f"{paradigm}-{i}", paradigm=paradigm) for i in range(n)]
    return out
