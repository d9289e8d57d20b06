"""`python -m train experiment=demo_text`, the README's demo on real text, shortened by overrides to a few
steps: the preset's model, sentencepiece tokenizer, BLiMP and syntax-question probes and end-of-run curves
all run through the real entry point. (The full demo is ~10 minutes; this is ~13 CPU-s.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from train.checkpoint import list_checkpoints
from train.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def test_demo_text_preset_runs_end_to_end_shortened(tmp_path, shared):
    # one real English file instead of the whole 22 MB corpus; 3 steps; 1 BLiMP pair per paradigm
    text = shared("corpora", "en", "onestopenglish", "onestopenglish_ele.txt")
    shared("treebanks", "ud_english_ewt", "en_ewt-ud-test.conllu")  # the preset's syntax-question source
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "train", "experiment=demo_text", f"data.paths=[{text}]", "data.budget_tokens=12288",
           f"data.cache_dir={tmp_path / 'cache'}", "tokenizer.vocab_size=1000", "schedule.n_log=2",
           "probes.max_pairs_per_paradigm=1", "probes.syntax_qa.max_sentences=40", "probes.syntax_qa.max_items=16",
           "logger.wandb=false", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (cfg["experiment"], cfg["model"]["name"], cfg["model"]["num_hidden_layers"]) == ("demo_text", "tiny-4x128", 4)
    # the preset's treebank path is made absolute from where `python -m train` started
    assert cfg["probes"]["syntax_qa"]["sources"] == [f"{ROOT}/../shared/treebanks/ud_english_ewt/en_ewt-ud-test.conllu"]
    steps = [s for s, _ in list_checkpoints(run_dir)]
    assert steps == [0, 1, 3]  # 12,288 tokens trained on: 3 steps (a budget counts tokens trained on)
    assert len(load_tokenizer(list_checkpoints(run_dir)[-1][1])) == 1000  # its own sentencepiece, saved
    for step in steps:
        blimp = pd.read_parquet(run_dir / "evals" / f"step{step}" / "blimp.parquet")
        assert len(blimp) == blimp.paradigm.nunique() == 67  # BLiMP's 67 paradigms, 1 pair each
        qa = pd.read_parquet(run_dir / "evals" / f"step{step}" / "syntax_qa.parquet")
        assert len(qa) == 16 and set(qa.qtype) <= {"TF", "MC", "FITB"}
    curves = run_dir / "curves"
    assert set(pd.read_csv(curves / "curves.csv").benchmark) == {"blimp"}
    assert (curves / "plots" / "blimp" / "overview.png").is_file() and (curves / "plots" / "syntax_qa_run.png").is_file()
    assert (curves / "syntax_qa.csv").is_file()
