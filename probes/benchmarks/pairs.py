"""The one record every benchmark loader and generator produces."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Region:
    """A named character span of a sentence (template slots from the generator)."""

    name: str
    good: tuple[int, int]  # [start, end) character offsets in Pair.good
    bad: tuple[int, int]  # [start, end) character offsets in Pair.bad


@dataclass(frozen=True)
class Pair:
    benchmark: str  # e.g. "zhoblimp", "blimp", "grammar"
    paradigm: str  # unique within the benchmark (loaders key repeated names by path)
    phenomenon: str
    pair_id: str  # always a string: sources mix int and str ids
    good: str
    bad: str
    regions: Optional[tuple[Region, ...]] = None  # finer regions where the source knows them
