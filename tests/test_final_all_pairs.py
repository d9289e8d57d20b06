"""probes.final_all_pairs: a sample of each paradigm along the curve, every pair at the run's last step."""
from __future__ import annotations

import json

import numpy as np
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.scoring.hook import ProbeHook, ProbesConfig
from probes.scoring.store import eval_path, read_pairs

WORDS = [("cat", "runs", "run"), ("cats", "run", "runs"), ("dog", "sees", "see"), ("dogs", "see", "sees")]


def test_the_last_checkpoint_scores_every_pair_the_others_a_sample(tmp_path):
    torch.set_num_threads(1)
    f = tmp_path / "bench.jsonl"
    rows = [{"sentence_good": f"{d} {n} {v} .", "sentence_bad": f"{d} {n} {w} .", "UID": par,
             "linguistics_term": "agreement", "pairID": f"{par}{d}{i}"}
            for par, d in (("sv", "the"), ("sv2", "a")) for i, (n, v, w) in enumerate(WORDS)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = ProbesConfig(benchmarks=[{"name": "b", "path": str(f)}], max_pairs_per_paradigm=2,
                       final_all_pairs=True, batch_size=4)
    tok = word_tokenizer()
    run = tmp_path / "run"
    hook = ProbeHook(cfg, tok, run, final_step=30)
    model = tiny_neox(len(tok), seed=0)
    for step in (0, 10, 30):
        hook.post_checkpoint_saved(run / "checkpoints" / f"step{step}", step, step * 64, model)
    sample = {s: read_pairs(eval_path(run, s, "b"))[0] for s in (0, 10, 30)}
    assert len(sample[0]) == len(sample[10]) == len(sample[30]) == 4  # 2 per paradigm, the same pairs
    assert list(sample[0].pair_id) == list(sample[30].pair_id)
    full, meta = read_pairs(eval_path(run, 30, "b_all"))  # every pair at the last step, as "b_all"
    assert len(full) == 8 == len(rows) and meta["benchmark"] == "b_all" and meta["step"] == 30
    assert set(sample[30].pair_id) <= set(full.pair_id)  # the sample is a subset of the full set
    merged = sample[30].merge(full, on="pair_id")
    assert np.allclose(merged.lp_good_x, merged.lp_good_y, atol=1e-4)  # one model (batches differ)
    assert not eval_path(run, 10, "b_all").exists() and not eval_path(run, 0, "b_all").exists()
    # the analysis reads both; "b_all" lacking at earlier steps is by design, not a problem in the input
    from probes.analysis.evalset import load_runs

    ev = load_runs([run])
    assert set(ev.table.benchmark) == {"b", "b_all"} and not [p for p in ev.problems if "b_all" in p]
    assert set(ev.table[ev.table.benchmark == "b_all"].step) == {30}
    # off by default: nothing extra at the last step
    plain = ProbeHook(ProbesConfig(benchmarks=cfg.benchmarks, max_pairs_per_paradigm=2), tok, tmp_path / "r2",
                      final_step=30)
    plain.post_checkpoint_saved(tmp_path / "ck", 30, 1920, model)
    assert len(read_pairs(eval_path(tmp_path / "r2", 30, "b"))[0]) == 4
    assert not eval_path(tmp_path / "r2", 30, "b_all").exists()
