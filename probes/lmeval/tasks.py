"""``python -m probes lm-eval-tasks``: our minimal pairs as lm-eval tasks (``<task>.yaml`` + ``.jsonl``, lm-eval's
``json`` builder), scored as ``probes score`` does; docs/lm_eval.md says why each setting is what it is."""
from __future__ import annotations

import argparse
import json
import string
import sys
from importlib import resources
from pathlib import Path
from typing import Optional, Sequence

from train.files import write_text_atomic

TASK_PREFIX = "sd_"  # our tasks' names: sd_<benchmark>, apart from lm-eval's own blimp etc.


def task_yaml(task: str, data_file: Path) -> str:
    """The task's YAML (task.yaml.tmpl; module doc); `data_file` is written as an absolute path: lm-eval hands
    data_files to datasets.load_dataset, which reads relative paths from the working directory."""
    template = resources.files("probes.lmeval").joinpath("task.yaml.tmpl").read_text(encoding="utf-8")
    return string.Template(template).substitute(task=task, data_file=json.dumps(str(Path(data_file).resolve())))


def write_task(pairs, name: str, out: Path) -> Path:
    """DIR/sd_<name>.jsonl and DIR/sd_<name>.yaml (atomic writes); the YAML's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    task = f"{TASK_PREFIX}{name}"
    data = out / f"{task}.jsonl"
    records = ({"benchmark": p.benchmark, "paradigm": p.paradigm, "phenomenon": p.phenomenon, "pair_id": str(p.pair_id),
                "sentence_good": p.good, "sentence_bad": p.bad} for p in pairs)
    write_text_atomic(data, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    yaml = out / f"{task}.yaml"
    write_text_atomic(yaml, task_yaml(task, data))
    return yaml


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m probes lm-eval-tasks",
                                description="Write lm-eval task YAMLs (+ local jsonl data) for our benchmarks, "
                                            "scored with our convention (start token, no delimiter, ties wrong).")
    p.add_argument("--benchmark", required=True, action="append", metavar="NAME_OR_PATH",
                   help="a registry benchmark (zhoblimp, blimp, climp, sling, grammar) or a benchmark path; repeatable")
    p.add_argument("--format", default="auto", help="benchmark reader for a path")
    p.add_argument("--max-pairs-per-paradigm", type=int, default=None, metavar="N",
                   help="a fixed-seed sample of N pairs per paradigm (default: every pair)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="where the YAMLs and jsonl files go "
                                                                         "(lm-eval --include_path DIR)")
    args = p.parse_args(argv)
    from probes.benchmarks.registry import FORMATS, REGISTRY, BenchmarkConfig, load_benchmark

    try:
        if args.format not in FORMATS:
            raise ValueError(f"--format {args.format}: unknown; known: {', '.join(FORMATS)}")
        for spec in args.benchmark:
            if spec not in REGISTRY and not Path(spec).exists():
                raise ValueError(f"--benchmark {spec}: unknown benchmark, and no such file or folder; "
                                 f"known names: {', '.join(sorted(REGISTRY))}")
            named = spec in REGISTRY  # a registry name, else a file or folder
            cfg = BenchmarkConfig(name=spec if named else Path(spec).stem, path=None if named else spec,
                                  format=args.format, max_pairs_per_paradigm=args.max_pairs_per_paradigm)
            try:
                pairs = load_benchmark(cfg)
            except (ValueError, FileNotFoundError) as e:  # loader messages name the file and line
                raise ValueError(f"--benchmark {spec}: {e}") from None
            if not pairs:
                raise ValueError(f"--benchmark {spec}: no pairs")
            path = write_task(pairs, cfg.name, args.out)
            print(f"{path}: task {TASK_PREFIX}{cfg.name}, {len(pairs)} pairs")
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"run: lm_eval --model hf --model_args pretrained=MODEL_DIR,prefix_token_id=<start_token_id> "
          f"--include_path {args.out} --tasks {TASK_PREFIX}<name> --log_samples --output_path OUT")
    return 0
