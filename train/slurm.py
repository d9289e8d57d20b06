"""SLURM without the submitit launcher, and the distributed environment inside any SLURM job.

`python -m train.slurm <overrides> --out DIR --partition P [...]` expands the grid as `python -m train -m`
would (train/grid.py) and writes DIR/grid.txt (one run's overrides a line) and DIR/array.sbatch (a job array
over the lines, from slurm/array.sbatch.in) for `sbatch`. slurm/README.md documents both paths.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import string
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import OmegaConf

from train.config import procs_per_node
from train.files import write_text_atomic
from train.grid import GridError, expand, hydra_context
from train.optim import accumulation_steps
from train.plan import A100_BF16_PEAK_TFLOPS, GiB, Hardware, memory_per_gpu, plan_run

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "slurm" / "array.sbatch.in"
LAUNCHERS = ("srun", "torchrun", "deepspeed")


def export_distributed_env() -> None:
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT from the job where no launcher set them
    (submitit and a bare `srun python -m train` set only SLURM_* / SUBMITIT_* variables)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    if os.environ.get("SUBMITIT_EXECUTOR"):
        import submitit
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    elif "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        if "MASTER_ADDR" not in os.environ:
            raise RuntimeError("a multi-task SLURM step without MASTER_ADDR: export it before srun "
                               "(slurm/array.sbatch.in does: the first host of $SLURM_JOB_NODELIST)")
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))
        os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))


# The per-run resources of both cluster paths are set in one file: the submitit launcher composes it, the
# sbatch path reads its defaults from it.
LAUNCHER_YAML = ROOT / "configs" / "hydra" / "launcher" / "slurm.yaml"
RESOURCE_KEYS = ("nodes", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "array_parallelism",
                 "signal_delay_s")
SHARED_KEYS = ("account", "qos", *RESOURCE_KEYS)


def launcher_defaults() -> dict:
    """The shared resource keys as configs/hydra/launcher/slurm.yaml sets them."""
    cfg = OmegaConf.load(LAUNCHER_YAML)
    missing = [k for k in SHARED_KEYS if k not in cfg]
    if missing:
        raise KeyError(f"{LAUNCHER_YAML}: no {', '.join(missing)} (train/slurm.py reads its defaults there)")
    return {k: cfg[k] for k in SHARED_KEYS}


# Per-run resources from the plan: GPUs, host memory and time follow the run, at most the yaml's node; a
# value the user sets (--gpus-per-node, hydra.launcher.mem_gb=...) is taken as it is.
PLANNED_KEYS = ("gpus_per_node", "mem_gb", "timeout_min")
GPU_MEMORY_GIB = 80  # the yaml's node: A100-80GB cards
SLURM_GPU = Hardware(gpu="A100-80GB (bf16)", peak_tflops=A100_BF16_PEAK_TFLOPS)  # the plan's hours on it
HOST_GB_PER_PROCESS = 8  # Python, torch, the CUDA context, the corpus reader and the probes, per process
HOST_BYTES_PER_PARAM = 16  # a checkpoint write holds fp32 weights and Adam states on the host: 4 + 12
TIME_MARGIN, TIME_OVERHEAD_MIN = 1.5, 30  # x the planned hours, + tokenizer/store building, start, I/O
# (the time limit is not the run's end: a run that reaches it saves, is requeued and resumes)


def planned_resources(p, cap: dict, gpus: Optional[int] = None) -> dict:
    """gpus_per_node, mem_gb and timeout_min of one RunPlan: the fewest GPUs (a power of two the batch splits
    over) whose memory holds it and whose time fits the cap, host memory per process, the hours with a margin."""
    def hours(n: int) -> float:
        return (p.gpu_hours + p.probe_hours) / n

    def minutes(n: int) -> float:
        return 60 * TIME_MARGIN * hours(n) + TIME_OVERHEAD_MIN

    counts = [n for n in (1, 2, 4, 8, 16) if n <= max(cap["gpus_per_node"], 1)
              and _divides(accumulation_steps, p.cfg.optim, n)
              and memory_per_gpu(p.cfg, p.params, p.seq_len, n)[0].fits(GPU_MEMORY_GIB * GiB)]
    if gpus is None:
        gpus = next((n for n in counts if minutes(n) <= cap["timeout_min"]), counts[-1] if counts else cap["gpus_per_node"])
    procs = procs_per_node(gpus)
    mem = procs * HOST_GB_PER_PROCESS + math.ceil(procs * HOST_BYTES_PER_PARAM * p.params / 1e9)
    # a CPU-only job (gpus_per_node=0): the GPU plan's time says nothing about it
    time = minutes(gpus) if gpus else cap["timeout_min"]
    # rounded up to powers of two (GB; hours), so that runs of similar size share one job array
    return {"gpus_per_node": gpus, "mem_gb": min(_pow2(mem), cap["mem_gb"]),
            "timeout_min": min(60 * _pow2(time / 60), cap["timeout_min"])}


def _pow2(x: float) -> int:
    return 2 ** max(0, math.ceil(math.log2(x)))


def _divides(check, optim, n: int) -> bool:
    try:
        check(optim, n)
        return True
    except ValueError:
        return False


def resource_groups(runs: Sequence[Sequence[str]], cap: dict, given: dict) -> list[tuple[dict, list[int]]]:
    """(resources, run indices) per request, one job array each: the plan's where `given` has None."""
    todo = [k for k in PLANNED_KEYS if given.get(k) is None]
    if not todo:
        return [(dict(given), list(range(len(runs))))]
    cache: dict = {}
    groups: dict[tuple, tuple[dict, list[int]]] = {}
    stopped: dict[str, list[str]] = {}  # the plan's CANNOT START, by reason (issue 44: written without a word)
    with hydra_context():
        for i, run in enumerate(runs):
            try:
                p = plan_run(run, SLURM_GPU, cache)
                if p.cannot_start:
                    stopped.setdefault(p.cannot_start, []).append(p.name)
                planned = planned_resources(p, cap, given.get("gpus_per_node"))
            except ValueError as e:  # a run the plan cannot size (no budget): the node's all, as before
                print(f"warning: {' '.join(run)}: {e}; it asks for the yaml's {', '.join(todo)} "
                      f"(set them: --gpus-per-node, --mem-gb, --timeout-min or hydra.launcher.<key>=...)",
                      file=sys.stderr)
                planned = {k: cap[k] for k in PLANNED_KEYS}
            res = {**planned, **{k: v for k, v in given.items() if v is not None}}
            groups.setdefault(tuple(res.items()), (res, []))[1].append(i)
    for reason, names in stopped.items():
        print(f"warning: {len(names)} of {len(runs)} runs CANNOT START, as `python -m train plan` marks them "
              f"({reason}); their tasks would stop at start: {', '.join(names)}", file=sys.stderr)
    return list(groups.values())


