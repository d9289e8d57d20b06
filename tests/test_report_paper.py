"""`probes report` organised as the ZhoBLiMP paper: the CSVs behind its figures and tables against values
computed by hand on a hand-made grid (two paradigms of 4 pairs, 2 or 3 seeds, 3 checkpoints)."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_curves import config, write_eval

from probes.analysis import report
from probes.analysis.bands import COVERAGE, seed_bands

Z = stats.norm.ppf(0.975)
# right pairs of 4 per (seed, step): (agr, bind); seed 3 only where a test asks for it
RIGHT = {1: [(2, 2), (3, 4), (4, 3)], 2: [(1, 2), (3, 2), (4, 4)], 3: [(0, 1), (1, 2), (2, 2)]}


def pairs(paradigm, phenomenon, k, n=4):
    """n pairs of which the first k are right under MLP and sum-LP, the others wrong."""
    return [{"paradigm": paradigm, "phenomenon": phenomenon, "pair_id": str(i),
             "lp_good": -2.0 if i < k else -6.0, "ntok_good": 2, "lp_bad": -4.0, "ntok_bad": 2} for i in range(n)]


def grid(root, seeds=(1, 2), benchmark="grammar", all_pairs=None):
    runs = []
    for seed in seeds:
        run = root / f"m_s{seed}"
        config(run, model="pythia-14m", seed=seed, budget=1000)
        for i, (a, b) in enumerate(RIGHT[seed]):
            write_eval(run, i, 1000 * i, pairs("agr", "agreement", a) + pairs("bind", "binding", b), benchmark=benchmark)
        if all_pairs:  # "<benchmark>_all" at the last checkpoint: every pair right in agr, 1 of 4 in bind
            write_eval(run, 2, 2000, pairs("agr", all_pairs[0], 4) + pairs("bind", all_pairs[1], 1),
                       benchmark=f"{benchmark}_all")
        runs.append(run)
    return runs


def run_report(runs, out):
    assert report.main([*map(str, runs), "--out", str(out), "--n-boot", "50", "--case-study", "none"]) == 0
    return (out / "report.md").read_text()


def test_two_seeds_get_each_seed_a_pooled_t_band_and_a_labelled_bootstrap(tmp_path, capsys):
    md = run_report(grid(tmp_path), tmp_path / "rep")
    printed = capsys.readouterr().out
    assert f"report: {tmp_path / 'rep' / 'report.md'}" in printed
    assert f"first figure: {tmp_path / 'rep' / 'figures' / 'overall_curve.png'}" in printed
    c = pd.read_csv(tmp_path / "rep" / "tables" / "curves_overall.csv")
    r = c[c.step == 1].iloc[0]
    # seed 1: agr 3/4, bind 4/4 -> 0.875, var (0.75*0.25/4 + 0)/2^2; seed 2: agr 3/4, bind 2/4 -> 0.625;
    # seeds resampled too: + (S - 1) sd^2 = 0.25^2 / 2 (probes.analysis.bands)
    v1, v2 = (0.1875 / 4) / 4, (0.1875 / 4 + 0.25 / 4) / 4
    half = Z * math.sqrt(v1 + v2 + 0.25 ** 2 / 2) / 2
    assert r.n_seeds == 2 and r.band == "seed-pair-bootstrap" and r.seed_spread == 0.25
    assert r.acc_mean == pytest.approx(0.75, abs=1e-12)
    assert (r.lo, r.hi) == pytest.approx((0.75 - half, min(1, 0.75 + half)), abs=1e-9)
    seeds = pd.read_csv(tmp_path / "rep" / "tables" / "curves_overall_seeds.csv")
    assert sorted(seeds[seeds.step == 1].acc) == [0.625, 0.875]  # each seed's own line
    ph = pd.read_csv(tmp_path / "rep" / "tables" / "curves_phenomenon.csv")
    b = ph[(ph.phenomenon == "binding") & (ph.step == 2)].iloc[0]  # 3/4 and 4/4
    # (changed by issue 42: a pooled t.) bind's seeds [1, 1, 1, 0] and [1, 1, 1, 1]: the shared pairs' variance,
    # seed means per pair [1, 1, 1, 0.5], var 0.0625 / 4 pairs; their spread sd^2 = 0.03125 is all seed x pair
    # wobble (residuals +-0.125 x 6, +-0.375 x 2: 0.375 / 3 / 4 = 0.03125), so the seed variance pooled with
    # agreement's (0) is 0 on df 2: the band is the pairs' alone, 1.96 sqrt(0.015625)
    assert (b.band, b.band_df) == ("pooled-t", 2)
    assert b.acc_mean == 0.875 and b.acc_mean - b.lo == pytest.approx(Z * 0.125, abs=1e-9)
    assert b.hi == 1.0  # clipped
    t4 = pd.read_csv(tmp_path / "rep" / "tables" / "table4_grammar.csv").iloc[0]  # the last checkpoint's cells
    assert (t4.binding, t4.binding_lo, t4.band) == (0.875, pytest.approx(b.lo, abs=1e-12),
                                                    "pooled-t/seed-pair-bootstrap")
    # phenomena pool; the overall curve has no other cell to pool with: the bootstrap, labelled by its coverage
    assert set(ph.band) == {"pooled-t"}
    assert "95 % t, 2 seeds, seed variance pooled over the phenomena of a cell" in md
    assert f"seed-and-pair bootstrap, 2 seeds ({COVERAGE['seed-pair-bootstrap']})" in md
    assert "95 % seed-pair-bootstrap" not in md and "t over seeds" not in md
    # difficulty groups (issue 42 item 6): bind's interval (0.875 -+ 1.96 * 0.125) reaches below 0.85 (Easy): not
    # put in a group; agr, every pair right in both seeds and no seed variance to pool, is Easy
    assert "| 1k | grammar | 1 | 0 | 0 | 0 | 1 |" in md.split("## Difficulty groups")[1]
    # per paradigm (tables/seeds_paradigm): bind at step 1, 4/4 and 2/4: var 0 + 0.25/4, seeds' sd^2 = 0.125
    sp = pd.read_csv(tmp_path / "rep" / "tables" / "seeds_paradigm.csv")
    bind = sp[(sp.paradigm == "bind") & (sp.step == 1)].iloc[0]
    assert bind.band == "seed-pair-bootstrap" and bind.acc_mlp_lo == pytest.approx(
        0.75 - Z * math.sqrt(0.25 / 4 + 0.125) / 2, abs=1e-12)
    # the first paragraph: the change from step 0 paired on the same pairs. Per seed and paradigm, d = last -
    # first per pair: seed 1 agr [0,0,1,1], bind [0,0,1,0] -> 0.375, var (0.25/4 + 0.1875/4)/4; seed 2 agr
    # [0,1,1,1], bind [0,0,1,1] -> 0.625, the same var; + the seeds' spread 0.25^2/2
    sm = pd.read_csv(tmp_path / "rep" / "tables" / "summary.csv").iloc[0]
    half = Z * math.sqrt(2 * (0.25 / 4 + 0.1875 / 4) / 4 + 0.25 ** 2 / 2) / 2
    assert (sm.first_acc, sm.last_acc, sm.change) == pytest.approx((0.4375, 0.9375, 0.5), abs=1e-12)
    assert (sm.change_lo, sm.change_hi) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-12)
    # above chance at the end, by the pooled band (changed by issue 42): binding 0.375 above chance with the
    # pairs' se 0.125 alone: z = 3; agreement 4/4 twice, no variance at all
    ac = pd.read_csv(tmp_path / "rep" / "tables" / "phenomena_above_chance.csv").set_index("phenomenon")
    assert ac.p_above["binding"] == pytest.approx(stats.norm.sf(3), rel=1e-9) and ac.p_above["agreement"] < 1e-12
    assert ac.q_above.to_numpy() == pytest.approx(stats.false_discovery_control(ac.p_above.to_numpy()))
    assert (sm.phenomena_above_chance, sm.phenomena) == (2, 2)
    assert md.split("\n")[2].startswith("**Summary.** pythia-14m · 1k (grammar, 2 seeds): overall accuracy 43.8 → "
                                         f"93.8 %, change +50.0 points (seed-pair-bootstrap "
                                         f"({COVERAGE['seed-pair-bootstrap']}) interval "
                                         f"{100 * (0.5 - half):+.1f} to {100 * (0.5 + half):+.1f}: told from no change)")
    main = md.split("## Appendix")[0]
    figs = re.findall(r"!\[[^]]*\]\((figures/[^)]+\.png)\)", main)
    assert figs[0] == "figures/overall_curve.png" and "figures/phenomena_grammar.png" in figs
    assert not re.findall(r"\]\((appendix/[^)]+)\)", main)  # per-phenomenon figures only in the appendix
    assert re.findall(r"\]\((appendix/curve_grammar_binding.png)\)", md.split("## Appendix")[1])


def test_two_seed_band_covers_the_seeds_it_is_drawn_from():
    """Two seeds whose curves differ by a known offset d = 0.1, with so many pairs that pair noise is nil
    (var 1e-6 each): the seed-and-pair bootstrap's half-width is Z sqrt(2e-6 + d^2 / 2) / 2 = 0.693 d, wider
    than the seeds' own distance d / 2 from their mean; a pair-only band (Z sqrt(2e-6) / 2 = 0.0014) is not."""
    steps = np.arange(5)
    base = 0.5 + 0.05 * steps
    units = pd.concat([pd.DataFrame({"run": f"s{k}", "model": "m", "budget": 1, "seed": k, "benchmark": "b",
                                     "step": steps, "tokens": 100 * steps, "acc": base + 0.1 * k, "var": 1e-6,
                                     "n_pairs": 10**6, "n_paradigms": 1}) for k in (0, 1)])
    b = seed_bands(units, ["model", "budget", "benchmark", "step"])
    assert set(b.band) == {"seed-pair-bootstrap"} and np.allclose(b.seed_spread, 0.1)
    assert np.allclose(b.acc_mean - b.lo, Z * math.sqrt(2e-6 + 0.1 ** 2 / 2) / 2, atol=1e-12)
    assert (b.lo <= base).all() and (b.hi >= base + 0.1).all()  # both seeds inside the band


