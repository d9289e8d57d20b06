"""experiment=zhoblimp_grid expands, through Hydra's own sweeper code, to the 60-run ZhoBLiMP design."""
from __future__ import annotations

import itertools

import pytest

from train.grid import GridError, compose_run, expand

MODELS = ["pythia-14m", "pythia-70m", "pythia-160m", "pythia-410m", "pythia-1.4b"]
BUDGETS = {"10M": 10_000_000, "100M": 100_000_000, "1B": 1_000_000_000, "3B": 3_000_000_000}
# Biderman et al. 2023, Table 1 (the pythia preset's per-size peak lr).
PYTHIA_LR = {"pythia-14m": 1e-3, "pythia-70m": 1e-3, "pythia-160m": 6e-4, "pythia-410m": 3e-4,
             "pythia-1.4b": 2e-4}


def test_the_grid_is_five_sizes_by_four_budgets_by_three_seeds():
    runs = expand(["experiment=zhoblimp_grid"])
    assert len(runs) == 60
    keys = {tuple(sorted(o for o in run if not o.startswith("experiment="))) for run in runs}
    want = {tuple(sorted([f"model={m}", f"budget={b}", f"seed={s}"]))
            for m, b, s in itertools.product(MODELS, BUDGETS, range(3))}
    assert keys == want


def test_each_size_gets_its_hyperparameters_and_budgets_count_tokens():
    for model in MODELS:
        cfg, choices = compose_run(["experiment=zhoblimp_grid", f"model={model}", "budget=1B", "seed=2"])
        assert (cfg.model.name, cfg.data.budget_tokens, cfg.seed, cfg.data.seed) == (model, 10**9, 2, 2)
        assert cfg.optim.lr == 6e-4 and cfg.optim.warmup_ratio == 0.1 and cfg.optim.decay == "cosine"
        assert cfg.schedule.unit == "tokens" and cfg.data.epochs == 1
        # the paper's "batch size of 256 x 64 tokens": 16,384 tokens per optimizer step
        assert (cfg.optim.global_batch, cfg.data.seq_len) == (256, 64)
        # every checkpoint on all 300 pairs of every paradigm (the in-loop 50-pair sample is for demos)
        assert cfg.probes.max_pairs_per_paradigm is None
        assert [b.max_pairs_per_paradigm for b in cfg.probes.resolved_benchmarks()] == [None]
        assert choices["optim"] == "zhoblimp" and "preset=zhoblimp" in cfg.logger.tags
        pythia, _ = compose_run(["experiment=zhoblimp_grid", f"model={model}", "optim=pythia"])
        assert pythia.optim.lr == PYTHIA_LR[model] and pythia.optim.min_lr_ratio == 0.1
        assert pythia.optim.global_batch == 1024 and pythia.optim.warmup_ratio == 0.01
        assert "preset=pythia" in pythia.logger.tags


def test_a_command_line_value_replaces_a_sweep_axis():
    runs = expand(["experiment=zhoblimp_grid", "model=pythia-70m", "seed=0,1"])
    assert len(runs) == 8
    assert {o for run in runs for o in run if o.startswith("model=")} == {"model=pythia-70m"}


@pytest.mark.parametrize("override, message", [
    ("budget=5M,10M", r"unknown budget '5M' in the grid: configs/budget/ has 100M, 10M, 1B, 2M, 3B, 500k"),
    ("model=pythia-99m", r"unknown model 'pythia-99m'.*pythia-14m"),
])
def test_an_unknown_model_or_budget_is_refused_with_the_options(override, message):
    with pytest.raises(GridError, match=message):
        expand(["experiment=zhoblimp_grid", override])


