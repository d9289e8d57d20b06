"""SLURM without the submitit launcher, and the distributed environment inside any SLURM job.

`python -m train.slurm <overrides> --out DIR --partition P [...]` expands the grid exactly as
`python -m train -m <overrides>` would (train/grid.py) and writes DIR/grid.txt (one run per line: its
overrides, shell-quoted) and DIR/array.sbatch (slurm/array.sbatch.in filled in: a job array over the
lines). `sbatch DIR/array.sbatch` submits it. slurm/README.md documents both paths.
"""
from __future__ import annotations

import argparse
import os
import shlex
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from train.config import procs_per_node
from train.files import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "slurm" / "array.sbatch.in"
LAUNCHERS = ("srun", "torchrun", "deepspeed")


def export_distributed_env() -> None:
    """Sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT from the job when a launcher has not.

    torchrun and the deepspeed launcher set them; submitit (hydra/launcher=slurm or local) and a bare
    `srun python -m train` (one task per GPU) only set SLURM_* / SUBMITIT_* variables, which
    train.engine.init_distributed does not read."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    if os.environ.get("SUBMITIT_EXECUTOR"):
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    elif "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        if "MASTER_ADDR" not in os.environ:
            raise RuntimeError("a multi-task SLURM step without MASTER_ADDR: export it before srun "
                               "(slurm/array.sbatch.in does: the first host of $SLURM_JOB_NODELIST)")
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")
        os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))


# The per-run resources (nodes, GPUs, CPUs, memory, time, ...) of both cluster paths are set in one place,
# configs/hydra/launcher/slurm.yaml: the submitit launcher composes it, the sbatch path reads its defaults
# from it, so a site edits one file.
LAUNCHER_YAML = ROOT / "configs" / "hydra" / "launcher" / "slurm.yaml"
RESOURCE_KEYS = ("nodes", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "array_parallelism",
                 "signal_delay_s")
SHARED_KEYS = ("account", "qos", *RESOURCE_KEYS)


def launcher_defaults() -> dict:
    """The shared resource keys as configs/hydra/launcher/slurm.yaml sets them."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(LAUNCHER_YAML)
    missing = [k for k in SHARED_KEYS if k not in cfg]
    if missing:
        raise KeyError(f"{LAUNCHER_YAML}: no {', '.join(missing)} (train/slurm.py reads its defaults there)")
    return {k: cfg[k] for k in SHARED_KEYS}


@dataclass
class SbatchOptions:
    """The knobs a cluster user sets; `SbatchOptions.from_launcher_yaml(partition=...)` fills the
    resources from configs/hydra/launcher/slurm.yaml (one 8 x A100-80GB node per run)."""
    partition: str
    account: Optional[str]
    qos: Optional[str]
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    mem_gb: int
    timeout_min: int
    array_parallelism: int
    signal_delay_s: int
    launcher: str = "srun"
    job_name: str = "syntax-dynamics"
    setup: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not self.partition:
            raise ValueError("partition is missing: the cluster's partition (--partition)")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher={self.launcher!r}: expected one of {', '.join(LAUNCHERS)}")
        for key in ("nodes", "cpus_per_task", "mem_gb", "timeout_min", "array_parallelism"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}={getattr(self, key)}: must be at least 1")
        if self.gpus_per_node < 0 or self.signal_delay_s < 0:
            raise ValueError("gpus_per_node and signal_delay_s must not be negative")

    @classmethod
    def from_launcher_yaml(cls, **given) -> "SbatchOptions":
        """Options from the launcher yaml's resources, with the given keys (None = not given) on top."""
        return cls(**{**launcher_defaults(), **{k: v for k, v in given.items() if v is not None}})


class SbatchTemplate(string.Template):
    """slurm/array.sbatch.in: `@@KEY@@` placeholders, so bash's own `$VAR`, `${A[@]}` and `$@` need no
    escaping. A `@@KEY_LINES@@` placeholder fills whole lines: its newline goes with it, and its value
    carries one newline per line, so none given leaves no blank line in the #SBATCH block (sbatch stops
    reading directives at the first line that is not one)."""

    flags = 0  # placeholders are upper case; the pattern is compiled verbose
    pattern = r"""@@(?:
        (?P<braced>[A-Z_]+_LINES)@@\n |   # a placeholder line: its value ends its own lines
        (?P<named>[A-Z_]+)@@ |             # an inline value
        (?P<escaped>(?!)) | (?P<invalid>(?!))
    )"""


