"""`python -m train verify` on a real tiny run: clean, then each failure the public suites shipped planted
in a copy (weights copied from another step, a truncated file, a swapped tensor or shard, a checkpoint
equal to the initialisation or to the final model, a tensor of another run)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPTNeoXForCausalLM

from trainutil import tiny_cfg
from train.checkpoint import checkpoint_dir, read_manifest, read_state, sha256_file, write_json_atomic, write_manifest
from train.loop import train
from train.trajectory import Weights, identical_pairs, trace
from train.verify import main as verify_main

ROOT = Path(__file__).resolve().parents[1]
STEPS = [0, 1, 2, 3, 6, 10, 19, 33, 60]  # schedule=log with n_log=8 on the 60-step tiny run
BIG = "gpt_neox.layers.1.mlp.dense_h_to_4h.weight"  # 128 x 32: judged alone by the detour rule


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def clean_run(cache, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    train(tiny_cfg(cache, "schedule.n_log=8"), run_dir)
    assert [int(p.name[4:]) for p in sorted((run_dir / "checkpoints").iterdir(), key=lambda p: int(p.name[4:]))] == STEPS
    return run_dir


@pytest.fixture
def run(clean_run, tmp_path):
    """A copy of the clean run to plant a fault in."""
    return Path(shutil.copytree(clean_run, tmp_path / "run"))


def ckpt(run: Path, step: int) -> Path:
    return checkpoint_dir(run, step)


def rehash(path: Path, *names: str) -> None:
    """Records the planted files' sha256 in the manifest: the checkpoint is consistent, as a served
    checkpoint with the wrong weights is (the Pythia and OLMo cases had no damaged byte)."""
    manifest = read_manifest(path)
    manifest["files"].update({n: sha256_file(path / n) for n in names})
    write_json_atomic(path / "manifest.json", manifest)


def verify(capsys, *args) -> tuple[int, list[str], str]:
    rc = verify_main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def findings(lines: list[str]) -> list[str]:
    """The findings about checkpoints. Not the eval files': a test here plants other weights and rehashes the
    manifest, so the eval files, which scored the weights before, each name another checkpoint (issue 38;
    test_weights_copied_from_another_step_are_byte_identical shows it once)."""
    return [line for line in lines if not line.startswith(("verify ", "note: ")) and "/evals/step" not in line]


def test_a_clean_run_passes_through_the_cli_and_reports_its_distances(clean_run):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "train", "verify", str(clean_run)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [f"verify {clean_run}: 9 checkpoints (step0..step60), 9 with manifests: clean"]
    proc = subprocess.run([sys.executable, "-m", "train", "verify", "--json", str(clean_run)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["findings"] == 0 and report["runs"][0]["findings"] == []
    rows = {c["step"]: c for c in report["runs"][0]["checkpoints"]}
    assert sorted(rows) == STEPS and all(c["manifest"] for c in rows.values())
    assert rows[60]["tokens"] == 60 * 8 * 32
    # the distances, computed here independently from the files: |θ_t − θ_0| and |θ_t − θ_60| over all tensors
    w = {s: load_file(ckpt(clean_run, s) / "model.safetensors") for s in (0, 10, 60)}
    d0 = sum(((w[10][k].double() - w[0][k].double()) ** 2).sum() for k in w[0]) ** 0.5
    d60 = sum(((w[10][k].double() - w[60][k].double()) ** 2).sum() for k in w[0]) ** 0.5
    assert rows[10]["distance_from_init"] == pytest.approx(float(d0), rel=1e-5)
    assert rows[10]["distance_from_final"] == pytest.approx(float(d60), rel=1e-5)
    assert rows[0]["distance_from_init"] == 0 and rows[60]["distance_from_final"] == 0
    # training moves away from the initialisation at every checkpoint of this run
    d = [rows[s]["distance_from_init"] for s in STEPS]
    assert all(b > a for a, b in zip(d, d[1:]))


def test_a_truncated_weights_file_is_named(run, capsys):
    f = ckpt(run, 10) / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert len(findings(lines)) == 1, lines
    assert findings(lines)[0].startswith(f"{f}: safetensors cannot read it")
    assert "truncated" in lines[0] and "does not match its sha256 in manifest.json" in lines[0]
    assert lines[-1].endswith("1 finding(s)")
    assert verify_main(["--json", str(run)]) == 1
    [finding] = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    assert (finding["step"], finding["file"], finding["kind"]) == (10, str(f), "unreadable")


def test_weights_copied_from_another_step_are_byte_identical(run, capsys):
    shutil.copy(ckpt(run, 6) / "model.safetensors", ckpt(run, 19) / "model.safetensors")
    rehash(ckpt(run, 19), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    # one finding on the weights: the copy; its neighbours (step10, step33) are not bent by it (it leaves the
    # trace). And step19's eval files scored the weights before the copy: each is named (issue 38)
    assert findings(lines) == [f"{ckpt(run, 19) / 'model.safetensors'}: byte-identical to step6/model.safetensors "
                               f"(another checkpoint): the weights did not change or were copied"]
    evals = [line for line in lines if "/evals/step" in line]
    assert evals and all(f.startswith(f"{run / 'evals' / 'step19'}/") and "names another checkpoint" in f for f in evals)


def test_checkpoints_without_manifests_have_their_weights_hashed(run, capsys):
    """Checkpoints written before manifests existed: nothing to check their files against, but copied
    weights are still found (the files are hashed) and a manifest.json that cannot be read is named."""
    for step in STEPS:
        (ckpt(run, step) / "manifest.json").unlink()
        state = json.loads((ckpt(run, step) / "trainer_state.json").read_text())
        state.pop("config_hash")  # which came with manifests: an older checkpoint has neither
        (ckpt(run, step) / "trainer_state.json").write_text(json.dumps(state))
    shutil.copy(ckpt(run, 6) / "model.safetensors", ckpt(run, 19) / "model.safetensors")
    (ckpt(run, 33) / "manifest.json").write_text("{not json")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [
        f"{ckpt(run, 19) / 'model.safetensors'}: byte-identical to step6/model.safetensors (another checkpoint): "
        f"the weights did not change or were copied",
        f"{ckpt(run, 33) / 'manifest.json'}: is not valid JSON (Expecting property name enclosed in double quotes: "
        f"line 1 column 2 (char 1)): the checkpoint cannot be verified"]
    assert sum(line.startswith("note: ") and "no manifest.json" in line for line in lines) == len(STEPS) - 1
    assert lines[-1].endswith(f"{len(STEPS)} checkpoints (step0..step60), 0 with manifests: 2 finding(s)")


def test_step1_equal_to_step0_is_blamed_on_step1(run, capsys):
    """Pythia #83: step 1 served the initialisation."""
    shutil.copy(ckpt(run, 0) / "model.safetensors", ckpt(run, 1) / "model.safetensors")
    rehash(ckpt(run, 1), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [f"{ckpt(run, 1) / 'model.safetensors'}: byte-identical to step0/model.safetensors "
                               f"(the initialisation): the weights did not change or were copied"]


def test_an_intermediate_step_serving_the_final_model_is_blamed_on_the_intermediate_step(run, capsys):
    """Pythia #206: step50000 served the final model's weights."""
    shutil.copy(ckpt(run, 60) / "model.safetensors", ckpt(run, 19) / "model.safetensors")
    rehash(ckpt(run, 19), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [f"{ckpt(run, 19) / 'model.safetensors'}: byte-identical to step60/model.safetensors "
                               f"(the final model): the weights did not change or were copied"]


def test_a_tensor_swapped_in_from_another_step_is_named(run, capsys):
    weights = load_file(ckpt(run, 10) / "model.safetensors")
    weights[BIG] = load_file(ckpt(run, 33) / "model.safetensors")[BIG]
    save_file(weights, ckpt(run, 10) / "model.safetensors", metadata={"format": "pt"})
    rehash(ckpt(run, 10), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [f"{ckpt(run, 10) / 'model.safetensors'}: 1 of 28 tensors hold the values they "
                               f"have at step33: {BIG}; a shard or tensor copied from another step"]


def test_a_tensor_of_another_run_is_off_the_path(run, capsys):
    """Not a copy of any saved step: the detour ratio finds it (another seed's initialisation here)."""
    weights = load_file(ckpt(run, 10) / "model.safetensors")
    torch.manual_seed(1234)
    other = GPTNeoXForCausalLM(GPTNeoXForCausalLM.config_class.from_pretrained(ckpt(run, 10)))
    weights[BIG] = other.state_dict()[BIG].contiguous()
    save_file(weights, ckpt(run, 10) / "model.safetensors", metadata={"format": "pt"})
    rehash(ckpt(run, 10), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    [line] = findings(lines)
    assert line.startswith(f"{ckpt(run, 10) / 'model.safetensors'}: {BIG} is off the run's path between "
                           f"step6 and step19 (detour ratio ")
    ratio = float(line.split("detour ratio ")[1].split(" ")[0])
    assert ratio > 3


def test_a_sharded_run_with_the_final_models_shard_at_an_intermediate_step(run, capsys):
    """save_pretrained shards large weights; Pythia #206 was one shard of step50000 being the final's."""
    for step in STEPS:
        path = ckpt(run, step)
        model = GPTNeoXForCausalLM.from_pretrained(path)
        (path / "model.safetensors").unlink()
        model.save_pretrained(path, max_shard_size=200_000)
        write_manifest(path, read_state(path), sum(p.numel() for p in model.parameters()))
    shutil.rmtree(run / "evals")  # they name the manifests before the re-save (issue 38): not this test's matter
    shards = sorted(p.name for p in ckpt(run, 19).glob("*.safetensors"))
    assert len(shards) >= 2 and (ckpt(run, 19) / "model.safetensors.index.json").is_file()
    rc, lines, _ = verify(capsys, run)
    assert rc == 0, lines
    shutil.copy(ckpt(run, 60) / shards[-1], ckpt(run, 19) / shards[-1])
    rehash(ckpt(run, 19), shards[-1])
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [f"{ckpt(run, 19) / shards[-1]}: byte-identical to step60/{shards[-1]} (the final "
                               f"model): the weights did not change or were copied"]


def test_files_that_differ_from_the_manifest_are_each_named(run, capsys):
    config = ckpt(run, 6) / "config.json"
    config.write_text(config.read_text().replace('"hidden_act"', '"hidden_act" ', 1))
    (ckpt(run, 2) / "tokenizer.json").unlink()
    (ckpt(run, 3) / "notes.txt").write_text("added after the run\n")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [
        f"{ckpt(run, 2) / 'tokenizer.json'}: listed in manifest.json but missing",
        f"{ckpt(run, 3) / 'notes.txt'}: not listed in manifest.json",
        f"{config}: does not match its sha256 in manifest.json: the file was damaged or replaced after it was written"]


def test_a_checkpoint_directory_copied_from_another_step(run, capsys):
    shutil.rmtree(ckpt(run, 10))
    shutil.copytree(ckpt(run, 6), ckpt(run, 10))
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [
        f"{ckpt(run, 10) / 'manifest.json'}: records step 6 in directory step10: a checkpoint copied from another step?",
        f"{ckpt(run, 10) / 'model.safetensors'}: byte-identical to step6/model.safetensors (another checkpoint): "
        f"the weights did not change or were copied",
        f"{ckpt(run, 10) / 'trainer_state.json'}: records step 6 in directory step10"]


def test_a_checkpoint_of_another_config_is_named(run, capsys):
    path = ckpt(run, 19)
    state = read_state(path)
    state["config_hash"] = "0" * 64
    write_json_atomic(path / "trainer_state.json", state)
    manifest = read_manifest(path)
    manifest["config_hash"] = state["config_hash"]
    write_json_atomic(path / "manifest.json", manifest)
    rehash(path, "trainer_state.json")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    [line] = findings(lines)
    assert line.startswith(f"{path / 'trainer_state.json'}: config_hash 000000000000… differs from the run's ")


def test_usage_errors_exit_2_naming_the_directory(tmp_path, capsys):
    rc, _, err = verify(capsys, tmp_path / "nowhere")
    assert rc == 2 and err == f"error: {tmp_path / 'nowhere'}: no such run directory\n"
    rc, _, err = verify(capsys, tmp_path)
    assert rc == 2 and err.startswith(f"error: {tmp_path}: no checkpoints/step<N> directories")


def test_bf16_checkpoints_are_clean_and_compared_at_bf16(cache, tmp_path, capsys):
    """schedule.weights_dtype=bf16 rewrites all but the resume checkpoints (step33, step60) in bf16: a
    healthy run stays clean, and a bf16 checkpoint holding fp32 values rounded to bf16 is a copy."""
    run = tmp_path / "bf16"
    train(tiny_cfg(cache, "schedule.n_log=8", "schedule.weights_dtype=bf16"), run)
    assert load_file(ckpt(run, 19) / "model.safetensors")[BIG].dtype == torch.bfloat16
    assert load_file(ckpt(run, 60) / "model.safetensors")[BIG].dtype == torch.float32
    rc, lines, _ = verify(capsys, run)
    assert rc == 0, lines
    weights = load_file(ckpt(run, 10) / "model.safetensors")
    weights[BIG] = load_file(ckpt(run, 60) / "model.safetensors")[BIG].to(torch.bfloat16)
    save_file(weights, ckpt(run, 10) / "model.safetensors", metadata={"format": "pt"})
    final = {k: v.to(torch.bfloat16) for k, v in load_file(ckpt(run, 60) / "model.safetensors").items()}
    save_file(final, ckpt(run, 3) / "model.safetensors", metadata={"format": "pt"})
    rehash(ckpt(run, 10), "model.safetensors")
    rehash(ckpt(run, 3), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    assert findings(lines) == [
        f"{ckpt(run, 3) / 'model.safetensors'}: every tensor equals that of step60/model.safetensors (the "
        f"final model): the weights did not change or were copied",
        f"{ckpt(run, 10) / 'model.safetensors'}: 1 of 28 tensors hold the values they have at step60 (the final "
        f"model): {BIG}; a shard or tensor copied from another step"]


def test_detour_ratios_against_hand_computed_values(tmp_path):
    """Three checkpoints of two small tensors (one layer): a goes (0,0) -> (3,0) -> (3,4), b goes 0 -> 1 -> 0.
    At the middle one, a's ratio is (3 + 4) / 5; b returned to where it was (chord 0): not judged alone;
    pooled, the layer's small tensors give (√10 + √17) / 5."""
    a = [[0.0, 0.0], [3.0, 0.0], [3.0, 4.0]]
    b = [[0.0], [1.0], [0.0]]
    weights = []
    for step in range(3):
        f = tmp_path / f"step{step}.safetensors"
        save_file({"gpt_neox.layers.0.a": torch.tensor(a[step]), "gpt_neox.layers.0.b": torch.tensor(b[step])}, f)
        names = ["gpt_neox.layers.0.a", "gpt_neox.layers.0.b"]
        weights.append(Weights(step, {n: f for n in names}, shapes={names[0]: (2,), names[1]: (1,)}))
    traj = trace(weights)
    assert traj.d_init[:, 0].tolist() == [0.0, 3.0, 5.0] and traj.d_final[:, 0].tolist() == [5.0, 4.0, 0.0]
    ratio = traj.detour()
    assert ratio[1, 0] == pytest.approx(7 / 5) and np.isnan(ratio[1, 1])
    assert np.isnan(ratio[0]).all() and np.isnan(ratio[2]).all()
    assert traj.groups() == {"gpt_neox.layers.0 small tensors": [0, 1]}
    assert traj.detour([0, 1])[1] == pytest.approx((10 ** 0.5 + 17 ** 0.5) / 5)
    assert identical_pairs(traj, "gpt_neox.layers.0.b") == [(0, 2)]


def test_fast_trusts_the_manifest_and_checks_names_and_sizes(run, capsys, monkeypatch):
    config = ckpt(run, 6) / "config.json"
    config.write_text(config.read_text().replace('"hidden_act"', '"hidden_act" ', 1))  # one byte longer
    (ckpt(run, 2) / "tokenizer.json").unlink()
    (ckpt(run, 3) / "notes.txt").write_text("added after the run\n")
    tok = ckpt(run, 10) / "tokenizer.json"  # same size, other bytes: only a hash sees it
    text = tok.read_text()
    tok.write_text(text.replace('"version"', '"versioN"', 1))
    assert len(tok.read_text()) == len(text) and tok.read_text() != text

    import train.verify

    def no_hash(path):
        raise AssertionError(f"--fast hashed {path}")

    with monkeypatch.context() as m:
        m.setattr(train.verify, "sha256_file", no_hash)
        rc, lines, _ = verify(capsys, "--fast", run)
    assert rc == 1
    assert findings(lines) == [
        f"{ckpt(run, 2) / 'tokenizer.json'}: listed in manifest.json but missing",
        f"{ckpt(run, 3) / 'notes.txt'}: not listed in manifest.json",
        f"{config}: is {config.stat().st_size:,} bytes, manifest.json records {config.stat().st_size - 1:,}: "
        f"the file was damaged or replaced after it was written"]
    assert any("--fast" in line and "not hashed" in line for line in lines)
    rc, lines, _ = verify(capsys, run)  # the full check hashes and sees the same-size change too
    assert f"{tok}: does not match its sha256 in manifest.json: the file was damaged or replaced after it " \
           f"was written" in findings(lines)


def test_a_checkpoint_is_hashed_while_written_not_read_back(tmp_path, monkeypatch):
    """save_checkpoint streams the optimizer and RNG state through sha256 as torch.save writes them: the
    manifest reads back only the files a library wrote (weights, config, tokenizer), each once, and
    records what a full read gives."""
    import builtins

    import train.digest
    from probeutil import word_tokenizer
    from train.checkpoint import save_checkpoint
    from train.engine import Dist, EngineConfig, TorchEngine
    from train.model import ModelConfig, build_model
    from train.optim import OptimConfig

    cpu = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
    engine = TorchEngine(EngineConfig(), OptimConfig(global_batch=2, micro_batch=2),
                         build_model(ModelConfig(hidden_size=32, intermediate_size=64, vocab_size=128)), cpu)
    engine.backward(engine.loss(torch.randint(0, 14, (2, 9))))
    engine.step(1e-3)
    read = []

    def recording_open(path, mode="r", *a, **k):
        if "r" in mode:
            read.append(Path(path).name)
        return builtins.open(path, mode, *a, **k)

    monkeypatch.setattr(train.digest, "open", recording_open, raising=False)
    state = {"step": 1, "tokens": 18, "config_hash": "c0ffee"}
    path = save_checkpoint(tmp_path, 1, engine, word_tokenizer(), state, cpu, with_resume=True)
    manifest = read_manifest(path)
    assert "resume/optimizer.pt" in manifest["files"] and "resume/rng_rank0.pt" in manifest["files"]
    assert "optimizer.pt" not in read and "rng_rank0.pt" not in read
    assert sorted(read) == sorted(set(read)) and "model.safetensors" in read  # each read file once
    for rel, digest in manifest["files"].items():
        assert digest == sha256_file(path / rel) and manifest["sizes"][rel] == (path / rel).stat().st_size, rel


def test_a_final_checkpoint_closer_to_step0_than_an_earlier_one_is_named(run, capsys):
    """The last checkpoint has no next neighbour for the detour rule: here it holds step10's weights, each
    nudged by a relative 1e-6 (so no file or tensor is identical), and is named by its distance from step 0
    falling below step33's."""
    weights = {k: (v * (1 + 1e-6)).contiguous() for k, v in load_file(ckpt(run, 10) / "model.safetensors").items()}
    save_file(weights, ckpt(run, 60) / "model.safetensors", metadata={"format": "pt"})
    rehash(ckpt(run, 60), "model.safetensors")
    rc, lines, _ = verify(capsys, run)
    assert rc == 1
    back = [line for line in findings(lines) if "is closer to step0's weights" in line]
    assert len(back) == 1 and back[0].startswith(f"{ckpt(run, 60)}: step60 is closer") and "than step" in back[0], lines
