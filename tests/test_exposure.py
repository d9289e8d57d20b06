"""`python -m probes exposure`: every pair's verbatim and critical n-gram counts in the rows a tiny run trained on by
each checkpoint equal brute-force counting over `train batch`'s rows (train.batch.batch_ids); the cache is shared
by runs of one stream and nested budgets; bad input is one line, nothing half-written."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from trainutil import tiny_cfg, write_token_store

from probes.__main__ import main as probes_main
from probes.exposure import run as exposure
from probes.exposure.count import Queries
from probes.exposure.run import COLUMNS, critical_ngrams, critical_span, exposure_path, read_exposure
from probes.scoring.primitive import sentence_ids
from train.batch import batch_ids, load_run_config, open_stream, stream_of
from train.files import list_checkpoints
from train.loop import train
from train.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny run on the grammar corpus, probed on grammar pairs at 4 checkpoints, and its exposure files."""
    torch.set_num_threads(1)
    cache, run_dir = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("run")
    train(tiny_cfg(cache, "data.grammar.n_documents=30", "schedule.n_log=3",
                   "probes.benchmarks=[{name: grammar, max_pairs_per_paradigm: 3}]"), run_dir)
    assert probes_main(["exposure", str(run_dir)]) == 0
    return run_dir, cache


def test_critical_span_by_hand():
    assert critical_span([1, 2, 3, 4], [1, 5, 4]) == (1, 3)  # prefix [1], suffix [4]
    assert critical_span([1, 5, 4], [1, 2, 3, 4]) == (1, 2)
    assert critical_span([7, 8, 9], [8, 7, 9]) == (0, 2) == critical_span([8, 7, 9], [7, 8, 9])  # order only
    assert critical_span([1, 1], [1, 1, 1]) == (2, 2)  # suffix may not reach into the prefix: empty span
    assert critical_span([1, 1, 1], [1, 1]) == (2, 3)
    assert critical_ngrams([1, 2, 3, 4], [1, 5, 4], 2) == [(1, 2), (2, 3), (3, 4)]
    assert critical_ngrams([1, 2, 3, 4], [1, 5, 4], 4) == [(1, 2, 3, 4)]
    assert critical_ngrams([1, 1], [1, 1, 1], 1) == []


def test_queries_count_exactly_with_exact_keys_and_checked_hashes():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 4, (6, 50))
    seqs = [tuple(int(v) for v in rows[r, j:j + n]) for r in range(6) for j in (0, 17, 40) for n in (1, 3, 9)]
    for bits in (2, 16, 17):  # 9 ids of 2 bits pack exactly; 9 of 16 bits are hashed and checked
        q = Queries(seqs + [(3, 3, 3, 3, 3, 3, 3, 3, 3, 3)], bits)
        got = np.zeros(len(q.seqs), dtype=np.int64)
        q.count(rows, got)
        want = [sum(tuple(row[j:j + len(s)]) == s for row in rows.tolist() for j in range(51 - len(s))) for s in q.seqs]
        assert got.tolist() == want


def brute_force(run_dir: Path) -> pd.DataFrame:
    """Counts over the rows of batch_ids, computed the slow, obvious way."""
    cfg = load_run_config(run_dir)
    _, stream = open_stream(cfg)
    steps = [s for s, _ in list_checkpoints(run_dir)]
    tok = load_tokenizer(list_checkpoints(run_dir)[-1][1])
    pairs = pd.read_parquet(sorted((run_dir / "evals").glob("step*/grammar.parquet"))[-1])
    rows, out = [], []
    for step in steps:
        rows = [list(r) for k in range(1, step + 1) for r in batch_ids(stream, k, cfg.optim.global_batch).tolist()]
        grams = Counter(tuple(r[j:j + n]) for r in rows for n in range(1, 40) for j in range(len(r) - n + 1))
        for n in (1, 2, 3, 4):
            for p in pairs.itertuples():
                g, b = (sentence_ids(tok, [t])[0][1:] for t in (p.good, p.bad))
                rec = {"pair_id": str(p.pair_id), "paradigm": p.paradigm, "phenomenon": p.phenomenon, "step": step,
                       "n": n}
                for side, s, o in (("good", g, b), ("bad", b, g)):
                    pre = next((i for i, (x, y) in enumerate(zip(s, o)) if x != y), min(len(s), len(o)))
                    suf = next((i for i, (x, y) in enumerate(zip(s[::-1][:len(s) - pre], o[::-1][:len(o) - pre]))
                                if x != y), min(len(s), len(o)) - pre)
                    crit = set(range(pre, len(s) - suf))
                    rec[side] = sum(grams[tuple(s[i:i + n])] for i in range(len(s) - n + 1)
                                    if crit & set(range(i, i + n)))
                    rec["verbatim_" + side] = grams[tuple(s)]
                out.append(rec)
    return pd.DataFrame(out, columns=COLUMNS), rows


