"""The start-up summary every run prints, and the recipes too short to mean anything named at start
(issue 29 item 2, issue 27 item 6's warnings)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainutil import compose_cfg, tiny_cfg
from train.config import to_typed
from train.loop import train
from train.summary import planned_steps_of, recipe_warnings

ROOT = Path(__file__).resolve().parents[1]


def _warnings(*overrides):
    cfg = to_typed(compose_cfg(list(overrides)))
    steps = planned_steps_of(cfg)
    return steps, "\n".join(recipe_warnings(cfg, steps, cfg.data.seq_len or cfg.model.max_position_embeddings))


@pytest.mark.parametrize("budget,steps,warm", [(10_000_000, 4, 1), (100_000_000, 47, 1), (1_000_000_000, 476, 5),
                                               (3_000_000_000, 1430, 15)])
def test_pythia_recipe_on_small_budgets_warns_naming_the_keys(budget, steps, warm):
    # issue 27's figures: optim=pythia schedule=pythia gives 4/47/476/1,430 steps and 1-15 warm-up updates
    n, text = _warnings("model=pythia-14m", "optim=pythia", "schedule=pythia", "data.seq_len=2048",
                        f"data.budget_tokens={budget}")
    assert n == steps  # 1024 x 2048 = 2,097,152 tokens per step
    assert f"warm-up of {warm} update" in text and "optim.warmup_ratio=0.01" in text
    if steps < 100:
        assert f"only {steps} optimizer steps" in text and "data.budget_tokens" in text and "optim.global_batch=1024" in text
    if steps < 512:
        assert "schedule=pythia" in text


def test_log_schedule_that_collapses_names_n_log():
    n, text = _warnings("experiment=demo", "data.budget_tokens=40000")  # 32 x 64 tokens: 19 steps
    assert n == 19 and "schedule.n_log=20 asks for 21" in text
    assert "schedule.n_log" not in _warnings("experiment=demo", "data.budget_tokens=200000")[1]  # 18 of 21


def test_a_long_enough_recipe_is_not_warned():
    n, text = _warnings("model=pythia-14m", "optim=zhoblimp", "schedule=log", "data.seq_len=64",
                       "data.budget_tokens=1000000000")  # the grid's 1B recipe: 61,035 steps
    assert n > 10_000 and text == ""


def test_every_run_prints_the_summary(tmp_path, capsys):
    train(tiny_cfg(tmp_path / "cache"), tmp_path / "run")
    out, err = capsys.readouterr()
    head = out[out.index("run directory:"):].splitlines()[:7]
    assert head[0] == f"run directory: {tmp_path / 'run'}"
    assert head[1].startswith("model: tiny, ") and " parameters " in head[1]
    assert head[2].startswith("tokenizer: sentencepiece, 400 ids")
    assert head[3].startswith("steps: 60 x 256 tokens (optim.global_batch=8 x seq_len 32)")
    assert head[4].startswith("warm-up: 1 update, then cosine")  # ceil(0.01 x 60)
    assert head[5].startswith("checkpoints: 5 (schedule=log: 0, 1, 4, 15, 60)")
    assert head[6] == "probes at every checkpoint: grammar (50 pairs)"  # 5 paradigms x max_pairs_per_paradigm=10
    assert "warning: only 60 optimizer steps" in err and "warning: warm-up of 1 update" in err


def test_cli_toy_budget_warns_before_reading_the_corpus(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline")
    p = subprocess.run([sys.executable, "-m", "train", "data.budget_tokens=5000", "logger=none",
                        f"hydra.run.dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'cache'}"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    first = p.stderr.splitlines()[0]
    assert first.startswith("warning: only 0 optimizer steps: data.budget_tokens=5,000 / (optim.global_batch=1024"), p.stderr
    assert "data.seq_len=128" in first  # the tiny model's positions


def test_run_directory_of_the_whole_corpus_says_full():
    """`tiny-bNone-s0` said None where the plots say "budget full"."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from train.config import register

    register()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=demo"], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        assert (cfg.hydra.run.dir, cfg.hydra.sweep.subdir) == ("runs/demo/tiny-bfull-s0", "tiny-bfull-s0")
        cfg = compose("config", overrides=["experiment=demo", "data.budget_tokens=1000"], return_hydra_config=True)
        assert cfg.hydra.run.dir == "runs/demo/tiny-b1000-s0"
