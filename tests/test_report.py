"""`probes report`: a whole tiny grid end to end, and the bad inputs the issue names."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from probes.analysis import report
from probes.analysis.evalset import log_tokens
from synthetic import RunSpec, log_spaced_steps, planted_dip, sigmoid_curve, write_run


def make_grid(root, models=("pythia-14m", "pythia-70m"), seeds=(1, 2), n_steps=16, pairs=200):
    rng = np.random.default_rng(0)
    steps = log_spaced_steps(n_steps, 4000)
    x = log_tokens(steps * 1000)
    runs = []
    for i, model in enumerate(models):
        curves = np.stack([
            sigmoid_curve(x, 0.5, 0.9, 4.3, 6.0) - planted_dip(x, 0.4, 5.8, 0.25),  # learned, lost, relearned
            sigmoid_curve(x, 0.5, 0.8 + 0.1 * i, 5.0, 3.0),       # improves with size
            np.full_like(x, 0.5),                                 # never learned
        ], axis=1)
        for seed in seeds:
            spec = RunSpec(model=model, budget=10**7, seed=seed, tokens_per_step=1000, steps=list(steps))
            runs.append(write_run(root / f"{model}_s{seed}", spec, np.clip(curves, 0, 1),
                                  ["attractor", "simple", "hard"], ["agreement", "agreement", "island"], pairs, rng))
    return runs


def test_report_on_a_grid(tmp_path, capsys):
    runs = make_grid(tmp_path / "runs")
    out = tmp_path / "rep"
    assert report.main([*map(str, runs), "--out", str(out), "--n-boot", "200", "--u-levels", "phenomenon,paradigm"]) == 0
    assert "report.md" in capsys.readouterr().out
    md = (out / "report.md").read_text()
    for section in ("## Learning curves", "## Final accuracy per phenomenon", "### Scaling view", "## U-shapes",
                    "## Age of acquisition", "## Difficulty groups", "## Appendix"):
        assert section in md
    figs = re.findall(r"\]\(((?:figures|appendix)/[^)]+\.png)\)", md)
    assert figs and all((out / f).is_file() for f in figs)
    from PIL import Image

    for f in set(figs):
        with Image.open(out / f) as im:
            im.verify()
    us = pd.read_csv(out / "tables" / "ushapes.csv")
    acc = us[us.accepted & (us.level == "paradigm")]
    assert set(acc.paradigm) == {"attractor"} and set(acc.model) == {"pythia-14m", "pythia-70m"}
    assert (acc.n_seeds == 2).all() and (acc.kind == "learned_then_lost").all()
    seeds = pd.read_csv(out / "tables" / "seeds_paradigm.csv")
    assert {"acc_mlp_mean", "acc_mlp_lo", "acc_mlp_hi", "n_seeds"} <= set(seeds.columns)
    assert (seeds.n_seeds == 2).all()
    par = pd.read_parquet(out / "tables" / "accuracy_paradigm.parquet")
    assert (par.acc_mlp_boot_lo <= par.acc_mlp).all() and (par.acc_mlp <= par.acc_mlp_boot_hi).all()
    aoa = pd.read_csv(out / "tables" / "aoa.csv")
    simple = aoa[(aoa.paradigm == "simple")]
    assert (simple.status == "ok").all() and np.allclose(simple.fit_mid, 5.0, atol=0.4)
    assert set(aoa[aoa.paradigm == "hard"].status) <= {"not_acquired", "no_rise_above_noise"}
    grid = pd.read_csv(out / "tables" / "scaling_overall.csv")
    assert len(grid) == 2
    assert "tables/ushape_regions" in md and (out / "tables" / "ushape_regions.csv").is_file()


def test_report_metric_sum_uses_summed_log_probs(tmp_path):
    """--metric sum: every analysis reads lp_good > lp_bad. Hand-made pairs where the two metrics disagree:
    three pairs -6/2 tokens vs -8/4 (MLP -3 < -2: wrong; sum -6 > -8: right) and one -4/2 vs -3/2 (wrong
    under both), so sum-LP accuracy is 3/4 and MLP accuracy 0 at every checkpoint."""
    from test_curves import config, pair, write_eval

    run = tmp_path / "run"
    config(run)
    rows = [pair("agr", i, -6.0, 2, -8.0, 4) for i in range(3)] + [pair("agr", 3, -4.0, 2, -3.0, 2)]
    for step in (0, 1, 2, 4, 8, 16):
        write_eval(run, step, step * 1000, rows, convention="start_token_all_tokens_v2")
    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "20", "--metric", "sum"]) == 0
    grid = pd.read_csv(out / "tables" / "scaling_overall.csv")
    assert "acc_mlp" not in grid and grid.acc_sum.tolist() == [0.75]
    aoa = pd.read_csv(out / "tables" / "aoa.csv")
    assert set(aoa.metric) == {"acc_sum"} and aoa.final_acc.tolist() == [0.75, 0.75]  # paradigm, phenomenon
    assert "accuracy = sum of log-probs, ties wrong" in (out / "report.md").read_text()


def test_report_says_too_few_checkpoints(tmp_path, capsys):
    runs = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=4, pairs=50)
    out = tmp_path / "rep"
    assert report.main([str(runs[0]), "--out", str(out), "--n-boot", "50"]) == 0
    err = capsys.readouterr().err
    assert "too few" in err or "fewer than" in err
    assert "fewer than 5 trained checkpoints" in (out / "report.md").read_text()


def test_report_bad_input(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.main([str(empty), "--out", str(tmp_path / "o")]) == 2
    assert str(empty) in capsys.readouterr().err
    assert not (tmp_path / "o" / "report.md").exists()


def wandb_media(run_dir: Path, kind: str, key: str) -> list[Path]:
    """The files wandb itself wrote for a logged key: `<run>/files/media/<kind>/<key>_<step>_<hash>.<ext>`
    (kind "images" for wandb.Image, "table" for wandb.Table): what `wandb sync` uploads."""
    folder, stem = (run_dir / "files" / "media" / kind / key).parent, Path(key).name
    return [f for f in folder.glob(f"{stem}_*") if re.fullmatch(rf"{re.escape(stem)}_\d+_[0-9a-f]+\..+", f.name)]


def test_report_logs_figures_and_tables_to_wandb(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setenv("WANDB_MODE", "offline")
    runs = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=8, pairs=50)
    _add_syntax_qa(runs[0], [0, 4000])
    out = tmp_path / "rep"
    assert report.main([str(runs[0]), "--out", str(out), "--n-boot", "50", "--wandb"]) == 0
    # finish() returns before the W&B service has surely written the run's files (a CI run once read
    # the run with no history yet); the CLI's process exit shuts the service down, and so does teardown()
    import wandb

    wandb.teardown()
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    figures = sorted((out / "figures").glob("*.png")) + sorted((out / "appendix").glob("*.png"))
    # main: overall curve, all phenomena, 2 heatmaps, 3 syntax-question figures, the form-vs-use view;
    # appendix: 2 phenomenon curves, 3 region plots
    assert len(figures) == 13 and "syntax_qa_oa" in {f.stem for f in figures}
    for fig in figures:  # every figure went to W&B as an image (media/images), the same picture
        (logged,) = wandb_media(run_dir, "images", f"report/{fig.stem}")
        with Image.open(logged) as im, Image.open(fig) as mine:
            assert im.format == "PNG" and im.size == mine.size, fig
    for table in ("ushapes", "aoa_phenomenon_summary", "difficulty_groups", "scaling_overall", "syntax_qa_final"):
        (logged,) = wandb_media(run_dir, "table", f"report/{table}")  # a wandb.Table (media/table)
        mine = pd.read_csv(out / "tables" / f"{table}.csv")
        assert json.loads(logged.read_text())["columns"] == list(mine.columns), table
    md = (out / "report.md").read_text()
    assert "## Syntax questions" in md and "](figures/syntax_qa_oa.png)" in md
    assert "| generated_tasks | `syntax_qa:FITB_acc` |" in md  # FITB feeds the generated-tasks group
    final = pd.read_csv(out / "tables" / "syntax_qa_final.csv")
    # one TF, MC and FITB item, all right: OA = (1 + 1 + (1 + 1)/2)/3
    assert final.run.tolist() == [runs[0].name] and final.step.tolist() == [4000] and final.OA.tolist() == [1.0]


def _add_syntax_qa(run, steps):
    """Syntax-question results, written by the probe's own writer, beside the minimal-pair evals."""
    from probeutil import word_tokenizer, write_items
    from probes.syntaxqa.score import SyntaxQAConfig

    items = pd.DataFrame([
        {"item_id": "tf", "kp": "GS", "qtype": "TF", "correct": 1.0, "rand_acc": 0.5, "f1": np.nan, "rand_f1": np.nan},
        {"item_id": "mc", "kp": "GS", "qtype": "MC", "correct": 1.0, "rand_acc": 0.25, "f1": np.nan, "rand_f1": np.nan},
        {"item_id": "fitb", "kp": "GS", "qtype": "FITB", "correct": 1.0, "rand_acc": 0.2, "f1": 1.0, "rand_f1": 0.4}])
    for step in steps:
        write_items(items, run / "evals" / f"step{step}" / "syntax_qa.parquet", step=step, tokens=step * 1000,
                    model_dir=run, tokenizer=word_tokenizer(), cfg=SyntaxQAConfig(), reports=[])


