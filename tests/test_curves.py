"""`probes curves`: accuracies on a hand-made run directory, the U finder, PNGs, bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from probes.analysis import curves
from probes.analysis.evalfile import MISSING, MLP
from probes.analysis.evalset import EvalInputError, load_runs, log_tokens
from probes.analysis.ushape import find_u_shapes

CONV = "bos_all_tokens_v1"


def outcome_matrix(o, paradigm: str) -> list[list[float]]:
    """MLP correctness of one paradigm's pairs, (steps, pairs): 1 right, 0 wrong, NaN missing."""
    block = o.correct[:, np.flatnonzero(o.row_paradigm == o.paradigms.index(paradigm))]
    return np.where(block & MISSING, np.nan, (block & MLP) > 0).tolist()


def write_eval(run: Path, step: int, tokens: int, rows: list[dict], benchmark: str = "grammar",
               convention: str = CONV, with_ckpt: bool = True, pair_set: str | None = None) -> Path:
    """One evals/step<N>/<benchmark>.parquet the way the probe hook writes it."""
    df = pd.DataFrame(rows)
    for col, default in (("benchmark", benchmark), ("good", "g"), ("bad", "b")):
        if col not in df:
            df[col] = default
    for r in ("prefix", "critical", "suffix"):
        for s in ("good", "bad"):
            if f"lp_{s}_{r}" not in df:
                df[f"lp_{s}_{r}"] = np.nan
                df[f"ntok_{s}_{r}"] = 0
    table = pa.Table.from_pandas(df, preserve_index=False)
    # model_dir as the writers record it: two runs' files are never byte copies of each other (a copy is refused)
    meta = {"step": step, "tokens": tokens, "benchmark": benchmark, "convention": convention,
            "model_dir": str(run / "checkpoints" / f"step{step}")}
    if pair_set:
        meta["pair_set"] = pair_set
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"syntax_dynamics": json.dumps(meta).encode()})
    path = run / "evals" / f"step{step}" / f"{benchmark}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    if with_ckpt:
        ck = run / "checkpoints" / f"step{step}"
        ck.mkdir(parents=True, exist_ok=True)
        (ck / "trainer_state.json").write_text(json.dumps({"step": step, "tokens": tokens}))
    return path


def pair(paradigm, pid, lpg, ng, lpb, nb, phenomenon=None):
    return {"paradigm": paradigm, "phenomenon": phenomenon or ("agreement" if paradigm.startswith("agr")
                                                                 else "binding"),
            "pair_id": str(pid), "lp_good": lpg, "ntok_good": ng, "lp_bad": lpb, "ntok_bad": nb}


def config(run: Path, model="pythia-14m", seed=1, budget=1000):
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(
        f"experiment: test\nseed: {seed}\nmodel:\n  name: {model}\ndata:\n  budget_tokens: {budget}\n  seed: 0\n")


@pytest.fixture
def run(tmp_path) -> Path:
    r = tmp_path / "run_a"
    config(r)
    # step 0: agr_local 4 pairs -> MLP: p0 correct, p1 TIE (wrong), p2 correct (MLP only), p3 wrong.
    write_eval(r, 0, 0, [
        pair("agr_local", 0, -4.0, 2, -6.0, 2),    # -2 > -3: mlp ok, sum ok
        pair("agr_local", 1, -6.0, 3, -4.0, 2),    # -2 == -2: tie -> wrong; sum -6 < -4 wrong
        pair("agr_local", 2, -6.0, 2, -5.0, 1),    # -3 > -5: mlp ok; sum -6 < -5 wrong
        pair("agr_local", 3, -9.0, 3, -3.0, 3),    # wrong both
        pair("bind_refl", "a", -2.0, 1, -2.0, 1),  # exact tie: wrong both
        pair("bind_refl", "b", -1.0, 1, -3.0, 1),  # ok both
    ])
    # step 1: everything correct except the agr tie stays a tie
    write_eval(r, 1, 2048, [
        pair("agr_local", 0, -1.0, 2, -6.0, 2), pair("agr_local", 1, -6.0, 3, -4.0, 2),
        pair("agr_local", 2, -1.0, 2, -5.0, 1), pair("agr_local", 3, -1.0, 3, -3.0, 3),
        pair("bind_refl", "a", -1.0, 1, -2.0, 1), pair("bind_refl", "b", -1.0, 1, -3.0, 1),
    ])
    # a half-written file and a temporary dir that readers must ignore
    (r / "evals" / "step1" / ".grammar.parquet.tmp").write_bytes(b"garbage")
    (r / "evals" / "step2.tmp").mkdir()
    # checkpoint 2 exists but was never probed -> reported, not fatal
    (r / "checkpoints" / "step2").mkdir(parents=True)
    return r