def test_three_seeds_get_a_t_interval(tmp_path):
    md = run_report(grid(tmp_path, seeds=(1, 2, 3)), tmp_path / "rep")
    c = pd.read_csv(tmp_path / "rep" / "tables" / "curves_overall.csv")
    r = c[c.step == 1].iloc[0]  # seeds 0.875, 0.625, 0.375: sd 0.25
    # (changed by issue 42: seeds and pairs as two levels.) Seed means per pair: agr [1, 2/3, 2/3, 0] (var
    # 19/108), bind [1, 1, 1/3, 1/3] (var 4/27), each / 4 pairs, / K^2 = 4, with z; the seeds' sd^2 less the
    # seed x pair wobble it holds (two-way residuals of each paradigm's seeds x pairs), / 3, with t975(2)
    def wobble(y):
        r = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0) + y.mean()
        return (r ** 2).sum() / 2 / 3 / 4
    agr, bind = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0]]), np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]])
    seed = max(0.25 ** 2 - (wobble(agr) + wobble(bind)) / 4, 0) / 3
    pair = (19 / 108 + 4 / 27) / 4 / 4
    half = math.sqrt(stats.t.ppf(0.975, 2) ** 2 * seed + Z ** 2 * pair)
    assert r.band == "t" and r.acc_mean == pytest.approx(0.625) and r.band_df == 2
    assert (r.lo, r.hi) == pytest.approx((0.625 - half, 1.0), abs=1e-9)  # the top clipped at 1
    assert "bands: 95 % t over seeds and pairs" in md


