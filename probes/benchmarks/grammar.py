"""Built-in grammar: one set of templates and a vocabulary give both a training corpus and minimal pairs. The
grammars are package data (``probes/benchmarks/grammars/<variant>.json``, naming its paradigms and its corpus mix,
a natural one not tuned to any learning curve: ``corpus_comment``; + a vocabulary TSV) run by the template engine of
``probes.benchmarks.generator``. Corpus and benchmark draw from separate random streams seeded by strings (SHA-512:
independent, and stable across processes), so a benchmark sentence is in the corpus only as often as chance says."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from train.corpus import GrammarConfig, generator
from probes.benchmarks.generator import Engine, GrammarError, Template, Vocabulary, parse_rule
from probes.benchmarks.pairs import Pair

VARIANTS = ("en", "zh")


@dataclass
class Grammar:
    benchmark: str
    engine: Engine
    paradigms: list[Template]
    corpus_types: list[Template]
    corpus_weights: list[float]


def _phrases(raw: dict, source: str) -> dict:
    return {name: [[parse_rule(r, f"{source}: phrase '{name}' alternative {a}") for r in alt]
                   for a, alt in enumerate(alts)] for name, alts in raw.items()}


@lru_cache(maxsize=None)
def load_grammar(variant: str) -> Grammar:
    """Read ``probes/benchmarks/grammars/<variant>.json`` and its vocabulary; every template is checked here."""
    if variant not in VARIANTS:
        raise GrammarError(f"grammar.variant: unknown variant '{variant}' (choose from {', '.join(VARIANTS)})")
    folder = resources.files("probes.benchmarks").joinpath("grammars")
    source = f"probes/benchmarks/grammars/{variant}.json"
    raw = json.loads(folder.joinpath(f"{variant}.json").read_text(encoding="utf-8"))
    vocab_name = raw["vocabulary"]
    vocab = Vocabulary.from_tsv(f"probes/benchmarks/grammars/{vocab_name}", folder.joinpath(vocab_name).read_text(encoding="utf-8"))
    engine = Engine(vocab, _phrases(raw.get("phrases", {}), source))
    sep = raw.get("sep", " ")
    paradigms = [Template(p["name"], p["good"], p["bad"], p["phenomenon"], p.get("roles", []), sep,
                          p.get("strict", False), source) for p in raw["paradigms"]]
    corpus = [Template(c["name"], c["rule"], sep=sep, source=source) for c in raw["corpus"]]
    names = [t.name for t in paradigms]
    if len(set(names)) != len(names):
        raise GrammarError(f"{source}: paradigm names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    for t in paradigms + corpus:
        engine.check(t)
    return Grammar(raw["benchmark"], engine, paradigms, corpus, [float(c["weight"]) for c in raw["corpus"]])


def _check_cfg(cfg: GrammarConfig) -> None:
    for key in ("n_documents", "sentences_per_document", "pairs_per_paradigm"):
        if getattr(cfg, key) < 0:
            raise ValueError(f"grammar.{key} must be >= 0, got {getattr(cfg, key)}")


@generator
def corpus_documents(cfg: GrammarConfig) -> list[str]:
    """``n_documents`` documents of ``sentences_per_document`` grammatical sentences joined by spaces
    (no separator for zh), sentence types drawn by the grammar's corpus weights."""
    _check_cfg(cfg)
    g = load_grammar(cfg.variant)
    rng = random.Random(f"syntax-dynamics:{cfg.variant}:corpus:{cfg.seed}")
    joiner = " " if g.paradigms[0].sep else ""
    docs = []
    for _ in range(cfg.n_documents):
        types = rng.choices(g.corpus_types, weights=g.corpus_weights, k=cfg.sentences_per_document)
        docs.append(joiner.join(g.engine.sentence(t, rng) for t in types))
    return docs


def benchmark_pairs(cfg: GrammarConfig) -> list[Pair]:
    """``pairs_per_paradigm`` unique pairs for every paradigm, with one Region per template slot."""
    _check_cfg(cfg)
    g = load_grammar(cfg.variant)
    out: list[Pair] = []
    for t in g.paradigms:
        # one stream per paradigm: adding a paradigm does not change the pairs of the others
        rng = random.Random(f"syntax-dynamics:{cfg.variant}:pairs:{t.name}:{cfg.seed}")
        out.extend(g.engine.pairs(t, cfg.pairs_per_paradigm, rng, g.benchmark))
    return out
