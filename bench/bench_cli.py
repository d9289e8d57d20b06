"""`python bench/bench_cli.py [--baseline REF] [--repeats N]`: CPU seconds (user + sys of the command's
processes) of the commands people wait on (issue 45), each beside the same command on the baseline's code
(`git archive REF`, default 897388b) in the same session, and the ratio:

- `train batch RUN --step 1`, the second call on a run (32 x 65 ids: a 2,000-document grammar corpus,
  data.seq_len=64, optim.global_batch=32); the first call, which may build the tokenizer and store, is not timed;
- `train batch RUN --steps 1:100`, per step (the baseline has no range: its --step 1 is the per-step figure);
- `train plan experiment=zhoblimp_grid` (60 runs composed).

CPU seconds, not wall: the machine is shared. Goals: batch <= 1 CPU-s a step, plan <= 3 CPU-s.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ["model=tiny", "model.hidden_size=32", "model.intermediate_size=128", "model.max_position_embeddings=64",
       "data.seq_len=64", "optim.global_batch=32", "optim.micro_batch=32", "tokenizer.vocab_size=400",
       "tokenizer.hard_vocab_limit=false", "probes=none", "logger.wandb=false"]

# the plan's corpus (configs/experiment/zhoblimp_grid.yaml: ../shared/corpora/zh from the code's folder): the
# same files for both codes, which run from their own folders
ZH = ROOT.parent / "shared" / "corpora" / "zh"
CORPUS = {"SYNTAX_DYNAMICS_CORPUS": str(ZH)} if ZH.is_dir() else {}


def cpu_s(cmd: list[str], code: Path) -> float:
    """CPU seconds of `cmd` (and its children) run with `code` first on the path; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(code), "TQDM_DISABLE": "1", "WANDB_MODE": "offline", **CORPUS}
    done = subprocess.run([sys.executable, *cmd], cwd=code, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} ({code}) failed:\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def make_run(tmp: Path) -> Path:
    """A run folder as the trainer writes one (its config.yaml), no training needed to rebuild its batches."""
    sys.path.insert(0, str(ROOT))
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import register

    register()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[*RUN, f"data.cache_dir={tmp / 'cache'}"])
    run = tmp / "run"
    run.mkdir()
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.to_container(cfg, resolve=True)))
    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", default="897388b", help="git ref of the code to compare with (default 897388b)")
    p.add_argument("--repeats", type=int, default=3, help="timings per figure; the median is printed")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        run = make_run(tmp)
        batch = ["-m", "train", "batch", str(run)]
        cpu_s([*batch, "--step", "1"], ROOT)  # the first call: tokenizer, store and the batch index

        def median(cmd, code, per=1):
            return statistics.median(cpu_s(cmd, code) for _ in range(args.repeats)) / per

        old_step = median([*batch, "--step", "1"], base)  # every call alike there: one figure for both rows
        rows = [("train batch --step 1 (second call)", old_step, median([*batch, "--step", "1"], ROOT), 1.0),
                ("train batch --steps 1:100, per step", old_step,
                 median([*batch, "--steps", "1:100"], ROOT, per=100), 1.0),
                ("train plan experiment=zhoblimp_grid", median(["-m", "train", "plan", "experiment=zhoblimp_grid"], base),
                 median(["-m", "train", "plan", "experiment=zhoblimp_grid"], ROOT), 3.0)]
    print(f"CPU-s, median of {args.repeats}; baseline {args.baseline}, load {os.getloadavg()[0]:.1f}")
    print(f"| command | {args.baseline} | now | now / {args.baseline} | goal |")
    print("|---|---|---|---|---|")
    for name, old, new, goal in rows:
        print(f"| {name} | {old:.2f} | {new:.3f} | {new / old:.3f} | <= {goal:g}{'' if new <= goal else ' MISSES'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
