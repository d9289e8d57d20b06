"""lm-eval beside our probes (probes/lmeval, docs/lm_eval.md), on a real tiny run probed in the loop with both
the grammar pairs and the lm-eval task `probes lm-eval-tasks` writes from the same pairs.

The agreement bound: both sides run the same float32 forward pass of the same weights on the same ids, in
other batches (other padding, other kernels' summation order). Each lp of a token is a logit minus a
logsumexp whose inputs went through dot products of at most K = intermediate_size = 128 terms; float32
rounding of such a sum is within K * eps32 of its magnitude, and the magnitudes here are the log-probs
themselves plus log V (the logsumexp's scale). Over a sentence of n tokens: |lp_a - lp_b| <=
n * K * eps32 * (|lp|/n + log V). A space before the sentence or another start token moves lps by nats.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from trainutil import tiny_cfg
from probes.lmeval.hook import file_name
from probes.lmeval.run import run_tasks
from probes.lmeval.tasks import write_task
from probes.scoring.hook import _load_benchmarks
from probes.scoring.store import read_pairs
from train.checkpoint import list_checkpoints
from train.loop import train
from train.start_token import scoring_start_id

pytest.importorskip("lm_eval")  # the lm-eval extra (scripts/setup.sh installs it for the tests)
ROOT = Path(__file__).resolve().parents[1]
TASK = "sd_grammar"
EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    cache, run_dir, tasks = (tmp_path_factory.mktemp(n) for n in ("cache", "run", "tasks"))
    pairs = _load_benchmarks(tiny_cfg(cache).probes)["grammar"]  # the pairs the probe hook scores
    write_task(pairs, "grammar", tasks)
    cfg = tiny_cfg(cache, f"probes.lm_eval.tasks=[{TASK}]", f"probes.lm_eval.include_path={tasks}")
    train(cfg, run_dir)
    return run_dir, tasks


def agreement(lm: pd.DataFrame, ours: pd.DataFrame, vocab: int, hidden: int = 128) -> tuple[float, float]:
    """(largest |lp difference| / its float32 bound over both sentences of every pair, share of pairs
    whose sum-LP decision differs). lm-eval's lls are [bad, good] (tasks.py)."""
    m = ours.merge(lm, on=["paradigm", "pair_id"], validate="one_to_one")
    assert len(m) == len(ours) == len(lm)
    worst = 0.0
    for side, i in (("bad", 0), ("good", 1)):
        lp = m[f"lp_{side}"].to_numpy()
        other = np.array([lls[i] for lls in m["lls"]])
        bound = m[f"ntok_{side}"].to_numpy() * hidden * EPS32 * (np.abs(lp) / m[f"ntok_{side}"] + math.log(vocab))
        worst = max(worst, float(np.max(np.abs(lp - other) / bound)))
    flips = float(np.mean((m.lp_good > m.lp_bad).to_numpy() != (m.acc == 1.0).to_numpy()))
    return worst, flips


def test_lm_eval_results_at_every_checkpoint_through_the_eval_contract(run):
    d, tasks = run
    steps = [s for s, _ in list_checkpoints(d)]
    assert len(steps) >= 4
    for s in steps:
        df, meta = read_pairs(d / "evals" / f"step{s}" / f"{file_name(TASK)}.parquet")
        pairs, _ = read_pairs(d / "evals" / f"step{s}" / "grammar.parquet")
        assert meta["kind"] == "lm_eval" and meta["task"] == TASK and meta["step"] == s
        assert meta["manifest"] and meta["convention"] == pairs.attrs.get("convention", meta["convention"])
        assert len(df) == len(pairs) and all(len(x) == 2 for x in df.lls)  # per-sample log-likelihoods kept
        # lm-eval's aggregate is the mean of its per-sample acc, which is our sum-LP accuracy
        assert meta["summary"]["acc"] == pytest.approx(df.acc.mean())
        assert meta["summary"]["acc"] == pytest.approx((pairs.lp_good > pairs.lp_bad).mean())


def test_lm_eval_and_probes_score_agree_on_the_last_checkpoint(run):
    d, _ = run
    step, ckpt = list_checkpoints(d)[-1]
    lm, _ = read_pairs(d / "evals" / f"step{step}" / f"{file_name(TASK)}.parquet")
    ours, _ = read_pairs(d / "evals" / f"step{step}" / "grammar.parquet")
    tok = AutoTokenizer.from_pretrained(ckpt)
    worst, flips = agreement(lm, ours, len(tok))
    assert worst <= 1.0 and flips == 0.0


