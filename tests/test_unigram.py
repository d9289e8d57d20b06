"""SLOR and MORCELA from stored unigram columns: definitions by hand, the authors' tables, the run's own counts."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from probeutil import word_tokenizer
from probes.scoring import unigram
from probes.benchmarks.registry import benchmarks_root
from probes.scoring.primitive import correct as lp_correct


def test_slor_and_morcela_by_hand():
    # good: lp -15 over 3 tokens, ulp -30; bad: lp -8 over 2 tokens, ulp -14
    df = pd.DataFrame({"lp_good": [-15.0], "lp_bad": [-8.0], "ntok_good": [3], "ntok_bad": [2],
                       "ulp_good": [-30.0], "ulp_bad": [-14.0]})
    assert unigram.score(df, "good", "slor")[0] == pytest.approx((-15 + 30) / 3)  # 5
    assert unigram.score(df, "bad", "slor")[0] == pytest.approx((-8 + 14) / 2)  # 3
    assert unigram.score(df, "good", "morcela", beta=0.5, gamma=10)[0] == pytest.approx((-15 + 15 + 10) / 3)
    assert unigram.score(df, "bad", "morcela", beta=0.5, gamma=10)[0] == pytest.approx((-8 + 7 + 10) / 2)
    # MLP: -5 vs -4 wrong; sum-LP: -15 vs -8 wrong; SLOR: 5 vs 3 right; MORCELA(0.5, 10): 3.33 vs 4.5 wrong
    assert not lp_correct(df, "mlp")[0] and not lp_correct(df, "sum")[0]
    assert unigram.correct(df, "slor")[0]
    assert not unigram.correct(df, "morcela", beta=0.5, gamma=10)[0]
    assert unigram.correct(df, "morcela", beta=1.0, gamma=0.0)[0]
    assert not unigram.correct(df, "morcela", beta=0.0, gamma=0.0)[0]  # beta=0, gamma=0 is MLP
    # beta=1, gamma=0 is SLOR, exactly; a tie is wrong
    assert (unigram.score(df, "good", "morcela", beta=1, gamma=0) == unigram.score(df, "good", "slor")).all()
    tie = df.assign(lp_bad=-15.0, ntok_bad=3, ulp_bad=-30.0)
    assert not unigram.correct(tie, "slor")[0]
    with pytest.raises(ValueError, match="python -m probes unigram"):
        unigram.correct(df.drop(columns=["ulp_bad"]), "slor")


def test_unigram_tables_from_counts_and_the_authors_json(tmp_path):
    lu = unigram.from_counts(np.array([3, 1, 0]), 4)  # N = 4; unseen ids (2, 3) get 1/N
    assert np.allclose(np.exp(lu), [0.75, 0.25, 0.25, 0.25])
    path = benchmarks_root() / "zhoblimp" / "unigram" / "chinese-llama.json"
    table = json.loads(path.read_text())
    lu = unigram.from_json(path, 49953)  # chinese-llama's 49,953 ids
    assert lu[29871] == pytest.approx(math.log(table["29871"]))
    absent = next(i for i in range(49953) if str(i) not in table)
    assert lu[absent] == pytest.approx(math.log(1 / 3e9))  # the authors' floor
    bad = tmp_path / "u.json"
    bad.write_text('{"0": 0.5, "1": 1.5}')
    with pytest.raises(ValueError, match=r"u.json: id 1 has probability 1.5"):
        unigram.from_json(bad, 4)


def test_columns_sum_the_scored_tokens_and_refuse_another_tokenizer():
    tok = word_tokenizer()
    lu = np.log(np.arange(1, len(tok) + 1) / 100.0)  # any table: id i -> log((i+1)/100)
    df = pd.DataFrame({"pair_id": ["0"], "good": ["the cat runs ."], "bad": ["the cat run ."],
                       "ntok_good": [4], "ntok_bad": [4]})
    out = unigram.add_unigram_columns(df, tok, lu)
    ids = tok("the cat runs .", add_special_tokens=False)["input_ids"]  # no start token: it is not scored
    assert out.ulp_good[0] == pytest.approx(sum(math.log((i + 1) / 100) for i in ids))
    with pytest.raises(ValueError, match="pair '0'.*3 tokens.*eval file 4: scored with another tokenizer"):
        unigram.add_unigram_columns(df.assign(bad="the cat run"), tok, lu)


def test_a_run_stores_unigram_columns_from_its_own_token_store(tmp_path):
    from trainutil import tiny_cfg
    from train.loop import train
    from probes.scoring.store import read_pairs

    cache = tmp_path / "cache"
    run = tmp_path / "run"
    train(tiny_cfg(cache, "schedule=custom", "schedule.points=[]"), run)
    (store,) = (cache / "stores").iterdir()
    meta = json.loads((store / "meta.json").read_text())
    ids = np.fromfile(store / "tokens.bin", dtype=meta["dtype"])
    counts = np.bincount(ids)
    from transformers import AutoTokenizer

    files = sorted((run / "evals").glob("step*/grammar.parquet"))
    assert len(files) == 2  # step 0 and the last step
    df, m = read_pairs(files[-1])
    assert m["unigram"] == f"token_store:{store.name}"
    tok = AutoTokenizer.from_pretrained(sorted((run / "checkpoints").iterdir())[-1])
    row = df.iloc[0]
    want = sum(math.log((counts[i] if i < len(counts) and counts[i] else 1) / len(ids))
               for i in tok(row.good, add_special_tokens=False)["input_ids"])
    assert row.ulp_good == pytest.approx(want)
    # the same columns added after the fact, without the model (python -m probes unigram)
    stripped = df.drop(columns=["ulp_good", "ulp_bad"])
    from probes.scoring.store import write_pairs

    write_pairs(stripped, files[-1], {k: v for k, v in m.items() if k != "unigram"})
    assert unigram.main([str(run), "--cache-dir", str(cache)]) == 0
    again, m2 = read_pairs(files[-1])
    assert np.allclose(again.ulp_good, df.ulp_good) and m2["unigram"] == m["unigram"]
    from probes.scoring.primitive import correct as lp_correct  # per paradigm, under every metric

    acc = again[["phenomenon", "paradigm"]].assign(
        acc_mlp=lp_correct(again, "mlp"), acc_sum=lp_correct(again, "sum"), acc_slor=unigram.correct(again, "slor"),
        acc_morcela=unigram.correct(again, "morcela")).groupby(["phenomenon", "paradigm"]).mean()
    assert {"acc_mlp", "acc_sum", "acc_slor", "acc_morcela"} <= set(acc.columns)
    # the report's SLOR / MORCELA section reads these columns at the last checkpoint
    from probes.analysis import report

    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    assert "## Normalised scores as their authors sweep them (pow-norm, SLOR, MORCELA)" in (out / "report.md").read_text()
    t = pd.read_csv(out / "tables" / "normalised_sweep_paradigm.csv")
    par = again.paradigm.iloc[0]
    sel = again[again.paradigm == par]
    slor_ok = ((sel.lp_good - sel.ulp_good) / sel.ntok_good > (sel.lp_bad - sel.ulp_bad) / sel.ntok_bad)
    at = t[t.paradigm == par].set_index("point")
    assert at.loc["slor", "acc"] == pytest.approx(slor_ok.mean())
    # its MLP point is the scaling grid's final accuracy (one definition of "final accuracy")
    grid = pd.read_csv(out / "tables" / "final_accuracy_paradigm.csv").set_index("paradigm")
    assert at.loc["mlp", "acc"] == pytest.approx(grid.loc[par, "acc_mlp"])


def test_the_probe_hook_writes_unigram_columns(tmp_path):
    import torch

    from probeutil import tiny_neox
    from probes.scoring.hook import ProbeHook, ProbesConfig
    from probes.benchmarks.pairs import Pair
    from probes.scoring.store import eval_path, read_pairs

    torch.set_num_threads(1)
    tok = word_tokenizer()
    lu = np.log(np.full(len(tok), 1 / len(tok)))  # uniform: ulp = ntok * log(1/V)
    pairs = {"agr": [Pair("agr", "sv", "agreement", "0", "the cat runs .", "the cat run")]}
    hook = ProbeHook(ProbesConfig(batch_size=2), tok, tmp_path / "run", pairs=pairs, unigram=(lu, "test:uniform"))
    hook.post_checkpoint_saved(tmp_path / "ck", 0, 0, tiny_neox(len(tok)))
    df, meta = read_pairs(eval_path(tmp_path / "run", 0, "agr"))
    assert meta["unigram"] == "test:uniform"
    assert df.ulp_good[0] == pytest.approx(4 * math.log(1 / len(tok)))
    assert df.ulp_bad[0] == pytest.approx(3 * math.log(1 / len(tok)))
