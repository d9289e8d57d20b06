"""Issue 25: an attacker's and a careless user's faults. Code planted in a DeepSpeed shard never runs;
damaged or swapped files are refused or reported, not used; kills leave nothing half done."""
from __future__ import annotations

import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from trainutil import tiny_cfg
from train.checkpoint import (DEEPSPEED_GLOBALS, CorruptCheckpointError, list_checkpoints, read_state,
                              refuse_unsafe_pickles, write_manifest)
from train.loop import train


@pytest.fixture(autouse=True, scope="module")
def one_thread():  # module scope: before the module's fixtures train (oversubscribed threads crawl)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def plant_global(path: Path, module: str, name: str, arg: str) -> None:
    """Rewrites the torch file `path` so that its data.pkl is `GLOBAL module name` called with `arg`
    (protocol 4: a dotted name resolves attribute by attribute, so `deepspeed.launcher.runner` +
    `os.system` is os.system)."""
    with zipfile.ZipFile(path) as z:
        items = [(info, z.read(info.filename)) for info in z.infolist()]
    data = arg.encode()
    pkl = (b"\x80\x04c" + f"{module}\n{name}\n".encode() + b"X" + struct.pack("<I", len(data)) + data
           + b"\x85R.")  # PROTO 4, GLOBAL, BINUNICODE arg, TUPLE1, REDUCE, STOP
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for info, blob in items:
            z.writestr(info, pkl if info.filename.endswith("/data.pkl") else blob)


def test_os_system_reached_through_a_deepspeed_module_is_refused_on_resume(cache, tmp_path):
    """Item 1. A prefix allow-list ("deepspeed.") passed `deepspeed.launcher.runner.os.system`."""
    overrides = ("engine=deepspeed", "engine.zero_stage=1", "probes=none", "schedule=custom",
                 "schedule.points=[2]")
    run_dir = tmp_path / "run"
    train(tiny_cfg(cache, *overrides), run_dir)
    shutil.rmtree(list_checkpoints(run_dir)[-1][1])
    ckpt = list_checkpoints(run_dir)[-1][1]
    shards = ckpt / "resume" / "deepspeed"
    # The allow-list is what DeepSpeed's own shards hold: exactly, read back from this real run
    found = set().union(*(torch.serialization.get_unsafe_globals_in_checkpoint(f) for f in shards.glob("*.pt")))
    assert found == set(DEEPSPEED_GLOBALS)
    refuse_unsafe_pickles(shards)

    marker = tmp_path / "payload-ran"
    target = shards / "mp_rank_00_model_states.pt"
    live = tmp_path / "live.pt"  # the payload is real: a full unpickle runs it
    shutil.copy(target, live)
    plant_global(live, "deepspeed.launcher.runner", "os.system", f"touch {tmp_path / 'live-ran'}")
    torch.load(live, weights_only=False)
    assert (tmp_path / "live-ran").exists()

    plant_global(target, "deepspeed.launcher.runner", "os.system", f"touch {marker}")
    write_manifest(ckpt, read_state(ckpt), 0)  # whoever plants a file can rehash the manifest too
    with pytest.raises(CorruptCheckpointError, match=r"mp_rank_00_model_states.pt names code that loading it "
                                                     r"would run \(deepspeed.launcher.runner.os.system\)"):
        train(tiny_cfg(cache, *overrides), run_dir)
    assert not marker.exists()


def flip(path: Path, offsets, keep_mtime: bool = False) -> None:
    st = path.stat()
    with open(path, "r+b") as f:
        for off in offsets:
            f.seek(off)
            byte = f.read(1)
            f.seek(off)
            f.write(bytes([byte[0] ^ 0x01]))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_damaged_token_store_is_refused_on_open_and_found_by_verify(cache, tmp_path):
    """Item 2: five flipped bytes in tokens.bin trained on silently, fresh and resumed runs alike."""
    from train.errors import InputFileError
    from train.verify import verify_run

    store_cache = tmp_path / "cache"
    run_dir = tmp_path / "run"
    train(tiny_cfg(store_cache, "probes=none", "schedule=custom", "schedule.points=[5]"), run_dir)
    (tokens,) = (store_cache / "stores").glob("*/tokens.bin")
    assert verify_run(run_dir).findings == []
    flip(tokens, [100, 200, 300, 400, 500])
    with pytest.raises(InputFileError, match=r"tokens.bin does not match its sha256 in meta.json"):
        train(tiny_cfg(store_cache, "probes=none", "schedule=custom", "schedule.points=[5]"), tmp_path / "fresh")
    assert not (tmp_path / "fresh" / "checkpoints").exists()
    # with its mtime put back, the cheap check on open passes; verify hashes the store in full
    flip(tokens, [600], keep_mtime=True)
    found = verify_run(run_dir).findings
    assert [(f.kind, Path(f.file)) for f in found] == [("damaged-store", tokens.parent)], found
    assert "tokens.bin does not match its sha256" in found[0].message


