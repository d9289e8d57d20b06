"""`python -m probes score-run` on a run directory: a generated benchmark regenerated with the run's own
settings (its config.yaml), and eval files of an older scoring convention scored again."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from probeutil import tiny_neox, word_tokenizer
from probes.__main__ import main as probes_main
from probes.benchmarks.registry import load_benchmark
from probes.evals.files import CONVENTION, eval_path, pair_set
from probes.evals.config import BenchmarkConfig, LanguageAConfig
from probes.scoring.primitive import score_pairs
from probes.scoring.store import read_pairs, write_pairs
from train.checkpoint import write_manifest

RECORDS = [{"sentence_good": f"the {n} {v} .", "sentence_bad": f"the {n} {w} .", "UID": "sv",
            "linguistics_term": "agreement", "pairID": str(i)}
           for i, (n, v, w) in enumerate([("cat", "runs", "run"), ("cats", "run", "runs"), ("dog", "sees", "see")])]


def checkpoint(run: Path, step: int = 0, positions: int = 32) -> Path:
    """A whole checkpoint as the trainer leaves it (weights, tokenizer, trainer_state.json, manifest)."""
    ckpt = run / "checkpoints" / f"step{step}"
    ckpt.mkdir(parents=True)
    model = tiny_neox(seed=step)
    model.config.max_position_embeddings = positions  # rotary positions: no weight depends on it
    model.save_pretrained(ckpt)
    word_tokenizer().save_pretrained(ckpt)
    state = {"step": step, "tokens": step * 256, "total_steps": 4, "config_hash": "c0ffee"}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    write_manifest(ckpt, state, param_count=0)
    return ckpt


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_generated_benchmark_is_regenerated_with_the_runs_settings(tmp_path, capsys):
    run = tmp_path / "run"
    checkpoint(run, positions=256)  # Language A's prompts are long for a word-level tokenizer
    # The run probed Language A with 2 pairs per paradigm and no demonstration (defaults: 50 and 1).
    own = {"name": "elagent_word_order", "language_a": {"shots": 0, "pairs_per_paradigm": 2, "seed": 3}}
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "probes": {
        "benchmarks": ["grammar", own], "max_pairs_per_paradigm": None}}))
    assert probes_main(["score-run", str(run), "--benchmark", "elagent_word_order", "--device", "cpu",
                        "--batch-size", "8"]) == 0
    df, meta = read_pairs(eval_path(run, 0, "elagent_word_order"))
    want = load_benchmark(BenchmarkConfig(name="elagent_word_order",
                                          language_a=LanguageAConfig(shots=0, pairs_per_paradigm=2, seed=3)))
    default = load_benchmark(BenchmarkConfig(name="elagent_word_order"))
    assert len(want) < len(default)  # the settings change the pairs: the test can tell them apart
    assert meta["pair_set"] == pair_set(want) != pair_set(default)
    assert df.good.tolist() == [p.good for p in want]
    assert "generated with the run's own settings" in capsys.readouterr().out


def test_eval_files_of_an_older_convention_are_scored_again(tmp_path, capsys):
    run = tmp_path / "run"
    ckpt = checkpoint(run)
    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    pairs = load_benchmark(BenchmarkConfig(name="mini", path=str(bench)))
    tok = word_tokenizer()
    model = tiny_neox(seed=0)
    now = score_pairs(model, tok, pairs, batch_size=4)
    # What the scorer wrote before v2 (BOS-conditioned), with lps that are not the current ones.
    old = now.assign(lp_good=now.lp_good - 1.0, lp_bad=now.lp_bad + 1.0)
    path = eval_path(run, 0, "mini")
    path.parent.mkdir(parents=True)
    write_pairs(old, path, {"step": 0, "tokens": 0, "benchmark": "mini", "convention": "bos_all_tokens_v1",
                            "pair_set": pair_set(pairs)})
    assert read_pairs(path)[1]["convention"] == "bos_all_tokens_v1"
    argv = ["score-run", str(run), "--benchmark", str(bench), "--device", "cpu", "--batch-size", "4"]
    assert probes_main(argv) == 0
    df, meta = read_pairs(path)
    assert meta["convention"] == CONVENTION and meta["model_dir"] == str(ckpt)
    # Bitwise: this process scored the same pairs with the same weights, batch size and kernels.
    pd.testing.assert_series_equal(df.lp_good, now.lp_good)
    pd.testing.assert_series_equal(df.lp_bad, now.lp_bad)
    # Now current: a second score-run leaves the file alone.
    before = path.stat().st_mtime_ns
    assert probes_main(argv) == 0 and path.stat().st_mtime_ns == before
    assert "0 eval files written" in capsys.readouterr().out


def test_another_sample_size_is_refused_then_replaced_and_the_curves_redrawn(tmp_path, capsys):
    """score-run never silently replaces a run's results of another pair sample (issue 36 item 7): one
    `error:` line naming the file and --replace; with --replace the run's curves/ are drawn again."""
    run = tmp_path / "run"
    checkpoint(run)
    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    argv = ["score-run", str(run), "--benchmark", str(bench), "--device", "cpu", "--batch-size", "4"]
    assert probes_main([*argv, "--max-pairs-per-paradigm", "1"]) == 0  # the in-loop sample, as it were
    assert probes_main(["curves", str(run), "--out", str(run / "curves")]) == 0
    path, drawn = eval_path(run, 0, "mini"), {p: p.stat().st_mtime_ns for p in (run / "curves").rglob("*.csv")}
    before = path.stat().st_mtime_ns
    capsys.readouterr()
    assert probes_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {path} (1 pairs; asked for 3)") and "--replace" in err
    assert path.stat().st_mtime_ns == before
    assert probes_main([*argv, "--replace"]) == 0
    assert read_pairs(path)[1]["n_pairs"] == 3
    assert drawn and all(p.stat().st_mtime_ns != t for p, t in drawn.items())  # curves/ drawn from the new files
