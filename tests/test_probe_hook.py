"""The probe hook on a tiny real model: writes eval files, returns metrics, skips existing files."""
from __future__ import annotations

import json
import os

import pytest
import torch

from probeutil import tiny_neox as tiny_model, word_tokenizer as tiny_tokenizer
from probes.benchmarks.registry import BenchmarkConfig
from probes.scoring.hook import ProbeHook, ProbesConfig
from probes.benchmarks.pairs import Pair
from probes.scoring.primitive import accuracy, correct, score_pairs
from probes.scoring.store import eval_path, read_pairs

PAIRS = {
    "agr": [
        Pair("agr", "sv", "agreement", str(i), f"the {n} {v} .", f"the {n} {w} .")
        for i, (n, v, w) in enumerate([("cat", "runs", "run"), ("cats", "run", "runs"),
                                       ("dog", "sees", "see"), ("dogs", "see", "sees")])
    ] + [Pair("agr", "det", "determiner", "9", "a cat runs .", "a cats runs .")],
    "tiny": [Pair("tiny", "p", "x", "0", "the dog", "a dog")],
}


def test_hook_writes_scores_and_skips_existing(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    tok = tiny_tokenizer()
    run = tmp_path / "run"
    hook = ProbeHook(ProbesConfig(batch_size=4), tok, run, pairs=PAIRS)
    m0 = tiny_model(len(tok), seed=0)
    m0.train()

    metrics = hook.post_checkpoint_saved(run / "checkpoints" / "step0", 0, 0, m0)
    assert m0.training  # scoring restored the trainer's mode
    path = eval_path(run, 0, "agr")
    df, meta = read_pairs(path)
    assert (meta["step"], meta["tokens"], meta["benchmark"]) == (0, 0, "agr")
    assert meta["convention"] == "start_token_all_tokens_v2"
    assert meta["model_dir"] == str(run / "checkpoints" / "step0") and meta["tokenizer"]
    assert list(df["pair_id"]) == ["0", "1", "2", "3", "9"]
    ref = score_pairs(m0, tok, PAIRS["agr"])
    assert df["lp_good"].tolist() == pytest.approx(ref["lp_good"].tolist(), abs=1e-6)

    ok = correct(ref, "mlp")
    assert metrics["probe/agr/acc_mlp"] == pytest.approx(accuracy(ref, "mlp"))
    assert metrics["probe/agr/agreement/acc_mlp"] == pytest.approx(ok.iloc[:4].mean())
    assert metrics["probe/agr/determiner/acc_mlp"] == float(ok.iloc[4])
    assert set(metrics) == {"probe/agr/acc_mlp", "probe/agr/agreement/acc_mlp",
                            "probe/agr/determiner/acc_mlp", "probe/tiny/acc_mlp", "probe/tiny/x/acc_mlp"}
    assert sorted(f for f in os.listdir(path.parent) if not f.endswith(".sha256")) == ["agr.parquet", "tiny.parquet"]

    # a resumed run reaches step 0 again with other weights: the existing file is kept
    before = path.stat().st_mtime_ns
    m1 = tiny_model(len(tok), seed=1)
    again = hook.post_checkpoint_saved(run / "checkpoints" / "step0", 0, 0, m1)
    assert path.stat().st_mtime_ns == before
    assert again == metrics

    # a new step is scored with the new weights
    hook.post_checkpoint_saved(run / "checkpoints" / "step1", 1, 512, m1)
    df1, meta1 = read_pairs(eval_path(run, 1, "agr"))
    assert meta1["tokens"] == 512
    ref1 = score_pairs(m1, tok, PAIRS["agr"])
    assert df1["lp_bad"].tolist() == pytest.approx(ref1["lp_bad"].tolist(), abs=1e-6)
    assert df1["lp_bad"].tolist() != pytest.approx(df["lp_bad"].tolist(), abs=1e-3)
    hook.close()

    # the hook kept the analysis cache current: a report reads no eval file, and sees both steps
    import numpy as np

    import probes.analysis.evalfile
    from probes.analysis.evalcache import cache_path
    from probes.analysis.evalset import load_runs

    assert np.load(cache_path(run, "agr"))["steps"].tolist() == [0, 1]

    def no_reads(*a):
        raise AssertionError(f"read {a[0]}")

    monkeypatch.setattr(probes.analysis.evalfile, "read_eval_file", no_reads)
    ev = load_runs([run])
    acc = ev.table[(ev.table.benchmark == "agr") & (ev.table.paradigm == "sv")].sort_values("step").acc_mlp
    assert acc.tolist() == pytest.approx([correct(ref, "mlp").iloc[:4].mean(), correct(ref1, "mlp").iloc[:4].mean()])


def test_hook_loads_configured_benchmarks_once(tmp_path):
    torch.set_num_threads(1)
    f = tmp_path / "mini.jsonl"
    f.write_text("".join(json.dumps({  # BLiMP's published schema
        "sentence_good": p.good, "sentence_bad": p.bad, "UID": p.paradigm,
        "linguistics_term": p.phenomenon, "pairID": p.pair_id}) + "\n" for p in PAIRS["agr"]))
    cfg = ProbesConfig(benchmarks=[BenchmarkConfig(name="mini", path=str(f))], batch_size=2)
    tok = tiny_tokenizer()
    hook = ProbeHook(cfg, tok, tmp_path / "run")
    f.unlink()  # loaded at construction, never again
    model = tiny_model(len(tok), seed=2)
    metrics = hook.post_checkpoint_saved(tmp_path / "ck", 8, 4096, model)
    df, meta = read_pairs(eval_path(tmp_path / "run", 8, "mini"))
    assert meta["benchmark"] == "mini" and meta["source"] == str(f)
    assert list(df["pair_id"]) == ["0", "1", "2", "3", "9"]
    assert metrics["probe/mini/acc_mlp"] == pytest.approx(accuracy(score_pairs(model, tok, PAIRS["agr"])))

    twice = ProbesConfig(benchmarks=[BenchmarkConfig(name="g", path=str(tmp_path)),
                                     BenchmarkConfig(name="g", path=str(tmp_path))])
    (tmp_path / "x.jsonl").write_text(f.name)  # never read: the name clash is found first
    with pytest.raises(ValueError, match=r"probes.benchmarks\[1\].name: 'g' is configured twice"):
        ProbeHook(twice, tok, tmp_path / "run")


def test_disabled_hook_writes_nothing(tmp_path):
    hook = ProbeHook(ProbesConfig(enabled=False), tiny_tokenizer(), tmp_path, pairs=PAIRS)
    assert hook.post_checkpoint_saved(tmp_path / "ck", 0, 0, tiny_model(14, 0)) == {}
    assert not (tmp_path / "evals").exists()


def test_bad_config_is_reported_at_construction(tmp_path):
    with pytest.raises(ValueError, match="probes.batch_size must be >= 1"):
        ProbeHook(ProbesConfig(batch_size=0), tiny_tokenizer(), tmp_path, pairs=PAIRS)
    with pytest.raises(ValueError, match="cannot be a file name"):
        ProbeHook(ProbesConfig(), tiny_tokenizer(), tmp_path, pairs={"a/b": PAIRS["tiny"]})
    with pytest.raises(ValueError, match="benchmark 'e' has no pairs"):
        ProbeHook(ProbesConfig(), tiny_tokenizer(), tmp_path, pairs={"e": []})


# ---------------------------------------------------------------- the benchmark list in configs


def _probes(*overrides: str):
    from trainutil import TINY, compose_cfg
    from train.config import to_typed

    base = [o for o in TINY if not o.startswith("probes.benchmarks")]
    return to_typed(compose_cfg(base + list(overrides))).probes


def test_config_takes_bare_names_and_mappings():
    probes = _probes("probes=zhoblimp", "probes.benchmarks=[zhoblimp,{name: blimp, path: /data/blimp}]")
    got = probes.resolved_benchmarks()
    assert [(b.name, b.path, b.max_pairs_per_paradigm, b.subsample_seed) for b in got] == [
        ("zhoblimp", None, 50, 0), ("blimp", "/data/blimp", 50, 0)]

    probes = _probes("probes=en", "probes.max_pairs_per_paradigm=null", "probes.subsample_seed=3",
                     "probes.benchmarks=[blimp,{name: mine, path: /x.jsonl, format: jsonl, "
                     "good_field: g, bad_field: b, max_pairs_per_paradigm: 7}]")
    blimp, mine = probes.resolved_benchmarks()
    assert (blimp.name, blimp.max_pairs_per_paradigm, blimp.subsample_seed) == ("blimp", None, 3)
    assert (mine.path, mine.format, mine.good_field, mine.max_pairs_per_paradigm,
            mine.subsample_seed) == ("/x.jsonl", "jsonl", "g", 7, 3)
    assert [b.name for b in _probes("probes=zh").resolved_benchmarks()] == ["zhoblimp", "climp", "sling"]


def test_config_keeps_the_grammar_spellings():
    # the demo's and tests/trainutil.py's overrides
    demo = _probes("probes=grammar",
                   "probes.benchmarks=[{name: grammar, grammar: {pairs_per_paradigm: 200}}]")
    (g,) = demo.resolved_benchmarks()
    assert (g.name, g.max_pairs_per_paradigm, g.grammar.pairs_per_paradigm) == ("grammar", None, 200)
    (g,) = _probes("probes.benchmarks=[{name: grammar, max_pairs_per_paradigm: 10}]").resolved_benchmarks()
    assert (g.name, g.max_pairs_per_paradigm) == ("grammar", 10)


def test_config_errors_name_the_entry():
    with pytest.raises(ValueError, match=r"probes.benchmarks\[1\]: unknown benchmark name"):
        _probes("probes.benchmarks=[blimp,nosuch]")
    with pytest.raises(ValueError, match=r"probes.benchmarks\[0\]: unknown key\(s\) \['pth'\]"):
        _probes("probes.benchmarks=[{name: blimp, pth: /x}]")
    with pytest.raises(ValueError, match=r"probes.benchmarks\[0\].max_pairs_per_paradigm: Value 'many'"):
        _probes("probes.benchmarks=[{name: blimp, max_pairs_per_paradigm: many}]")
