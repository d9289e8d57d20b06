"""`python -m train [overrides]`: one run, its directory = Hydra's output dir (hydra.run.dir=...).

A user error (a config key, a corpus file, a damaged checkpoint, a full disk) is printed as one line
`error: …` with exit status 2; a bug keeps its traceback (train/cli.py)."""
from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from train.cli import exit_on_user_error
from train.config import register, to_typed

register()


@hydra.main(config_path="../configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from train.loop import train

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    out = exit_on_user_error(lambda: train(to_typed(cfg), run_dir))
    print(f"run directory: {out}")


if __name__ == "__main__":
    main()
