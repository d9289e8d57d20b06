"""Issue 44, attacked a fourth time: output folders that replaced the user's own files (`report --out H` with
H/.cache, `compare --out D` with D/compare.csv, a dangling --out link), a held-out split that ate the corpus, eval
files dropped without a word, W&B groups that mixed corpora, and a kill mid-rewrite that made every reader say
"delete both"."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from test_curves import config, pair, write_eval

from probes.__main__ import main as probes_main
from probes.analysis import curves, report
from test_report import make_grid

CONV = "start_token_all_tokens_v2"


def _files(root):
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_report_out_never_replaces_a_hidden_entry_it_did_not_write(tmp_path, capsys):
    """O1: `report --out H` moved H/.cache aside and deleted it (`--out ~` would delete ~/.cache); a dangling
    --out link gave a traceback after the whole report and left its staging folder."""
    (run,) = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=5, pairs=20)
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "model.bin").write_bytes(b"weights")
    (home / ".figure-cache").mkdir()
    (home / ".figure-cache" / "mine.png").write_bytes(b"png")
    before = _files(home)
    capsys.readouterr()
    assert report.main([str(run), "--out", str(home), "--n-boot", "20"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {home / '.figure-cache' / 'mine.png'}: not written by probes report")
    assert "2 such" in line and _files(home) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "runs"]  # nothing staged beside it
    # its own hidden entries are replaced as before: a second report into a fresh folder works twice
    out = tmp_path / "rep"
    assert report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    assert (out / ".cache").is_dir() and report.main([str(run), "--out", str(out), "--n-boot", "20"]) == 0
    # a dangling link: one line, before any work, and no staging folder
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    capsys.readouterr()
    assert report.main([str(run), "--out", str(tmp_path / "dangling"), "--n-boot", "20"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out {tmp_path / 'dangling'}: a link to nothing; give a " \
                                              f"folder (a new one is made)"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _two_runs(root):
    for name, right in (("a", [True, False] * 4), ("b", [True] * 8)):
        config(root / name, seed=ord(name))
        write_eval(root / name, 5, 500, [pair("agr", i, -1.0 if r else -3.0, 1, -3.0 if r else -1.0, 1)
                                         for i, r in enumerate(right)], convention=CONV)
    return str(root / "a"), str(root / "b")


def test_compare_and_curves_refuse_to_overwrite_the_users_own_files(tmp_path, capsys):
    """O6: `compare --out D` overwrote the user's D/compare.csv; `curves --out D` did the same to D/curves.csv.
    Their own earlier output is replaced (the list they keep, .compare-files / .curves-files, says so)."""
    a, b = _two_runs(tmp_path / "runs")
    for argv, name in ((["compare", a, b], "compare.csv"), (["curves", a], "curves.csv"),
                       (["curves", a], "plots/mine.png")):
        d = tmp_path / f"d_{argv[0]}_{name.replace('/', '_')}"
        (d / name).parent.mkdir(parents=True)
        (d / name).write_text("mine\n")
        capsys.readouterr()
        assert probes_main([*argv, "--out", str(d)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {d / name}: not written by probes {argv[0]}"), line
        assert (d / name).read_text() == "mine\n" and sorted(p.name for p in d.iterdir()) == [name.split("/")[0]]
        (d / name).unlink()
        assert probes_main([*argv, "--out", str(d)]) == 0 and probes_main([*argv, "--out", str(d)]) == 0
    assert (tmp_path / "d_compare_compare.csv" / "flips.csv").is_file()
    # the run's own curves/ (written by older code, without a list) is still redrawn by the run's hook
    run = tmp_path / "runs" / "a"
    (run / "curves").mkdir()
    (run / "curves" / "curves.csv").write_text("old\n")
    curves.CurvesHook().post_train(run)
    assert (run / "curves" / "curves.csv").read_text() != "old\n" and (run / "curves" / ".curves-files").is_file()


def test_score_run_hub_refuses_a_folder_holding_the_users_evals(tmp_path, capsys):
    """The same rule for `score-run --hub --out D`: D/evals/ of the user's is refused before any download
    (old code went on to download and score into it)."""
    d = tmp_path / "d"
    (d / "evals" / "step0").mkdir(parents=True)
    (d / "evals" / "step0" / "mine.parquet").write_bytes(b"mine")
    assert probes_main(["score-run", "--hub", "EleutherAI/pythia-14m", "--revisions", "step0", "--out", str(d),
                        "--benchmark", "grammar", "--max-pairs-per-paradigm", "10", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'evals' / 'step0' / 'mine.parquet'}: not written by probes score-run" in err
    assert sorted(p.name for p in d.iterdir()) == ["evals"]


def _old_split(lengths, order_seed, heldout_tokens):
    """split_order as it was: the document that reaches heldout_tokens always held out, cap or not."""
    order = np.random.default_rng(order_seed).permutation(len(lengths))
    if heldout_tokens <= 0 or len(lengths) < 2:
        return order, order[:0]
    want = min(heldout_tokens, 0.05 * lengths.sum())
    held = int(min(np.searchsorted(np.cumsum(lengths[order][::-1]), want) + 1, len(lengths) - 1))
    return order[:len(order) - held], order[len(order) - held:]


def test_the_held_out_split_never_takes_more_than_its_cap(tmp_path):
    """H3: a corpus whose last document (in the order) is large held out 9,477 of 9,501 tokens despite the 5 %
    cap. Now the split holds whole documents only while under the cap (here: none), and wherever the old rule
    kept the cap the split is the old one, bit for bit (runs already trained keep their stream)."""
    from train.sequences import SequenceStream, split_order
    from trainutil import write_token_store

    order = np.random.default_rng(0).permutation(25)
    lengths = np.full(25, 1, dtype=np.int64)  # 24 documents of 1 framed token and one of 9,477
    lengths[order[-1]] = 9477
    assert lengths.sum() == 9501 and _old_split(lengths, 0, 20000)[1].tolist() == [order[-1]]
    train_docs, held = split_order(lengths, 0, 20000)
    assert held.size == 0 and train_docs.tolist() == order.tolist()
    # docs of 0 tokens framed by start and end: a store where the same order holds the large document last
    docs = [list(range(3, 3 + int(n) - 2)) if n > 2 else [5] for n in lengths]
    stream = SequenceStream(write_token_store(tmp_path / "s", docs), seq_len=8, budget_tokens=None, epochs=1,
                            order_seed=0, seed=0, start_id=1, end_id=2, heldout_tokens=20000)
    assert stream.heldout.size == 0 and stream.stream_tokens == sum(len(d) + 2 for d in docs)
    # random corpora: under the cap always; the old split wherever it was under the cap
    rng = np.random.default_rng(1)
    kept = 0
    for seed in range(300):
        lengths = rng.integers(1, 400, size=int(rng.integers(1, 300))) ** rng.integers(1, 3)
        want = int(rng.integers(0, 3000))
        new, old = split_order(lengths, seed, want), _old_split(lengths, seed, want)
        assert lengths[new[1]].sum() <= 0.05 * lengths.sum() and sorted([*new[0], *new[1]]) == list(range(len(lengths)))
        if lengths[old[1]].sum() <= 0.05 * lengths.sum():
            kept += 1
            assert [a.tolist() for a in new] == [a.tolist() for a in old]
    assert 150 < kept < 300


def test_a_one_document_corpus_says_why_it_has_no_held_out_loss(tmp_path, capsys):
    """It said "held-out loss: off (data.heldout_tokens=0)" while data.heldout_tokens was 20,000."""
    from train.loop import train
    from trainutil import tiny_cfg

    train(tiny_cfg(tmp_path / "cache", "data.grammar.n_documents=1", "data.grammar.sentences_per_document=100",
                   "data.heldout_tokens=20000", "data.budget_tokens=512", "probes=none"), tmp_path / "run")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("held-out loss")]
    assert line == ("held-out loss: off: the split takes whole documents from the end of the order, at most 5% of the "
                    "corpus, and its last document is longer (data.heldout_tokens=20,000)")


def _eval_of_kind(run, step, benchmark, kind):
    """An eval file as test_curves writes it, its metadata saying `kind`."""
    import json

    import pyarrow.parquet as pq

    path = write_eval(run, step, step * 100, [pair("agr", i, -1.0, 1, -3.0, 1) for i in range(4)], benchmark, CONV)
    t = pq.read_table(path)
    meta = {**json.loads(t.schema.metadata[b"syntax_dynamics"]), "kind": kind}
    pq.write_table(t.replace_schema_metadata({b"syntax_dynamics": json.dumps(meta).encode()}), path)
    return path


def test_eval_files_no_reader_takes_are_named_and_a_benchmark_is_of_one_kind(tmp_path, capsys):
    """K4: a file whose kind names an installed family (elagent) that its reader then skips (it reads elagent.parquet
    only) vanished without a word; a run of an unknown kind only got a riddle; a benchmark's kind was its newest
    file's, the others read as if of that kind."""
    from probes.analysis.evalset import EvalInputError, load_runs

    run = tmp_path / "a"
    config(run)
    for step in (5, 10):
        _eval_of_kind(run, step, "grammar", "minimal_pairs")
    _eval_of_kind(run, 5, "mytask", "elagent")
    _eval_of_kind(run, 5, "other", "not_installed_family")
    assert probes_main(["curves", str(run), "--out", str(tmp_path / "c")]) == 0
    problems = (tmp_path / "c" / "problems.txt").read_text().splitlines()
    assert f"{run}: benchmark mytask's eval files say kind 'elagent', but that family reads only files named " \
           f"elagent; not analysed" in problems
    assert f"{run}: benchmark other's eval files say kind 'not_installed_family', which no registered probe family " \
           f"reads (probes/families.py); not analysed" in problems
    only = tmp_path / "b"
    config(only)
    _eval_of_kind(only, 5, "other", "not_installed_family")
    with pytest.raises(EvalInputError) as e:
        load_runs([only])
    assert str(e.value) == (f"run directory {only} has no minimal-pair eval files (evals/step<N>/<benchmark>.parquet "
                            f"of kind minimal_pairs), which this analysis needs; benchmark other's files are of kind "
                            f"'not_installed_family', which no registered probe family reads (probes/families.py)")
    # files of one benchmark that differ in kind: the odd one named, whichever is the newest
    for name, kinds in (("c", ("elagent", "minimal_pairs")), ("d", ("minimal_pairs", "elagent"))):
        config(tmp_path / name)
        odd = _eval_of_kind(tmp_path / name, 5, "grammar", kinds[0])
        _eval_of_kind(tmp_path / name, 10, "grammar", kinds[1])
        with pytest.raises(EvalInputError, match=f"^{odd}: kind '{kinds[0]}', while the newest file of "):
            load_runs([tmp_path / name], cache=False)


