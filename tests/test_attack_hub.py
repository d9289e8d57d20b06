"""Issue 38, the hub surface attacked: a snapshot linking outside its cache, --out on a training run, a
revision with another tokenizer, a suite asking to run its own code, a rerun that re-scored, and weights
that cannot be read -- each refused with one `error:` line naming the file, nothing outside touched."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_hub import NAME, build_hub, demo_run, offline, score_run  # noqa: F401 - fixtures used by name
from train.files import step_dirs

REPO = f"models--{NAME.replace('/', '--')}"


def snapshot(cache: Path, rev: str) -> Path:
    repo = cache / REPO
    return repo / "snapshots" / (repo / "refs" / rev).read_text()


def errors(err: str) -> list[str]:
    assert "Traceback" not in err, err[-3000:]
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_a_link_outside_the_cache_is_neither_read_nor_deleted(demo_run, tmp_path, offline, capsys):
    """Item 1: huggingface_hub's delete_revisions followed the link and deleted the outside file."""
    ck = demo_run / "checkpoints"
    cache = build_hub(tmp_path / "hub", {"step0": ck / "step0", "step4": ck / "step4"})
    outside = tmp_path / "precious.safetensors"
    shutil.copyfile(ck / "step4" / "model.safetensors", outside)
    link = snapshot(cache, "step4") / "model.safetensors"
    link.unlink()
    link.symlink_to(outside)
    offline(cache)
    rc, _, err = score_run(capsys, "--revisions", "step0,step4", "--out", str(tmp_path / "out"), "--delete-after")
    (line,) = errors(err)
    assert rc == 2 and str(link) in line and "outside the cache" in line
    assert outside.is_file() and link.is_symlink()
    assert sorted(step_dirs(tmp_path / "out" / "evals")) == [0]  # step4 was not read either


def test_out_holding_a_training_run_is_refused_untouched(demo_run, tmp_path, offline, capsys):
    """Item 2: a run's in-loop evals/step4/grammar.parquet was overwritten by the suite's."""
    ck = demo_run / "checkpoints"
    offline(build_hub(tmp_path / "hub", {"step4": ck / "step4"}))
    for held in ("checkpoints", "config.yaml"):
        run = tmp_path / held
        shutil.copytree(demo_run / "evals", run / "evals")
        if held == "checkpoints":
            (run / "checkpoints").mkdir()
        else:
            shutil.copyfile(demo_run / "config.yaml", run / "config.yaml")
        before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        rc, _, err = score_run(capsys, "--revisions", "step4", "--out", str(run))
        (line,) = errors(err)
        assert rc == 2 and str(run) in line and "training run" in line
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_revision_with_another_tokenizer_is_refused_and_named_in_the_report(demo_run, tmp_path, offline, capsys):
    """Item 3: four pieces swapped, the same start token: scored into the same curve without a word."""
    from probes.__main__ import main as probes_main

    ck = demo_run / "checkpoints"
    other = tmp_path / "other"
    shutil.copytree(ck / "step4", other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]  # sentencepiece unigram: [[piece, score], ...], the id is the position
    for a, b in ((100, 101), (102, 103)):  # ordinary pieces, well past the specials
        vocab[a][0], vocab[b][0] = vocab[b][0], vocab[a][0]
    (other / "tokenizer.json").write_text(json.dumps(tok))
    offline(build_hub(tmp_path / "hub", {"step0": ck / "step0", "step4": other, "step15": ck / "step15"}))
    out = tmp_path / "out"
    rc, _, err = score_run(capsys, "--revisions", "step0,step4,step15", "--out", str(out))
    (line,) = errors(err)
    assert rc == 2 and "revision step4" in line and "tokenizer" in line
    assert sorted(step_dirs(out / "evals")) == [0, 15]
    rec = json.loads((out / "hub.json").read_text())
    assert any("revision step4" in w and "tokenizer" in w for w in rec["warnings"])
    assert probes_main(["report", str(out), "--out", str(tmp_path / "rep"), "--n-boot", "20"]) == 0
    assert "revision step4: its tokenizer gives other ids" in (tmp_path / "rep" / "report.md").read_text()


