"""``probes.lm_eval``: lm-eval tasks scored at every checkpoint (probes/lmeval/hook.py builds from it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

KIND = "lm_eval"  # its eval files' kind (probes/families.py)


@dataclass
class LmEvalConfig:
    """``probes.lm_eval.tasks=[sd_grammar] probes.lm_eval.include_path=DIR`` (DIR: local task YAMLs, e.g.
    from ``python -m probes lm-eval-tasks``; no hub is needed for those). Empty ``tasks``: off."""
    tasks: list[str] = field(default_factory=list)
    include_path: Optional[str] = None
    batch_size: int = 32
    limit: Optional[int] = None  # the first N documents of each task (quick looks); null = all

    @property
    def enabled(self) -> bool:  # what ProbesConfig.build asks of every family's section
        return bool(self.tasks)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"probes.lm_eval.batch_size must be >= 1, got {self.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"probes.lm_eval.limit must be >= 1 or null, got {self.limit}")
        if self.include_path is not None and not Path(self.include_path).is_dir():
            raise ValueError(f"probes.lm_eval.include_path: {self.include_path} is not a directory")
        if self.tasks:  # lm-eval is an optional extra: its absence fails here, at start
            from probes.lmeval.run import require_lm_eval

            require_lm_eval()
