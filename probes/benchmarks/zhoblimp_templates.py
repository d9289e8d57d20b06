"""Reader of the real ZhoBLiMP generation sources (github.com/sjtu-compling/ZhoBLiMP, under
``../shared/benchmarks/zhoblimp``) for our template engine, and ``attach_slots``, the template slots of the released
pairs. ``projects/ZhoBLiMP/*.json``: one paradigm each (``good_rule``/``bad_rule``, ``sep``, ``strict_MP``,
``phenomenon``, ``uid``; three templates share the uid ``existential_there_subject_raising``, and a template's
phenomenon is an older name than the released data's); ``assets/zh_phrase.json``: named phrases;
``assets/zh_vocab_saved.tsv``: the vocabulary (one row without expression)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from probes.benchmarks.generator import Direct, Engine, GrammarError, Lexical, Matched, PhraseRef, Slot, Template, Vocabulary
from probes.benchmarks.pairs import Pair


def read_vocabulary(path: Union[str, Path]) -> Vocabulary:
    # line 697 of the saved vocabulary has features but no expression; ZhoBLiMP's reader drops it, so do we
    return Vocabulary.from_tsv(path, skip_nameless=True)


def _values(v, where: str) -> frozenset[str]:
    items = v if isinstance(v, list) else str(v).split("/")
    out = frozenset(str(x).strip() for x in items if str(x).strip())
    if not out:
        raise GrammarError(f"{where}: empty value")
    return out


def _entry_rule(entry: dict, where: str) -> Union[Lexical, Direct, Matched, PhraseRef]:
    if not isinstance(entry, dict) or "type" not in entry or "rule" not in entry:
        raise GrammarError(f"{where}: expected {{'type': ..., 'rule': ...}}, got {entry!r}")
    kind, rule = entry["type"], entry["rule"]
    if kind == "Direct":
        words = tuple(rule) if isinstance(rule, list) else (str(rule),)
        return Direct(words or ("",))
    if kind == "Phrase":
        extra = tuple((int(i), tuple(sorted((k, _values(v, where)) for k, v in props.items())))
                      for i, props in rule.get("additional_properties", {}).items())
        return PhraseRef(rule["name"], extra)
    if kind not in ("Lexical", "Matched"):
        raise GrammarError(f"{where}: unknown rule type '{kind}'")
    rule = dict(rule)
    pos = {k: rule.pop(k, None) for k in ("matchedPosition", "mismatchedPosition")}
    props = {k: tuple(_values(rule.pop(k), where)) if k in rule else () for k in
             ("matchedProperties", "mismatchedProperties")}
    query = tuple(sorted((k, _values(v, where)) for k, v in rule.items()))
    if pos["matchedPosition"] is None and pos["mismatchedPosition"] is None:
        return Lexical(query)
    mp, mmp = (None if p is None else int(p) for p in pos.values())
    return Matched(query, mp, props["matchedProperties"], mmp, props["mismatchedProperties"])


def read_phrases(path: Union[str, Path]) -> dict[str, list[list[Slot]]]:
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return {name: [[(_entry_rule(e, f"{path}: phrase '{name}' alternative {a} position {j}"),) for j, e in enumerate(alt)]
                   for a, alt in enumerate(alts)] for name, alts in raw.items()}


def read_template(path: Union[str, Path]) -> Template:
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        good, bad = [str(r) for r in raw["good_rule"]], [str(r) for r in raw["bad_rule"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise GrammarError(f"{path}: not a ZhoBLiMP template ({e})") from e
    return Template(path.stem, good, bad, str(raw.get("phenomenon", "")), [], str(raw.get("sep", "")),
                    bool(raw.get("strict_MP", False)), str(path))


def load_engine(root: Union[str, Path]) -> Engine:
    root = Path(root)
    return Engine(read_vocabulary(root / "assets" / "zh_vocab_saved.tsv"), read_phrases(root / "assets" / "zh_phrase.json"))


def template_paths(root: Union[str, Path]) -> list[Path]:
    return sorted((Path(root) / "projects" / "ZhoBLiMP").glob("*.json"))


def templates_by_uid(root: Union[str, Path]) -> dict[str, list[Template]]:
    """The templates of each released paradigm (its ``uid``; three templates share one)."""
    out: dict[str, list[Template]] = {}
    for path in template_paths(root):
        t = read_template(path)
        uid = str(json.loads(path.read_text(encoding="utf-8")).get("uid") or path.stem)
        out.setdefault(uid, []).append(t)
    return out


def attach_slots(pairs: list[Pair], root: Union[str, Path]) -> tuple[list[Pair], dict[str, tuple[int, int]]]:
    """Released ZhoBLiMP pairs with ``slot<i>`` regions where they parse against a template of their paradigm
    (slotalign), the others unchanged; and ``{paradigm: (aligned, pairs)}``."""
    from probes.benchmarks.slotalign import SlotParser

    parser = SlotParser(load_engine(root))
    templates = templates_by_uid(root)
    out, counts = [], {}
    for p in pairs:
        done = p
        for t in templates.get(p.paradigm, []):
            done = parser.attach(t, p)
            if done.regions:
                break
        ok, n = counts.get(p.paradigm, (0, 0))
        counts[p.paradigm] = (ok + bool(done.regions), n + 1)
        out.append(done)
    return out, counts
