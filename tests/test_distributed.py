"""Two gloo processes under torchrun: DDP and DeepSpeed give the single-process loss trajectory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainutil import TINY, losses
from train.checkpoint import list_checkpoints

ROOT = Path(__file__).resolve().parents[1]
COMMON = [o for o in TINY if not o.startswith("probes.benchmarks")] + [
    "probes=none", "schedule=custom", "schedule.points=[10]", "data.grammar.n_documents=60"]


def launch(nproc: int, run_dir: Path, cache: Path, *overrides: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={29500 + os.getpid() % 1000}",
           "-m", "train", *COMMON, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("engine,stage", [("torch", 0), ("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3)])
def test_two_processes_match_one(tmp_path, engine, stage):
    cache = tmp_path / "cache"
    one, two = tmp_path / "one", tmp_path / "two"
    switch = [f"engine.zero_stage={stage}"] if engine == "deepspeed" else ["engine.backend=gloo"]
    if stage == 3:  # shard every tensor, not only those over DeepSpeed's 1e5 elements (none in tiny)
        switch.append("engine.zero3_persistence_threshold=0")
    launch(1, one, cache, f"engine={engine}", *switch)
    launch(2, two, cache, f"engine={engine}", *switch)
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) and len(a) >= 10
    for step in a:
        # Same global batch split over two ranks: equal up to the order of float reductions.
        assert b[step] == pytest.approx(a[step], rel=1e-4, abs=1e-5), step
    assert [s for s, _ in list_checkpoints(one)] == [s for s, _ in list_checkpoints(two)]
    state = (list_checkpoints(two)[-1][1] / "trainer_state.json").read_text()
    assert '"world_size": 2' in state
    if stage == 3:
        # Each rank held half of every weight: the checkpoint must hold the whole fp32 model, the one
        # a single process trained (same trajectory, so equal up to float reduction order).
        from transformers import GPTNeoXForCausalLM

        w1 = GPTNeoXForCausalLM.from_pretrained(list_checkpoints(one)[-1][1]).state_dict()
        w2 = GPTNeoXForCausalLM.from_pretrained(list_checkpoints(two)[-1][1]).state_dict()
        assert w1.keys() == w2.keys()
        for name in w1:
            assert w2[name].dtype == torch.float32 and w2[name].shape == w1[name].shape, name
            # 1e-3: the key bias gets a zero gradient up to rounding (softmax ignores a shift of all
            # scores), which Adam scales up to ~5e-4 here; every other tensor agrees within ~2e-6.
            assert torch.allclose(w2[name], w1[name], rtol=0, atol=1e-3), name


def launch_until(nproc: int, run_dir: Path, cache: Path, stop: int | None, *overrides: str) -> subprocess.CompletedProcess:
    """torchrun with `nproc` processes; with `stop`, SIGUSR1 reaches rank nproc - 1 alone during that step
    (train/faults.py), so every rank saves a resume checkpoint after it and exits for requeue."""
    from train.faults import ENV

    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={29500 + os.getpid() % 1000}", "-m", "train", *RESIZE, f"data.cache_dir={cache}",
           f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    if stop is not None:
        env[ENV] = f"mid_step:step{stop}:SIGUSR1@rank{nproc - 1}"
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


# 29 steps of 8 rows; a micro batch of 2 lets 1, 2 and 4 processes split them
RESIZE = [o for o in COMMON if not o.startswith(("optim.micro_batch", "data.grammar.n_documents"))] + [
    "optim.micro_batch=2", "data.grammar.n_documents=40"]


@pytest.mark.slow
def test_a_run_resumes_on_another_world_size(tmp_path):
    """4 processes train to step 8, 2 resume to step 17, 4 finish (torch engine, gloo): the batches are the
    one-process run's and the losses within float reduction order of it (tests/numerics.py)."""
    from numerics import loss_tol
    from transformers import GPTNeoXConfig

    from trainutil import compose_cfg, train_records as records_of
    from train.config import to_typed
    from train.loop import train

    cache, one, resized = tmp_path / "cache", tmp_path / "one", tmp_path / "resized"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(to_typed(compose_cfg([*RESIZE, f"data.cache_dir={cache}", "engine=torch"])), one)
    finally:
        torch.set_num_threads(threads)
    for nproc, stop in ((4, 8), (2, 17), (4, None)):
        proc = launch_until(nproc, resized, cache, stop)
        assert (proc.returncode == 0) == (stop is None), proc.stderr[-3000:]
        assert max(r["step"] for r in records_of(resized)) == (stop or 29), proc.stderr[-3000:]
    got, ref = records_of(resized), records_of(one)
    assert [r["step"] for r in got] == [r["step"] for r in ref] == list(range(1, 30))
    assert [r["world_size"] for r in got] == [4] * 8 + [2] * 9 + [4] * 12
    assert [r["batch_sha256"] for r in got] == [r["batch_sha256"] for r in ref]
    config = GPTNeoXConfig.from_pretrained(list_checkpoints(one)[0][1])
    for a, b in zip(ref, got):
        assert b["train/loss"] == pytest.approx(a["train/loss"], abs=loss_tol(config, 32, 8 * 32, a["train/loss"])), a["step"]


@pytest.mark.slow
def test_a_deepspeed_zero_run_resumed_on_another_world_size_is_refused_naming_both(tmp_path):
    cache, run = tmp_path / "cache", tmp_path / "run"
    ds = ["engine=deepspeed", "engine.zero_stage=1"]
    launch_until(2, run, cache, 3, *ds)
    assert [s for s, _ in list_checkpoints(run)][-1] == 3
    cmd = [sys.executable, "-m", "train", *RESIZE, *ds, f"data.cache_dir={cache}", f"hydra.run.dir={run}"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert "ZeRO-1 state saved by 2 processes, this run has 1: resume it on 2 processes" in line, line
    assert "python -m deepspeed.checkpoint.ds_to_universal --input_folder" in line and "Traceback" not in proc.stderr


def test_a_lone_deepspeed_process_ignores_a_port_left_in_use_in_its_environment():
    """CI failed with EADDRINUSE: an in-process DeepSpeed test left MASTER_PORT (and its listening store) in
    pytest's environment, and every later lone DeepSpeed subprocess tried to bind that port."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        code = ("import torch.distributed as d; from train.engine import EngineConfig, init_distributed; "
                "init_distributed(EngineConfig(kind='deepspeed')); print(d.get_world_size(), d.get_rank())")
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(held.getsockname()[1]),
               "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["1", "0"], proc.stderr[-2000:]


def test_a_torchrun_preemption_leaves_the_requeue_in_the_file_slurm_reads(tmp_path):
    """Issue 44: the ranks exit 75, torchrun exits 1, and the requeue status was lost. Every rank that exits 75
    writes $SYNTAX_DYNAMICS_REQUEUE_FILE (slurm/array.sbatch.in requeues on it, whatever the launcher says)."""
    from train.faults import ENV
    from train.interrupt import REQUEUE_FILE

    flag = tmp_path / "requeue"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={29500 + os.getpid() % 1000}", "-m", "train", *COMMON,
           f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", ENV: "mid_step:step2:SIGUSR1@rank1", REQUEUE_FILE: str(flag)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]  # torchrun's own status for a rank's 75
    assert flag.read_text() == ("preempted by SIGUSR1 after step 2: resume checkpoint saved; rerun the same "
                                "command to continue (exit status 75)\n")
