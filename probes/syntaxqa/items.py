"""Knowledge-point facts from every configured source (a PTB ``.mrg`` or ``.conllu`` file, or a directory of them,
read recursively and sorted, so the seeded sampling after it is reproducible), with empty knowledge points reported."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from probes.syntaxqa import ptb, ud
from probes.syntaxqa.records import KNOWLEDGE_POINTS, Fact


class EmptyKnowledgePointWarning(UserWarning):
    """A requested knowledge point has no items in a source (e.g. IO in a small Chinese sample)."""


class SourceErrorWarning(UserWarning):
    """Some trees / sentences of a source could not be read; the rest were used."""


@dataclass
class SourceReport:
    source: str
    sentences: int = 0
    facts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # "file:line: message" per unreadable tree / sentence
    empty: list[str] = field(default_factory=list)  # knowledge points with no facts


def source_files(source: str | Path) -> list[Path]:
    p = Path(source)
    if p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix in {".mrg", ".conllu"})
        if not files:
            raise FileNotFoundError(f"syntax-qa source {p}: directory has no .mrg or .conllu files")
        return files
    if not p.is_file():
        raise FileNotFoundError(f"syntax-qa source {p}: no such file or directory")
    if p.suffix not in {".mrg", ".conllu"}:
        raise ValueError(f"syntax-qa source {p}: unknown format (expected .mrg bracketed trees or .conllu)")
    return [p]


def collect_facts(sources: list[str], knowledge_points: list[str] | tuple[str, ...] = KNOWLEDGE_POINTS,
                  max_sentences: int | None = None) -> tuple[list[Fact], list[SourceReport]]:
    """Facts of the requested knowledge points from all sources; unreadable parts and empty KPs warn.
    ``max_sentences`` caps the sentences read per source (a cost control: the first N, in file order)."""
    unknown = [k for k in knowledge_points if k not in KNOWLEDGE_POINTS]
    if unknown:
        raise ValueError(f"syntax_qa.knowledge_points: unknown {unknown}; choose from {list(KNOWLEDGE_POINTS)}")
    if not sources:
        raise ValueError("syntax_qa.sources: no sources given (PTB .mrg / UD .conllu files or directories)")
    wanted = set(knowledge_points)
    out: list[Fact] = []
    reports: list[SourceReport] = []
    for src in sources:
        sentences, facts, errors = [], [], []  # of every file of the source
        for f in source_files(src):
            for acc, got in zip((sentences, facts, errors), (ptb.read_ptb if f.suffix == ".mrg" else ud.read_conllu)(f)):
                acc += got
        if max_sentences is not None:
            keep = {id(s) for s in sentences[:max_sentences]}
            sentences = sentences[:max_sentences]
            facts = [f for f in facts if id(f.sentence) in keep]
        facts = [f for f in facts if f.kp in wanted]
        counts = {k: sum(f.kp == k for f in facts) for k in knowledge_points}
        rep = SourceReport(str(src), len(sentences), counts, [str(e) for e in errors])
        rep.empty = [k for k in knowledge_points if rep.facts[k] == 0]
        if errors:
            shown = "; ".join(rep.errors[:3]) + (" …" if len(errors) > 3 else "")
            warnings.warn(f"syntax-qa source {src}: {len(errors)} unreadable tree(s)/sentence(s) skipped: {shown}",
                          SourceErrorWarning, stacklevel=2)
        if rep.empty:
            warnings.warn(f"syntax-qa source {src}: no items for knowledge point(s) {', '.join(rep.empty)}",
                          EmptyKnowledgePointWarning, stacklevel=2)
        out += facts
        reports.append(rep)
    return out, reports
