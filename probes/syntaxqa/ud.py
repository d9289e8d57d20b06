"""Universal Dependencies .conllu → sentences and knowledge-point facts: answers are contiguous dependency
subtrees, not head words (docs/syntax-questions.md); a sentence with broken heads costs only itself."""
from __future__ import annotations

from pathlib import Path

from probes.syntaxqa.records import Fact, Sentence, Span, anchor_is_unique, finish_facts, join_tokens

NOMINAL = {"NOUN", "PROPN", "PRON", "NUM"}
CONTENT = NOMINAL | {"VERB", "ADJ", "ADV"}
NEGATION = {"not", "n't", "never", "不", "没", "没有", "未"}
SUBJECT_RELS = {"nsubj", "csubj", "expl"}
# Children of a copular predicate that are not part of the subject complement.
SC_EXCLUDE = {"nsubj", "csubj", "expl", "cop", "aux", "mark", "punct", "advcl", "parataxis", "conj", "cc",
              "discourse", "vocative", "obl", "reparandum", "dep", "list", "orphan", "dislocated"}
NP_RIGHT_KEEP = {"flat", "fixed", "compound", "goeswith"}  # right dependents that belong to the noun itself


class ConlluError(ValueError):
    """A malformed .conllu sentence; the message names the file and line."""


class _Tree:
    def __init__(self, forms, upos, lemmas, heads, rels):
        self.forms, self.upos, self.lemmas, self.heads, self.rels = forms, upos, lemmas, heads, rels
        self.n = len(forms)
        self.children: list[list[int]] = [[] for _ in range(self.n)]
        for i, h in enumerate(heads):
            if h >= 0:
                self.children[h].append(i)

    def base(self, i: int) -> str:
        return self.rels[i].split(":")[0]

    def subtree(self, i: int, skip: frozenset[int] = frozenset()) -> set[int]:
        out, stack = set(), [i]
        while stack:
            j = stack.pop()
            out.add(j)
            stack.extend(c for c in self.children[j] if c not in skip)
        return out


def _span(tokens: set[int], sent: Sentence) -> Span | None:
    """Contiguous token set → trimmed Span; None when the set has holes (a non-projective subtree)."""
    if not tokens or max(tokens) + 1 - min(tokens) != len(tokens):
        return None
    return sent.trim(Span(min(tokens), max(tokens) + 1))


def _check_heads(heads: list[int], path: str, line: int) -> None:
    n = len(heads)
    roots = [i for i, h in enumerate(heads) if h == -1]
    if len(roots) != 1:
        raise ConlluError(f"{path}:{line}: sentence has {len(roots)} roots (head 0), expected exactly 1")
    for i in range(n):  # walking up from every token must reach the root within n steps
        j, steps = i, 0
        while heads[j] != -1:
            j = heads[j]
            steps += 1
            if steps > n:
                raise ConlluError(f"{path}:{line}: heads form a cycle through token {i + 1}")


