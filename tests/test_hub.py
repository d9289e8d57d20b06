"""`probes score-run --hub`: a public suite's revisions scored from an offline hub cache built here from
the checkpoints of a real tiny run (models--ORG--NAME/refs/<revision>, snapshots/<commit>/, blobs/), no
network; checkpoints that are not what their names say are named; the report draws hub and own runs."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from trainutil import tiny_cfg

from probes.__main__ import main as probes_main
from train.files import step_dirs
from probes.scoring.hub import PYTHIA_STEPS, distance, sanity_warnings

NAME = "tinyorg/tiny-suite"
HF_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
BENCH = ["--benchmark", "grammar", "--max-pairs-per-paradigm", "10", "--device", "cpu"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from train.loop import train

    run_dir = tmp_path_factory.mktemp("demo")
    train(tiny_cfg(tmp_path_factory.mktemp("cache"), "schedule=custom", "schedule.points=[0,4,15,60]"), run_dir)
    return run_dir


def build_hub(cache: Path, serve: dict[str, Path]) -> Path:
    """A hub cache as huggingface_hub lays it out: revision -> commit -> snapshot of symlinks into blobs
    named by their sha256. `serve[rev]` is the checkpoint whose HF files that revision holds (only what a
    hub revision has: no trainer_state.json, manifest or start_token.json)."""
    repo = cache / f"models--{NAME.replace('/', '--')}"
    for rev, ckpt in serve.items():
        commit = hashlib.sha1(f"{rev}:{ckpt}".encode()).hexdigest()
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / rev).write_text(commit)
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        for f in HF_FILES:
            if not (ckpt / f).is_file():
                continue
            digest = hashlib.sha256((ckpt / f).read_bytes()).hexdigest()
            blob = repo / "blobs" / digest
            blob.parent.mkdir(parents=True, exist_ok=True)
            if not blob.exists():
                shutil.copyfile(ckpt / f, blob)
            (snap / f).symlink_to(Path("../../blobs") / digest)
    return cache


@pytest.fixture
def offline(monkeypatch):
    """HF_HUB_OFFLINE as a user sets it; huggingface_hub reads its constants at import, so they are set too."""
    import huggingface_hub.constants as hc

    def use(cache: Path) -> None:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_HUB_CACHE", str(cache))
        monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))
    return use


def score_run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = probes_main(["score-run", "--hub", NAME, *args, *BENCH])
    out, err = capsys.readouterr()
    return rc, out, err


def test_pythia_revisions_are_its_154_checkpoints():
    assert len(PYTHIA_STEPS) == 154 and PYTHIA_STEPS[:12] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    assert PYTHIA_STEPS[-1] == 143000


def test_three_revisions_score_like_probes_score_and_a_rerun_does_nothing(demo_run, tmp_path, offline, capsys):
    ck = demo_run / "checkpoints"
    cache = build_hub(tmp_path / "hub", {"step0": ck / "step0", "step4": ck / "step4", "step60": ck / "step60"})
    offline(cache)
    out = tmp_path / "pythia_like"
    rc, _, err = score_run(capsys, "--revisions", "step0,step4,step60", "--out", str(out), "--tokens-per-step", "1000")
    assert rc == 0, err[-3000:]
    assert sorted(step_dirs(out / "evals")) == [0, 4, 60]
    assert "warning" not in err
    rec = json.loads((out / "hub.json").read_text())
    assert rec["start_token"] == "<|endoftext|>" and rec["reference"] == "step0"
    d = [rec["revisions"][r]["distance"] for r in ("step0", "step4", "step60")]
    assert d[0] == 0 < d[1] < d[2]
    for step in (0, 4, 60):
        snap = cache / f"models--{NAME.replace('/', '--')}" / "snapshots" / rec["revisions"][f"step{step}"]["commit"]
        ref = tmp_path / f"ref{step}.parquet"
        assert probes_main(["score", "--model", str(snap), "--out", str(ref), *BENCH]) == 0
        got = pd.read_parquet(out / "evals" / f"step{step}" / "grammar.parquet")
        want = pd.read_parquet(ref)
        cols = ["pair_id", "paradigm", "lp_good", "lp_bad", "ntok_good", "ntok_bad"]
        pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols].reset_index(drop=True))
        import pyarrow.parquet as pq

        meta = json.loads(pq.read_schema(out / "evals" / f"step{step}" / "grammar.parquet").metadata[b"syntax_dynamics"])
        assert meta["tokens"] == step * 1000 and meta["hub_revision"] == f"step{step}"
    rc, again, err = score_run(capsys, "--revisions", "step0,step4,step60", "--out", str(out), "--tokens-per-step", "1000")
    assert rc == 0 and "0 eval files written" in again, err[-2000:]
    # the report draws the suite beside one of our own runs (probed in the loop), on one tokens axis
    assert probes_main(["report", str(out), str(demo_run), "--out", str(tmp_path / "rep"), "--n-boot", "20"]) == 0
    table = pd.read_parquet(tmp_path / "rep" / "tables" / "accuracy_paradigm.parquet")
    assert {"pythia_like", demo_run.name} <= set(table.run)
    assert set(table[table.run == "pythia_like"].tokens) == {0, 4000, 60000}


def test_a_revision_serving_another_revisions_weights_is_named(demo_run, tmp_path, offline, capsys):
    ck = demo_run / "checkpoints"
    # step15 serves step60's files and step60 step15's: the same blobs twice, and the distance from
    # step0 falls from step15 to step60
    cache = build_hub(tmp_path / "hub", {"step0": ck / "step0", "step4": ck / "step4", "step15": ck / "step60",
                                         "step60": ck / "step15", "step61": ck / "step60"})
    offline(cache)
    out = tmp_path / "suite"
    rc, _, err = score_run(capsys, "--revisions", "step0,step4,step15,step60,step61,step99", "--out", str(out),
                           "--delete-after")
    assert rc == 2  # step99 is not in the offline cache
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "step99" in errors[0] and "HF_HUB_OFFLINE" in errors[0]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert any("step61" in w and "step15" in w and "same weight files" in w for w in warnings), warnings
    assert any("revision step60 is closer" in w and "step15" in w for w in warnings), warnings
    assert sorted(step_dirs(out / "evals")) == [0, 4, 15, 60, 61]  # scoring went on
    snaps = cache / f"models--{NAME.replace('/', '--')}" / "snapshots"
    assert len(list(snaps.iterdir())) == 1  # --delete-after kept only the reference, step0
    assert probes_main(["report", str(out), "--out", str(tmp_path / "rep"), "--n-boot", "20"]) == 0
    assert "revision step60 is closer" in (tmp_path / "rep" / "report.md").read_text()


def test_distance_and_warnings_by_hand(tmp_path):
    """Two one-tensor files: |(3, 4) - (0, 0)| = 5; a revision at 4 after one at 5 is going back."""
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, tmp_path / "a.safetensors")
    save_file({"w": torch.tensor([3.0, 4.0])}, tmp_path / "b.safetensors")
    assert distance([tmp_path / "a.safetensors"], [tmp_path / "b.safetensors"]) == 5.0
    revs = {"step0": {"step": 0, "weights": {"m": "x"}, "distance": 0.0, "reference": "step0"},
            "step1": {"step": 1, "weights": {"m": "y"}, "distance": 5.0, "reference": "step0"},
            "step2": {"step": 2, "weights": {"m": "z"}, "distance": 4.0, "reference": "step0"},
            "step3": {"step": 3, "weights": {"m": "w"}, "distance": 5.001, "reference": "step0"}}
    (w,) = sanity_warnings("o/n", revs)
    assert "step2" in w and "step1" in w


def test_a_failed_offline_score_run_leaves_no_stub_run_folder(tmp_path, offline, capsys):
    """Issue 44: nothing fetched offline, yet DIR/config.yaml and .lock stayed, a run a `runs/*` glob picked up."""
    (tmp_path / "empty-hub").mkdir()
    offline(tmp_path / "empty-hub")
    out = tmp_path / "runs" / "hub"
    rc, _, err = score_run(capsys, "--revisions", "step0", "--out", str(out))
    assert rc == 2 and "error:" in err and not out.exists(), err[-2000:]
