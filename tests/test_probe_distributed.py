"""The probe hook in 2 gloo processes: pairs sharded, rows gathered, rank 0 writes what 1 process does."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from numerics import sentence_lp_tol
from probeutil import tiny_neox, word_tokenizer
from probes.scoring.hook import ProbeHook, ProbesConfig
from probes.benchmarks.pairs import Pair, Region
from probes.scoring.primitive import sentence_ids
from probes.scoring.store import eval_path, read_pairs

SUBJECTS = [("cat", "runs", "run"), ("cats", "run", "runs"), ("dog", "sees", "see"),
            ("dogs", "see", "sees"), ("cat", "sees", "see"), ("dogs", "run", "runs")]
PAIRS = {
    "agr": [Pair("agr", "sv" if i < 4 else "sv2", "agreement", str(i), f"the {n} {v} .",
                 f"the {n} {w} .") for i, (n, v, w) in enumerate(SUBJECTS)]
    # one pair with template slots, in the second half: its slot columns come from one shard only
    + [Pair("agr", "det", "determiner", "9", "a cat runs .", "a cats runs .",
            (Region("det", (0, 1), (0, 1)), Region("noun", (2, 5), (2, 6))))],
    "one": [Pair("one", "p", "x", "0", "the dog", "a dog")],  # fewer pairs than ranks
}


def probe(run_dir: Path) -> list[dict]:
    """Two checkpoints' hook calls; the second reaches step 1 again (a resumed run)."""
    hook = ProbeHook(ProbesConfig(batch_size=2), word_tokenizer(), run_dir, pairs=PAIRS)
    model = tiny_neox()
    first = hook.post_checkpoint_saved(run_dir / "ck", 1, 100, model)
    again = hook.post_checkpoint_saved(run_dir / "ck", 1, 100, model)
    return [first, again]


def worker(rank: int, world: int, init_file: str, run_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        metrics = probe(Path(run_dir))
        Path(run_dir, f"metrics_rank{rank}.json").write_text(json.dumps(metrics))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_processes_write_what_one_does(tmp_path):
    torch.set_num_threads(1)
    one, two = tmp_path / "one", tmp_path / "two"
    single = probe(one)
    mp.spawn(worker, args=(2, str(tmp_path / "init"), str(two)), nprocs=2, join=True)

    rank0 = json.loads((two / "metrics_rank0.json").read_text())
    rank1 = json.loads((two / "metrics_rank1.json").read_text())
    assert rank1 == [{}, {}]  # only rank 0 reports
    assert rank0[0].keys() == single[0].keys() and rank0[1] == rank0[0]
    for key, value in single[0].items():
        assert rank0[0][key] == pytest.approx(value, abs=1e-12), key
    assert sorted(os.listdir(two / "evals" / "step1")) == ["agr.parquet", "agr.parquet.sha256", "one.parquet",
                                                          "one.parquet.sha256"]
    for name in PAIRS:
        a, meta_a = read_pairs(eval_path(one, 1, name))
        b, meta_b = read_pairs(eval_path(two, 1, name))
        assert (meta_a["world_size"], meta_b["world_size"]) == (1, 2)
        assert list(a.columns) == list(b.columns)
        assert list(a.dtypes) == list(b.dtypes)
        lp = [c for c in a.columns if c.startswith("lp_")]
        # the same rows in the same order; lps up to float32 rounding of other batch shapes and kernel
        # blocking (tests/numerics.py: n eps |lp|, n the additions behind one lp), never bitwise
        pd.testing.assert_frame_equal(a.drop(columns=lp), b.drop(columns=lp))
        model, tok = tiny_neox(), word_tokenizer()
        for col in lp:  # a region's lp (lp_good_slot_noun, ...) is part of the sentence's: its bound holds
            side = "good" if col.startswith("lp_good") else "bad"
            tol = np.array([sentence_lp_tol(model, ids) for ids in sentence_ids(tok, a[side].tolist())])
            assert a[col].isna().tolist() == b[col].isna().tolist(), col
            assert (np.abs(a[col].fillna(0) - b[col].fillna(0)) <= tol).all(), (col, (a[col] - b[col]).abs().max())
    a = read_pairs(eval_path(one, 1, "agr"))[0]
    assert a["lp_good_slot_noun"].notna().tolist() == [False] * 6 + [True]
