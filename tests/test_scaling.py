"""Scaling grid: Pearson r by hand, difficulty groups, final accuracies, heatmaps, regions."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from probes.analysis.evalset import RunInfo, parse_model_params
from probes.analysis.regions import RegionConfig, first_mover
from probes.analysis.scaling import (ScalingConfig, difficulty_groups, final_accuracy, grid_tables, pearson_r,
                            plot_grid_overall, plot_grid_phenomena)


def test_pearson_r_by_hand():
    # xc = (-1, 0, 1), yc = (-4/3, -1/3, 5/3): r = 3 / sqrt(2 * 42/9)
    assert pearson_r([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / np.sqrt(2 * 42 / 9))
    assert pearson_r([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(pearson_r([1, 2, 3], [1, 1, 1]))


def test_model_sizes_from_names():
    assert parse_model_params("pythia-14m") == 14e6
    assert parse_model_params("pythia-1.4b") == 1.4e9
    assert parse_model_params("tiny") is None


def _final(rows):
    sizes = {"pythia-14m": 14e6, "pythia-70m": 70e6, "pythia-160m": 160e6}
    return pd.DataFrame([{"model": m, "model_params": sizes[m], "budget": 10**8, "benchmark": "zh",
                          "phenomenon": "ph", "paradigm": p, "acc_mlp": a, "acc_sum": a}
                         for p, accs in rows.items() for m, a in zip(sizes, accs)])


def test_difficulty_groups():
    final = _final({"easy": [0.80, 0.88, 0.95], "medium": [0.6, 0.7, 0.66],
                    "difficult": [0.50, 0.54, 0.60], "other": [0.58, 0.50, 0.55]})
    g = difficulty_groups(final, ScalingConfig()).set_index("paradigm")
    assert g.group.to_dict() == {"difficult": "Difficult", "easy": "Easy", "medium": "Medium", "other": "Other"}
    logs = np.log10([14e6, 70e6, 160e6])
    assert g.loc["difficult", "pearson_r_log_size"] == pytest.approx(pearson_r(logs, [0.5, 0.54, 0.6]))
    assert g.loc["easy", "best_model"] == "pythia-160m"
    few = difficulty_groups(final[final.model != "pythia-160m"], ScalingConfig())
    assert few.set_index("paradigm").loc["difficult", "group"] == "Other"
    assert "model sizes" in few.set_index("paradigm").loc["difficult", "reason"]
    with pytest.raises(ValueError, match="medium_min_best"):
        ScalingConfig(easy_min_best=0.6, medium_min_best=0.7)


def test_final_accuracy_uses_last_checkpoint_and_seed_mean(tmp_path):
    t = pd.DataFrame({"run": ["a", "a", "b", "b"], "model": "pythia-14m", "budget": 10, "seed": [1, 1, 2, 2],
                      "step": [0, 9, 0, 9], "tokens": [0, 90, 0, 90], "benchmark": "zh", "phenomenon": "ph",
                      "paradigm": "p", "n_pairs": 10, "acc_mlp": [0.5, 0.8, 0.5, 0.6], "acc_sum": 0.5})
    f = final_accuracy(t, [RunInfo("a", "a", "pythia-14m"), RunInfo("b", "b", "pythia-14m")])
    assert f.acc_mlp.tolist() == pytest.approx([0.7]) and f.n_seeds.tolist() == [2]
    assert f.model_params.tolist() == [14e6]
    overall, per = grid_tables(f)
    paths = [plot_grid_overall(overall, "zh", "acc_mlp", tmp_path / "overall.png"),  # model x budget
             plot_grid_phenomena(overall, per, "zh", "acc_mlp", tmp_path / "phenomena.png")]  # phenomenon x model
    from PIL import Image

    for p in paths:
        with Image.open(p) as im:
            assert im.format == "PNG"


def test_first_mover_region():
    steps = np.arange(8)
    curve = pd.DataFrame({"step": steps, "tokens": 10 ** (steps + 3),
                          "delta_prefix": 0.0,
                          "delta_critical": [2, 2, 2, 2, 0.5, 0.4, 2, 2.2],  # moves at step 4
                          "delta_suffix": [1, 1, 0.2, 0.1, 0.1, 0.1, 1, 1]})  # moves at step 2
    r = first_mover(curve, 1, 7, RegionConfig())
    assert r["moves_first"] == "suffix"
    assert r["suffix_onset_tokens"] == 10 ** 5 and r["critical_onset_tokens"] == 10 ** 7
    assert np.isnan(r["prefix_onset_tokens"])  # a prefix that never moves
    flat = curve.assign(delta_critical=2.0, delta_suffix=1.0)
    assert first_mover(flat, 1, 7, RegionConfig())["moves_first"] == "none (below min_move)"


def test_difficulty_groups_use_the_largest_budget_by_default():
    """The paper groups its models trained on 3B tokens: a paradigm near chance at 10M but learned at the
    largest budget is Easy, and only the largest budget's rows are grouped."""
    small = _final({"p": [0.50, 0.52, 0.49], "q": [0.9, 0.9, 0.9]}).assign(budget=10**7)
    large = _final({"p": [0.80, 0.88, 0.95], "q": [0.50, 0.52, 0.49]}).assign(budget=3 * 10**9)
    final = pd.concat([small, large], ignore_index=True)
    g = difficulty_groups(final)
    assert g.budget.tolist() == [3 * 10**9] * 2
    assert g.set_index("paradigm").group.to_dict() == {"p": "Easy", "q": "Other"}
    each = difficulty_groups(final, ScalingConfig(budget="each"))
    assert sorted(each.budget.unique()) == [10**7, 3 * 10**9]
    # a whole-corpus run (budget null) is the largest: every budget is a prefix of it
    full = difficulty_groups(pd.concat([small, large.assign(budget=None)], ignore_index=True))
    assert full.budget.isna().all() and len(full) == 2
    from probes.analysis.scaling import PAPER_GROUPS
    assert PAPER_GROUPS == {"Easy": 80, "Medium": 15, "Difficult": 13, "Other": 10}
    assert sum(PAPER_GROUPS.values()) == 118


