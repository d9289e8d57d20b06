"""`probes compare`: two checkpoints of a real tiny run, hand-made seed groups tested as recipes (Welch's t on the
seeds, by hand) and as items (the pair as the unit: a second seed of the same decisions adds nothing), the bootstrap
interval against its normal approximation, p and interval that agree, BH within each level, and refused input (a run
against itself, copies by content, other pair sets, files without a pair fingerprint, a report cell of two pair sets)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats
from scipy.stats import false_discovery_control
from test_curves import config, pair, write_eval
from trainutil import tiny_cfg

from probes.__main__ import main as probes_main
from probes.analysis.compare import COLUMNS, compare, paired_stats
from probes.evals.files import EvalInputError, eval_file_meta
from train.files import step_dirs

CONV = "start_token_all_tokens_v2"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from train.loop import train

    run_dir = tmp_path_factory.mktemp("demo")
    train(tiny_cfg(tmp_path_factory.mktemp("cache")), run_dir)
    return run_dir


def _mlp_right(path: Path) -> pd.Series:
    df = pd.read_parquet(path)
    return pd.Series((df.lp_good / df.ntok_good > df.lp_bad / df.ntok_bad).to_numpy(),
                     index=pd.MultiIndex.from_arrays([df.paradigm, df.pair_id]))


def test_compare_two_checkpoints_of_a_real_run(demo_run, tmp_path, capsys):
    steps = sorted(step_dirs(demo_run / "evals"))
    first, last = steps[0], steps[-1]
    out = tmp_path / "cmp"
    assert probes_main(["compare", f"{demo_run}:{first}", str(demo_run), "--out", str(out)]) == 0
    t = pd.read_csv(out / "compare.csv", keep_default_na=False)
    assert list(t.columns) == COLUMNS
    a = _mlp_right(demo_run / "evals" / f"step{first}" / "grammar.parquet")
    b = _mlp_right(demo_run / "evals" / f"step{last}" / "grammar.parquet").loc[a.index]
    assert set(t.unit) == {"item"}  # one seed a side: the recipes cannot be tested, and the output says so
    assert "unit: item (asked: recipe)" in capsys.readouterr().out
    par = t[t.level == "paradigm"].set_index("paradigm")
    assert set(par.index) == set(a.index.get_level_values(0))
    for name, row in par.iterrows():
        ra, rb = a.loc[name], b.loc[name]
        assert (row.n, row.b, row.c) == (len(ra), int((ra & ~rb).sum()), int((~ra & rb).sum()))
        assert row.acc_a == pytest.approx(ra.mean(), abs=1e-12) and row.acc_b == pytest.approx(rb.mean(), abs=1e-12)
        assert row.ci_lo <= row.acc_b - row.acc_a + 1e-12 and row.acc_b - row.acc_a <= row.ci_hi + 1e-12
    assert ((t.p < 0.05) == ((t.ci_lo > 0) | (t.ci_hi < 0))).all()  # one method: they never contradict
    phen = t[t.level == "phenomenon"]
    assert phen.n.sum() == par.n.sum() and phen.b.sum() == par.b.sum()
    over = t[t.level == "overall"].iloc[0]
    assert (over.n, over.b, over.c) == (par.n.sum(), par.b.sum(), par.c.sum())
    flips = pd.read_csv(out / "flips.csv", keep_default_na=False)
    assert len(flips) and (flips.right_a != flips.right_b).all()
    assert (flips.margin_change.abs().diff().dropna() <= 1e-12).all()  # largest change of margin first
    meta = json.loads((out / "compare.json").read_text())
    assert (meta["unit"], meta["asked"]) == ("item", "recipe") and "these trained models" in meta["question"]
    assert [m["step"] for m in meta["a"] + meta["b"]] == [first, last]
    # a file without the fingerprint gets the one its writer would have recorded, from its sentences
    from probes.evals.files import file_pair_set

    f = demo_run / "evals" / f"step{last}" / "grammar.parquet"
    assert file_pair_set(f) == eval_file_meta(f)["pair_set"]
    df = pd.read_parquet(f)
    df.to_parquet(tmp_path / "bare.parquet")  # pandas' own metadata only
    assert file_pair_set(tmp_path / "bare.parquet") == eval_file_meta(f)["pair_set"]
    assert meta["b"][0]["tokens"] > 0 == meta["a"][0]["tokens"]


def _seed_run(root: Path, name: str, seed: int, right: list[bool], step: int = 10) -> Path:
    run = root / name
    config(run, model="pythia-70m" if root.name.startswith("B") else "pythia-14m", seed=seed)  # B: another config
    # right pair: -1 vs -3 (MLP right); wrong pair: -3 vs -1; e: each run's own scores (a genuine run is no copy)
    e = 0.001 * seed + 0.0001 * root.name.startswith("B")
    write_eval(run, step, step * 100, [pair("agr", i, (-1.0 if r else -3.0) - e, 1, -3.0 if r else -1.0, 1)
                                       for i, r in enumerate(right)], convention=CONV)
    return run


def test_seed_groups_are_paired_seed_by_seed(tmp_path):
    """A's seed 1 gets pairs 0-3 right, seed 2 none; B's seed 1 gets none right, seed 2 all. B's folder
    lists seed 2 first (directory x_s1 holds seed 2): paired by seed, every pair is right in half the seeds
    on each side, so no pair differs (b = c = 0); paired by position, B would be ahead on every pair."""
    _seed_run(tmp_path / "A", "x_s1", 1, [True] * 4)
    _seed_run(tmp_path / "A", "x_s2", 2, [False] * 4)
    _seed_run(tmp_path / "B", "x_s1", 2, [True] * 4)
    _seed_run(tmp_path / "B", "x_s2", 1, [False] * 4)
    _seed_run(tmp_path / "B", "x_s3", 3, [True] * 4)  # no seed 3 in A: left out, with a note
    res = compare(str(tmp_path / "A"), str(tmp_path / "B"), unit="item")
    row = res.table[res.table.level == "paradigm"].iloc[0]
    assert (row.n, row.b, row.c, row.acc_a, row.acc_b, row.p) == (4, 0, 0, 0.5, 0.5, 1.0)
    assert any("x_s3" in n for n in res.notes)
    assert sorted(m["seed"] for m in res.meta["b"]) == [1, 2]


def test_a_second_seed_of_the_same_decisions_adds_no_evidence(tmp_path):
    """A: pairs 0-5 right of 8; B: pairs 1-7 right -> b = 1 (pair 0), c = 2 (pairs 6, 7). A second seed of the same
    decisions on each side (its own scores, not a copy) leaves every number of the item unit as it was; pairs x
    seeds as trials would have given b = 2, c = 4. A run against itself is refused."""
    a_right, b_right = [True] * 6 + [False] * 2, [False] + [True] * 7
    single = compare(str(_seed_run(tmp_path / "A1", "r", 1, a_right)), str(_seed_run(tmp_path / "B1", "r", 1, b_right)))
    for seed in (1, 2):
        _seed_run(tmp_path / "A2", f"s{seed}", seed, a_right)
        _seed_run(tmp_path / "B2", f"s{seed}", seed, b_right)
    double = compare(str(tmp_path / "A2"), str(tmp_path / "B2"), unit="item")
    cols = ["unit", "n", "b", "c", "acc_a", "acc_b", "p", "ci_lo", "ci_hi", "q_bh"]
    pd.testing.assert_frame_equal(single.table[cols], double.table[cols])
    assert single.table.iloc[0][["n", "b", "c"]].tolist() == [8, 1, 2]
    run = tmp_path / "A1" / "r"
    with pytest.raises(EvalInputError, match="against itself"):
        compare(str(run), str(run))


def test_copies_are_refused_by_content_naming_both(tmp_path):
    """The issue's replay: {s1, a renamed copy of s1 with only `seed:` edited} against {s1, s2} gave p = 0.00048
    (the genuine seeds: 0.548). Refused, naming both directories, on one side or across the sides; and two runs
    whose eval files differ but whose checkpoints have one manifest (a copy scored again)."""
    import shutil

    right = [True] * 6 + [False] * 2
    s1 = _seed_run(tmp_path / "A", "s1", 1, right)
    _seed_run(tmp_path / "B", "s1", 1, right[::-1])
    _seed_run(tmp_path / "B", "s2", 2, right)
    shutil.copytree(s1, tmp_path / "A" / "s1_renamed")
    cfg = tmp_path / "A" / "s1_renamed" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("seed: 1", "seed: 2"))
    for kw in ({}, {"unit": "item"}):
        with pytest.raises(EvalInputError, match="hold the same run") as e:
            compare(str(tmp_path / "A"), str(tmp_path / "B"), **kw)
        assert str(s1) in str(e.value) and str(tmp_path / "A" / "s1_renamed") in str(e.value)
    shutil.move(tmp_path / "A" / "s1_renamed", tmp_path / "copy")  # across the sides
    with pytest.raises(EvalInputError, match=f"{s1}.* and {tmp_path / 'copy'}.* hold the same run"):
        compare(str(s1), str(tmp_path / "copy"))
    a, b = _seed_run(tmp_path / "C", "a", 1, right), _seed_run(tmp_path / "C", "b", 2, right[::-1])
    for run in (a, b):
        (run / "checkpoints" / "step10" / "manifest.json").write_text(json.dumps(
            {"files": {"model.safetensors": "ab" * 32}, "step": 10, "tokens": 1000, "config_hash": "cd" * 8}))
    with pytest.raises(EvalInputError, match="manifest.json") as e:
        compare(str(a), str(b))
    assert str(a) in str(e.value) and str(b) in str(e.value)


def test_recipe_unit_is_the_default_with_seeds(tmp_path, capsys):
    """10 pairs; A's seeds 1, 2, 3 get 5, 6, 7 right, B's seeds 1, 2 get 8, 9 (B's seed 3 is not needed: the recipe
    unit pairs nothing). Welch by hand: difference 0.85 - 0.6 = 0.25, variances 0.01 and 0.005, se^2 = 0.01/3 +
    0.005/2, df = se^4 / ((0.01/3)^2/2 + 0.0025^2/1) = 2.88; p and interval from that t. --unit item tests seeds 1
    and 2 of each side pair by pair instead, and says so."""
    for seed, k in ((1, 5), (2, 6), (3, 7)):
        _seed_run(tmp_path / "A", f"s{seed}", seed, [True] * k + [False] * (10 - k))
    for seed, k in ((1, 8), (2, 9)):
        _seed_run(tmp_path / "B", f"s{seed}", seed, [True] * k + [False] * (10 - k))
    out = tmp_path / "o"
    assert probes_main(["compare", str(tmp_path / "A"), str(tmp_path / "B"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "unit: recipe - do the recipes (configurations) differ?" in printed and "Welch" in printed
    over = pd.read_csv(out / "compare.csv", keep_default_na=False).query("level == 'overall'").iloc[0]
    se2 = 0.01 / 3 + 0.005 / 2
    df = se2 ** 2 / ((0.01 / 3) ** 2 / 2 + 0.0025 ** 2)
    half = stats.t.ppf(0.975, df) * math.sqrt(se2)
    assert over.unit == "recipe" and (over.acc_a, over.acc_b) == pytest.approx((0.6, 0.85), abs=1e-12)
    assert over.p == pytest.approx(2 * stats.t.sf(0.25 / math.sqrt(se2), df), rel=1e-9)
    assert (over.ci_lo, over.ci_hi) == pytest.approx((0.25 - half, 0.25 + half), rel=1e-9)
    meta = json.loads((out / "compare.json").read_text())
    assert (meta["unit"], meta["paired"], len(meta["a"]), len(meta["b"])) == ("recipe", False, 3, 2)
    item = compare(str(tmp_path / "A"), str(tmp_path / "B"), unit="item")
    row = item.table.query("level == 'overall'").iloc[0]
    # seeds 1, 2: A's shares 1 (pairs 0-4), 1/2 (pair 5), 0; B's 1 (0-7), 1/2 (pair 8), 0: B ahead on pairs 5-8
    assert (row.unit, row.n, row.b, row.c, row.acc_a, row.acc_b) == ("item", 10, 0, 4, 0.55, 0.85)
    assert any("s3" in n for n in item.notes) and item.meta["question"].startswith("do these trained models")
    # the same runs at two checkpoints: a paired t over the runs
    for seed, k in ((1, 2), (2, 4), (3, 3)):
        write_eval(tmp_path / "A" / f"s{seed}", 5, 500, [pair("agr", i, -1.0 - 0.001 * seed if i < k else -3.0, 1,
                                                              -3.0 if i < k else -1.0, 1) for i in range(10)], convention=CONV)
    res = compare(f"{tmp_path / 'A'}:5", str(tmp_path / "A"))
    row = res.table.query("level == 'overall'").iloc[0]
    d = np.array([3, 2, 4]) / 10  # per run: 5 - 2, 6 - 4, 7 - 3 pairs
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert res.meta["paired"] and (row.ci_lo, row.ci_hi) == pytest.approx((0.3 - half, 0.3 + half), rel=1e-9)


def test_bootstrap_interval_matches_its_normal_approximation():
    """n = 400 pairs: b = 20, c = 40, 300 right on both sides, 40 wrong on both. Mean diff 0.05; a pair's
    diff has variance (b+c)/n - 0.05^2 = 0.1475, so the paired 95 % interval is
    0.05 -+ 1.96 sqrt(0.1475/400) = 0.05 -+ 0.0376 (unpaired, 0.8 .2 + .85 .15 = 0.2875 would give -+ 0.0525).
    Tolerance: the bootstrap's lattice step 1/400 (0.0025) plus 3 Monte Carlo sd of a 2.5 % quantile of
    4000 draws (sqrt(.025 .975 / 4000) / (phi(1.96) / 0.0192) = 0.0008): 0.005."""
    a = np.zeros(400, bool)
    b = np.zeros(400, bool)
    a[:20] = True  # A right, B wrong
    b[20:60] = True  # A wrong, B right
    a[60:360] = b[60:360] = True  # both right
    s = paired_stats(a, b, n_boot=4000, rng=np.random.default_rng(1))
    half = 1.96 * math.sqrt(0.1475 / 400)
    assert (s["n"], s["b"], s["c"], s["acc_a"], s["acc_b"]) == (400, 20, 40, 0.8, 0.85)
    assert s["ci_lo"] == pytest.approx(0.05 - half, abs=0.005)
    assert s["ci_hi"] == pytest.approx(0.05 + half, abs=0.005)
    # p from the same draws: about twice the normal tail beyond 0 (0.0091), within the draws' error and lattice
    assert s["p"] == pytest.approx(2 * stats.norm.sf(0.05 / math.sqrt(0.1475 / 400)), abs=0.006)
    assert s["p"] < 0.05 and s["ci_lo"] > 0


def test_q_bh_is_benjamini_hochberg_within_each_level(tmp_path):
    """Three paradigms in two phenomena: q of each level is scipy's BH over that level's rows alone (over
    all rows at once, a phenomenon's pairs would be counted twice), and compare.json names the families."""
    rows_a, rows_b = [], []
    for k, (nb, nc) in enumerate(((0, 12), (2, 9), (5, 5))):
        for i in range(20):
            ra, rb = (True, False) if i < nb else (False, True) if i < nb + nc else (True, True)
            phen = "agreement" if k < 2 else "binding"
            rows_a.append(pair(f"agr{k}", i, -1.0 if ra else -3.0, 1, -3.0 if ra else -1.0, 1, phen))
            rows_b.append(pair(f"agr{k}", i, -1.0 if rb else -3.0, 1, -3.0 if rb else -1.0, 1, phen))
    for name, rows in (("a", rows_a), ("b", rows_b)):
        config(tmp_path / name, seed=ord(name))
        write_eval(tmp_path / name, 5, 500, rows, convention=CONV)
    assert probes_main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "o")]) == 0
    t = pd.read_csv(tmp_path / "o" / "compare.csv", keep_default_na=False)
    for level, n in (("paradigm", 3), ("phenomenon", 2), ("overall", 1)):
        at = t[t.level == level]
        assert len(at) == n
        assert np.allclose(at.q_bh, false_discovery_control(at.p.to_numpy(), method="bh"), rtol=1e-12)
    assert not np.allclose(t.q_bh, false_discovery_control(t.p.to_numpy(), method="bh"))
    fam = json.loads((tmp_path / "o" / "compare.json").read_text())["bh_families"]
    assert {k: v["rows"] for k, v in fam.items()} == {"paradigm": 3, "phenomenon": 2, "overall": 1}


