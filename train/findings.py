"""What `python -m train verify` reports: one finding per problem, naming the file, and the per-checkpoint
record the checks fill in (train/verify.py reads the files, train/verify_weights.py the tensors)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from train.trajectory import Weights


@dataclass
class Finding:
    step: Optional[int]  # None: about the run, not one checkpoint
    file: str  # path of the file (or directory) the finding is about
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass
class RunReport:
    run: str
    checkpoints: list[dict] = field(default_factory=list)  # step, tokens, manifest, distances
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not wrong (exit status unchanged)


def _names(names: list[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (f", … ({len(names)} in all)" if len(names) > limit else "")


def weight_files(path: Path) -> list[Path]:
    """The checkpoint's weights: model.safetensors, or the shards save_pretrained splits large ones into."""
    return sorted(f for f in Path(path).glob("*.safetensors") if not f.name.startswith("."))


class _Checkpoint:
    """What the file checks learned about one step<N>/ directory."""

    def __init__(self, step: int, path: Path):
        self.step, self.path = step, path
        self.state: Optional[dict] = None
        self.manifest: Optional[dict] = None
        self.hashes: dict[str, str] = {}  # file name -> sha256 (weights always; all files with a manifest)
        self.weights: Optional[Weights] = None  # None: unreadable, not traced