def grammar_corpus(path: Path, n: int = 80) -> None:
    from probes.benchmarks.grammar import corpus_documents
    from train.corpus import GrammarConfig

    docs = [d for d in corpus_documents(GrammarConfig(n_documents=n, sentences_per_document=10)) if d.strip()]
    path.write_text("\n\n".join(docs) + "\n")


@pytest.mark.parametrize("tokenizer", ["sentencepiece", "pretrained"])
def test_a_corpus_changed_under_a_resumed_run_is_refused_naming_the_file(tmp_path, tokenizer):
    """Item 3: with tokenizer=pretrained the resume trained on the edited corpus (rc 0); with
    sentencepiece it was refused with a message that blamed the code."""
    from train.token_store import DataChangedError

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    grammar_corpus(corpus / "a.txt")
    files = ["data=files", f"data.paths=[{corpus}]", "probes=none", "schedule=custom", "schedule.points=[5]"]
    extra = []
    if tokenizer == "pretrained":  # a tokenizer directory of a first run stands for the user's HF tokenizer
        train(tiny_cfg(tmp_path / "c0", *files), tmp_path / "first")
        extra = ["tokenizer=pretrained", f"tokenizer.path={tmp_path / 'first' / 'checkpoints' / 'step0'}"]
    run_dir = tmp_path / "run"
    train(tiny_cfg(tmp_path / "c", *files, *extra), run_dir)
    shutil.rmtree(list_checkpoints(run_dir)[-1][1])
    text = (corpus / "a.txt").read_text()
    (corpus / "a.txt").write_text(text.replace(" dog ", " cat "))
    with pytest.raises(DataChangedError, match=rf"step5: the corpus changed since this checkpoint was written "
                                                rf"\({corpus / 'a.txt'} \(size"):
        train(tiny_cfg(tmp_path / "c", *files, *extra), run_dir)
    # the same bytes again (a new mtime): the same store, the resume goes through
    (corpus / "a.txt").write_text(text)
    train(tiny_cfg(tmp_path / "c", *files, *extra), run_dir)


@pytest.mark.parametrize("name", [".lock", ".eval.lock"])
@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_lock_file_linked_to_another_file_is_refused_and_the_file_kept(tmp_path, name, link):
    """Item 4: <run>/.lock symlinked to another file had `pid … on host` written over that file."""
    from train.lock import RunDirLocked, RunLock

    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (os.symlink if link == "symlink" else os.link)(victim, run_dir / name)
    with pytest.raises(RunDirLocked, match=rf"{name} is (a symbolic link|not a plain file of its own)"):
        RunLock(run_dir, name=name).acquire()
    assert victim.read_text() == "keep me\n"
    (run_dir / name).unlink()
    with RunLock(run_dir, name=name):  # a plain lock file still works
        assert (run_dir / name).read_text().startswith(f"pid {os.getpid()} on ")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    try:  # a zombie (state Z) has died; only its parent's wait is missing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_killing_report_kills_its_figure_workers_and_closes_the_pipe(tmp_path):
    """Item 5: the forked figure workers outlived a killed `probes report` (ppid 1, blocked for 45+ min),
    and `probes report … | cat` never returned."""
    import signal
    import subprocess
    import sys
    import time

    from test_report import make_grid

    runs = make_grid(tmp_path / "runs")
    proc = subprocess.Popen([sys.executable, "-m", "probes", "report", *map(str, runs), "--out",
                             str(tmp_path / "rep"), "--n-boot", "200"], cwd=Path(__file__).resolve().parents[1],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline, workers = time.monotonic() + 120, []
        while not workers and time.monotonic() < deadline and proc.poll() is None:
            workers = children(proc.pid)
            time.sleep(0.02)
        assert workers, "the report ended before any figure worker was seen"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [w for w in workers if alive(w)]
        assert proc.stdout.read() is not None  # EOF: no worker holds the pipe (`| cat` returns)
    finally:
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)


