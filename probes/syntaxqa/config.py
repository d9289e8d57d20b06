"""``probes.syntax_qa``: the syntax-question probe's config (probes/syntaxqa/hook.py builds from it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from probes.syntaxqa.records import KNOWLEDGE_POINTS, QUESTION_TYPES


@dataclass
class PaperConfig:
    """``probes.syntax_qa.paper``: the paper's few-shot and generation settings (used when mode=paper)."""

    shots: int = 5  # exemplars per prompt (D.1); 0 = the paper's zero-shot prompt
    shot_seeds: int = 3  # exemplar draws per question, scores averaged (D.1)
    exemplar_k: int = 2  # exemplar-set questions per (type, knowledge point, answer category) tuple (§3.2)
    max_new_tokens_choice: int = 10  # true/false and multiple choice (D.1: "maximum length ... 10")
    max_new_tokens_fitb: int = 256  # fill in the blank (D.1: "maximum length to 256")

    def __post_init__(self) -> None:
        for key in ("shot_seeds", "exemplar_k", "max_new_tokens_choice", "max_new_tokens_fitb"):
            if getattr(self, key) < 1:
                raise ValueError(f"syntax_qa.paper.{key} must be >= 1, got {getattr(self, key)}")
        if self.shots < 0:
            raise ValueError(f"syntax_qa.paper.shots must be >= 0, got {self.shots}")


SYNTAX_QA_MODES = ("likelihood", "paper")
KIND = "syntax_questions"  # its eval files' kind (probes/families.py)


@dataclass
class SyntaxQAConfig:
    enabled: bool = False  # in-loop: probe every checkpoint (probes.syntax_qa.enabled=true)
    # likelihood: our wording, TF/MC ranked by likelihood (any base model, no generation needed); paper: the
    # paper's templates, prompts and few-shot setting, every answer generated and parsed (settings under `paper`)
    mode: str = "likelihood"
    sources: list[str] = field(default_factory=list)  # .mrg / .conllu files or directories of them
    knowledge_points: list[str] = field(default_factory=lambda: list(KNOWLEDGE_POINTS))
    question_types: list[str] = field(default_factory=lambda: list(QUESTION_TYPES))
    k_per_tuple: int = 5  # items per (question type, knowledge point, answer category)
    seed: int = 0  # sampling, distractors, option order, exemplars
    shots: int = 0  # few-shot exemplars per prompt (same knowledge point and type)
    shot_seeds: int = 3  # few-shot only: exemplar sets per item, scores averaged
    max_items: Optional[int] = None  # cost cap after balanced sampling (keeps the balance)
    max_sentences: Optional[int] = None  # read at most this many sentences per source
    generate: bool = True  # False skips fill-in-the-blank generation (cheap in-loop runs; OA is then NaN)
    max_new_tokens: int = 32
    batch_size: int = 16
    paper: PaperConfig = field(default_factory=PaperConfig)  # mode=paper only

    def __post_init__(self) -> None:
        if self.mode not in SYNTAX_QA_MODES:
            raise ValueError(f"syntax_qa.mode: unknown {self.mode!r}; choose from {list(SYNTAX_QA_MODES)}")
        if self.mode == "paper" and self.shots:
            raise ValueError("syntax_qa.shots is the likelihood mode's; with mode=paper set syntax_qa.paper.shots")
        if self.mode == "paper" and not self.generate:
            raise ValueError("syntax_qa.generate=false cannot apply to mode=paper, which generates every answer")
        if self.enabled and not self.sources:
            raise ValueError("syntax_qa.sources is empty: name .mrg/.conllu files or directories to ask about")
        for key, known in (("knowledge_points", KNOWLEDGE_POINTS), ("question_types", QUESTION_TYPES)):
            if bad := [k for k in getattr(self, key) if k not in known]:
                raise ValueError(f"syntax_qa.{key}: unknown {bad}; choose from {list(known)}")
        for key in ("k_per_tuple", "batch_size", "max_new_tokens", "shot_seeds"):
            if getattr(self, key) < 1:
                raise ValueError(f"syntax_qa.{key} must be >= 1, got {getattr(self, key)}")
        if self.shots < 0:
            raise ValueError(f"syntax_qa.shots must be >= 0, got {self.shots}")
        if self.max_items is not None and self.max_items < 1:
            raise ValueError(f"syntax_qa.max_items must be >= 1 or null, got {self.max_items}")
