"""`python -m train [overrides]`: one run, its directory = Hydra's output dir (hydra.run.dir=...).
`python -m train verify RUN_DIR …`: checks a run's checkpoints (train/verify.py); Hydra never sees it.

A user error (a config key, a corpus file, a damaged checkpoint, a full disk) is printed as one line
`error: …` with exit status 2; a bug keeps its traceback (train/cli.py).

Hydra would write <run>/.hydra/ (and a job log file) before any of our code runs, so a rerun refused for
a changed config or a held lock would still overwrite the run's record of its command line. configs/
config.yaml turns both off (hydra.output_subdir: null, hydra/job_logging: stdout) and the same three
files are written here once the trainer has accepted the run directory.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from train.cli import exit_on_user_error
from train.config import register, to_typed

register()


def write_hydra_record(run_dir: Path, cfg: DictConfig) -> None:
    """<run>/.hydra/{config,hydra,overrides}.yaml, as Hydra's own output_subdir would hold them."""
    from train.files import write_text_atomic

    hydra_cfg = HydraConfig.get()
    out = Path(run_dir) / ".hydra"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.yaml", OmegaConf.to_yaml(cfg))
    write_text_atomic(out / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
    write_text_atomic(out / "overrides.yaml", OmegaConf.to_yaml(list(hydra_cfg.overrides.task)))


@hydra.main(config_path="../configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from train.loop import train

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    out = exit_on_user_error(
        lambda: train(to_typed(cfg), run_dir, on_accepted=lambda: write_hydra_record(run_dir, cfg)))
    print(f"run directory: {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["verify"]:  # a subcommand, not an override (Hydra would reject the word)
        from train.verify import main as verify

        sys.exit(verify(sys.argv[2:]))
    main()
