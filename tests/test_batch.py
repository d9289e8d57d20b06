"""`python -m train batch`: the viewer rebuilds, from the token store and the run's seeds, exactly the
global batch each optimizer step trained on, for 1 and 2 gloo processes (train.jsonl's batch_sha256
hashes the tensors the ranks actually held, gathered across ranks)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from train.batch import batch_ids, batch_sha256, load_run_config, open_stream

ROOT = Path(__file__).resolve().parents[1]
from trainutil import TINY  # noqa: E402

COMMON = [o for o in TINY if not o.startswith("probes.benchmarks")] + [
    "probes=none", "schedule=custom", "schedule.points=[6]", "data.grammar.n_documents=30",
    "engine=torch", "engine.backend=gloo", "logger.log_every=1"]


def launch(nproc: int, run_dir: Path, cache: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={29500 + (os.getpid() + nproc) % 1000}",
           "-m", "train", *COMMON, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "TQDM_DISABLE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def logged(run_dir: Path) -> dict[int, str]:
    recs = [json.loads(line) for line in (run_dir / "logs" / "train.jsonl").read_text().splitlines()]
    return {r["step"]: r["batch_sha256"] for r in recs if r.get("event") == "train"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    cache = root / "cache"
    launch(1, root / "one", cache)
    launch(2, root / "two", cache)
    return root / "one", root / "two"


def test_hash_is_sha256_of_little_endian_int32_rows():
    ids = np.array([[1, 2, 300], [4, 5, 70000]], dtype=np.int64)
    want = hashlib.sha256(b"".join(int(v).to_bytes(4, "little", signed=True) for v in ids.ravel())).hexdigest()
    assert batch_sha256(ids) == want
    assert batch_sha256(ids.T.copy().T) == want  # Fortran-ordered input: still hashed in C order


@pytest.mark.slow
def test_viewer_rebuilds_every_logged_batch_of_one_and_two_processes(runs):
    one, two = runs
    h1, h2 = logged(one), logged(two)
    cfg = load_run_config(one)
    tokenizer, stream = open_stream(cfg)
    total = stream.steps(cfg.optim.global_batch)
    assert sorted(h1) == sorted(h2) == list(range(1, total + 1))  # log_every=1: every step has a hash
    for step in h1:
        ids = batch_ids(stream, step, cfg.optim.global_batch)
        assert ids.shape == (cfg.optim.global_batch, cfg.data.seq_len + 1)
        assert batch_sha256(ids) == h1[step] == h2[step], step
    # consecutive steps train on different sequences (the hash is not of something constant)
    assert len(set(h1.values())) == len(h1)


@pytest.mark.slow
def test_cli_writes_the_batch_and_decodes_it(runs, tmp_path):
    one, two = runs
    out = tmp_path / "b.npy"
    env = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "train", "batch", str(two), "--step", "3", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    arr = np.load(out)
    assert arr.dtype == np.dtype("<i4") and arr.shape == (8, 33)
    assert batch_sha256(arr) == logged(two)[3] and logged(two)[3] in proc.stdout
    text = subprocess.run([sys.executable, "-m", "train", "batch", str(one), "--step", "3", "--text"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and text.stdout.count("--- row ") == 8
    tokenizer, _ = open_stream(load_run_config(one))
    assert tokenizer.decode(arr[0].tolist()) in text.stdout
    bad = subprocess.run([sys.executable, "-m", "train", "batch", str(one), "--step", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and lines[-1].startswith("error: --step 0") and len(lines) == 1


def test_a_hub_suite_or_a_read_only_out_is_one_error_line(tmp_path, capsys):
    """Issue 38 item 10: a hub suite directory gave "Incompatible value 'None'", a read-only --out an OSError
    traceback (after the corpus was read)."""
    from train.batch import main

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "config.yaml").write_text("experiment: hub\nmodel:\n  name: EleutherAI/pythia-160m\nseed: null\n")
    (suite / "hub.json").write_text("{}")
    with pytest.raises(SystemExit) as ex:
        main([str(suite), "--step", "1"])
    err = capsys.readouterr().err.strip()
    assert ex.value.code == 2 and err == (f"error: {suite / 'config.yaml'}: a public suite's scores (probes score-run "
                                          f"--hub, {suite / 'hub.json'}), not a run trained here: it has no corpus or "
                                          f"token store to rebuild a batch from")
    point = tmp_path / "ro"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(point)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with pytest.raises(SystemExit) as ex:
            main([str(suite), "--step", "1", "--out", str(point / "b.npy")])
        err = capsys.readouterr().err.strip()
        assert ex.value.code == 2 and err == f"error: --out {point} is not writable: Read-only file system ({point})"
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)


@pytest.mark.slow
def test_a_later_call_reads_the_store_alone_and_a_range_gives_every_logged_hash(runs, tmp_path):
    """Issue 45: a call after the first on a corpus and tokenizer reads the token store alone: it imports neither
    torch, transformers nor datasets (13.7 CPU-s a step before: the corpus generated, the tokenizer loaded);
    `--steps A:B` writes the batches of A..B."""
    one, _ = runs
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-m", "train", "batch", str(one), "--step", "1"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    out, total = tmp_path / "all.npy", max(logged(one))
    code = ("import sys; from train.batch import main; main(sys.argv[1:]); print(sorted(m for m in ('torch', "
            "'transformers', 'datasets') if m in sys.modules))")
    later = subprocess.run([sys.executable, "-c", code, str(one), "--steps", f"2:{total}", "--out", str(out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert later.returncode == 0, later.stderr[-3000:]
    lines = later.stdout.strip().splitlines()
    assert lines[-1] == "[]" and len(lines) == total  # one line a step, then the modules (none)
    arr = np.load(out)
    assert arr.dtype == np.dtype("<i4") and arr.shape == (total - 1, 8, 33)
    assert [batch_sha256(b) for b in arr] == [logged(one)[s] for s in range(2, total + 1)]
    assert lines[0] == f"step 2: 8 rows x 33 ids, batch_sha256 {logged(one)[2]} -> {out}"