def grid_lines(runs: Sequence[Sequence[str]]) -> list[str]:
    return [" ".join(shlex.quote(o) for o in run) for run in runs]


def render(runs: Sequence[Sequence[str]], opts: SbatchOptions, out: Path, command: str = "") -> tuple[Path, Path]:
    """Writes out/grid.txt and out/array.sbatch (atomically) for these runs; returns both paths."""
    if not runs:
        raise ValueError("no runs to render")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    grid = out / "grid.txt"
    optional = [f"#SBATCH --{k}={v}" for k, v in (("account", opts.account), ("qos", opts.qos)) if v]
    # A CPU-only node asks for no GPU at all and runs one training process (procs_per_node).
    if opts.gpus_per_node > 0:
        optional.append(f"#SBATCH --gpus-per-node={opts.gpus_per_node}")
    procs = procs_per_node(opts.gpus_per_node)
    hours, minutes = divmod(opts.timeout_min, 60)
    values = {
        "COMMAND": command, "JOB_NAME": opts.job_name, "LAST_TASK": str(len(runs) - 1),
        "ARRAY_PARALLELISM": str(opts.array_parallelism), "PARTITION": opts.partition,
        "NODES": str(opts.nodes),
        # srun: one task per training process; torchrun/deepspeed: one launcher per node that starts them
        "TASKS_PER_NODE": str(procs if opts.launcher == "srun" else 1),
        "PROCS_PER_NODE": str(procs), "CPUS_PER_TASK": str(opts.cpus_per_task),
        "MEM_GB": str(opts.mem_gb), "TIME": f"{hours:02d}:{minutes:02d}:00",
        "SIGNAL_DELAY_S": str(opts.signal_delay_s), "LOG_DIR": shlex.quote(str(out / "logs")),
        "GRID_FILE": shlex.quote(str(grid)), "REPO": shlex.quote(str(ROOT)),
        "SETUP_LINES": "".join(f"{line}\n" for line in opts.setup), "LAUNCHER": opts.launcher,
    }
    values["OPTIONAL_LINES"] = "".join(f"{line}\n" for line in optional)
    try:
        script = SbatchTemplate(TEMPLATE.read_text()).substitute(values)
    except KeyError as e:
        raise RuntimeError(f"{TEMPLATE}: placeholder @@{e.args[0]}@@ is not one render() fills") from e
    (out / "logs").mkdir(exist_ok=True)
    write_text_atomic(grid, "\n".join(grid_lines(runs)) + "\n")
    sbatch = out / "array.sbatch"
    write_text_atomic(sbatch, script)
    sbatch.chmod(0o755)
    return grid, sbatch


def main(argv: Optional[Sequence[str]] = None) -> int:
    from train.grid import GridError, expand

    p = argparse.ArgumentParser(prog="python -m train.slurm", description=__doc__.split("\n")[0])
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m train -m")
    p.add_argument("-m", "--multirun", action="store_true",
                   help="accepted as in python -m train -m; the grid is always expanded")
    p.add_argument("--out", required=True, type=Path, help="directory for grid.txt and array.sbatch")
    p.add_argument("--partition", required=True)
    p.add_argument("--account")
    p.add_argument("--qos")
    p.add_argument("--launcher", choices=LAUNCHERS, default="srun")
    p.add_argument("--setup", action="append", default=[], help="a shell line run before training (repeatable)")
    for name in RESOURCE_KEYS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int,
                       help=f"default: {name} in {LAUNCHER_YAML.relative_to(ROOT)}")
    args = p.parse_args(argv)
    try:
        opts = SbatchOptions.from_launcher_yaml(**{k: v for k, v in vars(args).items()
                                                   if k not in ("overrides", "out", "multirun")})
    except ValueError as e:
        p.error(str(e))
    try:
        runs = expand(args.overrides)
    except GridError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    command = " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    grid, sbatch = render(runs, opts, args.out, command)
    print(f"{len(runs)} runs -> {grid}\nsubmit: sbatch {sbatch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