def test_table4_reads_all_pairs_and_quotes_the_paper(tmp_path):
    runs = grid(tmp_path, benchmark="zhoblimp", all_pairs=("BA", "fci_licensing"))
    md = run_report(runs, tmp_path / "rep")
    t = pd.read_csv(tmp_path / "rep" / "tables" / "table4_zhoblimp_all.csv")
    ours = t[t.source.str.startswith("ours")].iloc[0]
    # all pairs at the last checkpoint: BA (agr) 4/4 in both seeds, FCI (bind) 1/4: overall = mean of paradigms
    assert (ours.BA, ours.fci_licensing, ours.overall, ours.n_seeds) == (1.0, 0.25, 0.625, 2)
    # each cell's interval (changed by issue 42): all pairs scored, so no pair sampling; the seeds agree in both
    # phenomena, so the pooled seed variance is 0; "overall" has no other cell to pool with: the bootstrap
    ov = Z * math.sqrt(2 * (0.25 * 0.75 / 4) / 4) / 2
    assert (ours.BA_lo, ours.BA_hi, ours.band) == (1.0, 1.0, "pooled-t/seed-pair-bootstrap")
    assert (ours.fci_licensing_lo, ours.overall_hi) == pytest.approx((0.25, 0.625 + ov), abs=1e-12)
    assert f"| 62.5 | {100 * (0.625 - ov):.1f}–{100 * (0.625 + ov):.1f} ({COVERAGE['seed-pair-bootstrap']}) |" in md
    sc = pd.read_csv(tmp_path / "rep" / "tables" / "scaling_overall.csv")
    assert sc[sc.benchmark == "zhoblimp_all"].iloc[0].hi == pytest.approx(0.625 + ov, abs=1e-12)
    g = pd.read_csv(tmp_path / "rep" / "tables" / "difficulty_groups.csv").set_index("phenomenon")
    assert (g.loc["BA"].best_lo, g.loc["BA"].group, g.loc["BA"].group_sure) == (1.0, "Easy", True)
    assert g.loc["fci_licensing"].best_hi == pytest.approx(0.25, abs=1e-12)  # all pairs, seeds agree (issue 42)
    paper = t[t.row == "paper: Zh-Pythia-14M · 3B"].iloc[0]
    assert (paper.BA, paper.fci_licensing, paper.overall) == pytest.approx((0.751, 0.716, 0.699))
    assert t[t.row == "human (paper)"].iloc[0].BA == pytest.approx(0.962)
    assert "| _paper: Zh-Pythia-14M · 3B_ |" in md and "| pythia-14m · 1k | 2 | 100.0 | 25.0 | 62.5 |" in md
    # zhoblimp_all has one checkpoint: it feeds the table, never a curve
    c = pd.read_csv(tmp_path / "rep" / "tables" / "curves_phenomenon.csv")
    assert set(c.benchmark) == {"zhoblimp"}
    assert not list((tmp_path / "rep").glob("*/*zhoblimp_all*.png")) or \
        all("scaling" in p.name for p in (tmp_path / "rep").glob("*/*zhoblimp_all*.png"))
    # the paper's U's side by side: 3 checkpoints up to 2,000 tokens cannot show a U near 100M
    pu = pd.read_csv(tmp_path / "rep" / "tables" / "paper_ushapes.csv")
    assert set(pu.status) == {"not detectable here"} and "no U" not in md


