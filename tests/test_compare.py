"""`probes compare`: paired statistics of two checkpoints of a real tiny run, hand-made seed groups (the
pair as the unit: a copied seed adds nothing), the bootstrap interval against its normal approximation,
BH within each level, and refused input (a run against itself, copies, other pair sets)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, false_discovery_control
from test_curves import config, pair, write_eval
from trainutil import tiny_cfg

from probes.__main__ import main as probes_main
from probes.analysis.compare import COLUMNS, compare, paired_stats
from probes.evals.files import EvalInputError
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
    par = t[t.level == "paradigm"].set_index("paradigm")
    assert set(par.index) == set(a.index.get_level_values(0))
    for name, row in par.iterrows():
        ra, rb = a.loc[name], b.loc[name]
        assert (row.n, row.b, row.c) == (len(ra), int((ra & ~rb).sum()), int((~ra & rb).sum()))
        assert row.acc_a == pytest.approx(ra.mean(), abs=1e-12) and row.acc_b == pytest.approx(rb.mean(), abs=1e-12)
        want = binomtest(int(row.b), int(row.b + row.c), 0.5).pvalue if row.b + row.c else 1.0
        assert row.p_sign == pytest.approx(want, rel=1e-12)  # one seed: McNemar's exact test
        assert row.ci_lo <= row.acc_b - row.acc_a + 1e-12 and row.acc_b - row.acc_a <= row.ci_hi + 1e-12
    phen = t[t.level == "phenomenon"]
    assert phen.n.sum() == par.n.sum() and phen.b.sum() == par.b.sum()
    over = t[t.level == "overall"].iloc[0]
    assert (over.n, over.b, over.c) == (par.n.sum(), par.b.sum(), par.c.sum())
    flips = pd.read_csv(out / "flips.csv", keep_default_na=False)
    assert len(flips) and (flips.right_a != flips.right_b).all()
    assert (flips.margin_change.abs().diff().dropna() <= 1e-12).all()  # largest change of margin first
    meta = json.loads((out / "compare.json").read_text())
    assert [m["step"] for m in meta["a"] + meta["b"]] == [first, last]
    assert meta["b"][0]["tokens"] > 0 == meta["a"][0]["tokens"]


def _seed_run(root: Path, name: str, seed: int, right: list[bool], step: int = 10) -> Path:
    run = root / name
    config(run, model="pythia-70m" if root.name.startswith("B") else "pythia-14m", seed=seed)  # B: another config
    # right pair: -1 vs -3 (MLP right); wrong pair: -3 vs -1
    write_eval(run, step, step * 100, [pair("agr", i, -1.0 if r else -3.0, 1, -3.0 if r else -1.0, 1)
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
    res = compare(str(tmp_path / "A"), str(tmp_path / "B"))
    row = res.table[res.table.level == "paradigm"].iloc[0]
    assert (row.n, row.b, row.c, row.acc_a, row.acc_b, row.p_sign) == (4, 0, 0, 0.5, 0.5, 1.0)
    assert any("x_s3" in n for n in res.notes)
    assert sorted(m["seed"] for m in res.meta["b"]) == [1, 2]


def test_a_copied_seed_adds_no_evidence(tmp_path):
    """A: pairs 0-5 right of 8; B: pairs 1-7 right -> b = 1 (pair 0), c = 2 (pairs 6, 7). The same runs again as
    a second seed (config seed changed, so not refused as a copy) leave every number as it was; pairs x seeds
    as trials would have given b = 2, c = 4. A copy with the same config hash, and a run against itself, are
    refused."""
    a_right, b_right = [True] * 6 + [False] * 2, [False] + [True] * 7
    single = compare(str(_seed_run(tmp_path / "A1", "r", 1, a_right)), str(_seed_run(tmp_path / "B1", "r", 1, b_right)))
    for seed in (1, 2):
        _seed_run(tmp_path / "A2", f"s{seed}", seed, a_right)
        _seed_run(tmp_path / "B2", f"s{seed}", seed, b_right)
    double = compare(str(tmp_path / "A2"), str(tmp_path / "B2"))
    cols = ["n", "b", "c", "acc_a", "acc_b", "p_sign", "ci_lo", "ci_hi", "q_bh"]
    pd.testing.assert_frame_equal(single.table[cols], double.table[cols])
    assert single.table.iloc[0][["n", "b", "c"]].tolist() == [8, 1, 2]
    import shutil

    shutil.copytree(tmp_path / "A2" / "s1", tmp_path / "A2" / "copy")  # one run twice in a group
    with pytest.raises(EvalInputError, match="copy"):
        compare(str(tmp_path / "A2"), str(tmp_path / "B2"))
    run = tmp_path / "A1" / "r"
    shutil.copytree(run, tmp_path / "r_copy")
    for other in (run, tmp_path / "r_copy"):
        with pytest.raises(EvalInputError, match="against itself"):
            compare(str(run), str(other))


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
    assert s["p_sign"] == pytest.approx(binomtest(20, 60, 0.5).pvalue, rel=1e-12)


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
        assert np.allclose(at.q_bh, false_discovery_control(at.p_sign.to_numpy(), method="bh"), rtol=1e-12)
    assert not np.allclose(t.q_bh, false_discovery_control(t.p_sign.to_numpy(), method="bh"))
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
