"""The trainer finds its checkpoint hooks through the config: the `probes` section's `_target_` names the
dataclass that types it (probes.scoring.hook.ProbesConfig), train/ imports none of it, and a bad key is
still refused at start, naming the key, with exit status 2."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainutil import TINY, compose_cfg
from train.config import to_typed
from train.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_the_section_is_typed_by_its_target():
    cfg = to_typed(compose_cfg([*TINY, "probes.elagent.enabled=true", "probes.syntax_qa.k_per_tuple=2"]))
    assert type(cfg.probes).__module__ == "probes.scoring.hook" and type(cfg.probes).__name__ == "ProbesConfig"
    # keys the preset (configs/probes/grammar.yaml) leaves out are set like any other, then typed
    assert cfg.probes.elagent.enabled is True and cfg.probes.syntax_qa.k_per_tuple == 2
    assert cfg.probes.unigram is True  # the dataclass's default fills what no YAML names


@pytest.mark.parametrize("override, message", [
    ("probes.max_pairs_per_paradim=3", "unknown config key 'probes.max_pairs_per_paradim': not a field of ProbesConfig"),
    ("probes.syntax_qa.enabeld=true", "unknown config key 'probes.syntax_qa.enabeld': not a field of SyntaxQAConfig"),
    ("probes.batch_size=abc", "probes.batch_size: Value 'abc' of type 'str' could not be converted to Integer"),
    ("probes._target_=train.config.procs_per_node", "probes._target_='train.config.procs_per_node' is not a dataclass"),
])
def test_a_bad_key_is_refused_naming_it(override, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        to_typed(compose_cfg([*TINY, override]))


def test_the_command_line_refuses_it_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "train", "probes.syntax_qa.enabeld=true",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: unknown config key 'probes.syntax_qa.enabeld': not a field of SyntaxQAConfig (enabled, mode, "
        "sources, knowledge_points, question_types, k_per_tuple, seed, shots, shot_seeds, max_items, "
        "max_sentences, generate, max_new_tokens, batch_size, paper); check its spelling (keys added with + are "
        "checked too)"]
    assert not (tmp_path / "run" / "checkpoints").exists()
