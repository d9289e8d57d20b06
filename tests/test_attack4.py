"""Issue 44, attacked a fourth time: output folders that replaced the user's own files (`report --out H` with
H/.cache, `compare --out D` with D/compare.csv, a dangling --out link), a held-out split that ate the corpus, eval
files dropped without a word, W&B groups that mixed corpora, and a kill mid-rewrite that made every reader say
"delete both"."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from test_curves import config, pair, write_eval

from probes.__main__ import main as probes_main
from probes.analysis import curves, report
from test_report import make_grid

CONV = "start_token_all_tokens_v2"


def _files(root):
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_report_out_never_replaces_a_hidden_entry_it_did_not_write(tmp_path, capsys):
    """O1: `report --out H` moved H/.cache aside and deleted it (`--out ~` would delete ~/.cache); a dangling
    --out link gave a traceback after the whole report and left its staging folder."""
    (run,) = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=5, pairs=20)
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "model.bin").write_bytes(b"weights")
    (home / ".figure-cache").mkdir()
    (home / ".figure-cache" / "mine.png").write_bytes(b"png")
    before = _files(home)
    capsys.readouterr()
    assert report.main([str(run), "--out", str(home), "--n-boot", "20"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {home / '.figure-cache' / 'mine.png'}: not written by probes report")
    assert "2 such" in line and _files(home) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "runs"]  # nothing staged beside it
    # its own hidden entries are replaced as before: a second report into a fresh folder works twice
    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    assert (out / ".cache").is_dir() and report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    # a dangling link: one line, before any work, and no staging folder
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    capsys.readouterr()
    assert report.main([str(run), "--out", str(tmp_path / "dangling"), "--n-boot", "20"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out {tmp_path / 'dangling'}: a link to nothing; give a " \
                                              f"folder (a new one is made)"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _two_runs(root):
    for name, right in (("a", [True, False] * 4), ("b", [True] * 8)):
        config(root / name, seed=ord(name))
        write_eval(root / name, 5, 500, [pair("agr", i, -1.0 if r else -3.0, 1, -3.0 if r else -1.0, 1)
                                         for i, r in enumerate(right)], convention=CONV)
    return str(root / "a"), str(root / "b")


def test_compare_and_curves_refuse_to_overwrite_the_users_own_files(tmp_path, capsys):
    """O6: `compare --out D` overwrote the user's D/compare.csv; `curves --out D` did the same to D/curves.csv.
    Their own earlier output is replaced (the list they keep, .compare-files / .curves-files, says so)."""
    a, b = _two_runs(tmp_path / "runs")
    for argv, name in ((["compare", a, b], "compare.csv"), (["curves", a], "curves.csv"),
                       (["curves", a], "plots/mine.png")):
        d = tmp_path / f"d_{argv[0]}_{name.replace('/', '_')}"
        (d / name).parent.mkdir(parents=True)
        (d / name).write_text("mine\n")
        capsys.readouterr()
        assert probes_main([*argv, "--out", str(d)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {d / name}: not written by probes {argv[0]}"), line
        assert (d / name).read_text() == "mine\n" and sorted(p.name for p in d.iterdir()) == [name.split("/")[0]]
        (d / name).unlink()
        assert probes_main([*argv, "--out", str(d)]) == 0 and probes_main([*argv, "--out", str(d)]) == 0
    assert (tmp_path / "d_compare_compare.csv" / "flips.csv").is_file()
    # the run's own curves/ (written by older code, without a list) is still redrawn by the run's hook
    run = tmp_path / "runs" / "a"
    (run / "curves").mkdir()
    (run / "curves" / "curves.csv").write_text("old\n")
    curves.CurvesHook().post_train(run)
    assert (run / "curves" / "curves.csv").read_text() != "old\n" and (run / "curves" / ".curves-files").is_file()


def test_score_run_hub_refuses_a_folder_holding_the_users_evals(tmp_path, capsys):
    """The same rule for `score-run --hub --out D`: D/evals/ of the user's is refused before any download
    (old code went on to download and score into it)."""
    d = tmp_path / "d"
    (d / "evals" / "step0").mkdir(parents=True)
    (d / "evals" / "step0" / "mine.parquet").write_bytes(b"mine")
    assert probes_main(["score-run", "--hub", "EleutherAI/pythia-14m", "--revisions", "step0", "--out", str(d),
                        "--benchmark", "grammar", "--max-pairs-per-paradigm", "10", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'evals' / 'step0' / 'mine.parquet'}: not written by probes score-run" in err
    assert sorted(p.name for p in d.iterdir()) == ["evals"]
