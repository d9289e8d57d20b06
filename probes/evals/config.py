"""The typed configs of a benchmark: plain data, free of heavy imports and of the registry (which checks them when
the run's config is built), so the registry, the formats and language_a can import it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from train.corpus import GrammarConfig

LANGUAGE_A_LEXICONS = ("tgt", "english")  # probes/benchmarks/language_a.py


@dataclass
class LanguageAConfig:
    shots: int = 1  # demonstrations before the test sentence
    pairs_per_paradigm: int = 50
    seed: int = 0
    lexicon: str = "tgt"  # tgt: the paper's tgt_<lemma> words; english: the bare lemma

    def __post_init__(self) -> None:
        if self.shots < 0:
            raise ValueError(f"language_a.shots must be >= 0, got {self.shots}")
        if self.pairs_per_paradigm < 1:
            raise ValueError(f"language_a.pairs_per_paradigm must be >= 1, got {self.pairs_per_paradigm}")
        if self.lexicon not in LANGUAGE_A_LEXICONS:
            raise ValueError(f"language_a.lexicon must be one of {LANGUAGE_A_LEXICONS}, got {self.lexicon!r}")


@dataclass
class BenchmarkConfig:
    name: str = "grammar"  # a registry name, or any label when path is given
    path: Optional[str] = None  # file or directory; None = the registry's default location
    format: str = "auto"  # auto | blimp | zhoblimp | climp | sling | babylm | jsonl | csv | grammar
    max_pairs_per_paradigm: Optional[int] = None  # subsample per paradigm, fixed seed (cheap in-loop probing)
    subsample_seed: int = 0
    good_field: Optional[str] = None  # generic jsonl/csv loader column mapping
    bad_field: Optional[str] = None
    paradigm_field: Optional[str] = None
    phenomenon_field: Optional[str] = None
    id_field: Optional[str] = None
    delimiter: Optional[str] = None  # generic csv; None: sniffed from the header row
    grammar: GrammarConfig = field(default_factory=GrammarConfig)  # for name=grammar / grammar_zh
    language_a: LanguageAConfig = field(default_factory=LanguageAConfig)  # for format elagent
    # ZhoBLiMP files: recover each pair's template slots (phrase regions such as the case study's
    # NP/VP) from the generation sources (projects/ZhoBLiMP/*.json, assets/); None = look beside
    # the data (an ancestor of the data directory holding both); "" = don't
    templates: Optional[str] = None
