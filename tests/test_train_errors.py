"""`python -m train` on bad input: one line `error: …` naming the key, file or path, exit status 2, no
traceback; a damaged or foreign resume checkpoint, a full disk and a read-only run directory included."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import GPTNeoXForCausalLM

from conftest import skip_or_fail_in_ci
from trainutil import TINY, tiny_cfg
from train.errors import DiskFullError, InputFileError, is_user_error, writing
from train.loop import train

# ~14 optimizer steps of the tiny model, probed on 10 grammar pairs per paradigm at steps 0, 2, 14:
# the resume tests load it, they do not train
SMALL = ["data.grammar.n_documents=20", "schedule=custom", "schedule.points=[2]"]


def train_cli(cache: Path, *overrides: str, monkeypatch, capsys) -> str:
    """`python -m train TINY SMALL overrides` in this process (Hydra leaves logging alone); the one
    `error:` line of a refused run. Exit status 2 is asserted, and a traceback or a second line
    fails the test."""
    import runpy

    flags = [o for o in overrides if o.startswith("-")]  # before the overrides, as argparse wants them
    args = [*flags, *TINY, *SMALL, f"data.cache_dir={cache}", "hydra/job_logging=none",
            "hydra/hydra_logging=none", *(o for o in overrides if not o.startswith("-"))]
    monkeypatch.setattr(sys, "argv", ["train", *args])
    with pytest.raises(SystemExit) as end:  # as `python -m train` (Hydra finds configs/ from the file)
        runpy.run_module("train", run_name="__main__", alter_sys=True)
    err = capsys.readouterr().err
    assert end.value.code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    return errors[0]


def test_a_config_error_is_one_line_with_status_2(cache, tmp_path, monkeypatch, capsys):
    line = train_cli(cache, "optim.micro_batch=0", f"hydra.run.dir={tmp_path / 'run'}",
                     monkeypatch=monkeypatch, capsys=capsys)
    assert line == "error: optim.micro_batch=0: must be at least 1 (sequences)"
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_user_errors_and_bugs_are_told_apart():
    from train.schedule import ScheduleConfig

    with pytest.raises(ValueError) as ours:
        ScheduleConfig(kind="weekly")
    assert is_user_error(ours.value)
    with pytest.raises(FileNotFoundError) as raised_by_our_validation:  # a plain FileNotFoundError, raised by us
        from train.tokenizer import load_tokenizer
        load_tokenizer(Path(__file__).parent / "no-such-tokenizer")
    assert is_user_error(raised_by_our_validation.value)
    with pytest.raises(ValueError) as library:  # raised inside json: a bug of whoever called it
        json.loads("{")
    assert not is_user_error(library.value)
    with pytest.raises(ZeroDivisionError) as bug:
        _ = 1 / 0
    assert not is_user_error(bug.value)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def finished_run(cache, tmp_path_factory) -> tuple[Path, Path]:
    run_dir = tmp_path_factory.mktemp("run")
    train(tiny_cfg(cache, *SMALL), run_dir)
    return cache, run_dir


def test_score_run_accepts_the_tokenizer_training_recorded(finished_run, tmp_path, capsys):
    """The fingerprint the probe hook records in training is the one score-run computes from a
    checkpoint's saved tokenizer (else every real run would be refused); a checkpoint with a
    foreign tokenizer of the same size is refused."""
    from probes.__main__ import main
    from train.tokenizer import load_tokenizer

    run_dir = tmp_path / "probed"
    shutil.copytree(finished_run[1], run_dir)
    shutil.rmtree(run_dir / "evals" / "step2")
    args = ["score-run", str(run_dir), "--benchmark", "grammar", "--max-pairs-per-paradigm", "10",
            "--device", "cpu"]
    assert main(args) == 0
    assert (run_dir / "evals" / "step2" / "grammar.parquet").is_file()
    ckpt = run_dir / "checkpoints" / "step2"
    tok = load_tokenizer(ckpt)
    vocab = tok.backend_tokenizer.get_vocab()
    a, b = sorted(vocab, key=vocab.get)[10:12]  # swap two ordinary pieces: same size, other ids
    tok_json = json.loads((ckpt / "tokenizer.json").read_text())
    pieces = tok_json["model"]["vocab"]
    i, j = [k for k, (piece, _score) in enumerate(pieces) if piece in (a, b)]
    pieces[i][0], pieces[j][0] = pieces[j][0], pieces[i][0]
    (ckpt / "tokenizer.json").write_text(json.dumps(tok_json))
    shutil.rmtree(run_dir / "evals" / "step2")
    assert main(args) == 2
    assert f"{ckpt}: its tokenizer (fingerprint" in capsys.readouterr().err


def _damaged_copy(finished_run, tmp_path, damage) -> tuple[Path, Path]:
    cache, run_dir = finished_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    last = sorted((copy / "checkpoints").glob("step*"), key=lambda p: int(p.name[4:]))[-1]
    # A checkpoint's manifest.json catches any damage first (tests/test_faults.py); without one (written
    # before manifests existed, resumed on the strength of config.yaml) each file's reader names it.
    (last / "manifest.json").unlink()
    state = json.loads((last / "trainer_state.json").read_text())
    state.pop("config_hash")  # which came with manifests: an older checkpoint has neither
    (last / "trainer_state.json").write_text(json.dumps(state))
    return cache, damage(last)


def _truncate(name):
    def damage(ckpt: Path) -> Path:
        f = ckpt / name
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
        return f
    return damage


def _foreign_vocabulary(ckpt: Path) -> Path:
    """A checkpoint of another run: same architecture, a 128-row larger embedding (another tokenizer)."""
    model = GPTNeoXForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    model.resize_token_embeddings(model.get_input_embeddings().num_embeddings + 128)
    model.save_pretrained(ckpt)
    return ckpt / "model.safetensors"


@pytest.mark.parametrize("damage,what", [
    (_truncate("model.safetensors"), "cannot read the checkpoint's weights"),
    (_truncate("trainer_state.json"), "cannot read the trainer state"),
    (_truncate("resume/optimizer.pt"), "cannot read the optimizer state"),
    (_foreign_vocabulary, r"cannot read weights that fit this run's model .*size mismatch for gpt_neox.embed_in"),
], ids=["model.safetensors", "trainer_state.json", "optimizer.pt", "foreign_vocabulary"])
def test_a_damaged_resume_checkpoint_is_named(finished_run, tmp_path, damage, what):
    cache, damaged = _damaged_copy(finished_run, tmp_path, damage)
    with pytest.raises(InputFileError, match=what) as err:
        train(tiny_cfg(cache, *SMALL), tmp_path / "run")
    message = str(err.value)
    assert message.startswith(f"{damaged}: ") and "rerun to resume from the previous resume checkpoint" in message


def test_torch_save_unexpected_pos_is_named_as_a_full_disk(tmp_path):
    d = tmp_path / ".tmp-step3"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"x")
    with pytest.raises(DiskFullError, match=rf"disk full while writing {d / 'optimizer.pt'} \("):
        with writing(tmp_path):
            (d / "optimizer.pt").write_bytes(b"partial")
            # what torch.save says when the disk fills: no errno, no file name
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 1600 vs 1496")
    with pytest.raises(RuntimeError, match="not a write"):  # other errors pass unchanged
        with writing(tmp_path):
            raise RuntimeError("not a write")


@pytest.fixture()
def mount(tmp_path):
    """mount(size, ro=False): a tmpfs at a fresh directory (a full disk or a read-only one that really
    refuses root); skipped where mounting is not allowed, and a failure there under CI=true."""
    points = []

    def make(size: str, ro: bool = False) -> Path:
        point = tmp_path / f"mnt{len(points)}"
        point.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                          capture_output=True).returncode != 0:
            skip_or_fail_in_ci("cannot mount a tmpfs here (needs root)")
        points.append(point)
        (point / "run").mkdir()
        if ro:
            subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
        return point / "run"

    yield make
    for point in points:
        # lazy: a run stopped by an error in this process may still hold its log file open there
        subprocess.run(["umount", "-l", str(point)], check=True)


def test_a_full_disk_names_the_file(finished_run, mount, monkeypatch, capsys):
    run_dir = mount("300k")  # the tokenizer and token store come from finished_run's cache
    line = train_cli(finished_run[0], f"hydra.run.dir={run_dir}", monkeypatch=monkeypatch, capsys=capsys)
    assert line.startswith(f"error: disk full while writing {run_dir}/checkpoints/.tmp-step0/")
    assert "rerun the same command" in line


def test_a_read_only_run_dir_is_named(cache, mount, monkeypatch, capsys):
    run_dir = mount("1m", ro=True)
    line = train_cli(cache, f"hydra.run.dir={run_dir}", monkeypatch=monkeypatch, capsys=capsys)
    assert line == f"error: hydra.run.dir {run_dir} is not writable: Read-only file system ({run_dir})"


def test_a_read_only_sweep_dir_is_named_under_multirun(cache, mount, monkeypatch, capsys):
    """`-m` skips on_run_start: the sweep directory is checked before the launcher creates it."""
    sweep = mount("1m", ro=True)
    line = train_cli(cache, "-m", f"hydra.sweep.dir={sweep}", "seed=0,1", monkeypatch=monkeypatch, capsys=capsys)
    assert line == f"error: hydra.sweep.dir {sweep} is not writable: Read-only file system ({sweep})"


def test_a_tokenizer_too_small_for_the_characters_names_vocab_size(shared, tmp_path):
    """The README's Chinese variant with too few pieces (issue 36 item 4): sentencepiece's reason, the
    characters it must hold, comes out as `tokenizer.vocab_size` and the count it needs, even where a few
    lines are also too long for it (the line-length hint was the message before). 2,000 lines of Chinese
    Wikipedia, copied to tmp_path, hold more characters than 600 pieces; one more line is over 4,192 bytes."""
    src = shared("corpora", "zh", "wikipedia", "zhwiki_enix223_AA_wiki_00_t2s.txt")
    lines = src.read_text(encoding="utf-8").splitlines()[:2000]
    (tmp_path / "zh").mkdir()
    (tmp_path / "zh" / "a.txt").write_text("\n\n".join(lines) + "\n\n" + "长" * 1500 + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "train", "data=files", f"data.paths=[{tmp_path / 'zh'}]", "data.budget_tokens=10000",
           "model=tiny", "tokenizer.vocab_size=600", "probes=zhoblimp", "logger=none", f"data.cache_dir={tmp_path / 'c'}",
           f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    import re

    need = re.search(r"tokenizer\.vocab_size=600 is too small .* need ([\d,]+) pieces", errors[0])
    assert need and int(need.group(1).replace(",", "")) > 600, errors[0]
    assert "tokenizer.character_coverage" in errors[0] and "max_sentence_length" not in errors[0]
    # the silent minutes are announced (issue 36 item 5)
    assert re.search(r"training the tokenizer: sentencepiece unigram, tokenizer.vocab_size=600, on [\d,]+ lines",
                     proc.stdout), proc.stdout[-2000:]