def test_a_wrong_start_token_is_caught(run):
    """Planted: lm-eval's empty context conditioned on another token than the start token."""
    d, tasks = run
    step, ckpt = list_checkpoints(d)[-1]
    ours, _ = read_pairs(d / "evals" / f"step{step}" / "grammar.parquet")
    tok, model = AutoTokenizer.from_pretrained(ckpt), GPTNeoXForCausalLM.from_pretrained(ckpt)
    other = (scoring_start_id(tok, ckpt) + 1) % len(tok)
    lm, _ = run_tasks(model, tok, [TASK], include_path=str(tasks), start_id=other)
    worst, _ = agreement(lm, ours, len(tok))
    assert worst > 100.0  # far outside the float32 bound


def _bpe_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """A byte-level BPE as Pythia's: a leading space is part of the first token (" the" != "the")."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


@pytest.mark.parametrize("delimiter, agrees", [("", True), (" ", False)])
def test_the_delimiter_matters_with_a_bpe_tokenizer(tmp_path, delimiter, agrees):
    """Our sentencepiece tokenizer strips a leading space (its normalizer), so lm-eval's default " " delimiter
    is a no-op there; with a byte-level BPE it changes the first token. Planted: the default delimiter."""
    from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
    from probes.scoring.primitive import score_pairs

    pairs = load_benchmark(BenchmarkConfig(name="grammar", max_pairs_per_paradigm=3))
    tok = _bpe_tokenizer([t for p in pairs for t in (p.good, p.bad)])
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=128,
                                             max_position_embeddings=64)).eval()
    yaml = Path(write_task(pairs, "grammar", tmp_path))
    yaml.write_text(yaml.read_text().replace('target_delimiter: ""', f"target_delimiter: {delimiter!r}"))
    lm, _ = run_tasks(model, tok, [TASK], include_path=str(tmp_path), start_id=scoring_start_id(tok))
    worst, flips = agreement(lm, score_pairs(model, tok, pairs), len(tok))
    assert (worst <= 1.0 and flips == 0.0) if agrees else worst > 100.0


def test_the_curves_draw_the_lm_eval_task(run, tmp_path):
    from probes.analysis.curves import main as curves_main
    from probes.lmeval.report import lmeval_section

    d, _ = run
    assert curves_main([str(d), "--out", str(tmp_path / "c")]) == 0
    table = pd.read_csv(tmp_path / "c" / "lm_eval.csv")
    assert sorted(table[table.metric == "acc"].step) == [s for s, _ in list_checkpoints(d)]
    assert (tmp_path / "c" / "plots" / f"lm_eval_{d.name}.png").stat().st_size > 0
    md, figs = lmeval_section([(d.name, d, "tiny", None)], tmp_path / "r")
    assert md[0].startswith("## lm-eval tasks") and figs[0][1].is_file()


def test_without_lm_eval_the_key_fails_at_start_with_the_install_command(tmp_path):
    code = ("import runpy, sys; sys.modules['lm_eval'] = None; "
            "runpy.run_module('train', run_name='__main__', alter_sys=True)")
    done = subprocess.run([sys.executable, "-c", code, f"probes.lm_eval.tasks=[{TASK}]",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: probes.lm_eval.tasks needs lm-eval") and "`pip install -e .[lm-eval]`" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_lm_eval_tasks_writes_a_task_of_our_pairs(tmp_path):
    from probes.__main__ import main

    assert main(["lm-eval-tasks", "--benchmark", "grammar", "--max-pairs-per-paradigm", "2", "--out",
                 str(tmp_path)]) == 0
    rows = pd.read_json(tmp_path / "sd_grammar.jsonl", lines=True)
    assert {"sentence_good", "sentence_bad", "paradigm", "pair_id"} <= set(rows.columns) and len(rows)
    text = (tmp_path / "sd_grammar.yaml").read_text()
    assert 'target_delimiter: ""' in text and "doc_to_target: 1" in text and str(tmp_path.resolve()) in text


def test_a_malformed_task_yaml_is_named_with_its_parse_error(tmp_path):
    """Issue 38 item 10: a task YAML that does not parse was reported as "unknown task", the parse error hidden."""
    from probes.lmeval.run import check_tasks

    assert main_tasks(tmp_path) == 0
    yaml_file = tmp_path / f"{TASK}.yaml"
    yaml_file.write_text(yaml_file.read_text() + "metric_list: [unclosed\n")
    with pytest.raises(ValueError, match=rf"^{yaml_file}: not valid YAML \(.*line \d+.*\); lm-eval skipped that file"):
        check_tasks([TASK], str(tmp_path))


def main_tasks(out: Path) -> int:
    from probes.__main__ import main

    return main(["lm-eval-tasks", "--benchmark", "grammar", "--max-pairs-per-paradigm", "2", "--out", str(out)])