def test_a_csv_field_over_csvs_limit_is_one_line_naming_the_file_and_line(tmp_path):
    """A field over 131,072 characters (a quote left open) was a csv.Error traceback."""
    from probes.benchmarks.formats import BenchmarkFormatError, iter_csv

    path = tmp_path / "pairs.csv"
    path.write_text('good,bad\nThe cat sleeps.,The cat sleep.\n"open quote,' + "x" * 140_000 + "\n")
    with pytest.raises(BenchmarkFormatError, match=rf"^{path}:3: field larger than field limit \(131072\) \(a quote "):
        list(iter_csv(path))


def test_runs_of_two_corpora_are_not_one_wandb_group():
    """W3: the group was <experiment>/<model>/<budget> with experiment "default", so README §2's English and
    Chinese runs were one group and W&B averaged two corpora as seeds. The data key (train/loop.py: the token
    store's content hash) is part of it now; tests/test_wandb.py checks it on a real offline run."""
    from train.logger import grid_cell

    cfg = {"experiment": "default", "model": {"name": "tiny"}, "data": {"budget_tokens": 4096}, "seed": 1}
    en, zh = grid_cell({**cfg, "data_key": "1a2b3c4d"}), grid_cell({**cfg, "data_key": "9f8e7d6c", "seed": 2})
    assert en == "default/tiny/4096/1a2b3c4d" and zh == "default/tiny/4096/9f8e7d6c"
    assert grid_cell({**cfg, "data_key": "1a2b3c4d", "seed": 3}) == en  # another seed: the same group


