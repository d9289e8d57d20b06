"""Syntax questions probe: ask a causal LM about the syntax of treebank sentences (docs/syntax-questions.md)."""

from probes.families import Family
from probes.syntaxqa.config import KIND, SyntaxQAConfig

FAMILY = Family(kind=KIND, key="syntax_qa", config=SyntaxQAConfig, hook="probes.syntaxqa.hook:build",
                names=("syntax_qa", "syntax_qa_paper"),  # records.BENCHMARK, PAPER_BENCHMARK
                table="probes.syntaxqa.report:syntax_qa_table", curves="probes.syntaxqa.report:write_syntax_qa_curves",
                section="probes.syntaxqa.report:syntax_qa_section", tasks="probes.syntaxqa.report:task_rows",
                tables=("syntax_qa_final",), commands=(("syntax-qa", "probes.syntaxqa.score:main", "ask a causal LM "
                                                        "questions about treebank sentences (TF / MC / FITB, OA)"),))
