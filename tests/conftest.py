import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# W&B never reaches the network from tests; the deepspeed accelerator probe stays quiet on CPU.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the real benchmarks and corpora live there")
    return SHARED
os.environ.setdefault("TQDM_DISABLE", "1")
