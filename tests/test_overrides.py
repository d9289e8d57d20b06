"""Typos and impossible values on the command line: one line `error: …` naming the key, exit status 2,
nothing written into the run directory (issue 25 item 11, issue 29 item 5)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainutil import compose_cfg
from train.config import to_typed
from train.errors import ConfigError
from train.overrides import check_overrides, config_groups

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("arg,message", [
    ("model.hiden_size=64", r"'model.hiden_size'.*did you mean hidden_size"),
    ("+model.hiden_size=64", r"'model.hiden_size'.*did you mean hidden_size"),
    ("optim.global_bach=8", r"did you mean global_batch"),
    ("modle.hidden_size=8", r"'modle.hidden_size'.*did you mean model"),
    ("budgett=10M", r"did you mean budget"),
    ("model=pythia-14", r"model=pythia-14: no such option in configs/model/ \(did you mean pythia-14m"),
    ("optim.global_batch=abc", r"optim.global_batch='abc': expected an integer"),
    ("optim.lr=fast", r"optim.lr='fast': expected a number"),
    ("model.tie_word_embeddings=3", r"expected true or false"),
])
def test_a_typo_is_named_with_the_closest_key(arg, message):
    with pytest.raises(ConfigError, match=message):
        check_overrides([arg])


def test_valid_overrides_pass_unchanged():
    args = ["experiment=demo", "-m", "model=tiny,pythia-14m", "optim.lr=3e-4", "data.budget_tokens=null",
            "hydra.run.dir=x", "hydra/launcher=slurm", "probes.benchmarks=[zhoblimp,blimp]", "seed=3",
            "optim.lr=${model.lr}", "data.paths=[a,b]", "budget=10M", "model.lr=1e-3"]
    assert check_overrides(args) == args


def test_one_path_where_a_list_is_expected_is_a_list():
    assert check_overrides(["data=files", "data.paths=../corpus"]) == ["data=files", "data.paths=[../corpus]"]
    cfg = to_typed(compose_cfg(check_overrides(["data=files", "data.paths=../corpus"])))
    assert cfg.data.paths == ["../corpus"]


def test_groups_are_the_config_directories():
    groups = config_groups()
    assert "pythia-1.4b" in groups["model"] and "hydra" not in groups and "10M" in groups["budget"]


@pytest.mark.parametrize("override,message", [
    ("optim.lr=-1", "optim.lr=-1.0: the peak learning rate must be a positive number"),
    ("optim.lr=nan", "optim.lr=nan: the peak learning rate must be a positive number"),
    ("model.num_attention_heads=0", "model.num_attention_heads=0: must be at least 1"),
    ("model.num_attention_heads=3", "model.hidden_size=64 is not divisible by model.num_attention_heads=3"),
    ("logger.log_every=0", "logger.log_every=0: must be at least 1"),
    ("seed=-1", "seed=-1: seeds must be >= 0"),
    ("optim.warmup_ratio=2", r"optim.warmup_ratio=2.0: expected a fraction in \[0, 1\]"),
    ("optim.min_lr_ratio=-0.1", r"optim.min_lr_ratio=-0.1: expected a fraction"),
    ("data.epochs=0", "data.epochs=0: must be at least 1"),
    ("data.budget_tokens=-5", "data.budget_tokens=-5: must be a positive number"),
])
def test_values_that_cannot_train_are_refused_at_start(override, message):
    with pytest.raises(ValueError, match=message):
        to_typed(compose_cfg([override]))


def _train(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline")
    return subprocess.run([sys.executable, "-m", "train", f"hydra.run.dir={tmp_path / 'run'}", "logger=none",
                           *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_cli_typo_gets_did_you_mean_and_status_2(tmp_path):
    p = _train(tmp_path, "model.hiden_size=64")
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: unknown config key 'model.hiden_size'") and "did you mean hidden_size" in p.stderr
    assert "+model" not in p.stderr and "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_cli_negative_seed_leaves_no_config_behind(tmp_path):
    p = _train(tmp_path, "seed=-1")
    assert p.returncode == 2 and p.stderr.strip() == "error: seed=-1: seeds must be >= 0", p.stderr
    # Hydra may make the empty directory; nothing in it, so the corrected command is not refused as a changed config
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
