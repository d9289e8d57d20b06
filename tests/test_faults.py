"""Faults: the trainer killed (SIGKILL) at each point of a step, a checkpoint and an eval; damaged,
planted or swapped files; a deleted config.yaml; a refused rerun. Nothing lost, nothing run, nothing
silently wrong (issue 12)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from trainutil import TINY, tiny_cfg
from train.checkpoint import (CorruptCheckpointError, list_checkpoints, load_rng, read_state,
                              write_manifest)
from train.faults import ENV
from train.lock import RunDirLocked, RunLock
from train.logger import read_log
from train.loop import NonFiniteError, train
from train.weights import WeightsMismatchError, load_causal_lm

ROOT = Path(__file__).resolve().parents[1]
# Checkpoints at steps 0, 1, 4, 15, 60 (schedule=log, n_log=4 in TINY); probes on (grammar, 10 pairs).


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the subprocesses get OMP_NUM_THREADS=1: same kernels, same bits
    yield
    torch.set_num_threads(threads)


def command(run_dir: Path, cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "train", *TINY, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}",
            *extra]


def run_cli(run_dir: Path, cache: Path, *extra: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "WANDB_MODE": "offline"}
    env.pop(ENV, None)
    if fault:
        env[ENV] = fault
    return subprocess.run(command(run_dir, cache, *extra), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def keyed(run_dir: Path) -> list[tuple[int, str]]:
    return [(r["step"], r["event"]) for r in read_log(run_dir / "logs" / "train.jsonl")]


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_log(run_dir / "logs" / "train.jsonl")
            if r["event"] == "train"}


def eval_files(run_dir: Path) -> dict[int, list[str]]:
    return {int(d.name[4:]): sorted(f.name for f in d.iterdir() if not f.name.startswith("."))
            for d in (run_dir / "evals").iterdir() if d.name.startswith("step")}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def straight(cache, tmp_path_factory):
    """The uninterrupted reference run (it also builds the token store everyone reuses). A process like
    the killed ones: in-process runs (torch.set_num_threads) differ from OMP_NUM_THREADS=1 in the last bit."""
    run_dir = tmp_path_factory.mktemp("straight")
    proc = run_cli(run_dir, cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def killed_four_times(cache, straight, tmp_path_factory):
    """One run killed with SIGKILL at each point in turn, each rerun resuming the last one's leftovers:
    mid-step, inside a checkpoint write, after the rename and before the eval, during the eval write.
    Returns the run directory (finished by a last, clean rerun) and what was seen after each kill."""
    run_dir = tmp_path_factory.mktemp("killed")
    seen = {}
    for fault in ("mid_step:step10", "checkpoint_write:step15", "after_rename:step15", "eval_write:step60"):
        proc = run_cli(run_dir, cache, fault=fault)
        assert proc.returncode == -9, f"{fault}: rc {proc.returncode}\n{proc.stderr[-3000:]}"
        seen[fault] = {
            "stdout": proc.stdout, "checkpoints": [s for s, _ in list_checkpoints(run_dir)],
            "tmp_dirs": sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")),
            "evals": eval_files(run_dir),
            "eval_tmp": sorted(p.name for p in (run_dir / "evals").rglob(".*.tmp")),
            "log": keyed(run_dir),
        }
    seen["final"] = run_cli(run_dir, cache)
    assert seen["final"].returncode == 0, seen["final"].stderr[-3000:]
    return run_dir, seen


def test_each_kill_left_what_it_should(killed_four_times):
    run_dir, seen = killed_four_times
    mid = seen["mid_step:step10"]
    assert mid["checkpoints"] == [0, 1, 4] and max(s for s, _ in mid["log"]) == 9
    write = seen["checkpoint_write:step15"]
    assert write["checkpoints"] == [0, 1, 4] and write["tmp_dirs"] == [".tmp-step15"]
    rename = seen["after_rename:step15"]
    assert rename["checkpoints"] == [0, 1, 4, 15] and 15 not in rename["evals"]
    assert (15, "checkpoint") not in rename["log"]
    evalw = seen["eval_write:step60"]
    # no eval file; the .sha256 is written first (train/evalsums.py), so it may stand alone until the rerun
    assert evalw["checkpoints"] == [0, 1, 4, 15, 60] and set(evalw["evals"].get(60, [])) <= {"grammar.parquet.sha256"}
    assert evalw["eval_tmp"] and evalw["eval_tmp"][0].startswith(".grammar.parquet.")


def test_a_resumed_run_says_so_first(killed_four_times):
    run_dir, seen = killed_four_times
    ckpts = run_dir / "checkpoints"
    # every rerun after the first kill resumed; the first line it printed says from where
    expect = {"checkpoint_write:step15": 4, "after_rename:step15": 4, "eval_write:step60": 15}
    for fault, step in expect.items():
        first = seen[fault]["stdout"].splitlines()[0]
        assert first == f"resuming from step {step} (tokens {step * 256}) in {ckpts / f'step{step}'}", fault
    assert seen["final"].stdout.splitlines()[0] == f"resuming from step 60 (tokens 15360) in {ckpts / 'step60'}"
    # the checkpoint the eval kill left unprobed (step 15) was probed by the next run, and said so
    assert f"probing checkpoint {ckpts / 'step15'}" in seen["eval_write:step60"]["stdout"]


def test_killed_runs_end_with_the_uninterrupted_runs_losses_evals_and_log(straight, killed_four_times):
    run_dir, _ = killed_four_times
    a, b = train_losses(straight), train_losses(run_dir)
    assert sorted(b) == list(range(1, 61))
    assert b == a  # bitwise: the same floats at every step, replayed steps included
    # one eval file per checkpoint, with the uninterrupted run's scores
    steps = [s for s, _ in list_checkpoints(straight)]
    assert eval_files(run_dir) == eval_files(straight) == {s: ["grammar.parquet", "grammar.parquet.sha256"]
                                                           for s in steps}
    for step in steps:
        pa_ = pd.read_parquet(straight / "evals" / f"step{step}" / "grammar.parquet")
        pb = pd.read_parquet(run_dir / "evals" / f"step{step}" / "grammar.parquet")
        pd.testing.assert_frame_equal(pa_, pb)
    # no duplicate records: every (step, event) once, the same set as the uninterrupted log
    log = keyed(run_dir)
    assert len(log) == len(set(log))
    assert sorted(log) == sorted(keyed(straight))


def tree(run_dir: Path) -> dict[str, tuple]:
    """Every file and directory under run_dir with its size, mtime and bytes' hash."""
    import hashlib

    out = {}
    for p in sorted(run_dir.rglob("*")):
        st = p.stat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(run_dir))] = (st.st_size if p.is_file() else None, st.st_mtime_ns, digest)
    return out