def test_main_flow_does_not_grow_with_paradigms(tmp_path):
    """40 paradigms in 16 phenomena: the appendix grows, the main flow stays at its fixed figures."""
    run = tmp_path / "r"
    config(run)
    for i in range(3):
        rows = [r for p in range(40) for r in pairs(f"p{p}", f"ph{p % 16}", (p + i) % 5)]
        write_eval(run, i, 1000 * i, rows)
    md = run_report([run], tmp_path / "rep")
    main, appendix = md.split("## Appendix")
    assert len(re.findall(r"!\[", main)) <= 12
    assert len(re.findall(r"\]\(appendix/curve_", appendix)) == 16


def test_normalised_sweeps_by_hand(tmp_path):
    """Two pairs with unigram columns, each point of the authors' grids worked out by hand:
    pair 0: good lp -10 over 5 tokens (ulp -20), bad lp -8 over 2 (ulp -10);
    pair 1: good -6/3 (ulp -9), bad -6/3 (ulp -12): a tie under MLP, sum and pow; under MORCELA
    (-6 + 9b + g)/3 vs (-6 + 12b + g)/3, never right for b > 0."""
    from probes.analysis.normsweep import sweep_paradigms, sweep_summary
    from probes.analysis.evalset import load_runs

    run = tmp_path / "r"
    config(run)
    rows = [{"paradigm": "p", "phenomenon": "ph", "pair_id": "0", "lp_good": -10.0, "ntok_good": 5, "lp_bad": -8.0,
             "ntok_bad": 2, "ulp_good": -20.0, "ulp_bad": -10.0},
            {"paradigm": "p", "phenomenon": "ph", "pair_id": "1", "lp_good": -6.0, "ntok_good": 3, "lp_bad": -6.0,
             "ntok_bad": 3, "ulp_good": -9.0, "ulp_bad": -12.0}]
    write_eval(run, 0, 0, rows)
    write_eval(run, 5, 5000, rows)
    par = sweep_paradigms(load_runs([run]).runs).set_index("point")
    assert set(par.step) == {5}  # the last checkpoint
    expect = {
        "mlp": 0.5,  # -2 > -4
        "sum": 0.0,  # -10 < -8
        "pow0.5": 0.5,  # -10/5^0.5 = -4.47 > -8/2^0.5 = -5.66
        "pow0.1": 0.0,  # -10/5^0.1 = -8.51 < -8/2^0.1 = -7.46
        "slor": 0.5,  # (-10+20)/5 = 2 > (-8+10)/2 = 1
        "morcela_0.1_0": 0.5,  # (-10+2)/5 = -1.6 > (-8+1)/2 = -3.5
        "morcela_0.1_20": 0.0,  # (-10+2+20)/5 = 2.4 < (-8+1+20)/2 = 6.5
        "morcela_1.0_20": 0.0,  # (-10+20+20)/5 = 6 < (-8+10+20)/2 = 11
        "morcela_1.0_0": 0.5,  # = SLOR
    }
    for point, acc in expect.items():
        assert par.loc[point, "acc"] == acc, point
    assert len(par[par.metric == "morcela"]) == 110 and len(par[par.metric == "pow"]) == 9
    s = sweep_summary(par.reset_index()).set_index("metric")
    assert (s.loc["morcela", "acc_min"], s.loc["morcela", "acc_max"], s.loc["morcela", "acc_at_default"]) == (0, 0.5, 0.5)
    assert s.loc["pow", "acc_at_default"] == 0.5 and s.loc["morcela", "paradigms_moving_over_0.2"] == 1
    # issue 42 item 6: that move of 0.5 on 2 pairs is within pair noise, 1.96 sqrt((0.25 + 0) / 2) = 0.69
    assert s.loc["morcela", "paradigms_moving_over_0.2_sure"] == 0
    # gamma = 0 with beta = 0.1 is right, gamma = 20 wrong: the first right point and the first wrong one
    assert s.loc["morcela", "point_max"] == "morcela_0.1_0" and s.loc["pow", "point_min"] == "pow0.1"