def _parse_sentence(rows: list[tuple[int, str]], path: str, lang: str, index: int) -> tuple[Sentence, _Tree]:
    start = rows[0][0]
    sent_id = f"{Path(path).name}#{index}"
    toks: list[tuple[str, str, str, int, str, int]] = []  # form, upos, lemma, head, relation, line
    space_after: list[bool] = []
    mwt_end, mwt_space = -1, True
    for line, row in rows:
        if row.startswith("#"):
            if row.startswith("# sent_id"):
                sent_id = row.split("=", 1)[1].strip() if "=" in row else sent_id
            continue
        cols = row.split("\t")
        if len(cols) != 10:
            raise ConlluError(f"{path}:{line}: expected 10 tab-separated columns, found {len(cols)}")
        tid = cols[0]
        if "." in tid:
            continue  # empty node of the enhanced graph
        if "-" in tid:
            a, b = tid.split("-", 1)
            if not (a.isdigit() and b.isdigit()):
                raise ConlluError(f"{path}:{line}: bad multiword token id {tid!r}")
            mwt_end, mwt_space = int(b), "SpaceAfter=No" not in cols[9].split("|")
            continue
        if not tid.isdigit() or int(tid) != len(toks) + 1:
            raise ConlluError(f"{path}:{line}: token id {tid!r} out of sequence (expected {len(toks) + 1})")
        if not cols[6].isdigit():
            raise ConlluError(f"{path}:{line}: head {cols[6]!r} of token {tid} is not a number")
        toks.append((cols[1], cols[3], cols[2], int(cols[6]), cols[7], line))
        k = int(tid)  # inside a multiword token ("don't": do|n't) no space; its last word takes the token's
        space_after.append(False if k < mwt_end else mwt_space if k == mwt_end else "SpaceAfter=No" not in cols[9].split("|"))
    if not toks:
        raise ConlluError(f"{path}:{start}: sentence {sent_id} has no tokens")
    forms, upos, lemmas, heads_raw, rels, head_lines = map(list, zip(*toks))
    n = len(forms)
    for i, h in enumerate(heads_raw):
        if h > n:
            raise ConlluError(f"{path}:{head_lines[i]}: head {h} of token {i + 1} is beyond the sentence's {n} tokens")
    heads = [h - 1 for h in heads_raw]
    _check_heads(heads, path, start)
    text, offsets = join_tokens(forms, space_after)
    sent = Sentence(path, sent_id, start, lang, forms, [u == "PUNCT" for u in upos], text, offsets)
    return sent, _Tree(forms, upos, lemmas, heads, rels)


def read_conllu(path: str | Path) -> tuple[list[Sentence], list[Fact], list[ConlluError]]:
    path = str(path)
    lang = "zh" if Path(path).name.lower().startswith(("zh_", "zh-", "lzh_")) else "en"
    blocks: list[list[tuple[int, str]]] = [[]]
    with open(path, encoding="utf-8") as fh:
        for i, raw in enumerate(fh, start=1):
            row = raw.rstrip("\r\n")
            if row.strip():
                blocks[-1].append((i, row))
            elif blocks[-1]:
                blocks.append([])
    sentences, facts, errors = [], [], []
    for k, rows in enumerate((b for b in blocks if b), start=1):
        try:
            sent, tree = _parse_sentence(rows, path, lang, k)
        except ConlluError as e:
            errors.append(e)
            continue
        # distractor pool: subtrees headed by content words (a lone "the" or "of" is no plausible answer)
        # and every verb group, so verb answers (MVP, PPA) get verbal distractors too
        pool = [_span(tree.subtree(i), sent) for i in range(tree.n) if tree.upos[i] in CONTENT]
        pool += [_verb_group(tree, i, sent) for i in range(tree.n) if tree.upos[i] == "VERB"]
        sent.phrases = list(dict.fromkeys(s for s in pool if s is not None))
        sentences.append(sent)
        facts.extend(tree_facts(tree, sent))
    return sentences, facts, errors


def _is_negation(t: _Tree, i: int) -> bool:
    return t.base(i) == "advmod" and (t.lemmas[i].lower() in NEGATION or t.forms[i].lower() in NEGATION)


def _verb_group(t: _Tree, h: int, sent: Sentence) -> Span:
    """Auxiliaries + negation + the verb ("will join", "has not been sold") when contiguous, else the verb."""
    group = {h} | {c for c in t.children[h] if t.base(c) in {"aux", "cop"} or _is_negation(t, c)}
    return _span(group, sent) or Span(h, h + 1)


def _np_core(t: _Tree, h: int, skip: int, sent: Sentence) -> Span | None:
    """The noun with its own pre-modifiers (det, amod, compound …): "a decline" of "a decline in ad pages"."""
    keep = {h}
    for c in t.children[h]:
        if c == skip or t.base(c) == "punct":
            continue
        if c < h or t.base(c) in NP_RIGHT_KEEP:
            if t.base(c) in {"acl", "nmod"} and c > h:
                continue
            keep |= t.subtree(c)
    return _span(keep, sent)


