"""W&B across a requeue, offline: the resumed process continues the same run (one id, stored in the run
directory), its steps continue where the checkpoint left off, tags and group name the grid cell, and the
metrics are defined against tokens seen. A grid run's group is its cell (experiment/model/budget), its seeds
the members, the grid axes top-level config keys, its metric names say the measure (issue 36 item 2).
Checked by reading the .wandb files wandb wrote."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from trainutil import TINY, signal_at_step, tiny_cfg
from wandbutil import history_steps, wandb_records
from train.checkpoint import list_checkpoints, read_state
from train.loop import train
from train.preempt import REQUEUE_EXIT

ROOT = Path(__file__).resolve().parents[1]
EXTRA = [
    "schedule=custom", "schedule.points=[20]", "probes=none", "logger.wandb=true",
    "logger.mode=offline", "logger.project=grid-test", "logger.group=wb", "logger.tags=['preset=test']"]


@pytest.fixture
def one_thread():
    # The in-process runs share 2 cores with the subprocess: oversubscribed threads cost 3x here.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_requeued_run_continues_the_same_wandb_run(tmp_path, one_thread):
    cache, run = tmp_path / "cache", tmp_path / "run"
    train(tiny_cfg(cache, "probes=none"), tmp_path / "warm")  # builds the token store for the subprocess
    cmd = [sys.executable, "-m", "train", *TINY, *EXTRA, f"data.cache_dir={cache}", f"hydra.run.dir={run}"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    returncode, err = signal_at_step(cmd, env, 10)
    assert returncode == REQUEUE_EXIT, err[-3000:]
    stopped = read_state(list_checkpoints(run)[-1][1])["step"]
    assert stopped == 10
    time.sleep(1.1)  # wandb names an offline run's directory by its start second; a requeue takes longer
    train(tiny_cfg(cache, *EXTRA), run)  # the requeued job (in-process: spares an interpreter start)

    run_id = (run / "wandb_run_id").read_text().strip()
    files = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2, files
    assert all(f.name == f"run-{run_id}.wandb" for f in files), files
    first, second = (wandb_records(f) for f in files)
    for records in (first, second):
        (meta,) = [r.run for r in records if r.WhichOneof("record_type") == "run"][:1]
        assert meta.run_id == run_id and meta.project == "grid-test" and meta.run_group == "wb"
        # the actual parameter count and tokenizer stand beside the size name
        params = json.loads((list_checkpoints(run)[-1][1] / "manifest.json").read_text())["param_count"]
        n_tok = len(AutoTokenizer.from_pretrained(list_checkpoints(run)[-1][1]))
        assert list(meta.tags) == ["model=tiny", f"params={params}", f"tokenizer_label=sentencepiece-unigram {n_tok:,}",
                                   "budget=full", "seed=0", "preset=test"]
        metrics = {r.metric.glob_name or r.metric.name: r.metric.step_metric
                   for r in records if r.WhichOneof("record_type") == "metric"}
        assert metrics.get("train/*") == "tokens" and metrics.get("probe/*") == "tokens"
    a, b = history_steps(first), history_steps(second)
    total = read_state(list_checkpoints(run)[-1][1])["total_steps"]
    # Monotone, no step logged twice: the requeued process starts after the resume checkpoint.
    assert a == sorted(set(a)) and b == sorted(set(b)) and max(a) == stopped < min(b)
    assert a + b == list(range(0, total + 1))  # step 0: the initial checkpoint
    assert all(read_state(p)["wandb_run_id"] == run_id for _s, p in list_checkpoints(run))


def test_a_grid_run_is_grouped_by_its_cell_with_the_axes_as_config_keys(tmp_path, one_thread):
    run = tmp_path / "run"
    cfg = tiny_cfg(tmp_path / "cache", "seed=1", "data.budget_tokens=4096",
                   "schedule.n_log=2", "logger.wandb=true", "logger.mode=offline", "data.heldout_tokens=20000")
    train(cfg, run)
    (path,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(path)
    (meta,) = [r.run for r in records if r.WhichOneof("record_type") == "run"][:1]
    # the group is the cell and the data (the token store's content hash: corpus and tokenizer); the seeds of
    # one cell are its members (W&B's grouped charts average them), runs of another corpus are not (issue 44 W3)
    data = read_state(list_checkpoints(run)[-1][1])["data"]["store_sha256"][:8]
    assert meta.run_group == f"default/tiny/4096/{data}" and meta.job_type == "train"
    config = {i.key: json.loads(i.value_json) for r in records if r.WhichOneof("record_type") in ("run", "config")
              for i in (r.run.config if r.WhichOneof("record_type") == "run" else r.config).update}
    assert {k: config[k] for k in ("model_name", "budget", "seed", "data_key")} == {
        "model_name": "tiny", "budget": 4096, "seed": 1, "data_key": data}
    keys = {i.key or "/".join(i.nested_key) for r in records if r.WhichOneof("record_type") == "history"
            for i in r.history.item}
    assert "probe/grammar/acc_mlp" in keys and "val/loss" in keys and "val/ppl" in keys
    phen = {k for k in keys if k.startswith("probe/grammar/") and k.count("/") == 3}
    assert phen and all(k.endswith("/acc_mlp") for k in phen), phen
    metrics = {r.metric.glob_name or r.metric.name: r.metric.step_metric
               for r in records if r.WhichOneof("record_type") == "metric"}
    assert metrics.get("val/*") == "tokens"