def test_the_blimp_table4_caption_names_no_zhoblimp_rows(tmp_path, shared):
    """The BLiMP table's caption described ZhoBLiMP's reference rows (issue 36 item 8); its reference is BLiMP's
    own human validation, 0.96 for anaphor_gender_agreement in the repository's CSV."""
    shared("benchmarks", "blimp", "raw_results", "summary", "human_validation_summary.csv")
    rng = np.random.default_rng(0)
    spec = RunSpec(model="pythia-14m", budget=10**7, seed=1, tokens_per_step=1000, steps=[0, 1, 2, 4], benchmark="blimp")
    run = write_run(tmp_path / "r", spec, np.full((4, 1), 0.7), ["anaphor_gender_agreement"], ["anaphor_agreement"],
                    20, rng)
    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    md = (out / "report.md").read_text()
    caption = next(line for line in md.splitlines() if line.startswith("**blimp**"))
    assert "Zh-Pythia" not in caption and "human_validation_summary.csv" in caption and "88.6 %" in caption
    t4 = pd.read_csv(out / "tables" / "table4_blimp.csv")
    assert t4.row.tolist() == ["pythia-14m · 10M", "human (validation CSV, mean of paradigms)"]
    assert t4.anaphor_agreement.iloc[1] == t4.overall.iloc[1] == 0.96