def test_sweep_reads_paradigms_by_name_and_their_first_named_phenomenon(tmp_path):
    """Paradigms stored out of name order, a phenomenon missing on a paradigm's first row: rows come in
    name order with the first phenomenon given, each paradigm's accuracy its own pairs' (the sweep reads
    dictionary codes, not the strings of every row)."""
    from probes.analysis.evalset import load_runs
    from probes.analysis.normsweep import sweep_paradigms

    run = tmp_path / "r"
    config(run)
    rows = []
    for par, ph, right in (("zeta", "ph_z", 3), ("alpha", None, 1), ("mid", "ph_m", 0)):
        for i in range(4):
            rows.append({"paradigm": par, "phenomenon": ph if (i or par != "alpha") else None, "pair_id": f"{par}{i}",
                         "lp_good": -1.0 if i < right else -5.0, "ntok_good": 1, "lp_bad": -3.0, "ntok_bad": 1})
    rows[5]["phenomenon"] = "ph_a"  # alpha's second row names it
    write_eval(run, 0, 0, rows)
    par = sweep_paradigms(load_runs([run]).runs)
    mlp = par[par.point == "mlp"]
    assert mlp.paradigm.tolist() == ["alpha", "mid", "zeta"] and mlp.phenomenon.tolist() == ["ph_a", "ph_m", "ph_z"]
    assert mlp.acc.tolist() == [0.25, 0.0, 0.75] and (mlp.n_pairs == 4).all()