def test_accuracies_match_hand_computation(run):
    ev = load_runs([run])
    t = ev.table.set_index(["step", "paradigm"])
    assert t.loc[(0, "agr_local"), "acc_mlp"] == pytest.approx(2 / 4)  # the tie counts wrong
    assert t.loc[(0, "agr_local"), "acc_sum"] == pytest.approx(1 / 4)
    assert t.loc[(0, "bind_refl"), "acc_mlp"] == pytest.approx(1 / 2)
    assert t.loc[(0, "bind_refl"), "acc_sum"] == pytest.approx(1 / 2)
    assert t.loc[(1, "agr_local"), "acc_mlp"] == pytest.approx(3 / 4)
    assert t.loc[(1, "agr_local"), "acc_sum"] == pytest.approx(3 / 4)
    assert t.loc[(1, "agr_local"), "n_pairs"] == 4
    assert t.loc[(1, "agr_local"), "tokens"] == 2048
    assert t.loc[(0, "agr_local"), "delta_total"] == pytest.approx(np.mean([2, -2, -1, -6]))
    row = ev.table.iloc[0]
    assert (row["model"], row["seed"], row["budget"], row["run"]) == ("pythia-14m", 1, 1000, "run_a")
    assert ev.convention == CONV
    assert any("step(s) 2" in p for p in ev.problems), ev.problems
    # per-pair outcomes kept for bootstrap: the tie is 0 at both steps
    m = outcome_matrix(ev.outcomes[("run_a", "grammar")], "agr_local")
    assert m == [[1, 0, 1, 0], [1, 0, 1, 1]]


