"""Issue 38, the readers attacked: `probes report --out` over the user's own files, a tampered reduced
cache, and an eval file whose own metadata names another checkpoint than the one beside it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from probes.analysis import report
from test_report import make_grid


def test_report_out_never_removes_a_file_it_did_not_write(tmp_path, capsys):
    """Item 4: a second report into DIR deleted the user's DIR/figures/my_figure1.pdf and tables/my_table.csv."""
    (run,) = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=5, pairs=20)
    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    mine = {out / "figures" / "my_figure1.pdf": b"%PDF mine", out / "tables" / "my_table.csv": b"a,b\n1,2\n",
            out / "draft.tex": b"\\section{mine}"}
    for path, data in mine.items():
        path.write_bytes(data)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {out / 'figures' / 'my_figure1.pdf'}: not written by probes report") and "2 such" in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # a folder that is no report, with a report.md of its own: refused the same way
    other = tmp_path / "notes"
    other.mkdir()
    (other / "report.md").write_text("my notes")
    assert report.main([str(run), "--out", str(other), "--n-boot", "20"]) == 2
    assert (other / "report.md").read_text() == "my notes"
    # once they are moved away, the report is written again (its own files replaced, draft.tex kept)
    for path in mine:
        if path.name != "draft.tex":
            path.unlink()
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    assert (out / "draft.tex").read_bytes() == mine[out / "draft.tex"]


def test_a_tampered_reduced_cache_is_not_reported_as_truth(tmp_path):
    """Item 7: evals/.reduced-*.npz edited to all-correct was read as accuracy 0.99."""
    from probes.analysis.evalcache import cache_path
    from probes.analysis.evalset import load_runs

    (run,) = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=5, pairs=20)
    truth = load_runs([run], cache=True).table  # writes the cache
    path = cache_path(run, "synthetic")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["correct"] = np.ones_like(arrays["correct"])
    for col in ("t_acc_mlp", "t_acc_sum"):
        arrays[col] = np.full_like(arrays[col], 0.99)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    again = load_runs([run], cache=True).table
    assert again["acc_mlp"].max() < 0.99
    assert np.allclose(again.sort_values(list(truth.columns[:3]))["acc_mlp"],
                       truth.sort_values(list(truth.columns[:3]))["acc_mlp"])


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    from trainutil import tiny_cfg
    from train.loop import train

    run_dir = tmp_path_factory.mktemp("probed") / "run"
    train(tiny_cfg(tmp_path_factory.mktemp("cache"), "schedule=custom", "schedule.points=[5]"), run_dir)
    return run_dir


def test_an_eval_file_naming_another_checkpoint_is_refused_by_verify_and_the_readers(probed, tmp_path):
    """Item 7: another run's eval file copied in with its .sha256 passed verify and compare, although its own
    metadata named another checkpoint (its manifest_hash)."""
    from probes.analysis.evalset import load_runs
    from probes.evals.files import META_KEY, EvalInputError, eval_file_meta
    from train.evalsums import write_sum
    from train.verify import verify_run

    run = tmp_path / "run"
    shutil.copytree(probed, run)
    assert verify_run(run).findings == []
    ev = run / "evals" / "step5" / "grammar.parquet"
    table = pq.read_table(ev)
    meta = json.loads(table.schema.metadata[META_KEY])
    meta["manifest"] = "0" * 64  # as another run's file records its own checkpoint
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, META_KEY: json.dumps(meta)}), ev)
    write_sum(ev)  # copied in with its sidecar: the sha256 matches
    found = [f for f in verify_run(run).findings if f.kind == "eval-file"]
    assert len(found) == 1 and found[0].file == str(ev) and "names another checkpoint" in found[0].message
    with pytest.raises(EvalInputError, match=r"grammar.parquet: its metadata names another checkpoint"):
        eval_file_meta(ev)
    with pytest.raises(EvalInputError, match=r"its metadata names another checkpoint"):
        load_runs([run], cache=False)
