"""Penn-Treebank bracketed trees (with function tags) → sentences and knowledge-point facts (which phrases
become answers: docs/syntax-questions.md). A tree starts with "(" in column 0 (WSJ ``.mrg``: "( (S ..." or
"((S ..."); each is parsed on its own, so one that does not parse costs only itself."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from probes.syntaxqa.records import Fact, Sentence, Span, anchor_is_unique, finish_facts, join_tokens

PUNCT_POS = {",", ".", ":", "``", "''", "-LRB-", "-RRB-"}  # "$" and "#" belong to their amounts
VERB_POS = {"VB", "VBD", "VBG", "VBN", "VBP", "VBZ"}
CHAIN_POS = VERB_POS | {"MD", "TO"}
NEGATION = {"not", "n't", "never"}
CLAUSE_CATS = {"S", "SINV", "SQ"}
ADVERBIAL_TAGS = {"ADV", "TMP", "LOC", "MNR", "PRP", "DIR", "EXT"}
# Treebank escapes → the characters a reader sees.
_UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[", "-RSB-": "]", "``": '"', "''": '"'}
_NO_SPACE_BEFORE = {",", ".", ":", ";", "?", "!", "%", ")", "]", "}", "''", "'s", "'S", "n't", "'re", "'ll", "'d", "'ve", "'m", "'"}
_NO_SPACE_AFTER = {"(", "[", "{", "``", "$", "#"}


class TreeParseError(ValueError):
    """A bracketed tree that does not parse; the message names the file and line."""


@dataclass
class Node:
    label: str  # as written, e.g. "NP-SBJ-1"
    cat: str  # "NP"
    tags: frozenset[str]  # function tags, e.g. {"SBJ"}
    children: list["Node"] = field(default_factory=list)
    word: str | None = None  # set on preterminals
    start: int = 0  # surface-token span (empty elements take no token)
    end: int = 0

    @property
    def is_leaf(self) -> bool:
        return self.word is not None

    @property
    def span(self) -> Span:
        return Span(self.start, self.end)

    @property
    def empty(self) -> bool:
        return self.end <= self.start

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


def split_label(label: str) -> tuple[str, frozenset[str]]:
    if label.startswith("-"):  # -NONE-, -LRB-: the dashes are part of the tag
        return label, frozenset()
    parts = label.split("=")[0].split("-")
    cat = parts[0].split("|")[0]
    tags = frozenset(p for p in parts[1:] if p and not p.isdigit())
    return cat, tags


_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")


def _parse(text: str, path: str, line: int) -> Node:
    toks: list[tuple[str, int]] = []
    for ln, row in enumerate(text.split("\n")):
        toks.extend((m.group(), line + ln) for m in _TOKEN_RE.finditer(row))
    pos = 0

    def fail(msg: str, at: int) -> TreeParseError:
        where = toks[at][1] if at < len(toks) else toks[-1][1]
        return TreeParseError(f"{path}:{where}: {msg} (tree starting at line {line})")

    def node() -> Node:
        nonlocal pos
        if pos >= len(toks) or toks[pos][0] != "(":
            raise fail("expected '('", pos)
        pos += 1
        if pos < len(toks) and toks[pos][0] == "(":  # unlabelled wrapper "( (S ...) )"
            label = ""
        elif pos < len(toks) and toks[pos][0] != ")":
            label = toks[pos][0]
            pos += 1
        else:
            raise fail("empty brackets", pos)
        cat, tags = split_label(label) if label else ("", frozenset())
        n = Node(label, cat, tags)
        if pos < len(toks) and toks[pos][0] not in "()":
            n.word = toks[pos][0]
            pos += 1
        else:
            while pos < len(toks) and toks[pos][0] == "(":
                n.children.append(node())
            if not n.children:
                raise fail(f"node {label!r} has neither a word nor children", pos)
        if pos >= len(toks) or toks[pos][0] != ")":
            raise fail(f"expected ')' closing {label or 'tree'!r}", pos)
        pos += 1
        return n

    if not toks:
        raise TreeParseError(f"{path}:{line}: empty tree")
    root = node()
    if pos != len(toks):
        raise fail(f"unexpected {toks[pos][0]!r} after the end of the tree", pos)
    while not root.label and len(root.children) == 1 and not root.is_leaf:
        root = root.children[0]
    return root


def read_trees(path: str | Path) -> tuple[list[tuple[int, Node]], list[TreeParseError]]:
    """All trees of one file as (start line, root); trees that fail to parse are returned as errors."""
    path = str(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().split("\n")
    chunks: list[tuple[int, list[str]]] = []
    for i, row in enumerate(lines, start=1):
        if row.startswith("("):
            chunks.append((i, [row]))
        elif chunks:
            chunks[-1][1].append(row)
        elif row.strip():
            chunks.append((i, [row]))  # text before the first tree: reported as a parse error below
    trees: list[tuple[int, Node]] = []
    errors: list[TreeParseError] = []
    for line, rows in chunks:
        try:
            trees.append((line, _parse("\n".join(rows), path, line)))
        except TreeParseError as e:
            errors.append(e)
    return trees, errors


def _surface(root: Node) -> tuple[list[str], list[str]]:
    """Give every node its token span; return the surface words and their POS tags."""
    words: list[str] = []
    pos: list[str] = []

    def visit(n: Node) -> None:
        n.start = len(words)
        if n.is_leaf:
            if n.cat != "-NONE-":
                words.append(n.word)  # type: ignore[arg-type]
                pos.append(n.cat)
        else:
            for c in n.children:
                visit(c)
        n.end = len(words)

    visit(root)
    return words, pos


def detokenize(words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    shown = [_UNESCAPE.get(w, w).replace("\\/", "/").replace("\\*", "*") for w in words]
    space_after = []
    quote_open = False
    for i, w in enumerate(words):
        if w == "``":
            quote_open = True
        elif w == "''":
            quote_open = False
        nxt = words[i + 1] if i + 1 < len(words) else None
        space = not (w in _NO_SPACE_AFTER or (nxt is not None and nxt in _NO_SPACE_BEFORE))
        if w == '"':  # plain double quote: opening if we are outside a quotation
            space = quote_open
            quote_open = not quote_open
        space_after.append(space)
    return join_tokens(shown, space_after)


def sentence_from_tree(root: Node, path: str, sent_id: str, line: int) -> Sentence:
    words, pos = _surface(root)
    text, offsets = detokenize(words)
    sent = Sentence(path, sent_id, line, "en", words, [p in PUNCT_POS for p in pos], text, offsets)
    spans = (sent.trim(n.span) for n in root.walk() if not n.is_leaf and n is not root and not n.empty)
    sent.phrases = list(dict.fromkeys(t for t in spans if t is not None))
    return sent


def _verb_chains(vp: Node) -> list[tuple[list[int], Node]]:
    """Auxiliaries + main verb of a VP through VP-in-VP, one entry per coordinated VP: (VP (MD will) (VP (VB join)
    ...)) → ([will, join], the inner, *lexical* VP whose other children are the verb's complements and adjuncts)."""
    chain: list[int] = []
    cur = vp
    while True:
        verbs = [c for c in cur.children if c.is_leaf and not c.empty
                 and (c.cat in CHAIN_POS or (c.cat == "RB" and c.word.lower() in NEGATION))]
        inner = [c for c in cur.children if c.cat == "VP" and not c.empty]
        chain += [c.start for c in verbs]
        if verbs and len(inner) == 1:
            cur = inner[0]  # auxiliary followed by its VP complement ("will join", "has caused", "to make")
            continue
        if not verbs and len(inner) >= 2:  # VP coordination: each conjunct has its own chain
            return [(chain + sub, lex) for c in inner for sub, lex in _verb_chains(c)]
        break
    if not chain or next((n.cat for n in cur.walk() if n.is_leaf and n.start == chain[-1] and not n.empty),
                         "") not in VERB_POS:
        return []
    return [(chain, cur)]


def _chain_span(chain: list[int]) -> Span | None:
    """The verb group's span when its words are contiguous."""
    return Span(chain[0], chain[-1] + 1) if chain == list(range(chain[0], chain[-1] + 1)) else None


def tree_facts(root: Node, sent: Sentence) -> list[Fact]:
    facts: list[Fact] = []

    def add(kp: str, anchor: Span | None, answer_node_or_span, category: str) -> None:
        span = answer_node_or_span.span if isinstance(answer_node_or_span, Node) else answer_node_or_span
        ans = sent.trim(span)  # None for an empty span too
        if ans is None:
            return
        if anchor is not None:
            anchor = sent.trim(anchor)
            if anchor is None or anchor.overlaps(ans) or not anchor_is_unique(sent, anchor):
                return
        facts.append(Fact(kp, sent, anchor, ans, category))

    for n in root.walk():
        if n.is_leaf:
            continue
        # clause patterns: S → NP-SBJ VP
        if n.cat in CLAUSE_CATS:
            subj = [c for c in n.children if "SBJ" in c.tags and not c.empty]
            for vp in (c for c in n.children if c.cat == "VP"):
                for chain, lex in _verb_chains(vp):
                    verb = Span(chain[-1], chain[-1] + 1)
                    # verb groups join the distractor pool, so verb answers (MVP, PPA) get verbal distractors
                    for extra in (_chain_span(chain), verb):
                        if extra is not None and extra not in sent.phrases:
                            sent.phrases.append(extra)
                    if subj:
                        add("GS", verb, subj[0], subj[0].cat)
                    if n is root and _chain_span(chain) is not None:
                        add("MVP", None, _chain_span(chain), "single" if len(chain) == 1 else "multi")
                    _vp_facts(lex, verb, chain, add)
                    # clause-level adjuncts ("In 1990 , he ...") modify the same verb
                    for c in n.children:
                        if c.tags & ADVERBIAL_TAGS and "SBJ" not in c.tags and not c.empty:
                            add("ADV", verb, c, c.cat)
        # noun-phrase patterns: NP → NP (SBAR-relative | VP | RRC | PP ...)
        if n.cat == "NP" and n.children and n.children[0].cat == "NP" and not n.children[0].empty:
            head = n.children[0]
            for c in n.children[1:]:
                if c.cat == "SBAR" and c.children and c.children[0].cat.startswith("WH"):  # a relative clause
                    add("ADJ", head.span, c, "relative")
                elif c.cat in {"VP", "RRC"}:
                    add("ADJ", head.span, c, "reduced")
                elif c.cat == "PP" and not c.tags & {"PRD"}:
                    add("PPA", c.span, head, "noun")
        # coordination: X → X CC X (phrasal conjuncts of one kind, or words of one POS family)
        if any(c.cat in {"CC", "CONJP"} for c in n.children):
            conj = [c for c in n.children if c.cat not in {"CC", "CONJP", "DT", "RB"} | PUNCT_POS and not c.empty]
            kinds = {c.cat if not c.is_leaf else c.cat[:2] for c in conj}
            leaves = {c.is_leaf for c in conj}
            # one kind of conjunct ("shares , or about 18 % , of its stock" is not a coordination of
            # an NP with a PP); only UCP (unlike-category coordination) mixes categories.
            if len(conj) >= 2 and len(leaves) == 1 and (len(kinds) == 1 or n.cat == "UCP"):
                for other in conj[1:]:
                    add("CO", conj[0].span, other, other.cat)
    return finish_facts(facts)


def _vp_facts(lex: Node, verb: Span, chain: list[int], add) -> None:
    """Complements and adjuncts of a lexical VP, named by its main verb."""
    rest = [c for c in lex.children if not c.is_leaf and not c.empty]
    bare_nps = [c for c in rest if c.cat == "NP" and not c.tags]
    if len(bare_nps) >= 2:  # double object: "gave [the board] [a report]"
        add("IO", verb, bare_nps[0], "NP")
        add("DO", verb, bare_nps[1], "NP")
    elif len(bare_nps) == 1:
        add("DO", verb, bare_nps[0], "NP")
    for c in rest:
        if "PRD" in c.tags:
            add("SC", verb, c, c.cat)
        if c.cat == "PP" and "DTV" in c.tags:  # to-dative: the recipient NP inside "to him"
            inner = [g for g in c.children if g.cat == "NP" and not g.empty]
            if inner:
                add("IO", verb, inner[0], "PP-DTV")
        if (c.tags & ADVERBIAL_TAGS or (c.cat == "ADVP" and not c.tags)) and "PRD" not in c.tags:
            add("ADV", verb, c, c.cat)
        if c.cat == "PP" and "PRD" not in c.tags:
            add("PPA", c.span, _chain_span(chain) or verb, "verb")


def read_ptb(path: str | Path) -> tuple[list[Sentence], list[Fact], list[TreeParseError]]:
    path = str(path)
    trees, errors = read_trees(path)
    sentences: list[Sentence] = []
    facts: list[Fact] = []
    for i, (line, root) in enumerate(trees, start=1):
        sent = sentence_from_tree(root, path, f"{Path(path).name}#{i}", line)
        if not sent.tokens:
            continue
        sentences.append(sent)
        facts.extend(tree_facts(root, sent))
    return sentences, facts, errors
