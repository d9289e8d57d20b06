"""Issue 44 X1/X2: a run folder is data. An import path in its config.yaml (`probes._target_`, `data.generator`)
reaches this project's own code only (train/names.py), refused in one line naming the key before anything is
imported or called, by every command that reads it (`batch`, `neox --run`) and by the trainer's composition."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
ZEN = "Beautiful is better than ugly"


def run_dir(tmp_path: Path, key: str, value: str) -> Path:
    """A run folder as the trainer writes it (a real run's config.yaml) with one import path replaced."""
    from trainutil import TINY, compose_cfg
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose_cfg([*TINY, f"data.cache_dir={tmp_path / 'cache'}"]), resolve=True)
    section, name = key.split(".")
    cfg[section][name] = value
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"})


REFUSED = "not a name in this project's packages (train, probes); a run config may name only their code, nothing else is imported"


@pytest.mark.parametrize("key, value", [("probes._target_", "this.ProbesConfig"), ("data.generator", "builtins.print")])
def test_batch_and_neox_refuse_a_foreign_name_before_running_it(tmp_path, key, value):
    run = run_dir(tmp_path, key, value)
    want = f"error: {run / 'config.yaml'}: {key}={value!r}: {REFUSED}"
    done = cli("batch", str(run), "--step", "1")
    assert ZEN not in done.stdout and "grammar" not in done.stdout  # X1: the Zen; X2: print(GrammarConfig(...))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [want]
    done = cli("neox", "--run", str(run), "--out", str(tmp_path / "neox"))
    assert ZEN not in done.stdout and done.returncode == 2 and done.stderr.strip().splitlines() == [want]
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("override, message", [
    ("data.generator=os.system", "data.generator='os.system': " + REFUSED),
    ("probes._target_=subprocess.Popen", "probes._target_='subprocess.Popen': " + REFUSED),
    # inside our packages, but not defined there (json imported into the module) or not a marked generator
    ("probes._target_=train.corpus.json", "probes._target_='train.corpus.json' is not defined in this project's packages"),
])
def test_the_composed_config_is_held_to_the_same_names(override, message):
    from trainutil import TINY, compose_cfg
    from train.config import to_typed

    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        to_typed(compose_cfg([*TINY, override]))


def test_a_function_of_ours_that_is_not_a_generator_is_not_called(tmp_path):
    from train.corpus import DataConfig, load_documents

    cfg = DataConfig(generator="train.corpus.load_documents", cache_dir=str(tmp_path))  # would recurse into itself
    with pytest.raises(ConfigError, match=re.escape("data.generator='train.corpus.load_documents' is not a corpus "
                                                    "generator (@train.corpus.generator)")):
        load_documents(cfg)
    assert load_documents(DataConfig(generator="probes.benchmarks.grammar.corpus_documents",
                                     cache_dir=str(tmp_path)))[0].num_rows == 2000
