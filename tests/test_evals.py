"""The eval contract (probes.evals): one light module, one metadata for every writer, "already done"
means the same checkpoint (manifest hash) and the same pairs, and the packages depend one way."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.benchmarks.registry import load_benchmark
from probes.evals.config import BenchmarkConfig
from probes.evals.files import EvalInputError, eval_done, eval_file_meta, eval_path, pair_set
from probes.scoring.hook import ProbesConfig
from probes.scoring.evaluate import ScoreOptions
from train.errors import InputFileError
from train.files import atomic_open, manifest_hash, read_trainer_state
from probes.scoring.primitive import score_pairs
from probes.scoring.store import read_pairs
from probes.scoring.watch import pending, score_run
from train.checkpoint import weights_to_bf16, write_manifest

RECORDS = [  # BLiMP's published schema
    {"sentence_good": f"the {n} {v} .", "sentence_bad": f"the {n} {w} .", "UID": "sv",
     "linguistics_term": "agreement", "pairID": str(i)}
    for i, (n, v, w) in enumerate([("cat", "runs", "run"), ("cats", "run", "runs"), ("dog", "sees", "see")])
]
OPTS = ScoreOptions(batch_size=4, device="cpu")


def quiet(_line: str) -> None:
    pass


def save_checkpoint(run: Path, step: int, seed: int) -> Path:
    """A checkpoint as the trainer leaves it: weights, tokenizer, trainer_state.json, manifest.json."""
    ckpt = run / "checkpoints" / f"step{step}"
    ckpt.mkdir(parents=True, exist_ok=True)
    tiny_neox(seed=seed).save_pretrained(ckpt)
    word_tokenizer().save_pretrained(ckpt)
    state = {"step": step, "tokens": step * 256, "total_steps": 4, "config_hash": "c0ffee"}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    write_manifest(ckpt, state, param_count=0)  # rewritten after a replacement, as a replacing job would
    return ckpt


@pytest.fixture()
def bench(tmp_path):
    torch.set_num_threads(1)
    f = tmp_path / "mini.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return f, {"mini": load_benchmark(BenchmarkConfig(name="mini", path=str(f)))}


# ---------------------------------------------------------------- already done = same checkpoint, same pairs


def test_a_replaced_checkpoint_is_probed_again_and_nothing_else(tmp_path, bench):
    _, benchmarks = bench
    run = tmp_path / "run"
    ckpts = {step: save_checkpoint(run, step, seed=step) for step in (0, 2)}
    assert score_run(run, benchmarks, OPTS, quiet) == [eval_path(run, 0, "mini"), eval_path(run, 2, "mini")]
    mtimes = {s: eval_path(run, s, "mini").stat().st_mtime_ns for s in ckpts}
    assert read_pairs(eval_path(run, 2, "mini"))[1]["manifest"] == manifest_hash(ckpts[2])

    # unchanged: nothing to do, nothing touched
    assert pending(run, benchmarks) == [] and score_run(run, benchmarks, OPTS, quiet) == []

    # the weights of step2 replaced (another job rewrote the checkpoint and its manifest)
    old = manifest_hash(ckpts[2])
    save_checkpoint(run, 2, seed=7)
    assert manifest_hash(ckpts[2]) != old
    assert pending(run, benchmarks) == [(2, ckpts[2], ["mini"])]
    assert score_run(run, benchmarks, OPTS, quiet) == [eval_path(run, 2, "mini")]
    df, meta = read_pairs(eval_path(run, 2, "mini"))
    assert meta["manifest"] == manifest_hash(ckpts[2])
    ref = score_pairs(tiny_neox(seed=7), word_tokenizer(), benchmarks["mini"])
    assert df["lp_good"].tolist() == pytest.approx(ref["lp_good"].tolist(), abs=1e-5)  # the new weights' scores
    assert eval_path(run, 0, "mini").stat().st_mtime_ns == mtimes[0]

    # pruning resume/ and our own bf16 rewrite keep the checkpoint what it was: not probed again
    (ckpts[0] / "resume").mkdir()
    (ckpts[0] / "resume" / "rng_rank0.pt").write_bytes(b"x")
    write_manifest(ckpts[0], read_trainer_state(ckpts[0]), param_count=0)  # now lists resume/
    weights_to_bf16(ckpts[2])
    assert json.loads((ckpts[2] / "config.json").read_text())["dtype"] == "bfloat16"
    assert pending(run, benchmarks) == []

    # a sample of the benchmark is another pair set: scored, though the checkpoints are the same
    sample = {"mini": load_benchmark(BenchmarkConfig(name="mini", path=str(bench[0]), max_pairs_per_paradigm=2))}
    assert [s for s, _, _ in pending(run, sample)] == [0, 2]


def test_the_hooks_catch_up_reprobes_a_replaced_checkpoint(tmp_path, bench):
    from probes.scoring.hook import ProbeHook

    _, benchmarks = bench
    run = tmp_path / "run"
    ckpt = save_checkpoint(run, 1, seed=1)
    tok = word_tokenizer()
    hook = ProbeHook(ProbesConfig(batch_size=4), tok, run, pairs=benchmarks)
    assert hook.missing(1)
    hook.post_checkpoint_saved(ckpt, 1, 256, tiny_neox(seed=1))
    path = eval_path(run, 1, "mini")
    before = path.stat().st_mtime_ns
    assert not hook.missing(1)
    # score-run agrees that the hook's file is done (one meaning of "done")
    assert pending(run, benchmarks) == []
    hook.post_checkpoint_saved(ckpt, 1, 256, tiny_neox(seed=1))  # a resumed run reaching it again
    assert path.stat().st_mtime_ns == before

    save_checkpoint(run, 1, seed=5)  # replaced under its name
    assert hook.missing(1)  # the trainer's catch-up (train.loop probe_missed) probes it again
    hook.post_checkpoint_saved(ckpt, 1, 256, tiny_neox(seed=5))
    df, meta = read_pairs(path)
    assert meta["manifest"] == manifest_hash(ckpt) and not hook.missing(1)
    ref = score_pairs(tiny_neox(seed=5), tok, benchmarks["mini"])
    assert df["lp_bad"].tolist() == pytest.approx(ref["lp_bad"].tolist(), abs=1e-5)


def test_eval_done_reads_only_the_schema_and_names_a_bad_file(tmp_path, bench):
    _, benchmarks = bench
    run = tmp_path / "run"
    save_checkpoint(run, 0, seed=0)
    (path,) = score_run(run, benchmarks, OPTS, quiet)
    ckpt = run / "checkpoints" / "step0"
    assert eval_done(path, pair_set(benchmarks["mini"]), manifest_hash(ckpt))
    assert not eval_done(path, pair_set(benchmarks["mini"][:2]), manifest_hash(ckpt))
    assert not eval_done(path, pair_set(benchmarks["mini"]), None)  # scored on a checkpoint with a manifest
    path.write_bytes(path.read_bytes()[:100])  # torn (not by us: our writer never leaves one)
    assert not eval_done(path, pair_set(benchmarks["mini"]), manifest_hash(ckpt))
    with pytest.raises(EvalInputError, match=f"{path} does not match its sha256 in mini.parquet.sha256"):
        eval_file_meta(path)
    (path.parent / "mini.parquet.sha256").unlink()  # a file of ours written before the .sha256 existed
    with pytest.raises(EvalInputError, match=f"{path}: not a readable parquet file"):
        eval_file_meta(path)


# ---------------------------------------------------------------- one metadata for every writer


def test_every_writer_records_the_same_metadata(tmp_path, bench, capsys):
    from probes.__main__ import main as probes_main
    from probes.scoring.hook import ProbeHook
    from probes.syntaxqa.hook import SyntaxQAHook
    from probes.syntaxqa.config import SyntaxQAConfig

    f, benchmarks = bench
    run = tmp_path / "run"
    ckpt = save_checkpoint(run, 2, seed=2)
    model, tok = tiny_neox(seed=2), word_tokenizer()
    # the hook is handed an unresolved path (the trainer passes whatever the run dir was given as)
    odd = run / "checkpoints" / ".." / "checkpoints" / "step2"
    ProbeHook(ProbesConfig(batch_size=4), tok, tmp_path / "hook", pairs=benchmarks).post_checkpoint_saved(
        odd, 2, 512, model)
    score_run(run, benchmarks, OPTS, quiet)
    assert probes_main(["score", "--model", str(odd), "--benchmark", str(f), "--out", str(tmp_path / "cli.parquet"),
                        "--device", "cpu"]) == 0
    tree = tmp_path / "t.mrg"
    tree.write_text("( (S (NP-SBJ (DT the) (NN cat) ) (VP (VBZ sees) (NP (DT a) (NN dog) )) (. .) ))\n")
    qa = SyntaxQAConfig(enabled=True, sources=[str(tree)], knowledge_points=["GS", "DO"], question_types=["TF"],
                        generate=False, k_per_tuple=1)
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    long = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=128))
    SyntaxQAHook(qa, tok, tmp_path / "qa").post_checkpoint_saved(odd, 2, 512, long)  # prompts need 48 positions

    metas = {"hook": read_pairs(eval_path(tmp_path / "hook", 2, "mini"))[1],
             "score-run": read_pairs(eval_path(run, 2, "mini"))[1],
             "score": read_pairs(tmp_path / "cli.parquet")[1],
             "syntax-qa": read_pairs(eval_path(tmp_path / "qa", 2, "syntax_qa"))[1]}
    same = {"step": 2, "tokens": 512, "convention": "start_token_all_tokens_v2", "model_dir": str(ckpt.resolve()),
            "dtype": "float32", "bf16": False, "manifest": manifest_hash(ckpt)}
    for writer, meta in metas.items():
        assert {k: meta.get(k) for k in same} == same, writer
        assert meta["tokenizer"] == metas["hook"]["tokenizer"] and meta["versions"] == metas["hook"]["versions"]
        assert meta["pair_set"] and meta["n_pairs"] > 0
    assert {m["pair_set"] for w, m in metas.items() if w != "syntax-qa"} == {pair_set(benchmarks["mini"])}
    assert set(metas["hook"]["versions"]) >= {"python", "torch", "transformers"}


# ---------------------------------------------------------------- the one atomic writer and state reader


def test_atomic_open_syncs_before_the_rename_and_leaves_nothing_torn(tmp_path, monkeypatch):
    target = tmp_path / "d" / "out.txt"
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append("replace") or real_replace(a, b))
    with atomic_open(target, "w") as fh:
        fh.write("whole")
    assert target.read_text() == "whole"
    assert calls == ["fsync", "replace", "fsync"]  # the file's bytes, the rename, the directory entry
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600

    with pytest.raises(RuntimeError, match="cut short"):
        with atomic_open(target, "w") as fh:
            fh.write("half")
            raise RuntimeError("cut short")
    assert target.read_text() == "whole" and os.listdir(target.parent) == ["out.txt"]

    # a cache (durable=False) is renamed whole without either sync; a result still syncs both
    calls.clear()
    with atomic_open(target, "w", durable=False) as fh:
        fh.write("cache")
    assert target.read_text() == "cache" and calls == ["replace"] and os.listdir(target.parent) == ["out.txt"]


def test_report_caches_are_not_synced_its_results_are(tmp_path, monkeypatch):
    # what a report can recompute (the reduced eval caches, sigmoid fits, figure-cache entries) skips
    # the fsyncs; the report's own files (figures, tables, report.md) are written durably
    import numpy as np

    from probes.analysis import outputs
    from probes.analysis.aoa import FitStore
    from probes.analysis.evalcache import cache_path
    from probes.analysis.evalset import load_runs
    from probes.analysis.figcache import _store
    from synthetic import RunSpec, write_run

    run = write_run(tmp_path / "run", RunSpec(model="m", budget=1000, seed=1, tokens_per_step=10, steps=[0, 1, 2],
                                               benchmark="b"), np.full((3, 1), 0.7), ["p"], ["ph"], 20,
                    np.random.default_rng(0))
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd))
    load_runs([run], workers=1)
    FitStore(None).save(tmp_path / "fits.npz")
    _store(b"png", tmp_path / ".figure-cache" / "k.png")
    assert cache_path(run, "b").is_file() and synced == []
    outputs.write_text(tmp_path / "report.md", "x")
    assert any(s.endswith(".tmp") for s in synced) and str(tmp_path) in synced


def test_trainer_state_reader_names_the_file(tmp_path):
    assert read_trainer_state(tmp_path, missing_ok=True) == {}
    with pytest.raises(FileNotFoundError):
        read_trainer_state(tmp_path)
    (tmp_path / "trainer_state.json").write_text('{"step": 4, "tok')
    with pytest.raises(InputFileError, match=f"{tmp_path / 'trainer_state.json'}: cannot read the trainer state [(]invalid JSON at line 1"):
        read_trainer_state(tmp_path)


def test_a_rerun_of_a_finished_run_reprobes_only_the_replaced_checkpoint(tmp_path):
    """The trainer's catch-up (train.loop probe_missed -> hook.missing) on a real tiny run."""
    from trainutil import tiny_cfg
    from train.checkpoint import list_checkpoints
    from train.loop import train

    cfg = tiny_cfg(tmp_path / "cache")
    run = tmp_path / "run"
    train(cfg, run)
    ckpts = dict(list_checkpoints(run))
    steps = sorted(ckpts)
    mid = steps[1]  # a probe-only checkpoint (resume/ is kept on the last two)
    files = {s: eval_path(run, s, "grammar") for s in steps}
    mtimes = {s: f.stat().st_mtime_ns for s, f in files.items()}
    old = read_pairs(files[mid])

    # step `mid` now serves the initial weights (Pythia #83-style), its manifest rewritten to match
    (ckpts[mid] / "model.safetensors").write_bytes((ckpts[0] / "model.safetensors").read_bytes())
    write_manifest(ckpts[mid], read_trainer_state(ckpts[mid]), param_count=0)
    train(tiny_cfg(tmp_path / "cache"), run)  # resumes the finished run: nothing to train, catch-up only

    df, meta = read_pairs(files[mid])
    assert meta["manifest"] == manifest_hash(ckpts[mid]) != old[1]["manifest"]
    assert df["lp_good"].tolist() == pytest.approx(read_pairs(files[0])[0]["lp_good"].tolist(), abs=1e-5)
    assert df["lp_good"].tolist() != pytest.approx(old[0]["lp_good"].tolist(), abs=1e-3)
    assert {s: f.stat().st_mtime_ns for s, f in files.items() if s != mid} == {
        s: t for s, t in mtimes.items() if s != mid}