def test_the_papers_u_shapes_detected_absent_or_not_detectable(tmp_path):
    """Runs to 3B tokens: BA with a planted 0.2 dip at ~100M tokens is detected; FCI, rising without a dip,
    at a noise floor below 0.05 is absent; the NPI case-study paradigm is not in these runs."""
    from probes.analysis.evalset import load_runs
    from probes.analysis.paper_ushapes import paper_u_table
    from synthetic import RunSpec, log_spaced_steps, planted_dip, sigmoid_curve, write_run
    from probes.analysis.ushape import UShapeConfig

    rng = np.random.default_rng(3)
    steps = log_spaced_steps(24, 1500)
    x = np.log10(np.maximum(steps, 1) * 2e6)
    rise = sigmoid_curve(x, 0.5, 0.9, 7.0, 4.0)
    curves = np.clip(np.stack([rise - planted_dip(x, 0.2, 8.1, 0.15)] * 2 + [rise] * 2, axis=1), 0, 1)
    runs = [write_run(tmp_path / f"s{s}", RunSpec(budget=3 * 10**9, seed=s, tokens_per_step=2 * 10**6, steps=list(steps),
                                                 benchmark="zhoblimp"), curves, ["BA_a", "BA_b", "fci_a", "fci_b"],
                      ["BA", "BA", "fci_licensing", "fci_licensing"], 300, rng) for s in (1, 2)]
    t = paper_u_table(load_runs(runs), UShapeConfig(n_boot=400)).set_index("paper_u")
    assert t.loc["BA near 100M tokens", "status"] == "detected", t.loc["BA near 100M tokens", "why"]
    assert "2/2" in t.loc["BA near 100M tokens", "why"]
    fci = t.loc["FCI near 100M tokens"]
    assert fci.status == "absent" and fci.min_detectable_depth < 0.05
    assert t.loc["NPI case study, early dip", "status"] == "not detectable here"


def test_a_report_states_one_pairs_needed_figure(tmp_path):
    """One seed of 20 pairs per paradigm with a planted dip: the summary, the one-seed note, the too-thin U's
    and the paper's U's all say what more it would take; five different figures once appeared for one run."""
    from synthetic import RunSpec, log_spaced_steps, planted_dip, sigmoid_curve, write_run

    rng = np.random.default_rng(5)
    steps = log_spaced_steps(24, 1500)
    x = np.log10(np.maximum(steps, 1) * 2e6)
    rise = sigmoid_curve(x, 0.5, 0.9, 7.0, 4.0)
    curves = np.clip(np.stack([rise - planted_dip(x, 0.2, 8.1, 0.15)] * 2 + [rise] * 3, axis=1), 0, 1)
    run = write_run(tmp_path / "s1", RunSpec(budget=3 * 10**9, seed=1, tokens_per_step=2 * 10**6, steps=list(steps),
                                             benchmark="zhoblimp"), curves, ["BA_a", "BA_b", "fci_a", "fci_b", "fci_c"],
                    ["BA", "BA", "fci_licensing", "fci_licensing", "fci_licensing"], 20, rng)
    md = run_report([run], tmp_path / "rep")
    tables = tmp_path / "rep" / "tables"
    text = md + (tables / "ushapes.csv").read_text() + (tables / "paper_ushapes.csv").read_text()
    sm = pd.read_csv(tables / "summary.csv").iloc[0]
    assert "one seed, 20 pairs per paradigm: too few to accept a U" in md and "too_thin" in text
    assert "not detectable here" in (tables / "paper_ushapes.csv").read_text()
    assert set(re.findall(r"needs (?:>= )?(\d+) pairs per paradigm", text)) == {str(sm.pairs_needed_per_seed)}
    assert set(re.findall(r"(\d+) seeds at ", text)) == {str(sm.seeds_needed)}
    assert len(re.findall(r"needs \d+ pairs per paradigm", md)) >= 3  # summary, one-seed note, paper's U's


