"""ELAGENT Tasks 3-4: the artificial Language A, as word-order minimal pairs after k demonstrations (paper §2.2,
Table 2, App. C.3-C.4, G; docs/elagent.md lists the rules and paradigms). All six rules are on; the tense suffixes
are ``_-``/``_+`` as the extracted paper text reads them. English sentences have the structure of the paper's seed
sentence (C.3: "The yellow dog with a small tail chases the black cat quickly across the park"), so every rule has
something to move; a seeded generator stands in for GPT-4 and spaCy, so the parse, and the gold translation, are
known by construction. The demonstrations are a shared prefix: a pair differs only in the test translation."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from probes.evals.config import LanguageAConfig
from probes.benchmarks.pairs import Pair

PHENOMENON = "language_a_word_order"
# paradigm -> the syntactic rules the bad sentence breaks
PARADIGMS = {"all_rules": ("S1", "S2", "S3"), "S1_SOV": ("S1",), "S2_PV": ("S2",), "S3_PN": ("S3",)}
PRESENT, PAST = "_+", "_-"

AGENTS = (("dog", "dogs"), ("cat", "cats"), ("farmer", "farmers"), ("boy", "boys"), ("girl", "girls"),
          ("horse", "horses"), ("bird", "birds"), ("teacher", "teachers"))
THINGS = (("tail", "tails"), ("hat", "hats"), ("bag", "bags"), ("coat", "coats"), ("ball", "balls"),
          ("basket", "baskets"))
VERBS = (("chase", "chases", "chased"), ("follow", "follows", "followed"), ("watch", "watches", "watched"),
         ("carry", "carries", "carried"), ("find", "finds", "found"), ("push", "pushes", "pushed"),
         ("see", "sees", "saw"))
ADVERBS = ("quickly", "slowly", "quietly", "carefully", "happily")
PLACES = (("across", "park"), ("in", "garden"), ("near", "river"), ("through", "field"), ("behind", "house"))
ADJECTIVES = ("yellow", "black", "small", "big", "old", "young", "red", "happy")


@dataclass(frozen=True)
class NP:
    det: str
    adjs: tuple[str, ...]
    noun: tuple[str, str]  # singular (the lemma), plural
    plural: bool
    pp: Optional["PP"] = None


@dataclass(frozen=True)
class PP:
    prep: str
    np: NP


@dataclass(frozen=True)
class Clause:
    subj: NP
    verb: tuple[str, str, str]  # lemma, 3rd person singular present, past
    past: bool
    obj: NP
    adv: str
    vpp: PP


def _np_en(np: NP) -> list[str]:
    return [np.det, *np.adjs, np.noun[1] if np.plural else np.noun[0]] + (_pp_en(np.pp) if np.pp else [])


def _pp_en(pp: PP) -> list[str]:
    return [pp.prep, *_np_en(pp.np)]


def english(c: Clause) -> str:
    lemma, s3, past = c.verb
    verb = past if c.past else (lemma if c.subj.plural else s3)
    words = _np_en(c.subj) + [verb] + _np_en(c.obj) + [c.adv] + _pp_en(c.vpp)
    return " ".join(words)[0].upper() + " ".join(words)[1:] + "."


class Translator:
    """Renders a clause in Language A with the syntactic rules in ``rules`` on (morphology always on)."""

    def __init__(self, lexicon: str, rules: tuple[str, ...] = ("S1", "S2", "S3")):
        self.prefix = "tgt_" if lexicon == "tgt" else ""
        self.rules = set(rules)

    def word(self, w: str) -> str:
        return self.prefix + w

    def np(self, np: NP) -> list[str]:
        noun = ("P_" if np.plural else "S_") + self.word(np.noun[0])  # M1
        adjs = [self.word(a) for a in np.adjs for _ in range(2)]  # M3
        pp = self.pp(np.pp) if np.pp else []
        core = [self.word(np.det), *adjs, noun]
        return pp + core if "S3" in self.rules else core + pp  # S3: PP, determiner, adjectives, noun

    def pp(self, pp: PP) -> list[str]:
        return [self.word(pp.prep), *self.np(pp.np)]

    def clause(self, c: Clause) -> str:
        verb = [self.word(c.verb[0]) + (PAST if c.past else PRESENT)]  # M2
        mods = self.pp(c.vpp) + [self.word(c.adv)]  # S2: the PP first, then the adverb
        subj, obj = self.np(c.subj), self.np(c.obj)
        if "S2" not in self.rules:
            mods = [self.word(c.adv)] + self.pp(c.vpp)  # English: the adverb, then the PP
        if "S1" in self.rules:
            words = subj + obj + (mods + verb if "S2" in self.rules else verb + mods)
        else:  # English order of verb and object: the modifiers follow the object, or precede the verb (S2)
            words = subj + (mods + verb + obj if "S2" in self.rules else verb + obj + mods)
        return " ".join(words + ["."])


def _np(rng: random.Random, nouns, adj_p: float, pp: Optional[PP] = None) -> NP:
    plural = rng.random() < 0.5
    det = rng.choice(("the", "some") if plural else ("the", "a"))
    adjs = (rng.choice(ADJECTIVES),) if rng.random() < adj_p else ()
    return NP(det, adjs, rng.choice(nouns), plural, pp)


def draw_clause(rng: random.Random) -> Clause:
    with_np = _np(rng, THINGS, 0.7)
    subj = _np(rng, AGENTS, 1.0, PP("with", with_np))
    obj = _np(rng, AGENTS + THINGS, 0.7)
    prep, place = rng.choice(PLACES)
    vpp = PP(prep, NP("the", (), (place, place + "s"), False))
    return Clause(subj, rng.choice(VERBS), rng.random() < 0.5, obj, rng.choice(ADVERBS), vpp)


HEADER = "Translate English into Language A."


def benchmark_pairs(cfg: LanguageAConfig, benchmark: str = "elagent_word_order") -> list[Pair]:
    """``pairs_per_paradigm`` pairs for each paradigm in PARADIGMS (module docstring)."""
    full = Translator(cfg.lexicon)
    pairs = []
    for paradigm, broken in PARADIGMS.items():
        undone = Translator(cfg.lexicon, tuple(r for r in ("S1", "S2", "S3") if r not in broken))
        rng = random.Random(f"elagent/{cfg.seed}/{paradigm}")
        for i in range(cfg.pairs_per_paradigm):
            test = draw_clause(rng)
            demos: list[Clause] = []
            while len(demos) < cfg.shots:
                d = draw_clause(rng)
                if english(d) != english(test):
                    demos.append(d)
            prefix = "\n".join([HEADER] + [f"English: {english(d)}\nLanguage A: {full.clause(d)}" for d in demos]
                               + [f"English: {english(test)}\nLanguage A: "])
            good, bad = full.clause(test), undone.clause(test)
            if good == bad:  # cannot happen with the seed structure (every rule has a word to move)
                raise AssertionError(f"{paradigm}: rule(s) {broken} change nothing in {english(test)!r}")
            pairs.append(Pair(benchmark, paradigm, PHENOMENON, f"{paradigm}-{i}", prefix + good, prefix + bad))
    return pairs