def launch_planned(launcher, job_overrides, initial_job_idx: int) -> list:
    """hydra/launcher=slurm's launch (hydra_plugins/syntax_dynamics_slurm.py): the submitit plugin's, each run's
    resources from resource_groups where no hydra.launcher.<key> is set; every array submitted before waiting."""
    import submitit
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    given = {o.split("=", 1)[0].lstrip("+~") for o in launcher.config.hydra.overrides.hydra}
    cap = dict(launcher.params)
    saved = HydraConfig.instance().cfg  # plan_run composes each run; the sweep's own config comes back
    try:
        groups = resource_groups(job_overrides, cap, {k: cap[k] if f"hydra.launcher.{k}" in given else None
                                                      for k in PLANNED_KEYS})
    finally:
        HydraConfig.instance().cfg = saved
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    jobs = {}
    for res, indices in groups:  # the plugin's own launch, once per group
        params = {**cap, **res, "tasks_per_node": procs_per_node(res["gpus_per_node"])}
        executor = submitit.AutoExecutor(cluster="slurm", folder=params["submitit_folder"],
                                         slurm_max_num_timeout=params["max_num_timeout"])
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()
                                      if k not in ("submitit_folder", "max_num_timeout")})
        print(f"{len(indices)} runs: {res['gpus_per_node']} GPUs, {res['mem_gb']} GB, {res['timeout_min']} min each",
              file=sys.stderr)
        args = [(list(job_overrides[i]), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
                 Singleton.get_state()) for i in indices]
        jobs.update(zip(indices, executor.map_array(launcher, *zip(*args))))
    return [jobs[i].results()[0] for i in range(len(job_overrides))]


@dataclass
class SbatchOptions:
    """The knobs a cluster user sets; from_launcher_yaml fills the resources from the launcher yaml."""
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
    """`@@KEY@@` placeholders (bash's `$VAR` needs no escaping); a `@@KEY_LINES@@` one takes its newline with
    it, so an empty value leaves no blank line in the #SBATCH block (sbatch stops at the first)."""

    flags = 0  # placeholders are upper case; the pattern is compiled verbose
    pattern = r"""@@(?:
        (?P<braced>[A-Z_]+_LINES)@@\n |   # a placeholder line: its value ends its own lines
        (?P<named>[A-Z_]+)@@ |             # an inline value
        (?P<escaped>(?!)) | (?P<invalid>(?!))
    )"""


def render(runs: Sequence[Sequence[str]], opts: SbatchOptions, out: Path, command: str = "",
           suffix: str = "") -> tuple[Path, Path]:
    """Writes out/grid{suffix}.txt and out/array{suffix}.sbatch (atomically) for these runs; returns both."""
    if not runs:
        raise ValueError("no runs to render")
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    grid = out / f"grid{suffix}.txt"
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
    write_text_atomic(grid, "".join(" ".join(shlex.quote(o) for o in run) + "\n" for run in runs))
    sbatch = out / f"array{suffix}.sbatch"
    write_text_atomic(sbatch, script)
    sbatch.chmod(0o755)
    return grid, sbatch


def main(argv: Optional[Sequence[str]] = None) -> int:
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
        groups = resource_groups(runs, launcher_defaults(), {k: getattr(args, k) for k in PLANNED_KEYS})
    except (GridError, ValueError) as e:  # the plan's errors name the key (a budget that is not one step...)
        print(f"error: {e}", file=sys.stderr)
        return 2
    command = " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    for res, indices in groups:
        # one group: grid.txt and array.sbatch as ever; several: one array per request, named by it
        suffix = "" if len(groups) == 1 else f"-{res['gpus_per_node']}gpu-{res['mem_gb']}G-{res['timeout_min']}min"
        grid, sbatch = render([runs[i] for i in indices], replace(opts, **res), args.out, command, suffix)
        print(f"{len(indices)} runs ({res['gpus_per_node']} GPUs, {res['mem_gb']} GB, {res['timeout_min']} min "
              f"each) -> {grid}\nsubmit: sbatch {sbatch}")
    print(f"time limits: the plan's hours on an {SLURM_GPU.gpu} ({SLURM_GPU.peak_tflops:g} TFLOP/s peak) x "
          f"{TIME_MARGIN} + {TIME_OVERHEAD_MIN} min (`train plan --gpu A100 --peak-tflops "
          f"{SLURM_GPU.peak_tflops:g}`: the same hours)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

