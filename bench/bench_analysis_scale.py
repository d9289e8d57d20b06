"""Time the analysis on a synthetic scaling grid: 60 runs x 47 checkpoints x 118 paradigms x 300 pairs.

    python bench/bench_analysis_scale.py [--root /tmp/sd_scale_grid] [--regen]

The grid (5 model sizes x 4 budgets x 3 seeds; ~100M per-pair rows in 2,820 parquet files, written
once and reused) follows the eval contract exactly. Timed end to end, each stage printed: reading
all per-pair rows (load_runs), bootstrap + seed aggregation, U-shapes, AoA, and the full report
(which redoes everything above and draws the figures). Peak resident memory is printed too.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path

import numpy as np

from probes.aggregate import bootstrap_paradigm_intervals, seed_summary
from probes.aoa import aoa_table
from probes.curves import phenomenon_table
from probes.evalset import load_runs, log_tokens
from probes.report import ReportConfig, build_report
from probes.synthetic import RunSpec, log_spaced_steps, planted_dip, sigmoid_curve, write_run
from probes.ushape import find_u_shapes_in_runs

MODELS = ["pythia-14m", "pythia-70m", "pythia-160m", "pythia-410m", "pythia-1.4b"]
BUDGETS = [10**7, 10**8, 10**9, 3 * 10**9]


def build_grid(root: Path, n_ckpt: int, n_par: int, n_pairs: int, seeds: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paradigms = [f"paradigm_{i:03d}" for i in range(n_par)]
    phenomena = [f"phenomenon_{i % 15:02d}" for i in range(n_par)]
    mids, tops = rng.uniform(6.0, 9.0, n_par), rng.uniform(0.55, 0.98, n_par)
    planted = rng.random(n_par) < 0.1  # ~12 paradigms dip
    runs = []
    for mi, model in enumerate(MODELS):
        for budget in BUDGETS:
            # 10,000 optimizer steps per run whatever the budget: the batch scales with the budget
            per_step = budget // 10_000
            steps = log_spaced_steps(n_ckpt, 10_000)
            x = log_tokens(steps * per_step)
            curves = np.stack([
                sigmoid_curve(x, 0.5, min(0.99, tops[p] + 0.02 * mi), mids[p] - 0.2 * mi, 2.0)
                - (planted_dip(x, 0.2, mids[p] - 0.5, 0.3) if planted[p] else 0.0)
                for p in range(n_par)], axis=1)
            for seed in range(1, seeds + 1):
                d = root / f"{model}_{budget}_s{seed}"
                if not (d / ".complete").exists():
                    shutil.rmtree(d, ignore_errors=True)
                    spec = RunSpec(model=model, budget=budget, seed=seed, tokens_per_step=per_step,
                                   steps=list(steps), benchmark="zhoblimp_synth")
                    write_run(d, spec, np.clip(curves, 0, 1), paradigms, phenomena, n_pairs, rng)
                    (d / ".complete").touch()
                runs.append(d)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path("/tmp/sd_scale_grid"))
    ap.add_argument("--regen", action="store_true")
    ap.add_argument("--checkpoints", type=int, default=47)
    ap.add_argument("--paradigms", type=int, default=118)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="report directory (default ROOT/report)")
    a = ap.parse_args()
    if a.regen:
        shutil.rmtree(a.root, ignore_errors=True)
    t = time.perf_counter()
    runs = build_grid(a.root, a.checkpoints, a.paradigms, a.pairs, a.seeds)
    print(f"grid: {len(runs)} runs x {a.checkpoints} checkpoints x {a.paradigms} paradigms x {a.pairs} pairs "
          f"= {len(runs) * a.checkpoints * a.paradigms * a.pairs / 1e6:.0f}M per-pair rows "
          f"({time.perf_counter() - t:.0f} s to build or find)")
    stages = {}
    t0 = time.perf_counter()
    ev = load_runs(runs)
    stages["read per-pair rows (load_runs)"] = time.perf_counter() - t0
    t = time.perf_counter()
    bootstrap_paradigm_intervals(ev.table)
    phen = phenomenon_table(ev.table)
    seed_summary(ev.table, ["model", "budget", "benchmark", "phenomenon", "paradigm", "step"])
    stages["bootstrap over pairs + seed intervals"] = time.perf_counter() - t
    t = time.perf_counter()
    us, _ = find_u_shapes_in_runs(ev)
    stages[f"U-shapes ({int(us.accepted.sum())} accepted of {len(us)})"] = time.perf_counter() - t
    t = time.perf_counter()
    aoa_table(ev.table, phen)
    stages["AoA + forgettability"] = time.perf_counter() - t
    t = time.perf_counter()
    res = build_report(ev, a.out or a.root / "report", ReportConfig())
    stages[f"full report ({len(res['figures'])} figures)"] = time.perf_counter() - t
    for k, v in stages.items():
        print(f"  {k:45s} {v:6.1f} s")
    total = stages["read per-pair rows (load_runs)"] + stages[next(k for k in stages if k.startswith("full report"))]
    print(f"end to end (read + report): {total:.1f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"report: {(a.out or a.root / 'report') / 'report.md'}")


if __name__ == "__main__":
    main()