KILL_AT = """
import os, signal, sys
from pathlib import Path
import train.evalsums as es
path, point = Path(sys.argv[1]), sys.argv[2]
kill = lambda: os.kill(os.getpid(), signal.SIGKILL)
if point == "sums":  # the new file in place, its .sha256 not yet cut back to the new digest
    write, calls = es.write_text_atomic, []
    es.write_text_atomic = lambda *a: (calls.append(a), kill() if len(calls) == 2 else write(*a))
es.write_summed(path, b"new scores", fault=kill if point == "rename" else None)
"""


@pytest.mark.parametrize("point", ["rename", "sums"])
def test_a_kill_mid_rewrite_leaves_a_file_that_its_sha256_accepts(tmp_path, point):
    """A kill during `probes unigram`'s rewrite left a new .sha256 beside the intact old file, and every reader said
    "delete both" (good scores lost where the checkpoint is gone). Killed (SIGKILL) before the rename and after
    it, the file there, old or new, matches its .sha256; a finished rewrite leaves one digest, sha256sum's line."""
    import hashlib

    from train.evalsums import sum_path, sum_problem, write_summed

    path = tmp_path / "grammar.parquet"
    write_summed(path, b"old scores")
    proc = subprocess.run([sys.executable, "-c", KILL_AT, str(path), point], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert path.read_bytes() == (b"old scores" if point == "rename" else b"new scores")
    assert sum_problem(path) is None
    write_summed(path, b"newer")
    assert sum_path(path).read_text() == f"{hashlib.sha256(b'newer').hexdigest()}  grammar.parquet\n"
    # a damaged old file's digest is not carried over: the rewrite is what makes it good again
    path.write_bytes(b"newer, damaged")
    proc = subprocess.run([sys.executable, "-c", KILL_AT, str(path), "rename"], capture_output=True)
    assert "does not match its sha256" in sum_problem(path) and os.path.getsize(path) == 14
