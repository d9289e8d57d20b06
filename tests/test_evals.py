"""The eval contract (probes.evals): one light module, one metadata for every writer, "already done"
means the same checkpoint (manifest hash) and the same pairs, and the packages depend one way."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.benchmarks.registry import load_benchmark
from probes.evals import (BenchmarkConfig, EvalInputError, ProbesConfig, ScoreOptions, atomic_open, eval_done,
                          eval_path, manifest_hash, pair_set, read_meta, read_trainer_state)
from probes.scoring.primitive import score_pairs
from probes.scoring.store import read_pairs
from probes.scoring.watch import pending, score_run
from train.checkpoint import weights_to_bf16, write_manifest

ROOT = Path(__file__).resolve().parents[1]
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
        read_meta(path)
    (path.parent / "mini.parquet.sha256").unlink()  # a file of ours written before the .sha256 existed
    with pytest.raises(EvalInputError, match=f"{path}: not a readable parquet file"):
        read_meta(path)


# ---------------------------------------------------------------- one metadata for every writer


def test_every_writer_records_the_same_metadata(tmp_path, bench, capsys):
    from probes.__main__ import main as probes_main
    from probes.scoring.hook import ProbeHook
    from probes.syntaxqa.hook import SyntaxQAHook
    from probes.evals import SyntaxQAConfig

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


def test_trainer_state_reader_names_the_file(tmp_path):
    assert read_trainer_state(tmp_path, missing_ok=True) == {}
    with pytest.raises(FileNotFoundError):
        read_trainer_state(tmp_path)
    (tmp_path / "trainer_state.json").write_text('{"step": 4, "tok')
    with pytest.raises(EvalInputError, match=f"{tmp_path / 'trainer_state.json'}: invalid JSON at line 1"):
        read_trainer_state(tmp_path)


# ---------------------------------------------------------------- train -> probes.evals only; no cycles


def test_the_training_side_loads_no_probe_module():
    code = ("import sys, train.config, train.loop, train.corpus, train.checkpoint\n"
            "print('\\n'.join(m for m in sys.modules if m == 'probes' or m.startswith('probes.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(out.stdout.split())
    light = {"probes", "probes.evals", "probes.evals.config", "probes.evals.files", "probes.evals.evaluate",
             "probes.syntaxqa", "probes.syntaxqa.records"}
    assert loaded <= light, f"the trainer imports probe modules: {sorted(loaded - light)}"


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("train", "probes"):
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, path: Path, modules: dict) -> tuple[set[str], set[str]]:
    """(modules imported when `name` is imported, modules imported anywhere in it), ours only. Importing
    a.b.c runs a and a.b first, so those count too, except `name`'s own packages (already running)."""
    def targets(node, package: str) -> list[str]:
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        out = []
        for t in found:
            parts = t.split(".")
            out += [p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in modules]
        return out

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    top, every = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            every.update(targets(node, package))
    for node in tree.body:  # module level, including under if/try, not inside functions
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                top.update(targets(sub, package))
    own = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")) + 1)}
    return top - own, every - own


def _in_contract(module: str) -> bool:
    return module == "probes.evals" or module.startswith("probes.evals.")


def test_no_import_cycle_and_train_reaches_probes_only_through_the_contract():
    modules = _modules()
    graph = {m: _imports(m, f, modules) for m, f in modules.items()}
    # train/ uses probes only through probes.evals (and the package that holds it)
    for m, (_top, every) in graph.items():
        if m.startswith("train"):
            bad = sorted(t for t in every if t.startswith("probes.") and not _in_contract(t))
            assert not bad, f"{m} imports {bad}: the trainer reaches probes only through probes.evals"
    # the contract imports nothing of train, and at import time nothing heavy of probes
    for m, (top, every) in graph.items():
        if _in_contract(m):
            assert not any(t.startswith("train") for t in every), f"{m} imports train"
            assert top <= {"probes", "probes.evals", "probes.evals.config", "probes.evals.files",
                           "probes.evals.evaluate", "probes.syntaxqa", "probes.syntaxqa.records"}, (m, top)
    # no cycle among the imports that run at import time (Tarjan's strongly connected components)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v][0]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


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
