"""score-run / watch on a run directory of real tiny checkpoints (save_pretrained + trainer_state)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.__main__ import main
from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
from probes.scoring.primitive import score_pairs
from probes.scoring.store import eval_path, read_pairs
from probes.scoring.watch import ScoreOptions, pending, run_finished, score_run, watch, whole_checkpoints

ROOT = Path(__file__).resolve().parents[1]
RECORDS = [  # BLiMP's published schema
    {"sentence_good": f"the {n} {v} .", "sentence_bad": f"the {n} {w} .", "UID": uid,
     "linguistics_term": "agreement", "pairID": str(i)}
    for i, (n, v, w, uid) in enumerate([("cat", "runs", "run", "sv"), ("cats", "run", "runs", "sv"),
                                        ("dog", "sees", "see", "sv"), ("dogs", "see", "sees", "other")])
]
TOTAL = 4


def save_checkpoint(run: Path, step: int, *, final_name: bool = True) -> Path:
    """Like the trainer: assemble under .tmp-step<N>, rename when whole (unless final_name=False)."""
    tmp = run / "checkpoints" / f".tmp-step{step}"
    tmp.mkdir(parents=True)
    tiny_neox(seed=step).save_pretrained(tmp)
    word_tokenizer().save_pretrained(tmp)
    (tmp / "trainer_state.json").write_text(json.dumps(
        {"step": step, "tokens": step * 256, "total_steps": TOTAL}))
    if not final_name:
        return tmp
    final = run / "checkpoints" / f"step{step}"
    os.replace(tmp, final)
    return final


@pytest.fixture()
def bench(tmp_path) -> tuple[Path, dict]:
    f = tmp_path / "mini.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return f, {"mini": load_benchmark(BenchmarkConfig(name="mini", path=str(f)))}


OPTS = ScoreOptions(batch_size=3, device="cpu")


def quiet(_line: str) -> None:
    pass


def test_score_run_scores_whole_checkpoints_once(tmp_path, bench):
    torch.set_num_threads(1)
    _, benchmarks = bench
    run = tmp_path / "run"
    save_checkpoint(run, 0)
    save_checkpoint(run, 2)
    save_checkpoint(run, 5, final_name=False)  # a checkpoint being written: never read
    broken = run / "checkpoints" / "step3"  # a final name without weights: skipped, not read
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (run / "checkpoints" / "step3.old").mkdir()  # not a step<N> name

    assert [s for s, _ in whole_checkpoints(run)] == [0, 2]
    assert not run_finished(run)
    written = score_run(run, benchmarks, OPTS, quiet)
    assert written == [eval_path(run, 0, "mini"), eval_path(run, 2, "mini")]
    # the step dirs, and the analysis cache refreshed after each eval (probes.analysis.evalset.refresh_cache)
    assert sorted(os.listdir(run / "evals")) == [".reduced-mini.npz", "step0", "step2"]
    df, meta = read_pairs(eval_path(run, 2, "mini"))
    assert (meta["step"], meta["tokens"], meta["n_pairs"]) == (2, 512, 4)
    assert meta["model_dir"] == str((run / "checkpoints" / "step2").resolve())
    ref = score_pairs(tiny_neox(seed=2), word_tokenizer(), benchmarks["mini"])
    assert df["lp_good"].tolist() == pytest.approx(ref["lp_good"].tolist(), abs=1e-5)
    assert df["lp_bad"].tolist() != pytest.approx(read_pairs(eval_path(run, 0, "mini"))[0]["lp_bad"]
                                                  .tolist(), abs=1e-3)  # each step its own weights

    # a second pass has nothing to do and touches nothing
    before = {p: p.stat().st_mtime_ns for p in written}
    assert pending(run, benchmarks) == []
    assert score_run(run, benchmarks, OPTS, quiet) == []
    assert {p: p.stat().st_mtime_ns for p in written} == before

    # an eval file of another pair sample on the same checkpoint (an in-loop sample) is never replaced
    # silently (issue 36 item 7): named and refused, replaced with replace_samples (score-run --replace)
    sample = {"mini": load_benchmark(BenchmarkConfig(name="mini", path=str(bench[0]),
                                                     max_pairs_per_paradigm=1))}
    save_checkpoint(run, 4)
    steps = [0, 2, 4]
    with pytest.raises(ValueError, match=r"step0/mini.parquet \(4 pairs; asked for 2\) and 1 more eval files hold "
                                         r"another pair sample.*--replace"):
        score_run(run, sample, OPTS, quiet)
    assert {p: p.stat().st_mtime_ns for p in written} == before and not eval_path(run, 4, "mini").exists()
    assert score_run(run, sample, OPTS, quiet, replace_samples=True) == [eval_path(run, s, "mini") for s in steps]
    assert [read_pairs(eval_path(run, s, "mini"))[1]["n_pairs"] for s in steps] == [2, 2, 2]
    assert score_run(run, benchmarks, OPTS, quiet, replace_samples=True) == [eval_path(run, s, "mini") for s in steps]
    assert [read_pairs(eval_path(run, s, "mini"))[1]["n_pairs"] for s in steps] == [4, 4, 4]
    assert run_finished(run)


def test_watch_follows_a_run_until_it_finishes(tmp_path, bench):
    torch.set_num_threads(1)
    _, benchmarks = bench
    run = tmp_path / "run"
    # no run directory yet, run never finishes: the timeout ends the watch
    t0 = time.monotonic()
    assert watch(run, benchmarks, OPTS, poll_s=0.05, timeout_s=0.3, say=quiet) is False
    assert 0.3 <= time.monotonic() - t0 < 10

    save_checkpoint(run, 0)
    lines: list[str] = []
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(
        watch(run, benchmarks, OPTS, poll_s=0.1, timeout_s=120, say=lines.append)))
    thread.start()
    deadline = time.monotonic() + 60
    while not eval_path(run, 0, "mini").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert eval_path(run, 0, "mini").exists() and thread.is_alive()
    save_checkpoint(run, 1)
    save_checkpoint(run, TOTAL)  # step == total_steps: the run has finished
    thread.join(timeout=120)
    assert result == [True]
    assert all(eval_path(run, s, "mini").is_file() for s in (0, 1, TOTAL))
    assert lines[-1].endswith("run finished; every checkpoint is scored")
    assert sum("step0 mini" in line for line in lines) == 1  # never redone


def run_cli(*args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "probes", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_watch_survives_kill_and_restart(tmp_path, bench):
    f, _ = bench
    run = tmp_path / "run"
    for step in (0, 1, 2):
        save_checkpoint(run, step)
    args = ["watch", run, "--benchmark", f, "--poll", "0.2", "--batch-size", "2"]
    proc = run_cli(*args, "--timeout", "300")
    deadline = time.monotonic() + 120
    while not eval_path(run, 0, "mini").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert eval_path(run, 0, "mini").exists()
    first = eval_path(run, 0, "mini").stat().st_mtime_ns
    # whatever the kill interrupted left no file under a final name that does not read
    for p in (run / "evals").rglob("*.parquet"):
        if not p.name.startswith("."):
            read_pairs(p)

    save_checkpoint(run, TOTAL)
    proc = run_cli(*args, "--timeout", "300")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "run finished" in out
    assert eval_path(run, 0, "mini").stat().st_mtime_ns == first  # not redone
    for step in (0, 1, 2, TOTAL):
        df, meta = read_pairs(eval_path(run, step, "mini"))
        assert meta["step"] == step and len(df) == 4


def test_cli_errors(tmp_path, bench, capsys):
    f, _ = bench
    assert main(["score-run", str(tmp_path / "nothing"), "--benchmark", str(f)]) == 2
    assert "no checkpoints/ directory; not a run directory" in capsys.readouterr().err
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    odd = tmp_path / "pairs.xml"
    odd.write_text("<pairs><pair good='a' bad='b'/></pairs>\n")
    assert main(["score-run", str(run), "--benchmark", str(odd)]) == 2
    err = capsys.readouterr().err
    assert "--benchmark" in err and "pairs.xml" in err
    assert main(["watch", str(run), "--benchmark", str(f), "--poll", "0"]) == 2
    assert "--poll must be > 0" in capsys.readouterr().err
    assert main(["score-run", str(run), "--benchmark", str(f), "--benchmark", str(f)]) == 2
    assert "a second benchmark named 'mini'" in capsys.readouterr().err
    # a run directory with no checkpoints is fine for score-run: nothing to do
    assert main(["score-run", str(run), "--benchmark", str(f)]) == 0
    assert "0 eval files written" in capsys.readouterr().out
    # watch gives up at the timeout with status 3
    assert main(["watch", str(run), "--benchmark", str(f), "--poll", "0.05", "--timeout", "0.2"]) == 3
    assert "timeout after 0.2s" in capsys.readouterr().out


def test_a_second_score_run_on_one_run_is_refused(tmp_path, bench, capsys):
    from train.lock import EVAL_LOCK, RunLock

    f, _ = bench
    run = tmp_path / "run"
    save_checkpoint(run, 0)
    with RunLock(run, name=EVAL_LOCK):  # another score-run (or watch) holds the run's eval lock
        assert main(["score-run", str(run), "--benchmark", str(f), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert f"{run} is in use by pid {os.getpid()}" in err and "another score-run or watch" in err
        assert not eval_path(run, 0, "mini").exists()
    assert main(["score-run", str(run), "--benchmark", str(f), "--device", "cpu"]) == 0
    assert eval_path(run, 0, "mini").exists()


def test_a_foreign_tokenizer_of_the_same_size_is_refused(tmp_path, bench, capsys):
    from probeutil import WORDS, word_tokenizer

    f, benchmarks = bench
    run = tmp_path / "run"
    for step in (0, 1):
        save_checkpoint(run, step)
    score_run(run, benchmarks, OPTS, quiet)
    foreign = save_checkpoint(run, 2)
    word_tokenizer(list(reversed(WORDS))).save_pretrained(foreign)  # same size, other ids
    assert main(["score-run", str(run), "--benchmark", str(f), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{foreign}: its tokenizer (fingerprint" in err and "is not the one this run was probed with" in err
    assert str(eval_path(run, 0, "mini")) in err
    assert not eval_path(run, 2, "mini").exists()


@pytest.mark.parametrize("name", ["model.safetensors", "trainer_state.json"])
def test_a_truncated_checkpoint_file_is_named(tmp_path, bench, capsys, name):
    f, _ = bench
    run = tmp_path / "run"
    damaged = save_checkpoint(run, 1) / name
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    assert main(["score-run", str(run), "--benchmark", str(f), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(damaged.parent) in err and len(err.strip().splitlines()) == 1