def test_cli_writes_tables_plots_and_u_list(run, tmp_path, capsys):
    out = tmp_path / "out"
    assert curves.main([str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(out / "plots") in printed
    tidy = pd.read_parquet(out / "curves.parquet")
    assert list(tidy.columns) == curves.TIDY_COLUMNS
    assert len(pd.read_csv(out / "curves.csv")) == 4
    ph = pd.read_csv(out / "phenomena.csv").set_index(["step", "phenomenon"])
    assert ph.loc[(0, "agreement"), "acc_mlp"] == pytest.approx(0.5)
    pngs = sorted((out / "plots" / "grammar").glob("*.png"))
    assert {p.name for p in pngs} == {"agreement.png", "binding.png", "overview.png"}
    from PIL import Image  # matplotlib depends on pillow

    for p in pngs:
        with Image.open(p) as im:
            im.verify()
            assert im.format == "PNG" and im.size[0] > 300
    assert "step(s) 2" in (out / "problems.txt").read_text()


def test_u_shape_in_run_dir_has_token_positions(tmp_path):
    r = tmp_path / "u"
    config(r)
    accs = [0.5, 0.9, 0.9, 0.3, 0.2, 0.6, 1.0]  # 10 pairs each: peak step 2, trough step 4
    steps = [0, 1, 2, 4, 8, 16, 32]
    for s, a in zip(steps, accs):
        k = int(round(a * 10))
        rows = [pair("agr_attr", i, -1.0 if i < k else -5.0, 1, -3.0, 1) for i in range(10)]
        write_eval(r, s, s * 100, rows)
    out = tmp_path / "out"
    assert curves.main([str(r), "--out", str(out), "--delta", "0.2"]) == 0
    us = pd.read_csv(out / "ushapes.csv")
    para = us[us.level == "phenomenon"].iloc[0]  # the report's level (one paradigm: the same curve)
    # steps 1 and 2 both at 0.9: the raw scale's peak is step 1, the smoothed one's step 2 (that row is kept)
    assert para.peak_step in (1, 2) and (para.trough_step, para.recovery_step) == (8, 16)
    assert (para.peak_tokens, para.trough_tokens, para.recovery_tokens) == (100 * para.peak_step, 800, 1600)
    assert bool(para.peak_above_chance)  # 9/10 vs 0.5: z = 2.53
    assert set(us.level) == {"phenomenon"} and len(us) == 1


def test_find_u_shapes_known_u_and_monotone():
    y = [0.5, 0.7, 0.8, 0.6, 0.55, 0.7, 0.9]
    (u,) = find_u_shapes(y, 0.1)
    assert (u.peak, u.trough, u.recovery) == (2, 4, 5)
    assert u.depth == pytest.approx(0.25) and u.recovered_to == pytest.approx(0.9)
    assert find_u_shapes(np.linspace(0.5, 0.95, 20), 0.05) == []
    wiggle = 0.5 + np.linspace(0, 0.4, 20) + 0.04 * (-1) ** np.arange(20)  # wiggles of 0.08 < 0.1
    assert find_u_shapes(wiggle, 0.1) == []
    # a drop without recovery is not a U
    assert find_u_shapes([0.5, 0.9, 0.6, 0.62], 0.1) == []
    # two U's in one curve
    assert len(find_u_shapes([0.6, 0.9, 0.6, 0.9, 0.6, 0.95], 0.2)) == 2


def test_step0_sits_one_decade_left():
    x = log_tokens(np.array([0, 1000, 10000]))
    assert x.tolist() == pytest.approx([2.0, 3.0, 4.0])


def test_missing_and_empty_run_dirs_are_named(tmp_path, capsys):
    missing = tmp_path / "nope"
    with pytest.raises(EvalInputError, match=str(missing)):
        load_runs([missing])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert curves.main([str(empty), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "no minimal-pair eval files" in err
    (empty / "evals" / "step0").mkdir(parents=True)
    (empty / "evals" / "step0" / "syntax_qa.parquet").write_bytes(b"")  # only looked for, not read
    # its kind, by its name
    with pytest.raises(EvalInputError, match="files are of kind .syntax_questions., which .probes curves. draws alone"):
        load_runs([empty])


def test_mixed_conventions_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_eval(a, 0, 0, [pair("agr", 0, -1.0, 1, -2.0, 1)])
    write_eval(b, 0, 0, [pair("agr", 0, -1.0, 1, -2.0, 1)], convention="lm_eval_space")
    with pytest.raises(EvalInputError, match="bos_all_tokens_v1.*lm_eval_space|lm_eval_space.*bos_all"):
        load_runs([a, b])


def test_missing_column_names_file(tmp_path):
    r = tmp_path / "r"
    p = write_eval(r, 0, 0, [pair("agr", 0, -1.0, 1, -2.0, 1)])
    pq.write_table(pq.read_table(p).drop(["lp_bad"]), p)
    with pytest.raises(EvalInputError, match=r"grammar\.parquet.*lp_bad"):
        load_runs([r])


def test_rows_in_another_order_are_aligned_by_pair_id(tmp_path):
    r = tmp_path / "r"
    rows0 = [pair("agr", i, -1.0 if i < 2 else -5.0, 1, -3.0, 1) for i in range(4)]  # pairs 0,1 right
    rows1 = [pair("agr", i, -1.0 if i in (0, 3) else -5.0, 1, -3.0, 1) for i in (3, 2, 1, 0)]  # 0,3 right
    write_eval(r, 0, 0, rows0)
    write_eval(r, 1, 100, rows1)
    ev = load_runs([r])
    o = ev.outcomes[("r", "grammar")]
    assert list(o.pair_ids) == ["0", "1", "2", "3"]
    assert outcome_matrix(o, "agr") == [[1, 1, 0, 0], [1, 0, 0, 1]]
    assert ev.table.acc_mlp.tolist() == [0.5, 0.5]


def test_int_pair_ids_and_tokens_from_trainer_state(tmp_path):
    r = tmp_path / "r"
    p = write_eval(r, 3, 999, [pair("agr", 0, -1.0, 1, -2.0, 1)])
    t = pq.read_table(p)
    t = t.set_column(t.schema.get_field_index("pair_id"), "pair_id", pa.array([7]))
    meta = json.loads(t.schema.metadata[b"syntax_dynamics"])
    del meta["tokens"]
    pq.write_table(t.replace_schema_metadata({b"syntax_dynamics": json.dumps(meta).encode()}), p)
    ev = load_runs([r])
    assert ev.table.tokens.tolist() == [999]  # from checkpoints/step3/trainer_state.json
    assert list(ev.outcomes[("r", "grammar")].pair_ids) == ["7"]


def test_reduced_cache_is_reused_and_invalidated(run, monkeypatch):
    import probes.analysis.evalfile as F
    from probes.analysis.evalcache import cache_path

    first = load_runs([run])
    cache = cache_path(run, "grammar")
    assert cache.is_file()
    reads = []
    real = F.read_eval_file
    monkeypatch.setattr(F, "read_eval_file", lambda *a: reads.append(a[0]) or real(*a))
    again = load_runs([run])
    assert reads == []  # every number came from the cache
    pd.testing.assert_frame_equal(first.table, again.table)
    o1, o2 = first.outcomes[("run_a", "grammar")], again.outcomes[("run_a", "grammar")]
    assert (o1.correct == o2.correct).all() and list(o1.pair_ids) == list(o2.pair_ids)
    assert first.problems == again.problems and again.convention == CONV

    # a new checkpoint's eval (rows in another order, one pair gone): only that file is read, and
    # everything matches a fresh read of all files
    write_eval(run, 2, 4096, [pair("bind_refl", p, -1.0, 1, -9.0, 1) for p in "ba"]
               + [pair("agr_local", i, -1.0, 1, -9.0, 1) for i in (3, 1, 0)])
    third = load_runs([run])
    assert len(reads) == 1 and reads[0].parent.name == "step2"
    fresh = load_runs([run], cache=False)
    pd.testing.assert_frame_equal(third.table, fresh.table)
    o3, of = third.outcomes[("run_a", "grammar")], fresh.outcomes[("run_a", "grammar")]
    assert (o3.correct == of.correct).all() and list(o3.steps) == [0, 1, 2]
    assert o3.correct[2, 2] == F.MISSING  # agr_local pair 2 is not in step 2
    assert third.table[third.table.step == 2].acc_mlp.tolist() == [1.0, 1.0]
    assert third.problems == fresh.problems and any("different pair set" in p for p in third.problems)
    reads.clear()

    # a rewritten old file: every file is read again
    write_eval(run, 1, 2048, [pair("agr_local", i, -1.0, 1, -9.0, 1) for i in range(4)]
               + [pair("bind_refl", p, -9.0, 1, -1.0, 1) for p in "ab"])
    fourth = load_runs([run])
    assert len(reads) == 3
    assert fourth.table[fourth.table.step == 1].acc_mlp.tolist() == [1.0, 0.0]
    pd.testing.assert_frame_equal(fourth.table, load_runs([run], cache=False).table)
    reads.clear()

    # a torn cache (crash mid-write) is ignored and rebuilt
    cache.write_bytes(cache.read_bytes()[:100])
    pd.testing.assert_frame_equal(load_runs([run]).table, fourth.table)
    assert len(reads) == 3 and np.load(cache)["correct"].shape == (3, 6)

    # cache=False neither reads nor writes it
    cache.unlink()
    load_runs([run], cache=False)
    assert not cache.exists()


def test_a_kind_no_family_reads_is_named_with_or_without_the_reduced_cache(run):
    """A benchmark cached as minimal pairs, then rewritten by an unregistered family: not read as pairs (h38)."""
    for step, tokens in ((0, 0), (1, 2048)):
        write_eval(run, step, tokens, [pair("agr", 0, -1.0, 1, -2.0, 1)], benchmark="other")
    assert "other" in set(load_runs([run]).table.benchmark)  # read as minimal pairs, and cached so
    for p in run.glob("evals/step*/other.parquet"):
        t = pq.read_table(p)
        meta = {**json.loads(t.schema.metadata[b"syntax_dynamics"]), "kind": "toy_unregistered"}
        pq.write_table(t.replace_schema_metadata({b"syntax_dynamics": json.dumps(meta).encode()}), p)
    for cache in (True, False):
        ev = load_runs([run], cache=cache)
        assert set(ev.table.benchmark) == {"grammar"}
        assert any("other's eval files say kind 'toy_unregistered'" in p for p in ev.problems), ev.problems


def test_run_given_as_dot_is_named_after_its_directory(run, monkeypatch):
    monkeypatch.chdir(run)
    assert load_runs(["."]).runs[0].name == "run_a"


def test_end_of_run_u_list_applies_the_reports_rule(tmp_path, capsys):
    # Issue 11: a one-seed run scored at 10 pairs per paradigm listed "170 U-shapes at delta = 0.1"
    # at the end of training (every geometric dip of a noisy curve). The list must be the report's.
    from probes.analysis.report import ReportConfig, report_config
    from synthetic import RunSpec, log_spaced_steps, planted_dip, sigmoid_curve, write_run
    from probes.analysis.ushape import find_u_shapes_in_runs

    rng = np.random.default_rng(7)
    steps = log_spaced_steps(47, 20000)
    x = log_tokens(steps * 1000)
    names = [f"p{i}" for i in range(12)]
    flat = np.stack([sigmoid_curve(x, 0.5, rng.uniform(0.7, 0.9), rng.uniform(5, 6), 3) for _ in names], axis=1)
    thin = write_run(tmp_path / "thin", RunSpec(budget=10**7, tokens_per_step=1000, steps=list(steps)),
                     np.clip(flat, 0, 1), names, [f"ph{n}" for n in names], 10, rng)
    assert curves.main([str(thin), "--out", str(tmp_path / "c1"), "--delta", "0.1"]) == 0
    printed = capsys.readouterr().out
    us = pd.read_csv(tmp_path / "c1" / "ushapes.csv")
    assert len(us) >= 10  # plenty of geometric dips in 10-pair curves ...
    assert not us.accepted.any() and set(us.verdict) == {"too_thin"}  # ... none of them a U-shape
    assert "0 learning U's, 0 chance dips (peak not above chance), 0 dips peaking at step 0 (the untrained model) " \
        "at delta=0.1" in printed and "too few to accept a U of depth 0.1" in printed

    # two seeds with planted dips (0.3 deep, and 0.08: a U at the report's delta 0.05, not at 0.1):
    # the end-of-run list and the report's table accept the same U's
    dip = np.stack([0.9 - planted_dip(x, 0.3, 6.3, 0.2), sigmoid_curve(x, 0.5, 0.9, 5.0, 3),
                    0.9 - planted_dip(x, 0.08, 5.6, 0.3)], axis=1)
    runs = [write_run(tmp_path / f"s{s}", RunSpec(budget=10**7, seed=s, tokens_per_step=1000, steps=list(steps)),
                      np.clip(dip, 0, 1), ["attr", "simple", "shallow"], ["agr", "agr", "agr"], 300, rng)
            for s in (1, 2)]
    assert curves.main([*map(str, runs), "--out", str(tmp_path / "c2")]) == 0
    listed = pd.read_csv(tmp_path / "c2" / "ushapes.csv")
    ev = load_runs(runs)
    rep, _ = find_u_shapes_in_runs(ev, report_config(ev).ushape, levels=ReportConfig().u_levels)  # the report's
    keys = ["level", "paradigm", "peak_step", "trough_step", "recovery_step", "verdict"]
    got = listed[listed.accepted][keys].fillna("").astype(str).sort_values(keys).reset_index(drop=True)
    want = rep[rep.accepted][keys].fillna("").astype(str).sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    assert set(got.level) == {"phenomenon"} and len(got) and (listed[listed.accepted].n_seeds == 2).all()



def test_plot_helpers_and_syntax_qa_curves_do_not_load_the_curves_cli():
    # probes.analysis.curves is a CLI drawing with probes.analysis.plotting and the syntax-question curves; those must
    # not import it back (the two curve modules once imported each other). A fresh interpreter: this
    # test process has long imported probes.analysis.curves.
    import subprocess
    import sys

    code = "import sys, probes.analysis.plotting, probes.syntaxqa.report; print('probes.analysis.curves' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    assert out == "False"


def test_paradigm_sums_in_blocks_are_bincounts_bits():
    # A paradigm's mean delta is a sum taken one pair after another (bincount's order, as ever). The
    # block path sums a (pairs, paradigms) layout over its outer axis, which numpy adds row by row: the
    # same bits, where a pairwise sum (what numpy does along an inner axis) differs in the last places.
    from probes.analysis.evalfile import _blocks, paradigm_delta_sums

    rng = np.random.default_rng(5)
    k, g = 7, 50
    codes = np.repeat(np.arange(k), g)
    good = rng.normal(size=k * g) * 10.0 ** rng.uniform(-3, 8, k * g)  # magnitudes where order shows
    bad = rng.normal(size=k * g)
    good[:g], bad[:g] = -0.0, 0.0  # a paradigm of -0.0 deltas: summed from 0.0, its sum is +0.0
    good[g + 3], bad[2 * g + 1] = np.nan, np.inf
    assert _blocks(codes, k) == g and _blocks(np.roll(codes, 1), k) == 0 and _blocks(codes[:-1], k) == 0
    fast = paradigm_delta_sums(codes, k, [(good, bad), (bad, good)], g)
    ref = np.stack([np.bincount(codes, weights=a - b, minlength=k) for a, b in ((good, bad), (bad, good))])
    assert np.array_equal(fast, ref, equal_nan=True) and np.array_equal(np.signbit(fast), np.signbit(ref))
    assert np.array_equal(paradigm_delta_sums(codes, k, [(good, bad)]), ref[:1], equal_nan=True)
    pairwise = np.add.reduce((good - bad).reshape(k, g), axis=1)  # the sum this must not be
    assert not np.array_equal(pairwise[3:], ref[0, 3:])


def test_pairs_and_counts_read_by_value_where_a_file_stores_them_otherwise(tmp_path):
    # Files whose paradigm/pair_id (or token count) chunks are stored byte for byte as the file read
    # before are not decoded again (evalfile._chunk_key). One with the same pairs in another order, or
    # other token counts, must be read by value: a key blind to the bytes would align step 1's pairs as
    # step 0's, or score step 2 with step 1's counts.
    from probes.analysis.evalfile import Seen, read_eval_file

    run = tmp_path / "r"
    config(run)
    # agr: mean good -(1+i)/ng against bad -2/3; with ng = 2 only pair 0 is right, with ng = 4 pairs 0, 1
    rows = [pair("agr", i, -1.0 - i, 2, -2.0, 3) for i in range(4)] + \
           [pair("bind", i, -2.0, 1, -1.0 - i, 2) for i in range(3)]
    write_eval(run, 0, 100, rows)
    write_eval(run, 1, 200, rows[::-1])
    write_eval(run, 2, 300, [dict(r, ntok_good=r["ntok_good"] * 2) for r in rows])
    write_eval(run, 3, 400, [dict(r, ntok_good=r["ntok_good"] * 2) for r in rows])
    ev = load_runs([run], cache=False)
    o = ev.outcomes[("r", "grammar")]
    assert outcome_matrix(o, "agr") == [[1, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    t = ev.table[ev.table.paradigm == "agr"]
    assert t.acc_mlp.tolist() == [0.25, 0.25, 0.5, 0.5] and (t.n_pairs == 4).all()
    # and what was not decoded: step 3's pairs and counts are stored as step 2's
    files = [run / "evals" / f"step{s}" / "grammar.parquet" for s in range(4)]
    first = read_eval_file(files[0], 0, run)
    other_order = read_eval_file(files[1], 1, run, Seen(row_key=first.row_key))
    assert other_order.row_key != first.row_key and other_order.paradigm is not None
    two = read_eval_file(files[2], 2, run, Seen(row_key=first.row_key, counts_key=first.counts_key,
                                                 counts=first.counts))
    assert two.counts_key != first.counts_key and two.counts[0][0] == 4
    three = read_eval_file(files[3], 3, run, Seen(first.row_key, two.counts_key, two.counts))
    assert three.paradigm is None and three.counts[0] is two.counts[0]


def test_end_of_run_curves_and_the_report_answer_alike(tmp_path, capsys):
    # Issue 44: for the same run `probes curves` (run at the end of training) said "1 learning U (+2 peaking at
    # step 0)" and "121 pairs needed" where `probes report` said "0 learning U's, 0 step-0 dips" and 129: the
    # curves searched paradigms too, at level 0.05, where the report searches phenomena at its false-U budget.
    # One seed, 12 phenomena of 2 paradigms (12 curves: a per-curve level of 0.5 / 12), 40 pairs, 16 checkpoints,
    # one paradigm with a deep dip (a paradigm-level U, a shallower phenomenon one).
    from probes.analysis import report
    from probes.analysis.ushape import count_text
    from synthetic import RunSpec, log_spaced_steps, planted_dip, sigmoid_curve, write_run

    rng = np.random.default_rng(11)
    steps = log_spaced_steps(16, 20000)
    x = log_tokens(steps * 1000)
    names = [f"p{i:02d}" for i in range(24)]
    ys = np.stack([sigmoid_curve(x, 0.5, 0.9, 5.0, 3) - (planted_dip(x, 0.45, 6.5, 0.25) if i == 0 else 0)
                   for i in range(24)], axis=1)
    run = write_run(tmp_path / "r", RunSpec(budget=10**7, tokens_per_step=1000, steps=list(steps)),
                    np.clip(ys, 0, 1), names, [f"ph{i // 2:02d}" for i in range(24)], 40, rng)
    assert curves.main([str(run), "--out", str(tmp_path / "c")]) == 0
    said_curves = capsys.readouterr().out
    assert report.main([str(run), "--out", str(tmp_path / "rep"), "--n-boot", "200"]) == 0
    said_report = capsys.readouterr().out
    listed = pd.read_csv(tmp_path / "c" / "ushapes.csv")
    rep = pd.read_csv(tmp_path / "rep" / "tables" / "ushapes.csv")
    keys = ["level", "phenomenon", "paradigm", "peak_step", "trough_step", "recovery_step", "verdict", "accepted"]
    pd.testing.assert_frame_equal(listed[keys].astype(str), rep[keys].astype(str))
    count = count_text(rep)
    assert count in said_curves and count in said_report
    needed = pd.read_csv(tmp_path / "rep" / "tables" / "summary.csv").needed.iloc[0]
    assert f"({needed})" in said_curves and needed in (tmp_path / "rep" / "report.md").read_text()