def test_deleting_the_manifest_does_not_let_damaged_weights_through(cache, tmp_path):
    """Item 6: without manifest.json a damaged checkpoint resumed (a warning about 'an older version')
    and verify said clean."""
    from train.verify import verify_run

    run_dir = tmp_path / "run"
    train(tiny_cfg(cache, "probes=none", "schedule=custom", "schedule.points=[5]"), run_dir)
    shutil.rmtree(list_checkpoints(run_dir)[-1][1])
    ckpt = list_checkpoints(run_dir)[-1][1]
    flip(ckpt / "model.safetensors", [(ckpt / "model.safetensors").stat().st_size - 100])
    (ckpt / "manifest.json").unlink()
    with pytest.raises(CorruptCheckpointError, match=r"step5/manifest.json is missing, but .*trainer_state.json "
                                                     r"shows a version that writes one"):
        train(tiny_cfg(cache, "probes=none", "schedule=custom", "schedule.points=[5]"), run_dir)
    found = verify_run(run_dir).findings
    assert ("missing-manifest", str(ckpt / "manifest.json")) in [(f.kind, f.file) for f in found]


@pytest.fixture(scope="module")
def probed(cache, tmp_path_factory):
    """A tiny run with its eval files and per-token sidecars at steps 0 and 5 (and the last)."""
    run_dir = tmp_path_factory.mktemp("probed") / "run"
    train(tiny_cfg(cache, "schedule=custom", "schedule.points=[5]", "probes.per_token=true"), run_dir)
    return run_dir


def silent_flip(path: Path) -> None:
    """Flips one bit of lp_good's first value where it is stored raw (parquet keeps float64 plain or in a
    dictionary page): pyarrow reads the file back without complaint, with another value."""
    import pyarrow.parquet as pq

    before = pq.read_table(path)
    data = bytearray(path.read_bytes())
    off = data.find(struct.pack("<d", before["lp_good"][0].as_py()))
    assert off >= 0
    data[off + 6] ^= 0x10  # an exponent bit: the value moves by orders of magnitude
    path.write_bytes(bytes(data))
    after = pq.read_table(path)  # reads, silently other
    assert after["lp_good"][0].as_py() != before["lp_good"][0].as_py()


def test_a_flipped_bit_in_an_eval_file_or_sidecar_is_refused_by_every_reader_and_verify(probed, tmp_path):
    """Item 7: a single-bit flip read back silently in report, verify and score-run."""
    from probes.analysis.evalfile import read_eval_file
    from probes.evals.files import EvalInputError, eval_done, eval_file_meta as read_meta
    from probes.scoring.store import read_pairs
    from probes.scoring.tokens import read_tokens
    from train.verify import verify_run

    run_dir = tmp_path / "run"
    shutil.copytree(probed, run_dir)
    assert verify_run(run_dir).findings == []
    ev = run_dir / "evals" / "step5" / "grammar.parquet"
    side = run_dir / "evals" / "step5" / "grammar.tokens.parquet"
    assert (ev.parent / "grammar.parquet.sha256").read_text().endswith("  grammar.parquet\n")
    meta = read_meta(ev)
    silent_flip(ev)
    flip(side, [side.stat().st_size // 2])
    damaged = r"does not match its sha256 in grammar(.tokens)?.parquet.sha256: damaged"
    for reader in (read_pairs, read_meta, lambda p: read_eval_file(p, 5, run_dir)):
        with pytest.raises(EvalInputError, match=damaged):
            reader(ev)
    with pytest.raises(EvalInputError, match=damaged):
        read_tokens(side)
    assert not eval_done(ev, meta["pair_set"], meta["manifest"])  # score-run and the hook score it again
    found = {(f.kind, Path(f.file).name) for f in verify_run(run_dir).findings}
    assert found == {("eval-file", "grammar.parquet"), ("eval-file", "grammar.tokens.parquet")}
    # deleting the .sha256 does not make the file unchecked
    ok = run_dir / "evals" / "step0" / "grammar.parquet"
    (ok.parent / "grammar.parquet.sha256").unlink()
    with pytest.raises(EvalInputError, match=r"grammar.parquet: its grammar.parquet.sha256 is missing"):
        read_pairs(ok)


def test_two_copies_of_one_run_are_refused_not_counted_as_two_seeds(tmp_path):
    """Item 8: a copied run directory gave n_seeds=2 and a zero-width band, with no problem listed."""
    from probes.analysis.evalset import load_runs
    from probes.evals.files import EvalInputError
    from test_report import make_grid

    runs = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1, 2), n_steps=4, pairs=10)
    copy = tmp_path / "copy"
    shutil.copytree(runs[0], copy)
    assert len(load_runs(runs, cache=False).runs) == 2  # two seeds of one model: fine
    with pytest.raises(EvalInputError, match=rf"run directories {runs[0]} and {copy} hold the same run "
                                             rf"\(config hash [0-9a-f]{{12}}…, seed 1\)"):
        load_runs([*runs, copy], cache=False)