def test_other_pair_sets_are_refused_naming_both_files(tmp_path):
    """The same pair ids over other sentences (a grammar generated with another seed): refused."""
    for name, fp in (("a", "1111aaaa2222bbbb"), ("b", "3333cccc4444dddd")):
        config(tmp_path / name, seed=ord(name))
        write_eval(tmp_path / name, 5, 500, [pair("agr", i, -1.0, 1, -3.0, 1) for i in range(4)], pair_set=fp)
    with pytest.raises(EvalInputError, match="pair_set") as e:
        compare(str(tmp_path / "a"), str(tmp_path / "b"))
    for name in ("a", "b"):
        assert str(tmp_path / name / "evals" / "step5" / "grammar.parquet") in str(e.value)


def test_bad_input_is_one_error_line(tmp_path, capsys):
    run = _seed_run(tmp_path, "r", 1, [True, False])
    assert probes_main(["compare", f"{run}:7", str(run), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "step7" in err[0]
    assert probes_main(["compare", str(tmp_path / "nope"), str(run), "--out", str(tmp_path / "o")]) == 2
    assert "nope" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_files_without_a_pair_set_are_matched_by_their_sentences(tmp_path):
    """No pair_set in either file's metadata: the same sentences compare; the same ids over other sentences (merged
    on (paradigm, pair_id) alone before) are refused naming both files; a file with no sentences either, refused."""
    rows = [pair("agr", i, -1.0, 1, -3.0, 1) for i in range(4)]
    for name, good in (("a", "g"), ("b", "g"), ("c", "other")):
        config(tmp_path / name, seed=ord(name))
        write_eval(tmp_path / name, 5, 500, [{**r, "good": good, "lp_good": r["lp_good"] - ord(name) / 1e3} for r in rows])
    assert compare(str(tmp_path / "a"), str(tmp_path / "b")).table.n.iloc[0] == 4
    with pytest.raises(EvalInputError, match="hold different pairs") as e:
        compare(str(tmp_path / "a"), str(tmp_path / "c"))
    for name in ("a", "c"):
        assert str(tmp_path / name / "evals" / "step5" / "grammar.parquet") in str(e.value)
    f = tmp_path / "c" / "evals" / "step5" / "grammar.parquet"
    df = pd.read_parquet(f).drop(columns=["good", "bad"])
    meta = pq.read_schema(f).metadata
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(meta), f)
    with pytest.raises(EvalInputError, match=f"{f}: no pair_set"):
        compare(str(tmp_path / "a"), str(tmp_path / "c"))


def test_report_refuses_a_cell_of_two_pair_sets(tmp_path, capsys):
    """Issue 44 RM: `probes report runs/base runs/s1`, two seeds of one model x budget scored on 20 and 30 pairs a
    paradigm, were averaged as one cell ("at these 25 pairs"). Refused naming both runs, as compare refuses them;
    another model's run (another cell) on its own pairs is fine."""
    from probes.analysis.evalset import load_runs

    for name, seed, n in (("base", 1, 20), ("s1", 2, 30)):
        config(tmp_path / name, seed=seed)
        for step in (0, 10):
            write_eval(tmp_path / name, step, step * 100, [pair("agr", i, -1.0 - seed / 1e3, 1, -3.0, 1) for i in range(n)])
    assert probes_main(["report", str(tmp_path / "base"), str(tmp_path / "s1"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hold different pairs" in err[0] and "pythia-14m" in err[0]
    assert str(tmp_path / "base") in err[0] and str(tmp_path / "s1") in err[0]
    with pytest.raises(EvalInputError, match="hold different pairs"):
        compare(str(tmp_path / "base"), str(tmp_path / "s1"))
    config(tmp_path / "s1", model="pythia-70m", seed=2)
    assert len(load_runs([tmp_path / "base", tmp_path / "s1"], workers=1).runs) == 2
