"""Template engine for minimal pairs, after the ZhoBLiMP generator (Liu et al. 2024, §3.1): lexical, direct, matched
and phrase rules in the ZhoBLiMP notation; docs/training.md ("Template notation") says what each means and how a
bad slot relates to the good ones."""
from __future__ import annotations

import functools
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

from probes.benchmarks.pairs import Pair, Region
from probes.benchmarks.vocabulary import Entry, GrammarError, Query, Vocabulary

# Punctuation that attaches to the previous word when words are joined by a space.
_NO_SPACE_BEFORE = frozenset({".", ",", "?", "!", ";", ":"})
_KV = re.compile(r"[A-Za-z_][\w]*:\S+")
_EXTRA = re.compile(r"(-?\d+):<([^>]*)>")
_ALIASES = {"mPos": "matchedPosition", "mPro": "matchedProperties", "mmPos": "mismatchedPosition",
            "mmPro": "mismatchedProperties"}

# ---------------------------------------------------------------- rules
@dataclass(frozen=True)
class Lexical:
    query: Query


@dataclass(frozen=True)
class Direct:
    words: tuple[str, ...]  # alternatives; ("",) is the empty slot


@dataclass(frozen=True)
class Matched:
    query: Query
    match_pos: Optional[int] = None
    match_props: tuple[str, ...] = ()
    mismatch_pos: Optional[int] = None
    mismatch_props: tuple[str, ...] = ()


@dataclass(frozen=True)
class PhraseRef:
    name: str
    extra: tuple[tuple[int, Query], ...] = ()  # constraints added to one position of the phrase


Rule = Union[Lexical, Direct, Matched, PhraseRef]
Slot = tuple[Rule, ...]  # alternatives


def _query(d: dict[str, frozenset[str]]) -> Query:
    return tuple(sorted(d.items()))


