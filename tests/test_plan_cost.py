"""train.plan's honest parts: utilisation per size from the measured H100 table (overridable, said in
the output), probing cost per checkpoint, and storage equal to checkpoints.md (issue 29 item 6)."""
import re
from pathlib import Path

import pytest

from train.plan import Hardware, main, plan
from train.plan import BENCHMARK_SIZES, TOKENS_PER_PAIR, parse_mfu

ROOT = Path(__file__).resolve().parents[1]


def test_each_size_gets_its_measured_utilisation_and_probing_is_counted():
    p160, p14 = plan(["experiment=zhoblimp_grid", "model=pythia-160m,pythia-14m", "budget=1B", "seed=0"])
    assert (p160.mfu, p160.mfu_source) == (0.207, "measured, H100")  # bench_gpu.py's H100 figure
    assert p14.mfu == 0.207 and p14.mfu_source == "pythia-160m's, not measured"
    per_hour = 989e12 * 0.207 * 3600
    assert p160.gpu_hours == pytest.approx(6 * p160.params * p160.tokens / per_hour)
    # every checkpoint scores all 118 x 300 ZhoBLiMP pairs (the grid's preset), both sentences forward
    assert p160.probe_pairs == 35_400
    assert p160.probe_hours == pytest.approx(2 * p160.params * 35_400 * TOKENS_PER_PAIR * p160.checkpoints / per_hour)


def test_mfu_overrides_one_size_or_all(capsys):
    util = parse_mfu(["pythia-410m=0.3"])
    assert util.of("pythia-410m", 4e8) == (0.3, "--mfu") and util.of("pythia-1.4b", 1.4e9)[0] == 0.416
    assert parse_mfu(["0.35"]).of("pythia-1.4b", 1.4e9) == (0.35, "--mfu")
    with pytest.raises(ValueError, match="--mfu 2"):
        parse_mfu(["2"])
    assert main(["experiment=zhoblimp_grid", "model=pythia-410m", "budget=10M", "seed=0", "--mfu", "pythia-410m=0.3"]) == 0
    out = capsys.readouterr().out
    assert "pythia-410m 30.0% (--mfu)" in out and "989 TFLOP/s" in out and "probe-h" in out


def test_benchmark_sizes_match_the_registry(shared):
    from probes.benchmarks.registry import BenchmarkConfig, load_benchmark

    shared("benchmarks")
    for name in ("zhoblimp", "climp"):
        pairs = load_benchmark(BenchmarkConfig(name=name))
        paradigms, per = BENCHMARK_SIZES[name]
        assert len({p.paradigm for p in pairs}) == paradigms
        assert abs(len(pairs) - paradigms * per) <= 0.01 * paradigms * per  # the dedup rule drops a few


def test_checkpoints_md_storage_equals_the_plan(monkeypatch):
    """The storage checkpoints.md quotes for the 60-run grid is what the plan prints (it said 4.1 TB
    while the plan printed 3.46 TB: the document predated the grid's current parameter counts)."""
    text = (ROOT / "checkpoints.md").read_text()
    fp32, bf16 = (float(x) for x in re.search(r"about ([\d.]+) TB \(([\d.]+) TB with `schedule.weights_dtype=bf16`\)",
                                               text).groups())
    # the seeds change the data order, not a checkpoint's size: one seed's 20 runs, three times
    grid = ["experiment=zhoblimp_grid", "seed=0"]
    total = 3 * sum(p.storage_bytes for p in plan(grid)) / 1e12
    total_bf16 = 3 * sum(p.storage_bytes for p in plan(grid + ["schedule.weights_dtype=bf16"])) / 1e12
    assert (fp32, bf16) == (round(total, 1), round(total_bf16, 1))


def test_the_plan_warns_about_a_toy_recipe_naming_the_keys(capsys):
    # issue 27's trap: optim=pythia schedule=pythia at 10M tokens is 4 steps with 1 warm-up update
    assert main(["model=pythia-14m", "optim=pythia", "schedule=pythia", "data.seq_len=2048",
                 "data.budget_tokens=10000000"]) == 0
    err = capsys.readouterr().err
    assert "warning: pythia-14m-b10000000-s0: only 4 optimizer steps: data.budget_tokens=10,000,000" in err
    assert "optim.global_batch=1024" in err and "warm-up of 1 update (optim.warmup_ratio=0.01" in err