def test_size_correlation_uses_each_runs_actual_parameter_count(tmp_path):
    # Three runs named by Pythia sizes but trained with an 8,000-piece tokenizer: their checkpoints' manifests
    # say 3.25M, 27.2M and 97.4M parameters, not 14M, 70M and 160M. The difficulty groups' r(acc, log10 size)
    # must use those counts.
    import json

    from probes.analysis.evalset import _read_run_info

    counts = {"pythia-14m": 3_254_272, "pythia-70m": 27_170_816, "pythia-160m": 97_443_840}
    runs = []
    for name, n in counts.items():
        d = tmp_path / name
        (d / "checkpoints" / "step9").mkdir(parents=True)
        (d / "config.yaml").write_text(f"model:\n  name: {name}\ntokenizer:\n  kind: sentencepiece\n"
                                       f"  vocab_size: 8000\n  model_type: unigram\ndata:\n  budget_tokens: 100\n")
        (d / "checkpoints" / "step9" / "manifest.json").write_text(json.dumps({"step": 9, "param_count": n}))
        runs.append(_read_run_info(d))
    assert [r.model_params for r in runs] == list(counts.values())
    assert {r.tokenizer for r in runs} == {"sentencepiece-unigram 8,000"}
    accs = [0.50, 0.58, 0.60]
    t = pd.DataFrame({"run": list(counts), "model": list(counts), "budget": 100, "seed": 0, "step": 9, "tokens": 90,
                      "benchmark": "zh", "phenomenon": "ph", "paradigm": "p", "n_pairs": 10, "acc_mlp": accs,
                      "acc_sum": accs})
    g = difficulty_groups(final_accuracy(t, runs), ScalingConfig())
    r = g.pearson_r_log_size.iloc[0]
    assert r == pytest.approx(pearson_r(np.log10(list(counts.values())), accs))
    assert abs(r - pearson_r(np.log10([14e6, 70e6, 160e6]), accs)) > 0.005  # the names would give another r