def tree_facts(t: _Tree, sent: Sentence) -> list[Fact]:
    facts: list[Fact] = []
    hulls: dict[tuple[str, Span | None], list[Span]] = {}

    def add(kp: str, anchor: Span | None, answer: Span | None, category: str, tokens: set[int] | None = None) -> None:
        if tokens and anchor is not None:  # a correct answer's whole stretch, even one too gappy to show
            hulls.setdefault((kp, anchor), []).append(Span(min(tokens), max(tokens) + 1))
        if answer is None or (anchor is None and kp != "MVP"):
            return
        if anchor is not None and (anchor.overlaps(answer) or not anchor_is_unique(sent, anchor)):
            return
        facts.append(Fact(kp, sent, anchor, answer, category))

    def word(i: int) -> Span:
        return Span(i, i + 1)

    for d in range(t.n):
        h = t.heads[d]
        if h < 0:
            if t.upos[d] == "VERB":
                g = _verb_group(t, d, sent)
                add("MVP", None, g, "single" if g.end - g.start == 1 else "multi")
            continue
        base, rel = t.base(d), t.rels[d]
        verbal = t.upos[h] in {"VERB", "AUX"}
        has_case = any(t.base(c) == "case" and t.upos[c] == "ADP" for c in t.children[d])
        if base in {"nsubj", "csubj"}:
            cops = [c for c in t.children[h] if t.base(c) == "cop"]
            anchor = h if verbal else (cops[0] if cops else None)
            if anchor is not None:
                add("GS", word(anchor), _span(t.subtree(d), sent), t.upos[d], t.subtree(d))
        elif base == "obj" and verbal:
            add("DO", word(h), _span(t.subtree(d), sent), t.upos[d], t.subtree(d))
        elif base == "iobj" and verbal:
            add("IO", word(h), _span(t.subtree(d), sent), t.upos[d], t.subtree(d))
        elif base == "cop":
            keep = {h}
            for c in t.children[h]:
                if t.base(c) not in SC_EXCLUDE and not _is_negation(t, c):
                    keep |= t.subtree(c)
            add("SC", word(d), _span(keep, sent), t.upos[h])
        elif (base == "acl" and t.upos[h] in NOMINAL and (d > h or sent.lang == "zh")
              and (rel == "acl:relcl" or t.upos[d] in {"VERB", "ADJ", "AUX"})):
            # English relatives follow the noun; Chinese ones (我买的书) precede it, as the language has it.
            add("ADJ", _np_core(t, h, d, sent), _span(t.subtree(d), sent), "relative" if rel == "acl:relcl" else "reduced")
        elif base == "conj":
            # the conjunction, the other conjuncts and a shared preposition ("between [ADHD] and [LD]") stay out
            skip = frozenset(c for c in t.children[h] if t.base(c) in {"conj", "cc", "case", "mark"} or c == d)
            own_subject = any(t.base(c) in SUBJECT_RELS for c in t.children[d])
            if not own_subject:  # "John ate and slept": the conjuncts are the verbs, the subject is shared
                skip |= frozenset(c for c in t.children[h] if t.base(c) in SUBJECT_RELS | {"aux", "mark"})
            anchor = _span(t.subtree(h, skip), sent)
            toks = t.subtree(d, frozenset(c for c in t.children[d] if t.base(c) in {"cc", "case", "mark"}))
            if anchor is not None:
                add("CO", anchor, _span(toks, sent), t.upos[d], toks)
        if base in {"advmod", "obl", "advcl"} and t.upos[h] == "VERB" and not _is_negation(t, d):
            add("ADV", word(h), _span(t.subtree(d), sent), base, t.subtree(d))
        if base == "obl" and has_case and t.upos[h] == "VERB":
            add("PPA", _span(t.subtree(d), sent), _verb_group(t, h, sent), "verb")
        elif base == "nmod" and has_case and t.upos[h] in NOMINAL:
            add("PPA", _span(t.subtree(d), sent), _np_core(t, h, d, sent), "noun")
    return finish_facts(facts, hulls)