def test_step0_dips_have_their_own_table_and_chance_dips_are_named(tmp_path, capsys):
    # Issue 42 item 7: a dip peaking at step 0 (the untrained model) filled ushapes_accepted.csv and the gallery,
    # and the summary called chance_dips "learning U's". "init" is best at step 0, falls and recovers; "late"
    # rises, dips and recovers after learning began; both accepted.
    rng = np.random.default_rng(7)
    steps = log_spaced_steps(24, 5000)
    x = log_tokens(steps * 1000)
    init = np.interp(x, [x[0], x[1], x[9], x[12], 12], [0.9, 0.55, 0.55, 0.9, 0.9])
    late = sigmoid_curve(x, 0.5, 0.9, 4.0, 5) - planted_dip(x, 0.35, 5.8, 0.2)
    runs = [write_run(tmp_path / f"s{s}", RunSpec(seed=s, tokens_per_step=1000, steps=list(steps)),
                      np.clip(np.stack([init, late], axis=1), 0, 1), ["init", "late"], ["a", "b"], 400, rng)
            for s in (1, 2)]
    out = tmp_path / "rep"
    assert report.main([*map(str, runs), "--out", str(out), "--n-boot", "200", "--delta", "0.1"]) == 0
    printed = capsys.readouterr().out
    acc = pd.read_csv(out / "tables" / "ushapes_accepted.csv")
    step0 = pd.read_csv(out / "tables" / "ushapes_step0.csv")
    assert list(acc.phenomenon) == ["b"] and (acc.peak_step > 0).all() and list(acc.u_id) == [1]
    assert list(step0.phenomenon) == ["a"] and (step0.peak_step == 0).all()
    S = pd.read_csv(out / "tables" / "summary.csv")
    kind = acc.kind.iloc[0]
    assert (S.learning_us.iloc[0], S.chance_dips.iloc[0], S.us_from_step0.iloc[0]) == \
        ((1, 0) if kind != "chance_dip" else (0, 1)) + (1,)
    assert "dip peaking at step 0 (the untrained model)" in printed
    md = (out / "report.md").read_text()
    assert "tables/ushapes_step0.csv" in md