def test_a_refused_rerun_writes_nothing_into_the_run_directory(cache, killed_four_times):
    run_dir, _ = killed_four_times
    record = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "seed=5" not in record and (run_dir / ".hydra" / "config.yaml").is_file()
    before = tree(run_dir)
    changed = run_cli(run_dir, cache, "seed=5")
    assert changed.returncode != 0 and "seed: 0 -> 5" in changed.stderr
    assert tree(run_dir) == before
    # another job holds the run (in-process: flock refuses a second open file of the same process too)
    with RunLock(run_dir, announce=False), pytest.raises(RunDirLocked, match="is in use by"):
        train(tiny_cfg(cache, "seed=5"), run_dir)
    assert tree(run_dir) == before


class Payload:
    """A planted pickle: unpickling it creates `marker` (any other code could run there instead)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_planted_pickle_in_the_rng_state_is_refused_not_run(cache, tmp_path):
    marker = tmp_path / "payload-ran"

    resume = tmp_path / "resume"
    resume.mkdir()
    torch.save({"torch": torch.random.get_rng_state(), "cuda": [], "x": Payload(marker)}, resume / "rng_rank0.pt")
    with pytest.raises(CorruptCheckpointError, match=r"rng_rank0.pt holds more than tensors"):
        load_rng(resume, 0)
    assert not marker.exists()

    # Through a real resume, with the manifest rewritten to match (whoever plants a file can do that)
    run_dir = tmp_path / "run"
    train(tiny_cfg(cache, "probes=none", "schedule=custom", "schedule.points=[5]"), run_dir)
    last = list_checkpoints(run_dir)[-1][1]
    (last / "resume" / "rng_rank0.pt").replace(last / "resume" / "rng_rank0.pt.orig")
    torch.save({"torch": torch.random.get_rng_state(), "cuda": [], "x": Payload(marker)},
               last / "resume" / "rng_rank0.pt")
    (last / "resume" / "rng_rank0.pt.orig").unlink()
    write_manifest(last, read_state(last), 0)
    with pytest.raises(CorruptCheckpointError, match=r"rng_rank0.pt holds more than tensors"):
        train(tiny_cfg(cache, "probes=none", "schedule=custom", "schedule.points=[5]"), run_dir)
    assert not marker.exists()


def resumable_at_15(cache, tmp_path, *extra) -> tuple[Path, Path]:
    """A tiny run whose newest checkpoint (60) is gone: a rerun resumes from step 15."""
    run_dir = tmp_path / "run"
    train(tiny_cfg(cache, "probes=none", *extra), run_dir)
    import shutil

    shutil.rmtree(run_dir / "checkpoints" / "step60")
    return run_dir, run_dir / "checkpoints" / "step15"


def test_damaged_weights_are_refused_on_resume(cache, tmp_path):
    run_dir, ckpt = resumable_at_15(cache, tmp_path)
    log_before = (run_dir / "logs" / "train.jsonl").read_text()
    weights = ckpt / "model.safetensors"
    with open(weights, "r+b") as f:  # 4 KB of 0x7f inside the tensors: NaNs, as in the report
        f.seek(weights.stat().st_size // 2)
        f.write(b"\x7f" * 4096)
    with pytest.raises(CorruptCheckpointError, match=r"step15/model.safetensors does not match its sha256"):
        train(tiny_cfg(cache, "probes=none"), run_dir)
    assert (run_dir / "logs" / "train.jsonl").read_text() == log_before
    assert [s for s, _ in list_checkpoints(run_dir)] == [0, 1, 4, 15]


def test_deleting_config_yaml_does_not_bypass_the_config_check(cache, tmp_path):
    run_dir, _ = resumable_at_15(cache, tmp_path)
    (run_dir / "config.yaml").unlink()
    with pytest.raises(ValueError, match=r"trained with a different config .*Changed: optim.lr: 0.003 -> 0.002"):
        train(tiny_cfg(cache, "probes=none", "optim.lr=2e-3"), run_dir)
    assert [s for s, _ in list_checkpoints(run_dir)] == [0, 1, 4, 15]
    # micro_batch changes only how a step is computed: still accepted
    train(tiny_cfg(cache, "probes=none", "optim.micro_batch=8"), run_dir)
    assert [s for s, _ in list_checkpoints(run_dir)][-1] == 60


def poison(monkeypatch, nan_steps=(), inf_grad_steps=()):
    """The torch engine's loss, made non-finite at given steps (NaN loss), or with an infinite gradient
    (finite loss) -- a bad batch, as far as the loop can tell."""
    from train.engine import TorchEngine

    real = TorchEngine.loss
    calls = {"n": 0}

    def loss(self, batch):
        out = real(self, batch)
        step = calls["n"] // 2 + 1  # two micro-batches a step (global 8, micro 4)
        first = calls["n"] % 2 == 0
        calls["n"] += 1
        if first and step in nan_steps:
            return out * float("nan")
        if first and step in inf_grad_steps:
            out.register_hook(lambda g: g * float("inf"))
        return out

    monkeypatch.setattr(TorchEngine, "loss", loss)


def test_a_non_finite_loss_stops_the_run_naming_the_step(cache, tmp_path, monkeypatch):
    poison(monkeypatch, nan_steps=(7,))
    with pytest.raises(NonFiniteError, match=r"^step 7: loss nan, grad norm nan is not finite"):
        train(tiny_cfg(cache, "probes=none"), tmp_path / "run")
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [0, 1, 4]


def test_an_infinite_gradient_stops_the_run_too(cache, tmp_path, monkeypatch):
    poison(monkeypatch, inf_grad_steps=(3,))
    with pytest.raises(NonFiniteError, match=r"^step 3: loss [0-9.]+, grad norm (nan|inf) is not finite"):
        train(tiny_cfg(cache, "probes=none"), tmp_path / "run")


def test_bad_batches_are_skipped_a_bounded_number_of_times(cache, tmp_path, monkeypatch):
    poison(monkeypatch, nan_steps=(7,), inf_grad_steps=(3,))
    with pytest.raises(NonFiniteError, match=r"^step 7: .*already skipped at steps \[3\]"):
        train(tiny_cfg(cache, "probes=none", "max_skipped_batches=1"), tmp_path / "one")
    poison(monkeypatch, nan_steps=(7,), inf_grad_steps=(3,))
    run_dir = tmp_path / "two"
    train(tiny_cfg(cache, "probes=none", "max_skipped_batches=2"), run_dir)
    state = read_state(list_checkpoints(run_dir)[-1][1])
    assert state["skipped_steps"] == [3, 7] and state["step"] == 60
    log = read_log(run_dir / "logs" / "train.jsonl")
    assert [r["step"] for r in log if r["event"] == "skipped"] == [3, 7]
    # a skipped batch leaves no mark on the weights: every later loss is finite
    assert all(torch.isfinite(torch.tensor(r["train/loss"])) for r in log if r["event"] == "train")


def test_weights_that_do_not_fit_their_config_json_are_an_error(straight, tmp_path):
    import shutil

    swapped = tmp_path / "swapped"
    shutil.copytree(list_checkpoints(straight)[-1][1], swapped)
    neox = json.loads((swapped / "config.json").read_text())
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": neox["vocab_size"],
             **{k: neox[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                     "num_attention_heads")}}
    (swapped / "config.json").write_text(json.dumps(llama))
    with pytest.raises(WeightsMismatchError, match=r"LlamaForCausalLM\); missing \(would be random\): "):
        load_causal_lm(swapped)
    from transformers import GPTNeoXForCausalLM

    with pytest.raises(WeightsMismatchError, match=r"model_type='llama', expected 'gpt_neox'"):
        load_causal_lm(swapped, GPTNeoXForCausalLM)
    # the scoring CLI: an error naming the directory, exit status 2, no eval file
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"sentence_good": "the dog runs .", "sentence_bad": "the dog run .",
                                 "UID": "sv", "linguistics_term": "agreement", "pair_id": 0}) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "probes", "score", "--model", str(swapped), "--benchmark",
                           str(bench), "--out", str(tmp_path / "out.parquet")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and f"error: --model {swapped}: the weights do not fit" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_a_held_datasets_builder_lock_stops_the_load_naming_the_holder(tmp_path):
    import fcntl

    from train.corpus import DataConfig, load_documents

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the dog runs .\n\nthe cat sees the dog .\n")
    cfg = DataConfig(source="files", paths=[str(corpus)], cache_dir=str(tmp_path / "cache"), load_timeout_s=3)
    load_documents(cfg)  # builds the cached dataset (and its lock files)
    (lock,) = (tmp_path / "cache").rglob("*_builder.lock")
    # Another process building the same files holds this flock (here: the test, on another descriptor)
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(TimeoutError, match=rf"data.load_timeout_s=3 s\. Held: {lock} held by pid {os.getpid()}"):
            load_documents(cfg)
    finally:
        os.close(fd)
    assert len(load_documents(cfg)[0]) == 2  # released: the same call goes through


def test_a_planted_pickle_in_deepspeed_shards_is_refused_before_deepspeed_loads_it(tmp_path):
    from train.checkpoint import refuse_unsafe_pickles

    marker = tmp_path / "payload-ran"

    shards = tmp_path / "deepspeed"
    shards.mkdir()
    # what DeepSpeed itself writes passes: tensors, plain data, its own config enum
    from deepspeed.runtime.zero.config import ZeroStageEnum

    torch.save({"module": {"w": torch.ones(2)}, "zero_stage": ZeroStageEnum.optimizer_states, "ds_version": "x"},
               shards / "mp_rank_00_model_states.pt")
    refuse_unsafe_pickles(shards)
    torch.save({"optimizer_state_dict": Payload(marker)}, shards / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(CorruptCheckpointError, match=r"optim_states.pt names code that loading it would run "
                                                     r"\(builtins.getattr, pathlib.Path"):
        refuse_unsafe_pickles(shards)
    assert not marker.exists()
