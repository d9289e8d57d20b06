"""A real tiny run probed on the ELAGENT tasks: eval files at every checkpoint, then `probes report` and
`probes curves` on it (the ELAGENT section and the form-vs-use view)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, GPTNeoXForCausalLM

from trainutil import tiny_cfg
from probes.elagent.score import ElagentConfig, build_items, option_sequences, score_items
from probes.scoring.primitive import correct
from probes.scoring.store import read_pairs
from train.checkpoint import list_checkpoints
from train.loop import _build_hooks, train

ELAGENT = ["probes.elagent.enabled=true", "probes.elagent.items_per_paradigm=3", "probes.elagent.shots=1",
           "probes.benchmarks=[{name: grammar, max_pairs_per_paradigm: 10}, {name: elagent_word_order, "
           "language_a: {shots: 1, pairs_per_paradigm: 4}}]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    cache, run_dir = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("run")
    # the grammar-corpus tokenizer spells the prompts' digits and underscores piece by piece: long items
    cfg = tiny_cfg(cache, "model.max_position_embeddings=1024", "schedule.n_log=6", *ELAGENT)
    train(cfg, run_dir)
    return cache, run_dir


def test_every_checkpoint_has_both_elagent_evals(run):
    _, d = run
    steps = [s for s, _ in list_checkpoints(d)]
    assert len(steps) >= 6
    for s in steps:
        items, meta = read_pairs(d / "evals" / f"step{s}" / "elagent.parquet")
        pairs, _ = read_pairs(d / "evals" / f"step{s}" / "elagent_word_order.parquet")
        assert meta["kind"] == "elagent" and meta["step"] == s and meta["config"]["shots"] == 1
        # 2 precedence + 3 bAbI + 8 predicate paradigms, 3 items each; 4 word-order paradigms x 4 pairs
        assert len(items) == 13 * 3 and set(items.task) == {"precedence", "babi", "predicates"}
        assert len(pairs) == 16 and set(pairs.phenomenon) == {"language_a_word_order"}
        assert meta["summary"]["all/acc"] == pytest.approx(items.correct_sum.mean())
        # both curves, labelled: the letter and the context pair
        assert meta["scored"] == {"acc": "letter", "acc_pair": "context pair"}
        assert meta["summary"]["all/acc_pair"] == pytest.approx(items.correct_pair.mean())
        assert set(items.correct_pair) <= {0.0, 0.5, 1.0}
        assert meta["summary"]["babi/acc_random"] == pytest.approx(0.25)


def test_the_stored_option_scores_are_the_saved_checkpoints(run):
    _, d = run
    step, ckpt = list_checkpoints(d)[-1]
    stored, meta = read_pairs(d / "evals" / f"step{step}" / "elagent.parquet")
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = GPTNeoXForCausalLM.from_pretrained(ckpt)
    items = build_items(ElagentConfig(**meta["config"]))
    again = score_items(model, tok, items[::7])
    for a, (_, s) in zip(again.itertuples(), stored.iloc[::7].iterrows()):
        assert a.item_id == s.item_id and list(a.options) == list(s.options)
        assert a.lp == pytest.approx(list(s.lp), abs=1e-3) and a.correct_sum == s.correct_sum


def test_a_prompt_longer_than_the_model_is_refused_at_start(run, tmp_path):
    cache, d = run
    tok = AutoTokenizer.from_pretrained(list_checkpoints(d)[-1][1])
    cfg = tiny_cfg(cache, "probes.elagent.enabled=true")  # max_position_embeddings=64
    with pytest.raises(ValueError, match=r"probes.elagent: item \S+ has \d+ tokens with its longest option, more "
                                         r"than model.max_position_embeddings=64; lower probes.elagent.shots"):
        _build_hooks(cfg, tok, tmp_path)
    # even without examples: the first precedence item does not fit 64 positions with this tokenizer
    ctx, tails = option_sequences(tok, build_items(ElagentConfig(items_per_paradigm=1, shots=0))[0])
    assert len(ctx) + max(map(len, tails)) > 64


def test_prompts_longer_than_the_training_window_are_named(run, capsys):
    cache, d = run
    tok = AutoTokenizer.from_pretrained(list_checkpoints(d)[-1][1])
    # the run trained on windows of data.seq_len=32 (its config.yaml): every prompt fits 1024 positions, none 32
    _build_hooks(tiny_cfg(cache, "model.max_position_embeddings=1024", *ELAGENT), tok, d)
    err = capsys.readouterr().err
    assert "warning: probes.elagent: 39 of 39 prompts (median " in err and "longer than data.seq_len=32" in err, err


def test_report_shows_the_elagent_tasks_and_the_pairs_vs_tasks_view(run, tmp_path, capsys):
    from probes.analysis import curves
    from probes.analysis import report

    _, d = run
    out = tmp_path / "rep"
    assert report.main([str(d), "--out", str(out), "--n-boot", "50"]) == 0
    md = (out / "report.md").read_text()
    assert "## ELAGENT tasks (generated reasoning probes)" in md and "](figures/elagent_tasks.png)" in md
    assert "| task | context pair | letter | letter chance |" in md and "- **context pair** (`acc_pair`" in md
    # the run table: the actual parameter count (the checkpoints' manifest) and the tokenizer beside the size name
    params = json.loads((list_checkpoints(d)[-1][1] / "manifest.json").read_text())["param_count"]
    assert "| model | model_params | tokenizer |" in md and f"| tiny | {params:,} | sentencepiece-unigram 400 |" in md
    assert "## Minimal pairs vs generated tasks (chance-corrected)" in md and "](figures/formuse.png)" in md
    for line in ("| minimal_pairs | `grammar` |", "| generated_tasks | `elagent_word_order` |",
                 "| generated_tasks | `elagent:babi` |", "| generated_tasks | `elagent:precedence` |",
                 "| generated_tasks | `elagent:predicates` |"):
        assert line in md, line
    assert (out / "appendix" / "curve_elagent_word_order_language_a_word_order.png").is_file()
    # the generated-tasks curve at the last checkpoint, by hand from the eval files: the word-order pairs' MLP
    # accuracy (mean over its paradigms) and the three tasks' context-pair accuracies, each as (acc - 0.5) / 0.5,
    # averaged; minimal pairs: the grammar's paradigms, (acc - 0.5) / 0.5
    step = list_checkpoints(d)[-1][0]
    pairs, _ = read_pairs(d / "evals" / f"step{step}" / "elagent_word_order.parquet")
    items, _ = read_pairs(d / "evals" / f"step{step}" / "elagent.parquet")
    grammar, _ = read_pairs(d / "evals" / f"step{step}" / "grammar.parquet")
    word_order = correct(pairs, "mlp").groupby(pairs.paradigm).mean().mean()
    tasks = items.groupby("task").correct_sum.mean()
    use = ((word_order - 0.5) / 0.5 + ((items.groupby("task").correct_pair.mean() - 0.5) / 0.5).sum()) / 4
    form = (correct(grammar, "mlp").groupby(grammar.paradigm).mean().mean() - 0.5) / 0.5
    s = pd.read_csv(out / "tables" / "formuse.csv")
    last = s[s.step == step].set_index("group")
    assert last.loc["generated_tasks", "score_mean"] == pytest.approx(use)
    assert last.loc["minimal_pairs", "score_mean"] == pytest.approx(form)
    el = pd.read_csv(out / "tables" / "elagent_final.csv").set_index("key")
    assert el.loc["babi", "acc"] == pytest.approx(tasks["babi"]) and el.loc["predicates", "acc_random"] == pytest.approx(1 / 7)
    assert el.loc["babi", "acc_pair"] == pytest.approx(items.groupby("task").correct_pair.mean()["babi"])

    assert curves.main([str(d), "--out", str(tmp_path / "cur")]) == 0
    assert (tmp_path / "cur" / "plots" / f"elagent_{d.name}.png").is_file()
    assert set(pd.read_csv(tmp_path / "cur" / "elagent.csv").key) >= {"all", "babi", "precedence_1move"}


def test_curves_of_a_run_with_no_minimal_pairs_draw_the_tasks(run, tmp_path, capsys):
    """A run probed on ELAGENT tasks only (`probes.benchmarks=[]`): the end-of-run curves draw the tasks rather
    than stopping at "no minimal-pair eval files"; a run with nothing to draw still gets that error."""
    import shutil

    from probes.analysis import curves

    _, d = run
    only = tmp_path / "only_tasks"
    shutil.copytree(d / "evals", only / "evals", ignore=shutil.ignore_patterns("grammar*", "elagent_word_order*", ".reduced-*"))
    shutil.copy(d / "config.yaml", only / "config.yaml")
    assert curves.main([str(only), "--out", str(tmp_path / "cur")]) == 0
    assert (tmp_path / "cur" / "plots" / f"elagent_{only.name}.png").is_file()
    assert "no minimal-pair curves" in capsys.readouterr().out
    empty = tmp_path / "empty"
    (empty / "evals").mkdir(parents=True)
    assert curves.main([str(empty), "--out", str(tmp_path / "cur2")]) == 2
    assert "no minimal-pair eval files" in capsys.readouterr().err
