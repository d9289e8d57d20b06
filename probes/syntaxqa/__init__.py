"""Syntax questions probe (issue 6): ask a causal LM about the syntax of treebank sentences.

Modules: ``ptb`` (bracketed trees with function tags) and ``ud`` (.conllu) read sentences and extract
facts for nine knowledge points (``records.KNOWLEDGE_POINTS``); ``items`` gathers them per source and
reports empty knowledge points; ``questions`` renders true/false, multiple-choice and
fill-in-the-blank items and samples them balanced; ``prompts`` formats zero-/few-shot prompts;
``metrics`` holds exact match, strict F1 and OA; ``score`` is the entry point (config, build, score,
summarise, CLI); ``generation`` is the one greedy-generation path.

``mode=paper`` asks as the paper does: ``paper`` (its templates, prompts, exemplars, answer parser and scores).
"""

from probes.families import Family
from probes.syntaxqa.config import KIND, SyntaxQAConfig

FAMILY = Family(kind=KIND, key="syntax_qa", config=SyntaxQAConfig, hook="probes.syntaxqa.hook:build",
                table="probes.syntaxqa.curves:syntax_qa_table", curves="probes.syntaxqa.curves:write_syntax_qa_curves",
                section="probes.syntaxqa.report:syntax_qa_section", tasks="probes.syntaxqa.curves:task_rows",
                tables=("syntax_qa_final",), commands=(("syntax-qa", "probes.syntaxqa.score:main", "ask a causal LM "
                                                        "questions about treebank sentences (TF / MC / FITB, OA)"),))
