"""``probes.elagent``: the ELAGENT multiple-choice probe's config (probes/elagent/hook.py builds from it)."""
from __future__ import annotations

from dataclasses import dataclass, field

ELAGENT_TASKS = ("precedence", "babi", "predicates")  # probes/elagent: the multiple-choice tasks
BENCHMARK = "elagent"  # the eval file's name: evals/step<N>/elagent.parquet
KIND = "elagent"  # its kind (probes/families.py)


@dataclass
class ElagentConfig:
    enabled: bool = False
    tasks: list[str] = field(default_factory=lambda: list(ELAGENT_TASKS))
    items_per_paradigm: int = 20
    shots: int = 1  # solved examples of the same paradigm before each question
    seed: int = 0
    # precedence (Task 1): operators per expression, digits per operand, operator set, options per item
    n_operators: int = 3
    digits: int = 1
    operators: str = "+-*"
    precedence_options: int = 2  # the value under the new and the usual rule (+ other precedences' values)
    batch_size: int = 32

    def __post_init__(self) -> None:
        unknown = sorted(set(self.tasks) - set(ELAGENT_TASKS))
        if unknown or not self.tasks:
            raise ValueError(f"probes.elagent.tasks: unknown or empty {unknown or self.tasks}; known: {list(ELAGENT_TASKS)}")
        for key in ("items_per_paradigm", "batch_size", "digits"):
            if getattr(self, key) < 1:
                raise ValueError(f"probes.elagent.{key} must be >= 1, got {getattr(self, key)}")
        if self.shots < 0:
            raise ValueError(f"probes.elagent.shots must be >= 0, got {self.shots}")
        if not set(self.operators) <= set("+-*/") or len(set(self.operators)) != len(self.operators):
            raise ValueError(f"probes.elagent.operators: distinct characters of '+-*/', got {self.operators!r}")
        if not 2 <= self.n_operators <= len(self.operators):
            raise ValueError(f"probes.elagent.n_operators must be 2..{len(self.operators)} (distinct operators of "
                             f"probes.elagent.operators={self.operators!r}), got {self.n_operators}")
        if not 2 <= self.precedence_options <= 4:
            raise ValueError(f"probes.elagent.precedence_options must be 2..4, got {self.precedence_options}")
