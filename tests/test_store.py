"""Eval files: atomic parquet that pandas opens and that carries its own metadata."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from probes.scoring.store import eval_path, read_pairs, write_pairs


def rows() -> pd.DataFrame:
    return pd.DataFrame({
        "benchmark": ["b", "b"], "paradigm": ["p", "q"], "phenomenon": ["x", "y"],
        "pair_id": ["1", "02"], "lp_good": [-1.5, -2.25], "lp_bad": [-2.0, -2.0],
        "ntok_good": [3, 4], "ntok_bad": [3, 4],
    })


def test_roundtrip_pandas_and_metadata(tmp_path):
    path = eval_path(tmp_path / "run", 128, "zhoblimp")
    assert path == tmp_path / "run" / "evals" / "step128" / "zhoblimp.parquet"
    meta = {"step": 128, "tokens": 262144, "benchmark": "zhoblimp", "model_dir": tmp_path / "ck",
            "tokenizer": "abc123"}
    write_pairs(rows(), path, meta)
    # plain pandas opens it; ids stay strings ("02" is not 2)
    plain = pd.read_parquet(path)
    pd.testing.assert_frame_equal(plain, rows())
    df, got = read_pairs(path)
    pd.testing.assert_frame_equal(df, rows())
    assert got["step"] == 128 and got["tokens"] == 262144 and got["benchmark"] == "zhoblimp"
    assert got["convention"] == "start_token_all_tokens_v2"
    assert got["model_dir"] == str(tmp_path / "ck")
    assert "torch" in got["versions"]
    # the raw schema key the analysis code reads
    raw = pq.read_schema(path).metadata[b"syntax_dynamics"]
    assert json.loads(raw)["step"] == 128
    # no temporary file left next to it; its sha256 beside it (train/evalsums.py)
    assert sorted(os.listdir(path.parent)) == ["zhoblimp.parquet", "zhoblimp.parquet.sha256"]


def test_missing_or_bad_meta_is_rejected_and_leaves_nothing(tmp_path):
    path = tmp_path / "e.parquet"
    with pytest.raises(ValueError, match=r"e.parquet: metadata lacks required key 'tokens'"):
        write_pairs(rows(), path, {"step": 1, "benchmark": "b"})
    with pytest.raises(ValueError, match=r"metadata key 'step' must be int, got '1'"):
        write_pairs(rows(), path, {"step": "1", "tokens": 0, "benchmark": "b"})
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        write_pairs(rows(), path, {"step": 1, "tokens": 0, "benchmark": "b", "x": object()})
    assert os.listdir(tmp_path) == []


def test_crash_mid_write_keeps_old_file(tmp_path):
    path = tmp_path / "e.parquet"
    write_pairs(rows(), path, {"step": 1, "tokens": 10, "benchmark": "b"})
    bad = rows().assign(lp_good=[object(), object()])  # arrow cannot convert: fails mid-write
    with pytest.raises(Exception):
        write_pairs(bad, path, {"step": 2, "tokens": 20, "benchmark": "b"})
    df, meta = read_pairs(path)
    assert meta["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["e.parquet", "e.parquet.sha256"]
    # a failure after the temporary file is written (the rename onto a non-empty directory fails)
    # removes the temporary file
    blocker = tmp_path / "d.parquet"
    (blocker / "x").mkdir(parents=True)
    with pytest.raises(OSError):
        write_pairs(rows(), blocker, {"step": 3, "tokens": 30, "benchmark": "b"})
    assert sorted(os.listdir(tmp_path)) == ["d.parquet", "e.parquet", "e.parquet.sha256"]


def test_read_rejects_foreign_parquet(tmp_path):
    path = tmp_path / "foreign.parquet"
    rows().to_parquet(path)
    with pytest.raises(ValueError, match=r"foreign.parquet: parquet has no 'syntax_dynamics'"):
        read_pairs(path)
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        read_pairs(tmp_path / "nope.parquet")


def test_eval_path_validates():
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        eval_path(Path("r"), -1, "b")
    with pytest.raises(ValueError, match="cannot be a file name"):
        eval_path(Path("r"), 0, "../b")


@pytest.mark.parametrize("point", ["eval_write", "eval_written"])
def test_a_kill_while_an_eval_file_is_written_leaves_none_its_reader_refuses(tmp_path, point):
    """test_watch's kill once landed after the file's rename and before its .sha256: the file stayed,
    refused for a missing .sha256, and the restarted watcher stopped on it. The .sha256 goes first."""
    import subprocess
    import sys

    from train.faults import ENV

    path = eval_path(tmp_path / "run", 3, "b")
    code = ("import io, pandas as pd, sys; from probes.scoring.store import write_pairs; write_pairs("
            "pd.read_json(io.StringIO(sys.argv[1]), dtype=False), sys.argv[2], {'step': 3, 'tokens': 96, 'benchmark': 'b'})")
    proc = subprocess.run([sys.executable, "-c", code, rows().to_json(), str(path)], capture_output=True, text=True,
                          env={**os.environ, ENV: f"{point}:step3", "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert path.is_file() == (point == "eval_written")
    if path.is_file():
        df, meta = read_pairs(path)
        assert len(df) == 2 and meta["step"] == 3
