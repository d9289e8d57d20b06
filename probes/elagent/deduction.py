"""ELAGENT Tasks 5 (bAbI deduction) and 6 (predicates) as multiple choice over entities (paper §2.3, Tables 4-5,
App. C.5-C.6; docs/elagent.md says what each asks and what is not generated): ``babi_random`` is the paper's "Ran",
``babi_extended`` its "Ext"; ``predicates_<type>_ranpred`` a random predicate string defined in the prompt,
``_ranent`` an English predicate between random names. The matched question asks, over the same facts, about
another person (Task 5) or about role b instead of a (Task 6), so its right answer is another text."""
from __future__ import annotations

import random
from itertools import combinations

from probes.elagent.items import MCItem, Solved, distinct_names, listed, make_items, random_name

# ------------------------------------------------------------------------------------------- Task 5

# bAbI's basic-deduction animals (singular, plural) and some of its first names
ANIMALS = (("mouse", "mice"), ("cat", "cats"), ("wolf", "wolves"), ("sheep", "sheep"))
NAMES = ("Winona", "Jessica", "Emily", "Gertrude", "Bill", "Fred", "Julius", "Lily", "Brian", "Greg",
         "Bernhard", "Mary", "John", "Sandra", "Daniel")
BABI_PARADIGMS = ("babi_base", "babi_random", "babi_extended")


def babi_world(rng: random.Random, random_strings: bool, bijective: bool):
    """(kinds as (singular, plural), fears: kind index -> feared kind index, persons, kind of each person)."""
    if random_strings:
        kinds = [(s, s) for s in distinct_names(rng, 4)]  # a random string has no plural
        persons = distinct_names(rng, 4)
        while set(persons) & {k for k, _ in kinds}:
            persons = distinct_names(rng, 4)
    else:
        kinds = list(ANIMALS)
        rng.shuffle(kinds)
        persons = rng.sample(NAMES, 4)
    fears = [rng.choice([j for j in range(4) if j != i]) for i in range(4)]  # no kind fears itself
    of = list(range(4)) if bijective else [rng.randrange(4) for _ in range(4)]
    if bijective:
        rng.shuffle(of)
    return kinds, fears, persons, of


def draw_babi(rng: random.Random, paradigm: str) -> Solved:
    extended = paradigm == "babi_extended"
    kinds, fears, persons, of = babi_world(rng, paradigm == "babi_random", bijective=extended)
    facts = [f"{kinds[i][1].capitalize()} are afraid of {kinds[fears[i]][1]}." for i in range(4)]
    facts += [f"{p} is a {kinds[of[k]][0]}." for k, p in enumerate(persons)]
    rng.shuffle(facts)
    ask = rng.randrange(4)
    # the matched question asks about the first other person whose kind fears another kind (same facts)
    twin = next((j for j in range(4) if fears[of[j]] != fears[of[ask]]), None)
    if twin is None:  # every person fears the same kind: no matched question has another answer
        return draw_babi(rng, paradigm)
    text = " ".join(f"({i + 1}) {f}" for i, f in enumerate(facts))

    def solved(who: int, twin: Solved | None = None) -> Solved:
        target = fears[of[who]]
        if extended:  # the person of the feared kind: one more step (the kinds are a bijection, so one person)
            options, answer = tuple(persons), of.index(target)
            question = f"Based on the above sentences, who is {persons[who]} afraid of?"
        else:
            options, answer = tuple(k for k, _ in kinds), target
            question = f"Based on the above sentences, what is {persons[who]} afraid of?"
        return Solved(f"{text}\n{question}\n{listed(options)}", options, answer, twin)

    return solved(ask, solved(twin))


# ------------------------------------------------------------------------------------------- Task 6