def test_a_suite_asking_to_run_its_code_never_runs_it_and_never_asks(demo_run, tmp_path):
    """Item 5: transformers asked "Do you wish to run the custom code? [y/N]" and a "y" ran it;
    --trust-remote-code was silently ignored with --hub."""
    evil = tmp_path / "evil"
    shutil.copytree(demo_run / "checkpoints" / "step4", evil)
    marker = tmp_path / "code-ran"
    (evil / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                  "from transformers import GPTNeoXConfig\n"
                                  "class EvilConfig(GPTNeoXConfig):\n    model_type = 'evilneox'\n")
    config = json.loads((evil / "config.json").read_text())
    config.update(model_type="evilneox", auto_map={"AutoConfig": "evil.EvilConfig"})
    (evil / "config.json").write_text(json.dumps(config))
    cache = build_hub(tmp_path / "hub", {"step4": evil})
    snap = snapshot(cache, "step4")
    shutil.copyfile(evil / "evil.py", snap / "evil.py")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), HF_HUB_OFFLINE="1",
               HF_HUB_CACHE=str(cache))
    base = [sys.executable, "-m", "probes", "score-run", "--hub", NAME, "--revisions", "step4", "--benchmark",
            "grammar", "--max-pairs-per-paradigm", "2", "--device", "cpu"]
    for extra in ([], ["--trust-remote-code"]):
        proc = subprocess.run(base + ["--out", str(tmp_path / f"out{len(extra)}"), *extra], input="y\ny\n",
                              env=env, capture_output=True, text=True, timeout=600)
        (line,) = errors(proc.stderr)
        assert proc.returncode == 2 and not marker.exists(), proc.stderr[-2000:]
        assert "custom code" not in proc.stdout + proc.stderr.replace(line, "")  # no prompt
        assert ("--trust-remote-code is refused with --hub" in line) if extra else str(snap) in line


def test_a_finished_revision_is_not_scored_again(demo_run, tmp_path, offline, capsys):
    """Item 8: a cache made from the checkpoints' own files (manifest.json among them) re-scored every
    revision on an identical rerun."""
    import test_hub

    ck = demo_run / "checkpoints"
    files = tuple(sorted(p.name for p in (ck / "step0").iterdir() if p.is_file()))
    assert "manifest.json" in files
    old = test_hub.HF_FILES
    test_hub.HF_FILES = files
    try:
        offline(build_hub(tmp_path / "hub", {"step0": ck / "step0", "step4": ck / "step4"}))
    finally:
        test_hub.HF_FILES = old
    out = tmp_path / "out"
    rc, first, err = score_run(capsys, "--revisions", "step0,step4", "--out", str(out))
    assert rc == 0 and "2 eval files written" in first, err[-2000:]
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "evals").rglob("*.parquet")}
    rc, again, err = score_run(capsys, "--revisions", "step0,step4", "--out", str(out))
    assert rc == 0 and "0 eval files written" in again, err[-2000:]
    assert {p: p.stat().st_mtime_ns for p in (out / "evals").rglob("*.parquet")} == mtimes


def _legacy_pickle_with_payload(path: Path, marker: Path) -> None:
    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    with open(path, "wb") as f:
        pickle.dump({"gpt_neox.embed_in.weight": Payload()}, f)


@pytest.mark.parametrize("damage", ["bin-only", "truncated"])
def test_unreadable_weights_are_one_error_line_naming_the_file(demo_run, tmp_path, offline, capsys, damage):
    """Item 10: an UnpicklingError / SafetensorError traceback."""
    ck = demo_run / "checkpoints"
    cache = build_hub(tmp_path / "hub", {"step0": ck / "step0", "step4": ck / "step4"})
    snap = snapshot(cache, "step4")
    marker = tmp_path / "payload-ran"
    if damage == "bin-only":
        (snap / "model.safetensors").unlink()
        _legacy_pickle_with_payload(snap / "pytorch_model.bin", marker)
        named = snap / "pytorch_model.bin"
    else:
        blob = (snap / "model.safetensors").resolve()
        blob.write_bytes(blob.read_bytes()[:blob.stat().st_size // 2])
        named = snap / "model.safetensors"
    offline(cache)
    rc, _, err = score_run(capsys, "--revisions", "step0,step4", "--out", str(tmp_path / "out"))
    (line,) = errors(err)
    assert rc == 2 and str(named) in line and not marker.exists()
    assert sorted(step_dirs(tmp_path / "out" / "evals")) == [0]