def test_the_laptop_grid_has_the_papers_shape_at_small_scale():
    """experiment=zhoblimp_mini: 3 sizes x 2 budgets x 2 seeds on the zh corpus; a ZhoBLiMP sample in the loop
    and every pair at the last checkpoint; the paper's 64-token sequences, warmup 0.1, cosine, one epoch."""
    runs = expand(["experiment=zhoblimp_mini"])
    assert len(runs) == 12
    sizes = {}
    for run in runs:
        cfg, choices = compose_run(run)
        assert cfg.data.paths[0].endswith("shared/corpora/zh") and cfg.data.epochs == 1
        assert (cfg.data.seq_len, cfg.optim.global_batch, cfg.optim.warmup_ratio) == (64, 64, 0.1)
        assert cfg.probes.benchmarks == ["zhoblimp"] and cfg.probes.max_pairs_per_paradigm == 30
        assert cfg.probes.final_all_pairs and cfg.probes.unigram and cfg.engine.kind == "torch"
        sizes[cfg.model.name] = cfg.model.hidden_size
        assert cfg.data.budget_tokens in (500_000, 2_000_000) and cfg.seed in (0, 1)
    assert sizes == {"mini-0.41m": 32, "mini-0.87m": 64, "mini-1.6m": 96}


def test_the_mini_model_names_carry_their_parameter_counts():
    from train.model import build_model, count_parameters
    from probes.analysis.evalset import parse_model_params

    for name in ("mini-0.41m", "mini-0.87m", "mini-1.6m"):
        cfg, _ = compose_run(["experiment=zhoblimp_mini", f"model={name}"])
        n = count_parameters(build_model(cfg.model, cfg.tokenizer.vocab_size, device="meta"))
        assert abs(n - parse_model_params(name)) / n < 0.03, (name, n)


@pytest.mark.parametrize("grid", [
    ["experiment=zhoblimp_grid"], ["experiment=zhoblimp_mini"],
    # a plain value and a group axis beside a key the group's option also sets (composed whole)
    ["experiment=zhoblimp_mini", "optim.lr=1e-3,2e-3", "data.seed=5"],
    ["model=tiny,pythia-14m", "model.hidden_size=32,64", "seed=0,3"],
])
def test_a_grid_composed_once_gives_every_runs_own_composition(grid):
    """Issue 45: `train plan`/`train slurm` compose the grid's first run and each sweep value's change once
    (train/grid.py _Grid); every run's typed config and Hydra choices equal composing that run alone."""
    from train.grid import _compose_run, hydra_context

    runs = expand(grid)
    every = 5 if len(runs) > 20 else 1  # composing each run whole is the slow part: every 5th of the 60
    with hydra_context():
        fast = [compose_run(run) for run in runs]
        whole = [_compose_run(run) for run in runs[::every]]
    for run, (cfg, choices), (want, want_choices) in zip(runs[::every], fast[::every], whole):
        assert cfg == want and choices == want_choices, run
        assert type(cfg.probes) is type(want.probes) and cfg.logger.tags == want.logger.tags
    assert len({repr(c) for c, _ in fast}) == len(runs)  # every run its own config


def test_initialisation_and_data_order_seeds_cross_in_one_sweep_each_run_its_own_directory():
    """Issue 42 item 4: `seed` seeds the initialisation and data.seed (default ${seed}) the data order; a crossed
    design `-m seed=0,1 data.seed=0,1` gives four runs in four directories (all four were `-s0`/`-s1` before,
    two runs a directory), while a run with data.seed=${seed} keeps its old name."""
    from omegaconf import OmegaConf
    from train.grid import _compose, hydra_context, run_subdir

    runs = expand(["model=tiny", "seed=0,1", "data.seed=0,1"])
    with hydra_context():
        cfgs = [compose_run(run)[0] for run in runs]
        dirs = [OmegaConf.select(_compose(run, with_hydra=True), "hydra.run.dir") for run in runs]
        default = compose_run(["model=tiny", "seed=3"])[0]
    assert [(c.seed, c.data.seed) for c in cfgs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [run_subdir(c) for c in cfgs] == ["tiny-bfull-s0", "tiny-bfull-s0-d1", "tiny-bfull-s1-d0", "tiny-bfull-s1"]
    assert dirs == [f"runs/default/{run_subdir(c)}" for c in cfgs]
    assert (default.data.seed, run_subdir(default)) == (3, "tiny-bfull-s3")
