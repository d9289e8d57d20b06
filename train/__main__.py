"""`python -m train [overrides]`: one run, its directory = Hydra's output dir (hydra.run.dir=...);
`python -m train COMMAND …`: the commands of COMMANDS (train/commands.py), which Hydra never sees.

Hydra would write <run>/.hydra/ before any of our code runs, so a rerun refused for a changed config or a
held lock would overwrite the run's record of its command line: configs/config.yaml turns that off and the
same files are written here once the trainer has accepted the run directory.
"""
from __future__ import annotations

import re
import signal
import sys
from pathlib import Path


def _interrupted_early(signum, frame) -> None:
    # Ctrl-C while Python imports or Hydra composes: one line, not a traceback (the trainer sets its own)
    print("interrupted by SIGINT before the run started: nothing was written", file=sys.stderr, flush=True)
    raise SystemExit(130)


COMMANDS = {  # `python -m train NAME ...`; a first word that is neither a command nor an override is misspelt
    "verify": ("train.verify:main", "can a run's checkpoints be trusted? (weights, manifests, step 0 vs step N)"),
    "batch": ("train.batch:main", "the exact global batch of optimizer step N of a run (ids, or --text)"),
    "plan": ("train.plan:main", "what a run or a grid would cost (GPU-hours, memory, disk), nothing launched"),
    "slurm": ("train.slurm:main", "a SLURM array job for a grid (grid.txt + array.sbatch), without submitit"),
    "neox": ("train.neox:main", "gpt-neox interop: our config as a gpt-neox YAML (--import: its checkpoints)"),
}
HEAD = ("python -m train [KEY=VALUE ...] trains one run (Hydra overrides; -m: a sweep; --hydra-help: Hydra's\n"
        "help, config groups included). The other commands:")


def write_hydra_record(run_dir: Path, cfg) -> None:
    """<run>/.hydra/{config,hydra,overrides}.yaml, as Hydra's own output_subdir would hold them."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from train.files import write_text_atomic

    hydra_cfg = HydraConfig.get()
    out = Path(run_dir) / ".hydra"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.yaml", OmegaConf.to_yaml(cfg))
    write_text_atomic(out / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
    write_text_atomic(out / "overrides.yaml", OmegaConf.to_yaml(list(hydra_cfg.overrides.task)))


def train_main() -> None:
    """One run: the Hydra app (imported here, so the other commands and --help do not pay for it)."""
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from train.cli import exit_on_user_error
    from train.config import register, to_typed
    from train.overrides import check_overrides

    register()

    @hydra.main(config_path="../configs", config_name="config", version_base="1.3")
    def main(cfg) -> None:
        from train.loop import train
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        out = exit_on_user_error(
            lambda: train(to_typed(cfg), run_dir, on_accepted=lambda: write_hydra_record(run_dir, cfg)))
        print(f"run directory: {out}")

    # typos and wrong types named in one line before Hydra composes (train/overrides.py)
    sys.argv[1:] = exit_on_user_error(lambda: check_overrides(sys.argv[1:]))
    main()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _interrupted_early)
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    # a subcommand (Hydra would reject the word), --help, or a word that is not an override (key=value, ~key, -m)
    if first in ("-h", "--help") or re.fullmatch(r"[A-Za-z][\w-]*", first):
        from train.commands import dispatch
        sys.exit(dispatch("python -m train", COMMANDS, sys.argv[1:], HEAD))
    from train.commands import progress_bars_on_a_terminal_only
    progress_bars_on_a_terminal_only()
    train_main()
