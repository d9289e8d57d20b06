"""The vocabulary of the template engine: lexical entries with multi-valued features (ZhoBLiMP TSV)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

Query = tuple[tuple[str, frozenset[str]], ...]  # sorted (feature, allowed values): hashable
_EMPTY: frozenset[str] = frozenset()


class GrammarError(ValueError):
    """A template, phrase or vocabulary that cannot work; the message names file/template and slot."""


@dataclass(frozen=True)
class Entry:
    expression: str
    features: tuple[tuple[str, frozenset[str]], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "_index", dict(self.features))  # values() is the hot path of sampling
        self._index["expression"] = frozenset({self.expression})

    def values(self, prop: str) -> frozenset[str]:
        return self._index.get(prop, _EMPTY)

    def matches(self, query: Query) -> bool:
        return all(self.values(k) & allowed for k, allowed in query)


class Vocabulary:
    """Lexical entries with multi-valued features; ``select`` is cached because templates repeat queries."""

    def __init__(self, entries: list[Entry]):
        self.entries = list(entries)
        self._cache: dict[Query, tuple[Entry, ...]] = {}
        self.by_expression: dict[str, list[Entry]] = {}
        for e in self.entries:
            self.by_expression.setdefault(e.expression, []).append(e)

    @classmethod
    def from_tsv(cls, path: Union[str, Path], text: Optional[str] = None, skip_nameless: bool = False) -> "Vocabulary":
        """Read a ZhoBLiMP-style TSV: header ``expression<TAB>feature...``, ``/`` separates values, blank rows
        skipped.  A row with features but no expression is an error unless ``skip_nameless`` (ZhoBLiMP's
        own reader drops such rows; its saved vocabulary has one)."""
        text = Path(path).read_text(encoding="utf-8") if text is None else text
        lines = text.splitlines()
        if not lines or "expression" not in lines[0].split("\t"):
            raise GrammarError(f"{path}:1: vocabulary header must contain an 'expression' column")
        header = [h.strip() for h in lines[0].split("\t")]
        ix = header.index("expression")
        entries = []
        for lineno, line in enumerate(lines[1:], start=2):
            cells = [c.strip() for c in line.split("\t")]
            if not any(cells):
                continue
            if len(cells) > len(header):
                raise GrammarError(f"{path}:{lineno}: {len(cells)} columns, header has {len(header)}")
            cells += [""] * (len(header) - len(cells))
            if not cells[ix]:
                if skip_nameless:
                    continue
                raise GrammarError(f"{path}:{lineno}: row has features but no expression")
            feats = tuple((h, frozenset(v.strip() for v in c.split("/") if v.strip()))
                          for h, c in zip(header, cells) if h and h != "expression" and c)
            entries.append(Entry(cells[ix], feats))
        return cls(entries)

    def select(self, query: Query) -> tuple[Entry, ...]:
        if query not in self._cache:
            self._cache[query] = tuple(e for e in self.entries if e.matches(query))
        return self._cache[query]