def test_case_study_band_with_two_seeds(tmp_path):
    """The case study's accuracy band with 2 seeds is the pair bootstrap (by hand), and its text says so."""
    out = tmp_path / "rep"
    assert report.main([*map(str, grid(tmp_path)), "--out", str(out), "--n-boot", "50", "--case-study", "agr"]) == 0
    s = pd.read_csv(out / "tables" / "case_study_grammar_agr.csv")
    r = s[s.step == 1].iloc[0]  # agr 3/4 in both seeds: se sqrt(0.75 * 0.25 / 4) each
    half = Z * math.sqrt(2 * 0.75 * 0.25 / 4) / 2  # the two seeds agree: no seed part
    assert r.band == "seed-pair-bootstrap" and (r.acc_mlp_lo, r.acc_mlp_hi) == pytest.approx((0.75 - half, 0.75 + half))
    md = (out / "report.md").read_text()
    case = md.split("## Case study")[1].split("\n## ")[0]
    assert f"seed-and-pair bootstrap, 2 seeds ({COVERAGE['seed-pair-bootstrap']})" in case
    assert "t over seeds" not in case


def test_a_report_on_one_checkpoint_says_there_is_no_change(tmp_path):
    """Runs scored at one checkpoint only have no curve: no AoA, no change; the report still writes (it
    crashed on the empty AoA table) and its first paragraph says why there is no change to report."""
    run = tmp_path / "one"
    config(run, seed=1)
    write_eval(run, 5, 500, pairs("agr", "agreement", 3) + pairs("bind", "binding", 2))
    md = run_report([run], tmp_path / "rep")
    assert md.split("\n")[2] == "**Summary.** No benchmark was scored at two or more checkpoints: no change to report."
    assert "no curves, no bands" in md


def test_paper_u_needs_peak_trough_and_recovery_in_the_papers_windows(tmp_path):
    """The NPI case-study paradigm dips from step 0 in two models: one recovers at ~1e6 tokens (an early dip,
    not the paper's, which recovers around 100M), the other at ~1e8 (the paper's). Same trough window."""
    from probes.analysis.evalset import load_runs, log_tokens
    from probes.analysis.paper_ushapes import paper_u_table
    from synthetic import RunSpec, log_spaced_steps, write_run
    from probes.analysis.ushape import UShapeConfig

    rng = np.random.default_rng(4)
    steps = log_spaced_steps(30, 50_000)
    x = log_tokens(steps * 20_000)  # step 0, then 2e4 .. 1e9 tokens
    npi = "npi_renhe_wh_question_subj"
    runs = []
    for model, (fall, rise) in (("pythia-14m", (5.5, 5.7)), ("pythia-70m", (5.5, 7.7))):
        # 0.8 until 1e5 tokens, 0.5 from 10^fall to 10^rise, 0.85 from 0.3 decades later on
        curve = np.interp(x, [0, 5.0, fall, rise, rise + 0.3, 12], [0.8, 0.8, 0.5, 0.5, 0.85, 0.85])
        runs += [write_run(tmp_path / f"{model}-s{s}", RunSpec(model=model, budget=10**9, seed=s, tokens_per_step=20_000,
                                                               steps=list(steps), benchmark="zhoblimp"),
                           curve[:, None], [npi], ["npi_licensing"], 300, rng) for s in (1, 2)]
    t = paper_u_table(load_runs(runs), UShapeConfig(n_boot=400))
    t = t[t.paper_u == "NPI case study, early dip"].set_index("model")
    early, paper = t.loc["pythia-14m"], t.loc["pythia-70m"]
    assert early.status == "a dip, not the paper's U", early.why
    assert "outside: recovery" in early.why and "recovery 3e+07–1e+09" in early.why
    assert paper.status == "detected", paper.why