def test_counts_equal_brute_force_over_train_batch_rows(run):
    run_dir, _ = run
    got, meta = read_exposure(exposure_path(run_dir, "grammar"))
    want, rows = brute_force(run_dir)
    cfg = load_run_config(run_dir)
    # the rows cross document boundaries: a start token inside a row, and windows over it are counted
    tok = load_tokenizer(list_checkpoints(run_dir)[-1][1])
    start = sentence_ids(tok, ["x"])[0][0]
    assert any(start in r[1:] for r in rows)
    assert list(got.columns) == COLUMNS
    key = ["step", "n", "pair_id", "paradigm"]
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True),
                                  want.sort_values(key).reset_index(drop=True), check_dtype=False)
    assert got.query("step == 0")[["good", "bad", "verbatim_good", "verbatim_bad"]].to_numpy().sum() == 0
    last = got[got.step == got.step.max()]
    assert last.good.sum() > 0 and last.verbatim_good.sum() > 0  # grammar sentences occur in its corpus
    assert sorted(set(got.step)) == meta["steps"] == [s for s, _ in list_checkpoints(run_dir)]
    assert meta["kind"] == "exposure" and meta["stream"]["seed"] == cfg.data.seed
    assert meta["stream"]["seq_len"] == cfg.data.seq_len and meta["stream"]["global_batch"] == cfg.optim.global_batch


def test_rerun_is_bitwise_the_same_and_reads_the_cache(run, tmp_path, monkeypatch):
    run_dir, cache = run
    f = exposure_path(run_dir, "grammar")
    before, mtime = f.read_bytes(), f.stat().st_mtime_ns
    copy = tmp_path / "copy"  # another run directory of the same stream: counted from the cache alone
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("exposure"))
    fresh = tmp_path / "cache"  # counted again from nothing: the same bytes
    shutil.copytree(cache, fresh, ignore=shutil.ignore_patterns("exposure"))
    assert probes_main(["exposure", str(copy), "--cache-dir", str(fresh)]) == 0
    assert exposure_path(copy, "grammar").read_bytes() == before
    exposure_path(copy, "grammar").unlink()
    monkeypatch.setattr(Queries, "count", lambda *a: pytest.fail("counted again"))
    assert probes_main(["exposure", str(run_dir), str(copy)]) == 0
    assert f.read_bytes() == before and f.stat().st_mtime_ns == mtime
    assert exposure_path(copy, "grammar").read_bytes() == before


def test_nested_budgets_share_one_count(run):
    """A budget of a nested list trains the first batches of every larger budget of it: one cache key."""
    run_dir, _ = run
    cfg = load_run_config(run_dir)
    _, stream = open_stream(cfg)
    small, large = stream.stream_tokens // 3, stream.stream_tokens - 100
    views = []
    for b in (small, large):
        c = replace(cfg, data=replace(cfg.data, budget_tokens=b, nested_budgets=[small, large]))
        s = stream_of(c, stream.store, load_tokenizer(list_checkpoints(run_dir)[-1][1]))
        views.append((s, exposure._cache_key(exposure.stream_identity(c, stream.store, s), Queries([(1,)], 16))))
    (a, ka), (b, kb) = views
    assert ka == kb
    for k in range(1, a.steps(cfg.optim.global_batch) + 1):
        assert np.array_equal(batch_ids(a, k, cfg.optim.global_batch), batch_ids(b, k, cfg.optim.global_batch))


def test_planted_whole_stream_count_fails_the_brute_force(run, tmp_path, monkeypatch):
    """Planted bug: counting every batch of the stream, not those up to step N."""
    run_dir, cache = run
    copy = tmp_path / "r"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("exposure"))
    shutil.copytree(cache, tmp_path / "cache", ignore=shutil.ignore_patterns("exposure"))  # counted afresh
    real = exposure.batch_ids
    monkeypatch.setattr(exposure, "batch_ids", lambda s, k, g: np.concatenate(
        [real(s, j, g) for j in range(1, s.steps(g) + 1)]) if k == 1 else real(s, k, g)[:0])
    assert probes_main(["exposure", str(copy), "--cache-dir", str(tmp_path / "cache"), "--benchmark", "grammar"]) == 0
    got, _ = read_exposure(exposure_path(copy, "grammar"))
    want, _ = brute_force(run_dir)
    key = ["step", "n", "pair_id", "paradigm"]
    assert not got.sort_values(key).reset_index(drop=True).equals(want.sort_values(key).reset_index(drop=True))