def log_keys(run_dir: Path) -> list[tuple[int, str]]:
    from train.logger import read_log

    return [(r["step"], r["event"]) for r in read_log(run_dir / "logs" / "train.jsonl")]


def test_a_resume_logs_each_step_and_checkpoint_once(cache, tmp_path):
    """Item 9: a resume from step 0 logged checkpoint(0) again; a resume from an earlier checkpoint,
    the later one kept without its resume/, logged (60, checkpoint) twice."""
    overrides = ("probes=none", "schedule=custom", "schedule.points=[5]", "schedule.keep_resume=3")
    straight = tmp_path / "straight"
    train(tiny_cfg(cache, *overrides), straight)
    expected = log_keys(straight)
    assert (0, "checkpoint") in expected and len(set(expected)) == len(expected)

    from_zero = tmp_path / "from-zero"
    shutil.copytree(straight, from_zero)
    for step, path in list_checkpoints(from_zero)[1:]:
        shutil.rmtree(path)
    train(tiny_cfg(cache, *overrides), from_zero)
    assert log_keys(from_zero) == expected

    from_five = tmp_path / "from-five"
    shutil.copytree(straight, from_five)
    last = list_checkpoints(from_five)[-1][1]
    shutil.rmtree(last / "resume")
    write_manifest(last, read_state(last), 0)
    train(tiny_cfg(cache, *overrides), from_five)
    assert log_keys(from_five) == expected


def test_a_bf16_rewrite_cut_short_is_finished_by_the_next_run_and_never_damage(cache, tmp_path):
    """Item 10: a kill between the bf16 weights' rename and the manifest update was never repaired;
    verify reported a sha256 mismatch and score-run scored the checkpoint anyway."""
    import subprocess
    import sys

    from train.faults import ENV
    from train.verify import verify_run
    from trainutil import TINY

    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "train", *TINY, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}", "probes=none",
           "schedule=custom", "schedule.points=[1,2,5]", "schedule.keep_resume=1", "schedule.weights_dtype=bf16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", ENV: "bf16_rewrite:step1"}
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    step1 = run_dir / "checkpoints" / "step1"
    assert '"dtype": "float32"' in (step1 / "config.json").read_text()  # cut short: weights bf16, config not
    assert verify_run(run_dir).findings == []  # each file is one the manifest vouches for
    env.pop(ENV)
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"dtype": "bfloat16"' in (step1 / "config.json").read_text()
    assert verify_run(run_dir).findings == []


def test_what_a_killed_writer_left_under_a_temporary_name_is_removed_by_the_next_write(tmp_path):
    """Item 13 (and issue 21): SIGKILL left .tmp files (eval files, train.jsonl, tokenizer and store
    caches) that nothing cleaned, though atomic_open said a crash leaves none."""
    import socket
    import subprocess
    import sys

    from train.faults import ENV
    from trainutil import TINY

    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    cmd = [sys.executable, "-m", "train", *TINY, f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}",
           "schedule=custom", "schedule.points=[5]"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", ENV: "eval_write:step5"}
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    left = sorted(p.name for p in run_dir.rglob("*.tmp"))
    assert left and all(n.startswith(".grammar.parquet.") for n in left), left
    # a build of the token store and a tokenizer training killed too: their directories, from a dead
    # process of this host and in the older format (no writer named)
    dead = subprocess.Popen(["true"])
    dead.wait()
    planted = []
    for kind in ("stores", "tokenizers"):
        (final,) = [p for p in (cache / kind).iterdir() if not p.name.startswith(".")]
        shutil.rmtree(final)  # so that the rerun builds it again
        for name in (f".{final.name}.tmp-{dead.pid}@{socket.gethostname()}-ab_12cd3", f".{final.name}.tmp-zz9_ab12"):
            (cache / kind / name).mkdir()
            planted.append(cache / kind / name)
    alive = cache / "tokenizers" / f".{final.name}.tmp-{os.getpid()}@{socket.gethostname()}-live0001"
    alive.mkdir()
    env.pop(ENV)
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [p for p in run_dir.rglob("*") if ".tmp" in p.name] == []
    assert [p for p in planted if p.exists()] == []
    assert alive.is_dir()  # a live writer's (this test's pid) is never touched


