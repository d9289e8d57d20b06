"""One rule for reading an eval file, whoever reads it (analysis, scoring's SLOR/MORCELA, `probes report`).

A file without schema metadata used to be read by probes/analysis/evalfile.py (tokens from the
checkpoint's trainer_state.json) and refused by probes/scoring/store.py::read_pairs, so `probes report`
read such a run, then died with a traceback in final_metrics. Now both go through
probes.evals.files.eval_file_meta, and a file it refuses is one `error: …` line naming it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from probes.analysis import report
from probes.analysis.evalfile import read_eval_file
from synthetic import RunSpec, log_spaced_steps, sigmoid_curve, write_run
from probes.evals.files import EvalInputError, eval_file_meta
from probes.scoring.store import read_pairs

ROOT = Path(__file__).resolve().parents[1]


def _run_without_metadata(root: Path) -> Path:
    steps = log_spaced_steps(6, 600)
    curves = np.stack([sigmoid_curve(np.log10(steps * 1000.0 + 1), 0.5, 0.9, 4.5, 4.0)] * 2, axis=1)
    run = write_run(root / "run", RunSpec(model="pythia-14m", budget=10**6, seed=1, tokens_per_step=1000,
                                          steps=list(steps)),
                    curves, ["simple", "hard"], ["agreement", "island"], 20, np.random.default_rng(0))
    for f in (run / "evals").rglob("*.parquet"):  # as another tool, or an older writer, left them
        pq.write_table(pq.read_table(f).replace_schema_metadata(None), f)
    return run


def test_analysis_and_scoring_read_a_file_without_metadata_alike(tmp_path):
    run = _run_without_metadata(tmp_path)
    f = run / "evals" / "step600" / "synthetic.parquet"
    assert eval_file_meta(f) == {"step": 600, "tokens": 600_000, "benchmark": "synthetic", "convention": "unknown",
                                 "kind": "minimal_pairs"}  # by its name, as a file from before `kind`
    df, meta = read_pairs(f)
    assert meta == eval_file_meta(f) and len(df) == 40
    assert read_eval_file(f, 600, run).tokens == meta["tokens"]

    (run / "checkpoints" / "step600" / "trainer_state.json").unlink()  # now nothing says how far training was
    for read in (lambda: read_pairs(f), lambda: read_eval_file(f, 600, run)):
        with pytest.raises(EvalInputError, match=f"^{f}: no 'tokens' in its metadata, nor in "):
            read()


def test_report_reads_such_a_run_or_refuses_it_in_one_line(tmp_path, capsys):
    run = _run_without_metadata(tmp_path)
    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "50"]) == 0  # was a traceback in final_metrics
    assert (out / "report.md").is_file()

    bad = run / "evals" / "step600" / "synthetic.parquet"
    (run / "checkpoints" / "step600" / "trainer_state.json").write_text('{"step": 600}')  # no tokens
    for cached in (run / "evals").glob(".reduced-*"):  # the first report's reduced copy would answer for the files
        cached.unlink()
    done = subprocess.run([sys.executable, "-m", "probes", "report", str(run), "--out", str(tmp_path / "rep2")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: no 'tokens' in its metadata, nor in "), lines


def test_another_benchmarks_file_under_this_name_is_refused(tmp_path):
    """Issue 25 item 15: a foreign benchmark's eval file copied in as blimp.parquet was read as BLiMP (accuracy
    1.0 from one pair). Its metadata names the benchmark it holds; the name it sits under must agree."""
    steps = log_spaced_steps(4, 100)
    curves = np.stack([sigmoid_curve(np.log10(steps * 1000.0 + 1), 0.5, 0.9, 4.5, 4.0)] * 2, axis=1)
    run = write_run(tmp_path / "run", RunSpec(model="pythia-14m", budget=10**6, seed=1, tokens_per_step=1000,
                                              steps=list(steps)),
                    curves, ["simple", "hard"], ["agreement", "island"], 20, np.random.default_rng(0))
    f = run / "evals" / "step100" / "synthetic.parquet"
    assert eval_file_meta(f)["benchmark"] == "synthetic"
    foreign = f.with_name("blimp.parquet")
    foreign.write_bytes(f.read_bytes())
    with pytest.raises(EvalInputError, match=f"^{foreign}: holds benchmark 'synthetic' under the name 'blimp'"):
        eval_file_meta(foreign)
    with pytest.raises(EvalInputError, match="under the name 'blimp'"):
        read_pairs(foreign)
