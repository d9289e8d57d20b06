"""Issue 25: an attacker's and a careless user's faults. Code planted in a DeepSpeed shard never runs;
damaged or swapped files are refused or reported, not used; kills leave nothing half done."""
from __future__ import annotations

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


@pytest.fixture(autouse=True)
def one_thread():
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
