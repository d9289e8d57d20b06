"""Recover a template's slots in a sentence the template produced (a released ZhoBLiMP pair, which holds only its
sentences, while phrase regions need slots). A slot matches a substring one of its alternatives can produce (a
literal, a vocabulary word satisfying its query, a named phrase, recursively). Agreement and a phrase's extra
constraints are ignored: they narrow which word is drawn, never where a slot ends, and so a vocabulary entry changed
since the data was generated cannot fail the parse. Of a sentence's splits, the pair of parses whose shared slots
hold the most identical text is kept; a pair that does not parse keeps no slots (callers fall back to the generic
split)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from probes.benchmarks.generator import Direct, Engine, PhraseRef, Slot, Template, parse_rule
from probes.benchmarks.pairs import Pair, Region

Span = tuple[int, int]


@dataclass
class SlotParser:
    """Parses sentences of one engine's templates into slot spans; caches the words of each query."""

    engine: Engine
    max_parses: int = 16  # parses kept per sentence; real templates give 1-3
    max_depth: int = 6  # phrase recursion, as the engine's

    def __post_init__(self):
        self._words: dict = {}

    # ---- what one rule can match at a position of the text
    def _leaf_words(self, rule) -> dict[int, frozenset[str]]:
        """Words a leaf can produce, by length (so a match is a few set look-ups)."""
        if rule not in self._words:
            if isinstance(rule, Direct):
                words = set(rule.words)
            else:
                q = dict(rule.query)
                words = {e.expression for e in
                         (self.engine._candidates(q, {}, None) if q else self.engine.vocab.entries)}
            by_len: dict[int, set[str]] = {}
            for w in words:
                by_len.setdefault(len(w), set()).add(w)
            self._words[rule] = {n: frozenset(ws) for n, ws in by_len.items()}
        return self._words[rule]

    def _slot_ends(self, slot: Slot, text: str, start: int, sep: str, memo: dict, depth: int) -> frozenset[int]:
        return frozenset().union(*(self._rule_ends(rule, text, start, sep, memo, depth) for rule in slot))

    def _rule_ends(self, rule, text: str, start: int, sep: str, memo: dict, depth: int) -> frozenset[int]:
        key = (rule, start)
        if key in memo:
            return memo[key]
        memo[key] = frozenset()  # a left-recursive phrase at the same position matches nothing new
        if isinstance(rule, PhraseRef):
            out: set[int] = set()
            if depth < self.max_depth:
                for alt in self.engine.phrases.get(rule.name, []):
                    pos = {start}
                    for sub in alt:
                        nxt: set[int] = set()
                        for p in pos:
                            for q in _after_sep(text, p, sep, p == start):
                                nxt |= self._slot_ends(sub, text, q, sep, memo, depth + 1)
                        pos = nxt
                        if not pos:
                            break
                    out |= pos
        else:  # a word: Direct, Lexical or Matched
            out = {start + n for n, ws in self._leaf_words(rule).items() if text[start:start + n] in ws}
        memo[key] = frozenset(out)
        return memo[key]

    # ---- whole sentences
    def parses(self, slots: list[Slot], text: str, sep: str) -> list[list[Span]]:
        """Every split of ``text`` into one span per slot (up to ``max_parses``), in a stable order."""
        memo: dict = {}
        n = len(slots)
        feasible: dict[tuple[int, int], bool] = {}

        def can(i: int, pos: int) -> bool:  # can slots i.. cover text[pos:]?
            if (i, pos) not in feasible:
                if i == n:
                    feasible[i, pos] = pos == len(text)
                else:
                    feasible[i, pos] = any(can(i + 1, e) for q in _after_sep(text, pos, sep, i == 0)
                                           for e in self._slot_ends(slots[i], text, q, sep, memo, 0))
            return feasible[i, pos]

        out: list[list[Span]] = []

        def walk(i: int, pos: int, acc: list[Span]) -> None:
            if len(out) >= self.max_parses:
                return
            if i == n:
                out.append(list(acc))
                return
            for q in _after_sep(text, pos, sep, i == 0):
                for e in sorted(self._slot_ends(slots[i], text, q, sep, memo, 0)):
                    if can(i + 1, e):
                        walk(i + 1, e, acc + [(q, e)])

        if can(0, 0):
            walk(0, 0, [])
        return out

    def align(self, t: Template, good: str, bad: str) -> Optional[tuple[list[Span], list[Span]]]:
        """Slot spans of a pair of ``t`` (good and bad), or None when either sentence does not parse."""
        gslots = [parse_rule(r) for r in t.good]
        bslots = [parse_rule(r) for r in t.bad]
        gp, bp = self.parses(gslots, good, t.sep), self.parses(bslots, bad, t.sep)
        if not gp or not bp:
            return None
        shared = [i for i, (g, b) in enumerate(zip(t.good, t.bad)) if g == b]

        def agreement(g: list[Span], b: list[Span]) -> int:
            return sum(good[slice(*g[i])] == bad[slice(*b[i])] for i in shared)

        return max(((g, b) for g in gp for b in bp), key=lambda gb: agreement(*gb))  # first of the best

    def attach(self, t: Template, pair: Pair, names: Optional[list[str]] = None) -> Pair:
        """``pair`` with one Region per slot of ``t`` (named by ``t.roles`` or slot<i>), or unchanged."""
        spans = self.align(t, pair.good, pair.bad)
        if spans is None:
            return pair
        names = names or [t.roles[i] if t.roles else f"slot{i}" for i in range(len(t.good))]
        regions = tuple(Region(nm, g, b) for nm, g, b in zip(names, *spans))
        return Pair(pair.benchmark, pair.paradigm, pair.phenomenon, pair.pair_id, pair.good, pair.bad, regions)


def _after_sep(text: str, pos: int, sep: str, first: bool) -> list[int]:
    """Where the next slot may start: right here (empty slot, punctuation) or after the separator."""
    if first or not sep or not text.startswith(sep, pos):
        return [pos]
    return [pos, pos + len(sep)]
