"""The real training entry point on a tiny config: checkpoints, evals, resume, both engines."""
from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, GPTNeoXForCausalLM

from trainutil import compose_cfg, losses, tiny_cfg
from train.checkpoint import list_checkpoints
from train.loop import train


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def run(cache, run_dir, *overrides):
    cfg = tiny_cfg(cache, *overrides)
    return train(cfg, run_dir)


@pytest.fixture(scope="module")
def torch_run(cache, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("torch_run")
    run(cache, run_dir, "curves_at_end=true")  # the default, which TINY turns off for the other runs
    return run_dir


def test_checkpoints_follow_the_schedule_and_load_with_from_pretrained(torch_run):
    state_last = json.loads((list_checkpoints(torch_run)[-1][1] / "trainer_state.json").read_text())
    total = state_last["total_steps"]
    steps = [s for s, _ in list_checkpoints(torch_run)]
    assert steps[0] == 0 and steps[-1] == total and len(steps) >= 4
    assert state_last["tokens"] == total * 8 * 32 and state_last["tokens_per_step"] == 256
    ckpt = list_checkpoints(torch_run)[-1][1]
    model = GPTNeoXForCausalLM.from_pretrained(ckpt)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    assert model.config.vocab_size >= len(tokenizer) and model.config.vocab_size % 128 == 0
    # Only the newest keep_resume=2 checkpoints carry resume state.
    with_resume = [s for s, p in list_checkpoints(torch_run) if (p / "resume").is_dir()]
    assert with_resume == steps[-2:]
    assert not [p for p in (torch_run / "checkpoints").iterdir() if p.name.startswith(".")]


def test_every_checkpoint_is_probed_and_learning_happened(torch_run):
    steps = [s for s, _ in list_checkpoints(torch_run)]
    accs, lp_per_token = {}, {}
    for step in steps:
        df = pd.read_parquet(torch_run / "evals" / f"step{step}" / "grammar.parquet")
        for col in ("pair_id", "paradigm", "phenomenon", "lp_good", "lp_bad", "ntok_good", "ntok_bad"):
            assert col in df.columns
        assert (df.lp_good < 0).all() and (df.ntok_good > 0).all()
        assert len(df) == 5 * 10  # the grammar's 5 paradigms x max_pairs_per_paradigm=10
        accs[step] = (df.lp_good / df.ntok_good > df.lp_bad / df.ntok_bad).mean()
        lp_per_token[step] = df.lp_good.sum() / df.ntok_good.sum()
    log = losses(torch_run)
    first, last = log[min(log)], log[max(log)]
    assert last < first - 0.5, f"loss did not fall: {first:.3f} -> {last:.3f}"
    # What 60 steps of 8 x 32 tokens (15k tokens) teach, read from the eval files: the probe sentences come
    # from the templates that made the corpus, so their log-prob per token follows the training loss --
    # from near-uniform over the embedding rows at step 0 (small init: logits ~0) to the last loss, rising
    # at every checkpoint. An eval of a stale or untrained model fails this. Agreement itself is not
    # learned at this budget: measured over 1,000 pairs, accuracy at the last step is 0.55/0.54/0.51 for
    # seeds 0/1/2 (binomial sd 0.016): above chance for one seed, not another. Accuracy far above chance
    # is the demo's claim (README: ~98 % after 1,184 steps), too long for a test; here the untrained
    # model must be at chance.
    rows = GPTNeoXForCausalLM.from_pretrained(list_checkpoints(torch_run)[0][1]).config.vocab_size
    assert lp_per_token[0] == pytest.approx(-math.log(rows), abs=0.3), lp_per_token
    assert all(lp_per_token[a] < lp_per_token[b] for a, b in zip(steps, steps[1:])), lp_per_token
    assert -lp_per_token[steps[-1]] == pytest.approx(last, abs=0.3), (lp_per_token, last)
    assert abs(accs[0] - 0.5) <= 3 * math.sqrt(0.25 / 50), accs  # chance within 3 binomial sd


def test_curves_are_drawn_when_training_ends_by_default(torch_run):
    from PIL import Image

    assert compose_cfg([]).curves_at_end is True
    # <run>/curves/curves.csv says what the eval files say: accuracy per paradigm and checkpoint
    table = pd.read_csv(torch_run / "curves" / "curves.csv")
    steps = [s for s, _ in list_checkpoints(torch_run)]
    assert sorted(table.step.unique()) == steps and len(table) == 5 * len(steps)
    for step in steps:
        df = pd.read_parquet(torch_run / "evals" / f"step{step}" / "grammar.parquet")
        want = (df.lp_good / df.ntok_good > df.lp_bad / df.ntok_bad).groupby(df.paradigm).mean()
        got = table[table.step == step].set_index("paradigm").acc_mlp
        assert got.sort_index().tolist() == pytest.approx(want.sort_index().tolist()), step
    assert "verdict" in pd.read_csv(torch_run / "curves" / "ushapes.csv").columns
    # one plot per phenomenon of the grammar (3) and the overview, each a whole PNG
    plots = sorted(p.name for p in (torch_run / "curves" / "plots" / "grammar").glob("*.png"))
    assert plots == ["anaphor_agreement.png", "determiner_noun_agreement.png", "overview.png",
                     "subject_verb_agreement.png"]
    for name in plots:
        with Image.open(torch_run / "curves" / "plots" / "grammar" / name) as im:
            im.verify()


def test_saved_weights_give_the_training_models_logits(cache, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_cfg(cache, "schedule=custom", "schedule.points=[3]",
                   "probes=none")
    from train.model import build_model
    from train.tokenizer import load_tokenizer

    train(cfg, run_dir)
    ckpt = run_dir / "checkpoints" / "step0"
    tok = load_tokenizer(ckpt)
    rebuilt = build_model(cfg.model, len(tok), seed=cfg.seed)  # step0 = the seeded initialisation
    loaded = GPTNeoXForCausalLM.from_pretrained(ckpt)
    ids = torch.tensor([tok("the dogs near the cat run .", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(rebuilt(ids).logits, loaded(ids).logits, atol=1e-6)


@pytest.mark.parametrize("engine", ["torch", "deepspeed"])
def test_resume_reproduces_the_uninterrupted_loss_trajectory(cache, tmp_path, engine):
    overrides = [f"engine={engine}", "engine.zero_stage=0", "schedule=custom", "schedule.points=[20]",
                 "probes=none"]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run(cache, straight, *overrides)
    run(cache, broken, *overrides)
    # Lose everything after step 20, as a crash would, then rerun the same command.
    last_step = max(s for s, _ in list_checkpoints(broken))
    shutil.rmtree(broken / "checkpoints" / f"step{last_step}")
    run(cache, broken, *overrides)
    a, b = losses(straight), losses(broken)
    assert sorted(a) == sorted(b) and max(a) > 21
    # Bitwise, by construction: one process, one thread count, the same kernels on the same shapes, and
    # the resume state restores every bit the next step reads (fp32 weights, Adam moments, data position).
    for step in range(21, max(a) + 1):
        assert b[step] == a[step], step


def test_resume_with_a_changed_model_config_is_refused(cache, tmp_path):
    run(cache, tmp_path / "run", "schedule=custom", "schedule.points=[2]", "probes=none")
    with pytest.raises(ValueError, match=r"model.hidden_size: 32 -> 64"):
        run(cache, tmp_path / "run", "schedule=custom", "schedule.points=[2]", "probes=none",
            "model.hidden_size=64")


def test_syntax_qa_probe_joins_the_hooks_when_enabled(cache, tmp_path):
    from test_checkpoint import tiny_tokenizer
    from train.loop import _build_hooks

    trees = tmp_path / "hand.mrg"
    trees.write_text("( (S (NP-SBJ (DT The) (NN dog) ) (VP (VBD saw) (NP (DT a) (NN cat) )) (. .) ))\n"
                     "( (S (NP-SBJ (DT The) (NN man) ) (VP (VBD gave) (NP (DT the) (NN boy) ) (NP (DT a) (NN book) ))"
                     " (. .) ))\n")
    cfg = tiny_cfg(cache, "probes.syntax_qa.enabled=true", f"probes.syntax_qa.sources=[{trees}]",
                   "probes.syntax_qa.knowledge_points=[GS,DO]")
    hooks = _build_hooks(cfg, tiny_tokenizer(), tmp_path)
    assert [type(h).__name__ for h in hooks] == ["ProbeHook", "SyntaxQAHook", "CurvesHook"]
    assert {it.kp for it in hooks[1].items} == {"GS", "DO"}
    assert [type(h).__name__ for h in _build_hooks(tiny_cfg(cache), tiny_tokenizer(), tmp_path)] == ["ProbeHook",
                                                                                              "CurvesHook"]
