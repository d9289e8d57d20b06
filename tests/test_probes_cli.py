"""`python -m probes score` end to end on a saved tiny model directory, in a real subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from probeutil import tiny_neox, word_tokenizer
from probes.__main__ import main
from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
from probes.scoring.primitive import score_pairs
from probes.scoring.store import read_pairs

ROOT = Path(__file__).resolve().parents[1]
RECORDS = [  # BLiMP's published schema
    {"sentence_good": f"the {n} {v} .", "sentence_bad": f"the {n} {w} .", "UID": uid,
     "linguistics_term": term, "pairID": str(i)}
    for i, (n, v, w, uid, term) in enumerate([
        ("cat", "runs", "run", "sv_agr", "agreement"), ("cats", "run", "runs", "sv_agr", "agreement"),
        ("dog", "sees", "see", "sv_agr", "agreement"), ("dogs", "see", "sees", "sv_agr", "agreement"),
        ("cat", "sees", "see", "sv_other", "other"),
    ])
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("model")
    word_tokenizer().save_pretrained(d)
    tiny_neox().save_pretrained(d)
    (d / "trainer_state.json").write_text(json.dumps({"step": 4, "tokens": 8192}))
    return d


@pytest.fixture(scope="module")
def bench_file(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("bench") / "mini.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return f


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "probes", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_score_end_to_end(model_dir, bench_file, tmp_path):
    out = tmp_path / "o" / "mini.parquet"
    r = run_cli("score", "--model", model_dir, "--benchmark", bench_file, "--out", out,
                "--batch-size", "3", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    df = pd.read_parquet(out)
    assert len(df) == 5 and list(df["pair_id"]) == ["0", "1", "2", "3", "4"]
    _, meta = read_pairs(out)
    assert (meta["step"], meta["tokens"], meta["benchmark"]) == (4, 8192, "mini")
    assert meta["convention"] == "start_token_all_tokens_v2"
    # the same numbers as scoring in-process with the saved model and tokenizer
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    ref = score_pairs(model, tok, load_benchmark(BenchmarkConfig(name="mini", path=str(bench_file))))
    assert df["lp_good"].tolist() == pytest.approx(ref["lp_good"].tolist(), abs=1e-5)
    assert df["lp_bad"].tolist() == pytest.approx(ref["lp_bad"].tolist(), abs=1e-5)
    acc = ((ref.lp_good / ref.ntok_good) > (ref.lp_bad / ref.ntok_bad)).mean()
    assert f"acc_mlp={acc:.4f}" in r.stdout



# The rest calls the same entry point in-process: a subprocess per case would spend its time
# importing torch.


def test_sample_per_paradigm(model_dir, bench_file, tmp_path, capsys):
    out = tmp_path / "one.parquet"
    code = main(["score", "--model", str(model_dir), "--benchmark", str(bench_file),
                 "--out", str(out), "--max-pairs-per-paradigm", "1"])
    assert code == 0
    assert sorted(pd.read_parquet(out)["paradigm"]) == ["sv_agr", "sv_other"]
    assert "mini: 2 pairs, 2 paradigms" in capsys.readouterr().out


def test_score_errors_are_clear(model_dir, bench_file, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((model_dir / "config.json").read_text())
    out = str(tmp_path / "x.parquet")
    assert main(["score", "--model", str(empty), "--benchmark", str(bench_file), "--out", out]) == 2
    assert f"--model {empty}: no model weights" in capsys.readouterr().err
    notok = tmp_path / "notok"
    notok.mkdir()
    for f in ("config.json", "model.safetensors"):
        (notok / f).write_bytes((model_dir / f).read_bytes())
    assert main(["score", "--model", str(notok), "--benchmark", str(bench_file), "--out", out]) == 2
    assert f"--model {notok}: no tokenizer files" in capsys.readouterr().err
    assert main(["score", "--model", str(model_dir), "--benchmark", "no_such_bench",
                 "--out", out]) == 2
    err = capsys.readouterr().err
    assert "--benchmark no_such_bench: unknown benchmark" in err and "zhoblimp" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RECORDS[0]) + "\n{not json\n")
    assert main(["score", "--model", str(model_dir), "--benchmark", str(bad), "--out", out]) == 2
    assert "bad.jsonl" in capsys.readouterr().err
    odd = tmp_path / "pairs.xml"  # a file of no known format
    odd.write_text("<pairs><pair good='the cat runs .' bad='the cat run .'/></pairs>\n")
    assert main(["score", "--model", str(model_dir), "--benchmark", str(odd), "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --benchmark {odd}:") and "pairs.xml" in err
    assert not Path(out).exists()
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_dispatches_to_benchmarks_and_curves(capsys):
    for command in ("curves", "benchmarks", "score-run", "watch"):
        with pytest.raises(SystemExit) as e:
            main([command, "--help"])
        assert e.value.code == 0
        assert f"python -m probes {command}" in capsys.readouterr().out


def test_out_that_cannot_be_written_fails_before_scoring(model_dir, bench_file, tmp_path, capsys, monkeypatch):
    import probes.scoring.primitive

    scored = []
    monkeypatch.setattr(probes.scoring.primitive, "score_pairs", lambda *a, **k: scored.append(1))
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    out = afile / "scores.parquet"
    assert main(["score", "--model", str(model_dir), "--benchmark", str(bench_file), "--out", str(out)]) == 2
    assert f"error: --out {out}: cannot be written (--out {afile}: {afile} is a file, not a directory)" in \
        capsys.readouterr().err
    assert main(["score", "--model", str(model_dir), "--benchmark", str(bench_file), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path}: is a directory" in capsys.readouterr().err
    assert scored == []


def test_tokenizer_with_more_ids_than_the_embedding_is_named(model_dir, bench_file, tmp_path, capsys):
    from probeutil import WORDS, word_tokenizer

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for f in ("config.json", "model.safetensors"):
        (mixed / f).write_bytes((model_dir / f).read_bytes())
    word_tokenizer(WORDS + ["extra", "words"]).save_pretrained(mixed)  # 2 ids past the embedding
    out = tmp_path / "x.parquet"
    assert main(["score", "--model", str(mixed), "--benchmark", str(bench_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--model {mixed}: the tokenizer has 16 ids but the model's embedding only 14 rows" in err
    assert not out.exists()


def test_a_benchmark_path_is_that_file_even_named_as_a_builtin(model_dir, tmp_path, capsys, monkeypatch):
    """A copy of 6 of the built-in grammar's pairs written to grammar.jsonl: --benchmark with that path scores
    those 6 pairs (it used to score the built-in generator's, by the file's stem); a name that is also a path
    in the working directory is an error naming both."""
    builtin = load_benchmark(BenchmarkConfig(name="grammar"))
    picked = [p for par in sorted({p.paradigm for p in builtin})[:3]
              for p in [q for q in builtin if q.paradigm == par][:2]]
    f = tmp_path / "copy" / "grammar.jsonl"
    f.parent.mkdir()
    f.write_text("".join(json.dumps({"sentence_good": p.good, "sentence_bad": p.bad, "UID": p.paradigm,
                                     "linguistics_term": p.phenomenon, "pairID": p.pair_id}) + "\n" for p in picked))
    out = tmp_path / "g.parquet"
    assert main(["score", "--model", str(model_dir), "--benchmark", str(f), "--out", str(out)]) == 0
    df = pd.read_parquet(out)
    assert len(builtin) > 6 and sorted(zip(df.paradigm, df.pair_id, df.good)) == \
        sorted((p.paradigm, p.pair_id, p.good) for p in picked)
    monkeypatch.chdir(f.parent.parent)
    (f.parent.parent / "grammar").mkdir()
    assert main(["score", "--model", str(model_dir), "--benchmark", "grammar", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "built-in benchmark 'grammar'" in err and str(f.parent.parent / "grammar") in err


def test_score_and_benchmarks_count_a_custom_suites_paradigms_alike(model_dir, tmp_path, capsys):
    """Issue 44: one paradigm name under 3 phenomena was "3 paradigms" in `benchmarks`, "1 paradigms" in `score`."""
    f = tmp_path / "custom.jsonl"
    f.write_text("".join(json.dumps({**r, "UID": "p", "linguistics_term": f"t{i % 3}"}) + "\n"
                         for i, r in enumerate(RECORDS[:3])))
    assert main(["benchmarks", str(f)]) == 0
    assert "total: 3 pairs in 3 paradigms and 3 phenomena" in capsys.readouterr().out
    assert main(["score", "--model", str(model_dir), "--benchmark", str(f), "--out", str(tmp_path / "o.parquet")]) == 0
    assert "custom: 3 pairs, 3 paradigms" in capsys.readouterr().out