def _parse_kv(tokens: list[str], where: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for tok in tokens:
        if not _KV.fullmatch(tok):
            raise GrammarError(f"{where}: cannot mix literal '{tok}' with feature:value items")
        key, value = tok.split(":", 1)
        out[_ALIASES.get(key, key)] = [v for v in value.split("/") if v]
    return out


@functools.lru_cache(maxsize=4096)
def parse_rule(text: str, where: str = "rule") -> Slot:
    """Parse one slot of the notation into its alternatives (see the module docstring)."""
    alternatives: list[Rule] = []
    for part in text.split("|"):
        extras = [(int(i), body) for i, body in _EXTRA.findall(part)]
        tokens = _EXTRA.sub(" ", part).split()
        if not tokens:
            alternatives.append(Direct(("",)))
        elif not _KV.fullmatch(tokens[0]):
            if any(_KV.fullmatch(t) for t in tokens):
                raise GrammarError(f"{where}: '{part.strip()}' mixes literals and feature:value items")
            alternatives.append(Direct(tuple(tokens)))
        elif tokens[0].startswith("phrase:"):
            if len(tokens) > 1:
                raise GrammarError(f"{where}: unexpected '{' '.join(tokens[1:])}' after {tokens[0]}")
            extra = tuple((i, _query({k: frozenset(v) for k, v in _parse_kv(body.split(), where).items()}))
                          for i, body in extras)
            alternatives.append(PhraseRef(tokens[0].split(":", 1)[1], extra))
        else:
            kv = _parse_kv(tokens, where)
            pos = {k: kv.pop(k, None) for k in ("matchedPosition", "mismatchedPosition")}
            pro = {k: tuple(kv.pop(k, ())) for k in ("matchedProperties", "mismatchedProperties")}
            q = _query({k: frozenset(v) for k, v in kv.items()})
            if pos["matchedPosition"] is None and pos["mismatchedPosition"] is None:
                alternatives.append(Lexical(q))
                continue
            try:
                mp, mmp = (None if p is None else int(p[0]) for p in pos.values())
            except ValueError:
                raise GrammarError(f"{where}: matched position must be an integer in '{part.strip()}'")
            if (mp is None) != (not pro["matchedProperties"]) or (mmp is None) != (not pro["mismatchedProperties"]):
                raise GrammarError(f"{where}: a matched position needs its properties and vice versa")
            alternatives.append(Matched(q, mp, pro["matchedProperties"], mmp, pro["mismatchedProperties"]))
    return tuple(alternatives)


@dataclass
class Template:
    """One paradigm (good and bad rule lists) or, with ``bad`` empty, one corpus sentence type."""

    name: str
    good: list[str]
    bad: list[str] = field(default_factory=list)
    phenomenon: str = ""
    roles: list[str] = field(default_factory=list)  # region names; default slot<i>
    sep: str = " "
    strict_length: bool = False  # ZhoBLiMP strict_MP: good and bad of equal length
    source: str = "<template>"  # file the template came from, for error messages


class _Retry(Exception):
    """One sample failed (no shared value, repeated word ...): draw again."""


@dataclass
class _Node:
    rule: Rule
    query: dict[str, frozenset[str]] = field(default_factory=dict)
    exclude: dict[str, frozenset[str]] = field(default_factory=dict)
    children: Optional[list["_Node"]] = None  # a phrase
    entry: Optional[Entry] = None  # drawn (pinned) filler of a leaf
    text: Optional[str] = None
    resolved: bool = False

    def pinned_copy(self) -> "_Node":
        kids = None if self.children is None else [c.pinned_copy() for c in self.children]
        return _Node(self.rule, dict(self.query), dict(self.exclude), kids, self.entry, self.text, True)


def join(words: list[str], sep: str) -> tuple[str, list[tuple[int, int]]]:
    """Join words with ``sep`` (no separator before punctuation or around empty slots); return text and spans."""
    out, spans = "", []
    for w in words:
        if w and out and sep and w not in _NO_SPACE_BEFORE:
            out += sep
        spans.append((len(out), len(out) + len(w)))
        out += w
    return out, spans


class Engine:
    """Vocabulary + phrase definitions; compiles templates and draws sentences and pairs from them."""

    def __init__(self, vocab: Vocabulary, phrases: dict[str, list[list[Slot]]], max_depth: int = 6):
        self.vocab, self.phrases, self.max_depth = vocab, phrases, max_depth

    # ---- static checks: every problem found here names the template and the slot
    def check(self, t: Template) -> None:
        if t.bad and len(t.bad) != len(t.good):
            raise GrammarError(f"{t.source}: template '{t.name}': good has {len(t.good)} slots, bad {len(t.bad)}")
        if t.roles and len(t.roles) != len(t.good):
            raise GrammarError(f"{t.source}: template '{t.name}': {len(t.roles)} roles for {len(t.good)} slots")
        for side, rules in (("good", t.good), ("bad", t.bad)):
            wheres = [f"{t.source}: template '{t.name}' {side} slot {i} ({self._role(t, i)}) '{x}'"
                      for i, x in enumerate(rules)]
            slots = [parse_rule(x, w) for x, w in zip(rules, wheres)]
            for i, slot in enumerate(slots):
                if side == "bad" and t.bad[i] in t.good:
                    continue  # shared with or copied from the good sentence: its positions are the good ones
                self._check_slot(slot, wheres[i], len(rules), i, side == "bad", (), {})
                for rule in slot:  # a match needs a word at the other end, not a phrase
                    for p in (getattr(rule, "match_pos", None), getattr(rule, "mismatch_pos", None)):
                        if p is not None and p != i and any(isinstance(r, PhraseRef) for r in slots[p]):
                            raise GrammarError(f"{wheres[i]}: matched position {p} holds a phrase, not a word")

    def _check_slot(self, slot: Slot, where: str, n: int, i: int, bad: bool, stack: tuple, extra: dict) -> None:
        for rule in slot:
            if isinstance(rule, PhraseRef):
                if rule.name not in self.phrases:
                    raise GrammarError(f"{where}: unknown phrase '{rule.name}'")
                if rule.name in stack:  # recursion: checked once on the way down
                    continue
                for a, alt in enumerate(self.phrases[rule.name]):
                    add = dict(rule.extra)
                    for j, sub in enumerate(alt):
                        more = dict(add.get(j, add.get(j - len(alt), ())))
                        w = f"{where} -> phrase '{rule.name}' alternative {a} position {j}"
                        self._check_slot(sub, w, len(alt), j, False, stack + (rule.name,), more)
                continue
            if isinstance(rule, Matched):
                for p in (rule.match_pos, rule.mismatch_pos):
                    if p is not None and not (-n <= p < n) or (p == i and not bad):
                        raise GrammarError(f"{where}: matched position {p} outside 0..{n - 1} or itself")
            if isinstance(rule, (Lexical, Matched)):
                q = dict(rule.query) | extra
                if q and not self._candidates(q, {}, None):
                    raise GrammarError(f"{where}: unsatisfiable query {_fmt(q)}: no vocabulary entry matches")

    @staticmethod
    def _role(t: Template, i: int) -> str:
        return t.roles[i] if t.roles else f"slot{i}"

    # ---- candidates and property values of leaves
    def _candidates(self, query: dict, exclude: dict, words: Optional[tuple[str, ...]]) -> Sequence[Entry]:
        if words is not None:
            base = [e for w in words for e in (self.vocab.by_expression.get(w) or [Entry(w)])]
            base = [e for e in base if e.matches(_query(query))]
        elif set(query) == {"expression"}:  # a pure expression match is a literal, in the vocabulary or not
            base = [e for w in sorted(query["expression"]) for e in (self.vocab.by_expression.get(w) or [Entry(w)])]
        else:
            base = self.vocab.select(_query(query))
        if not exclude:
            return base
        return [e for e in base if not any(e.values(k) & v for k, v in exclude.items())]

    def _leaf_candidates(self, node: _Node) -> Sequence[Entry]:
        if node.entry is not None:
            return [node.entry]
        words = node.rule.words if isinstance(node.rule, Direct) else None
        return self._candidates(node.query, node.exclude, words)

    def _values(self, node: _Node, prop: str) -> Optional[frozenset[str]]:
        if node.children is not None:
            raise _Retry(f"matched position holds phrase '{node.rule.name}', not a word")
        if prop == "expression" and node.entry is None and not node.query and not isinstance(node.rule, Direct):
            return None  # unconstrained: agrees with any word
        out: set[str] = set()
        for e in self._leaf_candidates(node):
            out |= e.values(prop)
        return frozenset(out)

    # ---- expansion, matching, drawing
    def _expand(self, slot: Slot, rng: random.Random, depth: int, extra: Query = ()) -> _Node:
        rule = rng.choice(slot)
        if not isinstance(rule, PhraseRef):
            node = _Node(rule, dict(getattr(rule, "query", ())))
            for k, v in extra:
                node.query[k] = node.query[k] & v if k in node.query else v
            return node
        alts = self.phrases[rule.name]
        if depth >= self.max_depth:  # stop recursion: only alternatives without phrases
            alts = [a for a in alts if not any(isinstance(r, PhraseRef) for s in a for r in s)]
            if not alts:
                raise _Retry(f"phrase '{rule.name}' recursion deeper than {self.max_depth}")
        alt = rng.choice(alts)
        add = {(j if j >= 0 else j + len(alt)): q for j, q in rule.extra}
        kids = [self._expand(s, rng, depth + 1, add.get(j, ())) for j, s in enumerate(alt)]
        self._resolve(kids, rng)
        return _Node(rule, children=kids)

    def _resolve(self, nodes: list[_Node], rng: random.Random, good: Optional[list[_Node]] = None) -> None:
        for i, node in enumerate(nodes):
            if node.resolved or not isinstance(node.rule, Matched):
                continue
            r = node.rule
            for pos, props, agree in ((r.match_pos, r.match_props, True), (r.mismatch_pos, r.mismatch_props, False)):
                if pos is None:
                    continue
                ref = good[i] if (good is not None and pos % len(nodes) == i) else nodes[pos]
                for prop in props:
                    (self._agree if agree else self._disagree)(node, ref, prop, rng)
            node.resolved = True
            if not self._leaf_candidates(node):
                raise _Retry(f"no word satisfies {_fmt(node.query)} after matching")

    def _constrain(self, node: _Node, prop: str, vals: frozenset[str]) -> None:
        if node.entry is None:
            node.query[prop] = node.query[prop] & vals if prop in node.query else vals

    def _agree(self, node: _Node, ref: _Node, prop: str, rng: random.Random) -> None:
        mine, theirs = self._values(node, prop), self._values(ref, prop)
        shared = theirs if mine is None else mine if theirs is None else mine & theirs
        if not shared:
            raise _Retry(f"no shared value of '{prop}'")
        value = frozenset({rng.choice(sorted(shared))})
        self._constrain(node, prop, value)
        self._constrain(ref, prop, value)

    def _disagree(self, node: _Node, ref: _Node, prop: str, rng: random.Random) -> None:
        theirs = self._values(ref, prop)
        if not theirs:
            raise _Retry(f"no value of '{prop}' to disagree with")
        # a drawn word disagrees with all of its values; an undrawn one is fixed to one value first
        value = theirs if ref.entry is not None else frozenset({rng.choice(sorted(theirs))})
        self._constrain(ref, prop, value)
        # As in ZhoBLiMP, the other value comes from the range the reference slot could have taken
        # (its rule without its own constraint on prop): "pos:CD mmPos:3 mmPro:expression" after
        # "pos:CD subcat:num" picks another subcat:num numeral, not any CD.
        if isinstance(ref.rule, Direct):
            domain = frozenset(ref.rule.words) if prop == "expression" else frozenset()
        else:
            q = {k: v for k, v in ref.query.items() if k != prop}
            x = {k: v for k, v in ref.exclude.items() if k != prop}
            domain = frozenset().union(*(e.values(prop) for e in self._candidates(q, x, None))) if q else None
        if domain is not None:
            self._constrain(node, prop, domain - value)
        node.exclude[prop] = node.exclude.get(prop, frozenset()) | value

    def _draw(self, node: _Node, rng: random.Random, sep: str) -> str:
        if node.text is None:
            if node.children is not None:
                node.text = join([self._draw(c, rng, sep) for c in node.children], sep)[0]
            else:
                cands = self._leaf_candidates(node)
                if not cands:
                    raise _Retry(f"no word satisfies {_fmt(node.query)}")
                node.entry = rng.choice(cands)
                node.text = node.entry.expression
        return node.text

    @staticmethod
    def _leaves(nodes: list[_Node]) -> list[_Node]:
        return [leaf for n in nodes for leaf in (Engine._leaves(n.children) if n.children is not None else [n])]

    def _check_repeats(self, nodes: list[_Node]) -> None:
        # ZhoBLiMP's rule: a word may not recur unless a literal or an expression match put it there;
        # a shared lemma counts as a repeat ("the key to the keys").
        seen = set()
        for n in self._leaves(nodes):
            r = n.rule
            if (isinstance(r, Direct) or not n.text or "expression" in dict(getattr(r, "query", ()))
                    or "expression" in getattr(r, "match_props", ())):
                continue
            key = tuple(sorted(n.entry.values("lemma"))) or n.text
            if key in seen:
                raise _Retry(f"repeated word '{n.text}'")
            seen.add(key)

    # ---- public drawing API
    def sentence(self, t: Template, rng: random.Random) -> str:
        """One sentence from the good rules of ``t`` (call ``check`` first); retries internal failures."""
        slots = [parse_rule(s) for s in t.good]
        for _ in range(1000):
            try:
                nodes = [self._expand(s, rng, 0) for s in slots]
                self._resolve(nodes, rng)
                words = [self._draw(n, rng, t.sep) for n in nodes]
                self._check_repeats(nodes)
                return join(words, t.sep)[0]
            except _Retry:
                continue
        raise GrammarError(f"{t.source}: template '{t.name}': no sentence after 1000 attempts")

    def _pair(self, t: Template, good_slots, bad_specs, rng) -> tuple[list[_Node], list[_Node]]:
        good = [self._expand(s, rng, 0) for s in good_slots]
        self._resolve(good, rng)
        for n in good:
            self._draw(n, rng, t.sep)
        self._check_repeats(good)
        bad = [good[arg].pinned_copy() if kind == "copy" else self._expand(arg, rng, 0) for kind, arg in bad_specs]
        self._resolve(bad, rng, good)
        for n in bad:
            self._draw(n, rng, t.sep)
        return good, bad

    def pairs(self, t: Template, n: int, rng: random.Random, benchmark: str,
              max_attempts: Optional[int] = None, allow_fewer: bool = False) -> list[Pair]:
        """``n`` unique pairs (distinct good sentences, good != bad) with one Region per slot."""
        self.check(t)
        if not t.bad:
            raise GrammarError(f"{t.source}: template '{t.name}' has no bad rules")
        good_slots = [parse_rule(s) for s in t.good]
        # shared slots, and word-order contrasts (a position that takes another good slot's filler), copy
        bad_specs = [("copy", i if text == t.good[i] else t.good.index(text)) if text in t.good
                     else ("new", parse_rule(text)) for i, text in enumerate(t.bad)]
        # A shared slot that repeats the word of a changed slot (an expression match) repeats the bad
        # word, not the good one: "..., 张夫人也启程了" follows the bad verb 启程, as in ZhoBLiMP's data.
        # Shared slots that only agree in a property keep their good word, so the pair stays minimal.
        grew = True
        while grew:
            grew = False
            for i, (kind, arg) in enumerate(bad_specs):
                slot = parse_rule(t.good[i])
                if kind == "copy" and arg == i and all(isinstance(r, Matched) and "expression" in r.match_props
                                                       and r.match_pos is not None and bad_specs[r.match_pos][0] == "new"
                                                       for r in slot):
                    bad_specs[i], grew = ("new", slot), True
        seen: set[str] = set()
        out: list[Pair] = []
        failures: Counter = Counter()
        limit = max_attempts if max_attempts is not None else max(1000, 50 * n)
        attempts = 0
        while len(out) < n and attempts < limit:
            attempts += 1
            try:
                good, bad = self._pair(t, good_slots, bad_specs, rng)
            except _Retry as e:
                failures[str(e)] += 1
                continue
            g, gspans = join([x.text for x in good], t.sep)
            b, bspans = join([x.text for x in bad], t.sep)
            size = (lambda s: len(s)) if t.sep == "" else (lambda s: len(s.split()))
            reason = ("good == bad" if g == b else "duplicate good sentence" if g in seen
                      else "length differs (strict)" if t.strict_length and size(g) != size(b) else None)
            if reason:
                failures[reason] += 1
                continue
            seen.add(g)
            regions = tuple(Region(self._role(t, i), gs, bs) for i, (gs, bs) in enumerate(zip(gspans, bspans)))
            out.append(Pair(benchmark, t.name, t.phenomenon, str(len(out)), g, b, regions))
        if len(out) < n and not allow_fewer:
            common = "; ".join(f"{k} ({v}x)" for k, v in failures.most_common(3))
            raise GrammarError(f"{t.source}: template '{t.name}': only {len(out)} of {n} unique pairs "
                               f"after {attempts} attempts; most common failures: {common}")
        return out


def _fmt(q: dict) -> str:
    return " ".join(f"{k}:{'/'.join(sorted(v))}" for k, v in sorted(q.items()))