def one_line_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        probes_main(["exposure", *map(str, argv)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_bad_input_one_line_nothing_written(run, tmp_path, capsys):
    run_dir, cache = run
    copy = tmp_path / "r"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("exposure"))
    assert "was not probed on blimp" in one_line_error(capsys, copy, "--benchmark", "blimp")
    assert "is not there" in one_line_error(capsys, copy, "--cache-dir", tmp_path / "empty")  # no token store
    # the store rebuilt with another tokenizer where the run's was
    store = next((cache / "stores").iterdir())
    meta = json.loads((store / "meta.json").read_text())
    other = tmp_path / "other"
    write_token_store(other / "stores" / store.name, [[1, 2, 3]] * 50, tokenizer_fingerprint="0" * 16,
                      vocab_size=meta["vocab_size"])
    assert "built with another tokenizer" in one_line_error(capsys, copy, "--cache-dir", other)
    damaged = tmp_path / "damaged"  # a count cache that does not match its .sha256
    shutil.copytree(cache, damaged)
    npz = next((damaged / "exposure").glob("*.npz"))
    npz.write_bytes(npz.read_bytes()[:-1] + bytes([npz.read_bytes()[-1] ^ 1]))
    assert "an exposure count cache" in one_line_error(capsys, copy, "--cache-dir", damaged)
    assert not (copy / "exposure").exists()
    # an exposure file of another stream, a damaged one
    f = exposure_path(run_dir, "grammar")
    _, m = read_exposure(f)
    with pytest.raises(ValueError, match=r"counted over another stream than its run's \(differs in seed\)"):
        read_exposure(f, {**m["stream"], "seed": m["stream"]["seed"] + 1})
    bad = tmp_path / "exposure" / "grammar.parquet"
    bad.parent.mkdir()
    data = bytearray(f.read_bytes())
    data[100] ^= 1
    bad.write_bytes(bytes(data))
    shutil.copy(f.with_name(f.name + ".sha256"), bad.with_name(bad.name + ".sha256"))
    with pytest.raises(ValueError, match="does not match its sha256"):
        read_exposure(bad)


# n-gram baselines (probes/exposure/ngram.py): stupid backoff over the same counts, exposure/<benchmark>.ngram.parquet

def test_ngram_stupid_backoff_by_hand_on_a_two_row_stream():
    """Ids: 0 = start S, 1 = a, 2 = b, 3 = c; vocabulary V = 4. One row per step (global batch 1):
        row 1 = S a b c, row 2 = c S a b.  good = S a b c, bad = S a c c (5 ids with S: scored are the 3 after it).
    Counts by step 2 (N = 8 tokens): unigrams S 2, a 2, b 2, c 2; bigrams (S a) 2, (a b) 2, (b c) 1, (c S) 1;
    trigrams (S a b) 2, (a b c) 1, (c S a) 1; 4-grams (S a b c) 1, (c S a b) 1. (c c) occurs only ACROSS the two
    rows (row 1 ends in c, row 2 starts with it): it is not an occurrence, so its count is 0.
    Token j is scored at order top = min(n, j + 1); backing off k levels multiplies by 0.4^k; the unigram is
    (c(w) + 1) / (N + V).
      good, n = 2: a|S = 2/2, b|a = 2/2, c|b = 1/2                    -> lp = log 0.5
      good, n = 3..5: a|S = 1 (top 2), b|S a = 2/2, c|a b = 1/2 (n = 3) or c|S a b = 1/2 (n >= 4) -> log 0.5
      bad, n = 2: a|S = 1, c|a unseen -> 0.4 (2+1)/12 = 0.1, c|c unseen -> 0.1                    -> 2 log 0.1
      bad, n = 3: a|S = 1, c|S a and c|a unseen -> 0.4^2 * 0.25 = 0.04; c|a c, c|c unseen -> 0.04   -> 2 log 0.04
      bad, n = 4, 5: c (j = 2, top 3) -> 0.04; c (j = 3, top 4) -> 0.4^3 * 0.25 = 0.016       -> log 0.04 + log 0.016
    By step 1 (row 1 only, N = 4; every n-gram of it once): good scores 1 per token at every n (lp 0); bad: a|S = 1,
    each c backs off to the unigram (1+1)/(4+4) = 0.25 -> as at step 2 (0.1, 0.04, 0.016 per c, by top).
    Step 0 (nothing trained, N = 0): every token 0.4^(top-1) / 4; both sides have 3 tokens: a tie, wrong."""
    from probes.exposure.ngram import ngram_frame, windows
    from probes.scoring.primitive import correct

    rows = np.array([[0, 1, 2, 3], [3, 0, 1, 2]])
    ids = {"good": (0, 1, 2, 3), "bad": (0, 1, 3, 3)}
    q = Queries([w for s in ids.values() for w in windows(s)], 2)
    counts = {0: np.zeros(len(q.seqs), dtype=np.int64)}
    for step in (1, 2):  # rows 1..step counted in one call: a window could cross from row 1 into row 2
        q.count(rows[:step], counts.setdefault(step, counts[0].copy()))
    pairs = pd.DataFrame({"pair_id": [7], "paradigm": ["p"], "phenomenon": ["ph"], "good": ["good"], "bad": ["bad"]})
    got = ngram_frame(pairs, ids, q.index.__getitem__, counts, {0: 0, 1: 4, 2: 8}, 4).set_index(["step", "n"])
    L = np.log
    want = {(2, 2): (L(.5), 2 * L(.1)), (2, 3): (L(.5), 2 * L(.04)), (2, 4): (L(.5), L(.04) + L(.016)),
            (1, 2): (0, 2 * L(.1)), (1, 3): (0, 2 * L(.04)), (1, 4): (0, L(.04) + L(.016)),
            (0, 2): (3 * L(.1),) * 2, (0, 3): (L(.1) + L(.04) + L(.04),) * 2, (0, 5): (L(.1) + L(.04) + L(.016),) * 2}
    want[(2, 5)], want[(1, 5)] = want[(2, 4)], want[(1, 4)]
    for key, (g, b) in want.items():
        assert got.loc[key, ["lp_good", "lp_bad"]].tolist() == pytest.approx([g, b], abs=1e-12), key
    assert (got.ntok_good == 3).all() and (got.ntok_bad == 3).all()
    ok = correct(got.reset_index(), "sum")
    assert ok.tolist() == [s > 0 for s in got.reset_index().step]  # the step-0 tie counts wrong


def backoff_lp(seq, n: int, grams: Counter, tokens: int, vocab: int) -> float:
    """Stupid backoff written from its recursive definition: S(w | ctx) = c(ctx w) / c(ctx) if c(ctx w) > 0,
    else 0.4 S(w | ctx without its first id); S(w) = (c(w) + 1) / (tokens + vocab)."""
    lp = 0.0
    for j in range(1, len(seq)):
        ctx, w, pen = tuple(seq[max(0, j - n + 1):j]), seq[j], 0.0
        while ctx and grams[ctx + (w,)] == 0:
            ctx, pen = ctx[1:], pen + np.log(0.4)
        lp += pen + (np.log(grams[ctx + (w,)] / grams[ctx]) if ctx else np.log((grams[(w,)] + 1) / (tokens + vocab)))
    return lp


def test_ngram_baseline_equals_a_brute_force_model_over_train_batch_rows(run):
    run_dir, _ = run
    f = exposure_path(run_dir, "grammar").with_suffix(".ngram.parquet")
    got, meta = read_exposure(f, kind="ngram")
    assert meta["smoothing"]["name"] == "stupid_backoff" and meta["smoothing"]["alpha"] == 0.4
    assert meta["stream"] == read_exposure(exposure_path(run_dir, "grammar"))[1]["stream"]
    with pytest.raises(ValueError, match="kind 'ngram', not an exposure file"):
        read_exposure(f)
    cfg = load_run_config(run_dir)
    _, stream = open_stream(cfg)
    tok = load_tokenizer(list_checkpoints(run_dir)[-1][1])
    pairs = pd.read_parquet(sorted((run_dir / "evals").glob("step*/grammar.parquet"))[-1])
    got = got.set_index(["step", "n", "pair_id", "paradigm"]).sort_index()
    assert len(got) == len(pairs) * 4 * len(meta["steps"])
    for step in meta["steps"]:
        rows = [r for k in range(1, step + 1) for r in batch_ids(stream, k, cfg.optim.global_batch).tolist()]
        grams = Counter(tuple(r[j:j + m]) for r in rows for m in range(1, 6) for j in range(len(r) - m + 1))
        tokens = sum(map(len, rows))
        for p in pairs.itertuples():
            g, b = sentence_ids(tok, [p.good, p.bad])
            for n in (2, 3, 4, 5):
                row = got.loc[(step, n, str(p.pair_id), p.paradigm)]
                assert (row.ntok_good, row.ntok_bad) == (len(g) - 1, len(b) - 1)
                assert [row.lp_good, row.lp_bad] == pytest.approx(
                    [backoff_lp(s, n, grams, tokens, meta["vocab"]) for s in (g, b)], abs=1e-9)
    last = got.loc[meta["steps"][-1]]
    assert last.lp_good.mean() > got.loc[0].lp_good.mean()  # training data makes the sentences likelier