def test_a_full_disk_names_the_file_and_its_filesystem(cache, tmp_path, monkeypatch, capsys):
    """Item 12: a write that filled another filesystem than the run directory's (here the log's) was
    reported as 'disk full while writing a file (66141.4 MiB left …)': no file, the wrong filesystem."""
    import subprocess

    from test_train_errors import train_cli

    point = tmp_path / "small"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (point / "filler").write_bytes(b"\0" * 64 * 1024)  # full
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "logs").symlink_to(point)
        line = train_cli(cache, f"hydra.run.dir={run_dir}", "probes=none", monkeypatch=monkeypatch, capsys=capsys)
        assert line == (f"error: disk full while writing {run_dir}/logs/train.jsonl (0.0 MiB left on its filesystem): "
                        f"free some space and rerun the same command (a write cut short is never used)")
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def report_cmd(runs, out: Path) -> list[str]:
    import sys

    return [sys.executable, "-m", "probes", "report", *map(str, runs), "--out", str(out), "--n-boot", "50"]


def test_a_killed_report_leaves_the_previous_report_whole(tmp_path):
    """Item 14: a killed report left a stale mix (old report.md beside new tables)."""
    import signal
    import subprocess
    import time

    from test_report import make_grid

    runs = make_grid(tmp_path / "runs", n_steps=8, pairs=50)
    out, root = tmp_path / "rep", Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert subprocess.run(report_cmd(runs, out), cwd=root, env=env, capture_output=True).returncode == 0
    before, t0 = tree_bytes(out), time.time()
    time.sleep(0.05)
    proc = subprocess.Popen(report_cmd(runs[:2], out), cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:  # killed as soon as it has written anything (under --out, or beside it)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not any(
                p.is_file() and p.stat().st_mtime > t0 for p in tmp_path.rglob("*") if "runs" not in p.parts):
            time.sleep(0.01)
        assert proc.poll() is None, "the report ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)  # its figure workers die with it (item 5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert tree_bytes(out) == before  # the previous report, whole
    assert subprocess.run(report_cmd(runs[:2], out), cwd=root, env=env, capture_output=True).returncode == 0
    assert tree_bytes(out) != before and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_report_out_on_a_read_only_or_full_filesystem_is_one_line(tmp_path):
    """Item 11 (report): --out on a read-only or a full filesystem printed a traceback."""
    import subprocess

    from test_report import make_grid

    runs = make_grid(tmp_path / "runs", models=("pythia-14m",), seeds=(1,), n_steps=4, pairs=10)
    root = Path(__file__).resolve().parents[1]
    points = []
    try:
        for opts in ("size=1m,ro", "size=32k"):
            point = tmp_path / f"mnt{len(points)}"
            point.mkdir()
            if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(point)], capture_output=True).returncode:
                pytest.skip("cannot mount a tmpfs here (needs root)")
            points.append(point)
            proc = subprocess.run(report_cmd(runs, point / "rep"), cwd=root, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
            assert [line for line in lines if line.startswith("error: ")] == [lines[-1]]
            if "ro" in opts:
                assert lines[-1] == f"error: --out {point / 'rep'} is not writable: Read-only file system ({point})"
            else:
                assert lines[-1].startswith(f"error: disk full while writing {point}/")
                assert [p for p in point.iterdir()] == []  # the stage is gone; no half report
    finally:
        for point in points:
            subprocess.run(["umount", "-l", str(point)], check=True)


@pytest.fixture(scope="module")
def resumable(cache, tmp_path_factory):
    """A finished tiny run (checkpoints 0, 2, 5 and the last: test_train_errors' SMALL) and its overrides."""
    overrides = ("probes=none", "data.grammar.n_documents=20", "schedule=custom", "schedule.points=[2,5]")
    run_dir = tmp_path_factory.mktemp("resumable") / "run"
    train(tiny_cfg(cache, *overrides), run_dir)
    return run_dir, overrides


@pytest.mark.parametrize("damage", ["empty-config", "bad-yaml", "latin1-log"])
def test_a_damaged_config_yaml_or_log_is_one_error_line(resumable, cache, tmp_path, monkeypatch, capsys, damage):
    """Item 11: an unparsable or empty config.yaml, a non-UTF-8 train.jsonl printed tracebacks."""
    from test_train_errors import train_cli

    src, overrides = resumable
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    if damage == "empty-config":
        (run_dir / "config.yaml").write_text("")
        expect = f"error: {run_dir / 'config.yaml'}: empty or not a mapping"
    elif damage == "bad-yaml":
        (run_dir / "config.yaml").write_text("model: [unclosed\n")
        expect = f"error: {run_dir / 'config.yaml'}: cannot be read as the run's config"
    else:
        with open(run_dir / "logs" / "train.jsonl", "ab") as f:
            f.write("{\"step\": 3, \"event\": \"caf\xe9\"}\n".encode("latin-1"))
        expect = f"error: {run_dir / 'logs' / 'train.jsonl'}: not UTF-8 at byte"
    monkeypatch.chdir(tmp_path)
    line = train_cli(cache, f"hydra.run.dir={run_dir}", *overrides[:-1], "schedule.points=[2,5]",
                     monkeypatch=monkeypatch, capsys=capsys)
    assert line.startswith(expect), line


def test_a_foreign_checkpoint_a_lost_log_and_a_cut_sidecar_are_not_taken_silently(resumable, cache, tmp_path,
                                                                                 capsys):
    """Item 15: another run's checkpoint copied in (only verify flagged it), train.jsonl deleted (history
    silently gone), a truncated .tokens.parquet not rewritten."""
    src, overrides = resumable
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    other = tmp_path / "other"
    train(tiny_cfg(cache, *overrides, "optim.lr=2e-3"), other)
    shutil.rmtree(run_dir / "checkpoints" / "step5")
    shutil.copytree(other / "checkpoints" / "step5", run_dir / "checkpoints" / "step5")
    with pytest.raises(CorruptCheckpointError, match=r"step5/trainer_state.json: config hash [0-9a-f]{12}… is not "
                                                     r"this run's"):
        train(tiny_cfg(cache, *overrides), run_dir)

    shutil.rmtree(run_dir)
    shutil.copytree(src, run_dir)
    shutil.rmtree(list_checkpoints(run_dir)[-1][1])  # resume from step 5 ...
    (run_dir / "logs" / "train.jsonl").unlink()  # ... without its log
    capsys.readouterr()
    train(tiny_cfg(cache, *overrides), run_dir)
    assert f"warning: {run_dir / 'logs' / 'train.jsonl'} is missing: the records of steps 1..5 are lost" \
        in capsys.readouterr().err


def test_a_cut_per_token_sidecar_is_scored_again(probed, tmp_path):
    """Item 15: a truncated .tokens.parquet beside a whole eval file counted as done."""
    from probes.evals.files import eval_done, eval_file_meta

    run_dir = tmp_path / "run"
    shutil.copytree(probed, run_dir)
    ev = run_dir / "evals" / "step0" / "grammar.parquet"
    meta = eval_file_meta(ev)
    assert eval_done(ev, meta["pair_set"], meta["manifest"], per_token=True)
    side = run_dir / "evals" / "step0" / "grammar.tokens.parquet"
    side.write_bytes(side.read_bytes()[:-100])
    assert not eval_done(ev, meta["pair_set"], meta["manifest"], per_token=True)


def test_a_sentence_longer_than_the_models_positions_is_one_error_line(probed, tmp_path):
    """Item 11: `probes score` on a benchmark sentence longer than the model's positions printed a traceback."""
    import json
    import subprocess
    import sys

    long = " ".join(["the dog runs"] * 40) + " ."
    bench = tmp_path / "long.jsonl"
    bench.write_text(json.dumps({"sentence_good": long, "sentence_bad": long.replace("runs", "run", 1),
                                 "UID": "sv", "linguistics_term": "agreement", "pair_id": 0}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "probes", "score", "--model", str(probed / "checkpoints" / "step5"),
                           "--benchmark", str(bench), "--out", str(tmp_path / "out.parquet")],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: --benchmark {bench}: benchmark 'long' paradigm 'sv' pair '0': the good sentence has ")
    assert "more than the model's max_position_embeddings=64" in proc.stderr
    assert not (tmp_path / "out.parquet").exists()