# Table 4's four types: (transitive, symmetric) -> predicates as (statement, question) templates. The
# first of each is the paper's example; statement "{x} ... {y}", question about {x}.
PREDICATES = {
    "nt_ns": (False, False, [("{x} fears {y}", "Whom does {x} fear?"),
                             ("{x} admires {y}", "Whom does {x} admire?"),
                             ("{x} helps {y}", "Whom does {x} help?")]),
    "t_ns": (True, False, [("{x} runs faster than {y}", "Who does {x} run faster than?"),
                           ("{x} is taller than {y}", "Who is {x} taller than?"),
                           ("{x} is older than {y}", "Who is {x} older than?")]),
    "nt_s": (False, True, [("{x} and {y} are partially related", "Who is {x} partially related to?"),
                           ("{x} and {y} shook hands", "Who did {x} shake hands with?"),
                           ("{x} and {y} are neighbours", "Who is {x} a neighbour of?")]),
    "t_s": (True, True, [("{x} and {y} have the same speed", "Who has the same speed as {x}?"),
                         ("{x} and {y} are the same age", "Who is the same age as {x}?"),
                         ("{x} and {y} live in the same city", "Who lives in the same city as {x}?")]),
}
PREDICATE_PARADIGMS = tuple(f"predicates_{t}_{v}" for t in PREDICATES for v in ("ranpred", "ranent"))
# the template's statements over roles a (asked about), b, c, d: a p b, b p c, d p a (C.6)
TEMPLATE = (("a", "b"), ("b", "c"), ("d", "a"))


def entailed(statements, asked: str, transitive: bool, symmetric: bool) -> set[str]:
    """Every y != ``asked`` with ``asked`` p y entailed by the statements and the predicate's properties."""
    rel = set(statements)
    while True:
        new = set(rel)
        if symmetric:
            new |= {(y, x) for x, y in rel}
        if transitive:
            new |= {(x, z) for x, y in rel for y2, z in rel if y == y2}
        if new == rel:
            break
        rel = new
    return {y for x, y in rel if x == asked and y != asked}


def option_texts(others: list[str]) -> list[tuple[str, frozenset]]:
    """C.6's seven options over the three other entities, in the paper's order: singles, pairs, all three."""
    out = [(f"Only {a}", frozenset([a])) for a in others]
    out += [(f"{a} and {b}", frozenset([a, b])) for a, b in combinations(others, 2)]
    a, b, c = others
    out.append((f"{a}, {b}, and {c}", frozenset(others)))
    return out


def draw_predicate(rng: random.Random, paradigm: str) -> Solved:
    _, t, s, variant = paradigm.split("_")  # predicates_<t>_<s>_<variant>
    kind = f"{t}_{s}"
    transitive, symmetric, preds = PREDICATES[kind]
    statement, question = rng.choice(preds)
    names = ["X1", "X2", "X3", "X4"] if variant == "ranpred" else distinct_names(rng, 4)
    rng.shuffle(names)
    role = dict(zip("abcd", names))
    facts = [(role[x], role[y]) for x, y in TEMPLATE]
    rng.shuffle(facts)
    # shuffled per item: the paper's one order would put the right letter at the same place throughout a type
    order = list(range(7))
    rng.shuffle(order)
    p = random_name(rng, 4, 6) if variant == "ranpred" else ""
    definition = f"'X {p} Y' means '{statement.format(x='X', y='Y')}'." if p else ""
    said = [f"{x} {p} {y}" if p else statement.format(x=x, y=y) for x, y in facts]
    listed_facts = ", ".join(f"({i + 1}) {s}" for i, s in enumerate(said[:-1])) + f", and (3) {said[-1]}"

    def solved(asked: str, order: list[int], twin: Solved | None = None) -> Solved:
        gold = entailed(facts, asked, transitive, symmetric)
        opts = [option_texts(sorted(n for n in names if n != asked))[k] for k in order]
        q = f"What does {asked} {p}?" if p else question.format(x=asked)
        text = " ".join(filter(None, [definition, f"Suppose {listed_facts}.", q]))
        return Solved(f"{text}\n{listed(tuple(t for t, _ in opts))}", tuple(t for t, _ in opts),
                      [s for _, s in opts].index(frozenset(gold)), twin)

    # the matched question asks about role b (a p b, b p c): its entailed set differs from a's in every type
    return solved(role["a"], order, solved(role["b"], list(range(7))))


def deduction_items(n: int, shots: int, seed: int) -> list[MCItem]:
    out = []
    for paradigm in BABI_PARADIGMS:
        out += make_items("babi", paradigm, n, shots, seed, lambda r, p=paradigm: draw_babi(r, p))
    for paradigm in PREDICATE_PARADIGMS:
        out += make_items("predicates", paradigm, n, shots, seed, lambda r, p=paradigm: draw_predicate(r, p))
    return out
